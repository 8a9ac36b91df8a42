package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/rangecast/rangecast/internal/address"
	pb "github.com/rangecast/rangecast/proto/rangecast/v1"
)

// membersChunk is how many contacts one membership call names; the
// coordinator accepts up to 10,000.
const membersChunk = 5000

func segmentsCommand(c *client) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "segments",
		Short: "Create segments, change their members, preview their audience",
		Long: `A segment is a list of contacts kept by hand (and by imports with --segment):
membership changes only when you add or remove members, never by
re-evaluating a filter at send time. A broadcast created with --segment NAME
sends to the segment's members that may receive mail.`,
	}
	cmd.AddCommand(createSegmentCommand(c), membersCommand(c, true), membersCommand(c, false), previewCommand(c))
	cmd.AddCommand(listSegmentsCommand(c), deleteSegmentCommand(c))
	return cmd
}

func createSegmentCommand(c *client) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "create NAME",
		Short: "Create an empty segment",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ac, err := c.audience()
			if err != nil {
				return err
			}
			resp, err := ac.CreateSegment(cmd.Context(), &pb.CreateSegmentRequest{Name: args[0]})
			if err != nil {
				return err
			}
			if asJSON {
				return jsonLine(cmd.OutOrStdout(), resp.GetSegment())
			}
			fmt.Fprintf(cmd.OutOrStdout(), "created segment %s\n", shown(resp.GetSegment().GetName()))
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the segment as JSON")
	return cmd
}

// errNotFound is returned when some contacts named for a membership change
// do not exist, so the command exits non-zero after changing the others.
type errNotFound int

func (e errNotFound) Error() string {
	return fmt.Sprintf("%d %s no contact (listed above); the others were changed", int(e), plural(int64(e), "entry names", "entries name"))
}

func membersCommand(c *client, add bool) *cobra.Command {
	var file string
	var asJSON bool
	verb, past, prep, unchangedWord := "add", "added", "to", "already members"
	if !add {
		verb, past, prep, unchangedWord = "remove", "removed", "from", "not members"
	}
	cmd := &cobra.Command{
		Use:   verb + " SEGMENT [EMAIL|ID ...] [--file FILE]",
		Short: strings.ToUpper(verb[:1]) + verb[1:] + " contacts " + prep + " a segment, by email or id",
		Long: `Contacts are named by email (case-insensitive) or id, as arguments or in a
file with one per line (- reads stdin; blank lines and lines starting with #
are skipped; in a CSV, the first column is used and a header "email" is
skipped). Contacts that do not exist are listed and the command exits with
status 1; all others are ` + past + `.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			segment, refs := args[0], args[1:]
			if file != "" {
				var in io.Reader = cmd.InOrStdin()
				if file != "-" {
					f, err := os.Open(file)
					if err != nil {
						return err
					}
					defer f.Close()
					in = f
				}
				more, err := readRefs(in)
				if err != nil {
					return fmt.Errorf("--file %s: %w", file, err)
				}
				refs = append(refs, more...)
			}
			if len(refs) == 0 {
				return fmt.Errorf("name the contacts to %s: emails or ids as arguments, or --file", verb)
			}
			refs = distinctRefs(refs)
			ac, err := c.audience()
			if err != nil {
				return err
			}
			var changed, unchanged int64
			var notFound []string
			for start := 0; start < len(refs); start += membersChunk {
				ch, un, nf, err := changeMembers(cmd.Context(), ac, add, segment, refs[start:min(start+membersChunk, len(refs))])
				if err != nil {
					if start > 0 {
						return fmt.Errorf("after %d of %d contacts were processed (%d %s): %w", start, len(refs), changed, past, err)
					}
					return err
				}
				changed, unchanged, notFound = changed+ch, unchanged+un, append(notFound, nf...)
			}
			out := cmd.OutOrStdout()
			if asJSON {
				if notFound == nil {
					notFound = []string{}
				}
				err := json.NewEncoder(out).Encode(struct {
					Segment   string   `json:"segment"`
					Changed   int64    `json:"changed"`
					Unchanged int64    `json:"unchanged"`
					NotFound  []string `json:"notFound"`
				}{segment, changed, unchanged, notFound})
				if err == nil && len(notFound) > 0 {
					err = errNotFound(len(notFound))
				}
				return err
			}
			fmt.Fprintf(out, "%s %d %s %s %s (%d %s)\n", past, changed, plural(changed, "contact", "contacts"), prep, segment, unchanged, unchangedWord)
			for _, nf := range notFound {
				fmt.Fprintf(out, "  no such contact: %s\n", nf)
			}
			if len(notFound) > 0 {
				return errNotFound(len(notFound))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&file, "file", "", "file of emails or ids, one per line (- reads stdin)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the counts ("+past+", unchanged) and the names that match no contact as JSON")
	return cmd
}

// changeMembers sends one chunk of references, split into ids and emails.
func changeMembers(ctx context.Context, ac pb.AudienceServiceClient, add bool, segment string, refs []string) (changed, unchanged int64, notFound []string, err error) {
	var ids, emails []string
	for _, r := range refs {
		if id, email := contactRef(r); id != "" {
			ids = append(ids, id)
		} else {
			emails = append(emails, email)
		}
	}
	if add {
		resp, err := ac.AddSegmentMembers(ctx, &pb.AddSegmentMembersRequest{Segment: segment, ContactIds: ids, Emails: emails})
		return resp.GetChanged(), resp.GetUnchanged(), resp.GetNotFound(), err
	}
	resp, err := ac.RemoveSegmentMembers(ctx, &pb.RemoveSegmentMembersRequest{Segment: segment, ContactIds: ids, Emails: emails})
	return resp.GetChanged(), resp.GetUnchanged(), resp.GetNotFound(), err
}

// distinctRefs drops repeated names, keeping the first: a line repeated in
// a file (or across the calls a long file is sent in) is one contact, not
// counted once changed and once unchanged. Emails compare as the
// coordinator compares them (address.Key).
func distinctRefs(refs []string) []string {
	seen := make(map[string]bool, len(refs))
	out := make([]string, 0, len(refs))
	for _, r := range refs {
		id, email := contactRef(r)
		k := "id:" + strings.ToUpper(id)
		if id == "" {
			k = "email:" + address.Key(email)
		}
		if !seen[k] {
			seen[k] = true
			out = append(out, r)
		}
	}
	return out
}

// readRefs reads one email or id per line: blank lines and # comments are
// skipped, a CSV line gives its first column, and a first line "email"
// (a CSV header) is skipped.
func readRefs(in io.Reader) ([]string, error) {
	var out []string
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	first := true
	for sc.Scan() {
		line := strings.TrimSpace(strings.TrimPrefix(sc.Text(), "\ufeff"))
		if i := strings.IndexByte(line, ','); i >= 0 {
			line = strings.TrimSpace(line[:i])
		}
		line = strings.Trim(line, `"`)
		header := first && strings.EqualFold(line, "email")
		first = false
		if line == "" || strings.HasPrefix(line, "#") || header {
			continue
		}
		out = append(out, line)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

func previewCommand(c *client) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "preview [SEGMENT]",
		Short: "Count who a broadcast to a segment (or to everyone) would reach now",
		Long: `Print two numbers: the contacts the audience matches (the segment's members,
or every contact), and how many of them a broadcast started now would send
to: those that are subscribed, not do-not-contact, not suppressed and have an
address. The second number comes from the same query a broadcast's start uses.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var segment string
			if len(args) == 1 {
				if segment = args[0]; segment == "" {
					return errors.New("the segment name is empty; leave it out to preview everyone")
				}
			}
			ac, err := c.audience()
			if err != nil {
				return err
			}
			resp, err := ac.PreviewAudience(cmd.Context(), &pb.PreviewAudienceRequest{Segment: segment})
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			if asJSON {
				out, err := protojson.MarshalOptions{EmitUnpopulated: true}.Marshal(resp)
				if err != nil {
					return err
				}
				fmt.Fprintln(w, string(out))
				return nil
			}
			what := "everyone"
			if segment != "" {
				what = "segment " + segment
			}
			fmt.Fprintf(w, "%s: %d %s, %d eligible to receive (%d unsubscribed, do-not-contact, suppressed or without an address)\n",
				what, resp.GetMatched(), plural(resp.GetMatched(), "contact", "contacts"), resp.GetEligible(), resp.GetMatched()-resp.GetEligible())
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}
