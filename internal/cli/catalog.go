package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	pb "github.com/rangecast/rangecast/proto/rangecast/v1"
)

// eraseChunk is how many addresses one EraseContacts call names; the
// coordinator accepts up to 10,000.
const eraseChunk = 1000

func (c *client) catalog() (pb.CatalogServiceClient, error) {
	conn, err := c.dial()
	if err != nil {
		return nil, err
	}
	return pb.NewCatalogServiceClient(conn), nil
}

// listFlags are the flags every list command has.
type listFlags struct {
	limit    int
	pageSize int32
	asJSON   bool
}

func (l *listFlags) add(cmd *cobra.Command, what string) {
	f := cmd.Flags()
	f.Var(atLeast(&l.limit, 0, 0), "limit", "print at most this many "+what+" (0: all of them, read a page at a time)")
	f.Int32Var(&l.pageSize, "page-size", 500, "how many "+what+" one request reads (1 to 500)")
	f.BoolVar(&l.asJSON, "json", false, "print one JSON object per line")
}

// done reports whether n items are as many as --limit allows.
func (l *listFlags) done(n int) bool { return l.limit > 0 && n >= l.limit }

// jsonLine prints m as one line of JSON.
func jsonLine(w io.Writer, m proto.Message) error {
	b, err := protojson.MarshalOptions{EmitUnpopulated: true}.Marshal(m)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(w, string(b))
	return err
}

// pages calls fetch with each page token until fetch returns no next
// token (the last page, or enough printed).
func pages(fetch func(token string) (next string, err error)) error {
	token := ""
	for {
		next, err := fetch(token)
		if err != nil || next == "" {
			return err
		}
		token = next
	}
}

// listing is one keyset-paged list command's part: its header, how to fetch
// a page, how to print a row, and what to say when the list is empty.
type listing[T proto.Message] struct {
	header string
	none   string
	fetch  func(ctx context.Context, token string) (items []T, next string, err error)
	row    func(T) string
}

// printListing prints a list a page at a time (so a long one streams):
// aligned rows under the header, or one JSON object per line, stopping at
// --limit.
func printListing[T proto.Message](cmd *cobra.Command, l *listFlags, li listing[T]) error {
	w := cmd.OutOrStdout()
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if !l.asJSON {
		fmt.Fprintln(tw, li.header)
	}
	n := 0
	err := pages(func(token string) (string, error) {
		items, next, err := li.fetch(cmd.Context(), token)
		if err != nil {
			return "", err
		}
		for _, it := range items {
			if l.done(n) {
				return "", nil
			}
			n++
			if l.asJSON {
				if err := jsonLine(w, it); err != nil {
					return "", err
				}
				continue
			}
			fmt.Fprintln(tw, li.row(it))
		}
		if !l.asJSON {
			tw.Flush() //nolint:errcheck // a page at a time
		}
		return next, nil
	})
	if err != nil {
		return err
	}
	if !l.asJSON {
		tw.Flush() //nolint:errcheck
		if n == 0 {
			fmt.Fprintln(w, li.none)
		}
	}
	return nil
}

func listContactsCommand(c *client) *cobra.Command {
	var l listFlags
	var segment string
	cmd := &cobra.Command{
		Use:   "list [--segment NAME]",
		Short: "List contacts (or a segment's members), oldest first",
		Long: `List contacts in the order they were first imported, or only the members of
--segment. The list is read a page at a time (a keyset page: each continues
after the last id of the one before), so it works the same at a million
contacts; --limit stops early. --json prints one contact per line, without
its segments (a list does not read memberships; contacts show lists them).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cc, err := c.catalog()
			if err != nil {
				return err
			}
			return printListing(cmd, &l, listing[*pb.Contact]{
				header: "ID\tEMAIL\tNAME\tSTATUS\tCREATED",
				none:   "no contacts",
				fetch: func(ctx context.Context, token string) ([]*pb.Contact, string, error) {
					resp, err := cc.ListContacts(ctx, &pb.ListContactsRequest{Segment: segment, PageSize: l.pageSize, PageToken: token})
					return resp.GetContacts(), resp.GetNextPageToken(), err
				},
				row: func(ct *pb.Contact) string {
					return fmt.Sprintf("%s\t%s\t%s\t%s\t%s", ct.GetId(), shown(ct.GetEmail()), shown(ct.GetName()), eligibility(ct), when(ct.GetCreatedAt()))
				},
			})
		},
	}
	cmd.Flags().StringVar(&segment, "segment", "", "list only this segment's members")
	l.add(cmd, "contacts")
	return cmd
}

func deleteContactsCommand(c *client) *cobra.Command {
	var file string
	var asJSON bool
	cmd := &cobra.Command{
		Use: "delete EMAIL... | --file FILE",
		// What the help calls it: a script's `contacts erase ADDR` was a
		// no-op that succeeded (tester).
		Aliases: []string{"erase"},
		Short:   "Erase contacts (GDPR Art. 17): their data goes, their suppression stays",
		Long: `Erase people. For each address, the contact and its segment memberships are
deleted; its rows in every broadcast's ledger keep their status, so counts do
not change, but the address becomes an irreversible token and any reply that
quoted it is withheld; its delivery events lose their detail; its
transactional messages keep their status without address, payload or replies
(one still queued is not sent).

What remains is a keyed hash of the address (HMAC-SHA256, key kept in the
database): the address is suppressed for good, so importing it again later
adds a contact that no broadcast ever mails. An address that names no contact
is recorded the same way. Erasure cannot be undone.

--file reads addresses one per line (or a CSV whose first column is the
email, with an "email" header); blank lines and lines starting with # are
skipped; - reads stdin.`,
		Example: `  rangecast contacts delete ann@example.org
  rangecast contacts delete --file requests.csv --json`,
		RunE: func(cmd *cobra.Command, args []string) error {
			emails := args
			if file != "" {
				if len(args) > 0 {
					return fmt.Errorf("name addresses as arguments or with --file, not both")
				}
				var err error
				if emails, err = readAddresses(cmd.InOrStdin(), file); err != nil {
					return err
				}
			}
			if len(emails) == 0 {
				return fmt.Errorf("name the addresses to erase: rangecast contacts delete EMAIL... or --file FILE")
			}
			cc, err := c.catalog()
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			var found, total int
			for lo := 0; lo < len(emails); lo += eraseChunk {
				resp, err := cc.EraseContacts(cmd.Context(), &pb.EraseContactsRequest{Emails: emails[lo:min(lo+eraseChunk, len(emails))]})
				if err != nil {
					if lo > 0 {
						fmt.Fprintf(cmd.ErrOrStderr(), "the first %d addresses were erased before this error\n", lo)
					}
					return err
				}
				for _, e := range resp.GetErased() {
					total++
					if e.GetContactId() != "" {
						found++
					}
					if asJSON {
						if err := jsonLine(w, e); err != nil {
							return err
						}
						continue
					}
					if e.GetContactId() == "" {
						fmt.Fprintf(w, "erased %s: no such contact; the address is suppressed for future imports\n", shown(e.GetEmail()))
						continue
					}
					fmt.Fprintf(w, "erased %s (contact %s): %d ledger %s anonymised, %d delivery %s, %d transactional %s; the address stays suppressed\n",
						shown(e.GetEmail()), e.GetContactId(), e.GetSends(), plural(e.GetSends(), "row", "rows"),
						e.GetEvents(), plural(e.GetEvents(), "event", "events"), e.GetTransactional(), plural(e.GetTransactional(), "message", "messages"))
				}
			}
			if !asJSON && total > 1 {
				fmt.Fprintf(w, "%d %s erased, %d of them %s\n", total, plural(int64(total), "address", "addresses"), found, plural(int64(found), "a contact", "contacts"))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&file, "file", "", "read the addresses from FILE, one per line (- for stdin)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object per address")
	return cmd
}

// readAddresses reads one address per line, or the first column of a CSV
// (a header "email" is skipped), without comments and blank lines, as
// segments add --file does (readRefs: a BOM a spreadsheet wrote is taken
// off, where it had made the first address one no contact has).
func readAddresses(stdin io.Reader, file string) ([]string, error) {
	in := stdin
	if file != "-" {
		f, err := os.Open(file)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		in = f
	}
	out, err := readRefs(in)
	if err != nil {
		return nil, fmt.Errorf("--file %s: %w", file, err)
	}
	return out, nil
}

func listSegmentsCommand(c *client) *cobra.Command {
	var l listFlags
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List segments with their member counts",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cc, err := c.catalog()
			if err != nil {
				return err
			}
			return printListing(cmd, &l, listing[*pb.SegmentSummary]{
				header: "NAME\tMEMBERS\tBROADCASTS\tCREATED",
				none:   "no segments (create one with rangecast segments create NAME)",
				fetch: func(ctx context.Context, token string) ([]*pb.SegmentSummary, string, error) {
					resp, err := cc.ListSegments(ctx, &pb.ListSegmentsRequest{PageSize: l.pageSize, PageToken: token})
					return resp.GetSegments(), resp.GetNextPageToken(), err
				},
				row: func(g *pb.SegmentSummary) string {
					return fmt.Sprintf("%s\t%d\t%d\t%s", shown(g.GetSegment().GetName()), g.GetMembers(), g.GetBroadcasts(), when(g.GetSegment().GetCreatedAt()))
				},
			})
		},
	}
	l.add(cmd, "segments")
	return cmd
}

func deleteSegmentCommand(c *client) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "delete NAME",
		Short: "Delete a segment (its memberships, not its contacts)",
		Long: `Delete a segment and its memberships; the contacts stay. A segment that is the
audience of a broadcast (in any state) cannot be deleted: the broadcast keeps it.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cc, err := c.catalog()
			if err != nil {
				return err
			}
			resp, err := cc.DeleteSegment(cmd.Context(), &pb.DeleteSegmentRequest{Name: args[0]})
			if err != nil {
				return err
			}
			if asJSON {
				return jsonLine(cmd.OutOrStdout(), resp)
			}
			g := resp.GetSegment()
			fmt.Fprintf(cmd.OutOrStdout(), "deleted segment %s (%d %s; the contacts stay)\n",
				shown(g.GetSegment().GetName()), g.GetMembers(), plural(g.GetMembers(), "member", "members"))
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func listTemplatesCommand(c *client) *cobra.Command {
	var l listFlags
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List stored templates by name",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cc, err := c.catalog()
			if err != nil {
				return err
			}
			return printListing(cmd, &l, listing[*pb.TransactionalTemplate]{
				header: "NAME\tVERSION\tSUBJECT\tUPDATED",
				none:   "no templates (store one with rangecast send template put)",
				fetch: func(ctx context.Context, token string) ([]*pb.TransactionalTemplate, string, error) {
					resp, err := cc.ListTemplates(ctx, &pb.ListTemplatesRequest{PageSize: l.pageSize, PageToken: token})
					return resp.GetTemplates(), resp.GetNextPageToken(), err
				},
				row: func(t *pb.TransactionalTemplate) string {
					return fmt.Sprintf("%s\t%d\t%s\t%s", shown(t.GetName()), t.GetVersion(), shown(t.GetSubject()), when(t.GetUpdatedAt()))
				},
			})
		},
	}
	l.add(cmd, "templates")
	return cmd
}

func deleteTemplateCommand(c *client) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "delete NAME",
		Short: "Delete a stored template (messages already accepted still go out)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cc, err := c.catalog()
			if err != nil {
				return err
			}
			resp, err := cc.DeleteTemplate(cmd.Context(), &pb.DeleteTemplateRequest{Name: args[0]})
			if err != nil {
				return err
			}
			if asJSON {
				return jsonLine(cmd.OutOrStdout(), resp)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "deleted template %s (version %d)\n", shown(resp.GetTemplate().GetName()), resp.GetTemplate().GetVersion())
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}
