package cli

import (
	"bufio"
	"cmp"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"unicode"
	"unicode/utf8"

	"github.com/oklog/ulid/v2"
	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rangecast/rangecast/internal/address"
	"github.com/rangecast/rangecast/internal/api"
	pb "github.com/rangecast/rangecast/proto/rangecast/v1"
)

// Import limits of the CLI's side of the stream.
const (
	// importChunk is the most rows one stream message carries.
	importChunk = 500
	// importChunkBytes is about the most row data one stream message
	// carries: a chunk is sent when it reaches importChunk rows or this
	// size, whichever comes first, so wide rows stay far below gRPC's
	// receive limit (4 MiB by default) whatever the coordinator's setting.
	// A row alone larger than this is rejected here: no valid row comes
	// near it (see csvColumns.tooLarge).
	importChunkBytes = 1 << 20
)

// The coordinator's per-field limits of an imported row (internal/api,
// validateRow), which stays their authority: the CLI checks them only to
// refuse up front a header every row would fail on, and to name the field
// of a row too large to send.
const (
	maxImportEmail      = 254
	maxImportName       = 256
	maxImportAttributes = 64
	maxImportAttrKey    = 128
	maxImportAttrValue  = 2048
)

func contactsCommand(c *client) *cobra.Command {
	cmd := &cobra.Command{Use: "contacts", Short: "Import, list, inspect, suppress, unsubscribe and erase contacts"}
	cmd.AddCommand(importCommand(c), showContactCommand(c), suppressCommand(c), unsuppressCommand(c), unsubscribeCommand(c))
	cmd.AddCommand(listContactsCommand(c), deleteContactsCommand(c))
	return cmd
}

// errRejected is returned when an import rejected rows, so the command
// exits non-zero: a script must not take a partial import for a clean one.
type errRejected struct{ rejected, imported int64 }

func (e errRejected) Error() string {
	return fmt.Sprintf("%d %s rejected (listed above); the other %d %s imported. Fix those rows and import the file again: rows already imported are only updated",
		e.rejected, plural(e.rejected, "row was", "rows were"), e.imported, plural(e.imported, "row was", "rows were"))
}

// importStopped is an import whose stream ended before its result: the
// coordinator stopped, or the connection dropped. Which of the rows sent
// were stored is not known here (the coordinator stores them as they
// arrive), but importing the file again is safe. It has no Unwrap on
// purpose: its message describes the stream's status already, and
// printError, given a wrapped status, would describe that status again
// around it.
type importStopped struct {
	sent int
	err  error
}

// stopped is err, as importStopped when it says the stream was cut (the
// coordinator went away, the connection dropped, the deadline passed):
// an error the coordinator answered (a bad token, a refused request, its
// own account of a failed import) is its own message.
func stopped(sent int, err error) error {
	if st, ok := status.FromError(err); ok && !api.AnsweredByCoordinator(st) {
		switch st.Code() {
		case codes.Unavailable, codes.Canceled, codes.DeadlineExceeded, codes.Aborted:
			return importStopped{sent: sent, err: err}
		}
	}
	return err
}

func (e importStopped) Error() string {
	why := describe(e.err)
	if st, ok := status.FromError(e.err); ok && st.Code() == codes.Unavailable {
		// Mid-stream (stopped took no answer of the coordinator's): the
		// connection was up, so not describe's hints for one that never
		// was (is it running, TLS).
		why = "the connection to the coordinator was lost: " + st.Message()
	}
	return fmt.Sprintf("the import stopped before it finished (%s): up to %d rows sent may have been imported; import the file again once the coordinator answers (rows already imported are only updated)",
		why, e.sent)
}

func importCommand(c *client) *cobra.Command {
	var segments []string
	var asJSON, multiline bool
	imp := &cobra.Command{
		Use:   "import FILE.csv",
		Short: "Import contacts from CSV (header: email, name if any, unsubscribed/do_not_contact if any, attribute columns, in any order; - reads stdin)",
		Long: `Import contacts from a CSV file with a header row, which names the columns
(case-insensitively, in any order): the column headed email, which is
required, is the address, the one headed name (if any) the name, and every
other column an attribute under its header, usable in templates as
{{.Attributes.column}}, except these, read as who may not be mailed (true or
false, yes or no, 1 or 0; empty is false): unsubscribed, do_not_contact, and
subscribed (false marks the person unsubscribed). A header without an email column, with an empty
header or with two columns of the same header is refused before anything is
imported. Lines may end in LF, CRLF or CR alone. Contacts are matched by
email, case-insensitively: an existing contact keeps its id, its name is
replaced by a name the file gives (a row without one, or a file without a
name column, keeps it) and attributes merged. An import never re-subscribes someone who unsubscribed.

Rows that cannot be imported (an invalid address, a repeat of an earlier
row's email, a field too long, a malformed CSV line) are each printed with
their line number, and the command exits with status 1; every other row is
imported. A quoted field that runs over several lines is refused unless
--multiline is given: it is most often a quote left open, which would
swallow the rows after it. The file is streamed, so millions of rows work.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			// Checked once here: the coordinator checks every row, and a
			// bad name would reject every row of the file with one message.
			for _, name := range segments {
				if err := api.ValidateSegmentName(name); err != nil {
					return fmt.Errorf("--segment: %w; nothing was imported", err)
				}
			}
			var in io.Reader = cmd.InOrStdin()
			if args[0] != "-" {
				f, err := os.Open(args[0])
				if err != nil {
					return err
				}
				defer f.Close()
				in = f
			}
			ac, err := c.audience()
			if err != nil {
				return err
			}
			stream, err := ac.ImportContacts(cmd.Context())
			if err != nil {
				return err
			}
			sent := 0 // rows sent
			res, err := readCSV(in, segments, multiline, func(rows []*pb.ContactRow) error {
				err := stream.Send(&pb.ImportContactsRequest{Rows: rows})
				if errors.Is(err, io.EOF) {
					// The stream ended on the coordinator's side; gRPC
					// gives its status to the receive, not the send.
					_, err = stream.CloseAndRecv()
				}
				if err != nil {
					return stopped(sent, err)
				}
				sent += len(rows)
				return nil
			})
			if err != nil {
				stream.CloseSend() //nolint:errcheck
				return err
			}
			resp, err := stream.CloseAndRecv()
			if err != nil {
				return stopped(sent, err)
			}
			for _, e := range resp.GetErrors() {
				res.rejected = append(res.rejected, fmt.Sprintf("line %d: %s: %s", res.line(e.GetRow()), shown(e.GetEmail()), shown(res.serverError(e.GetError()))))
			}
			// The server lists its first rejections only; it counts all.
			unlisted := max(resp.GetRejected()-int64(len(resp.GetErrors())), 0)
			rejected := int64(len(res.rejected)) + unlisted
			if res.records == 0 {
				// Not an error (an export of nobody is a valid file), but
				// not to be mistaken for an import that did something.
				fmt.Fprintf(cmd.ErrOrStderr(), "note: %s has a header row but no contact rows: nothing was imported\n", shown(importSource(args[0])))
			}
			if n, first := res.importedUTF8Local(resp.GetErrors()); n > 0 {
				// Stored and sent like any other, but refused by a relay
				// without SMTPUTF8 (failed "not handed to the relay: …"; broadcasts retry
				// sends them once it offers it): better known now (tester).
				// Rows the server rejected are not counted (reviewer).
				more := ""
				if n > len(first) {
					more = fmt.Sprintf(" and %d more", n-len(first))
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "note: %d imported %s a non-ASCII local part (%s%s): only a relay offering SMTPUTF8 can deliver to them\n",
					n, plural(int64(n), "address has", "addresses have"), shown(strings.Join(first, ", ")), more)
			}
			if len(res.unread) > 0 {
				fmt.Fprintf(cmd.ErrOrStderr(), "note: %s %s, not read as who may be mailed: mark people with a column headed unsubscribed or do_not_contact (true/false); import never re-subscribes anyone\n",
					shown(strings.Join(res.unread, ", ")), plural(int64(len(res.unread)), "is an attribute", "are attributes"))
			}
			if res.records > 0 && res.noName {
				// A file whose second column used to be read as the name
				// whatever its header (full_name, say) now imports it as
				// an attribute: say so, rather than leave names empty.
				fmt.Fprintf(cmd.ErrOrStderr(), "note: %s has no column headed name: new contacts have no name (existing ones keep theirs); every column but email is an attribute\n", shown(importSource(args[0])))
			}
			out := cmd.OutOrStdout()
			if asJSON {
				if err := printImportJSON(out, resp, res, rejected); err != nil {
					return err
				}
				if rejected > 0 {
					return errRejected{rejected: rejected, imported: resp.GetImported()}
				}
				return nil
			}
			fmt.Fprintf(out, "imported %d %s%s; %d %s rejected\n", resp.GetImported(), plural(resp.GetImported(), "contact", "contacts"),
				newAndUpdated(resp), rejected, plural(rejected, "row", "rows"))
			if n := resp.GetErased(); n > 0 {
				fmt.Fprintf(out, "  %d of them %s erased before (GDPR Art. 17): kept suppressed, never mailed\n", n, plural(n, "was", "were"))
			}
			// The reader's and the server's rejections arrive separately; a
			// person reads them in file order.
			slices.SortStableFunc(res.rejected, func(a, b string) int { return cmp.Compare(lineOf(a), lineOf(b)) })
			for _, r := range res.rejected {
				fmt.Fprintln(out, "  "+r)
			}
			if unlisted > 0 {
				fmt.Fprintf(out, "  … and %d more rejected by the coordinator, which lists only the first %d\n", unlisted, len(resp.GetErrors()))
			}
			if rejected > 0 {
				return errRejected{rejected: rejected, imported: resp.GetImported()}
			}
			return nil
		},
	}
	// StringArray, not StringSlice: a segment's name may hold a comma,
	// and a slice flag split --segment 'a,b' into segments a and b.
	imp.Flags().StringArrayVar(&segments, "segment", nil, "also add every imported contact to this segment, named as it is (repeatable)")
	imp.Flags().BoolVar(&multiline, "multiline", false, "accept quoted fields that run over several lines (attribute values with line breaks); without it such a record is refused, since it is most often an unbalanced quote swallowing the rows after it")
	imp.Flags().BoolVar(&asJSON, "json", false, "print what was imported and every rejected row as JSON")
	return imp
}

// importSource is how the import's file argument is named in messages.
func importSource(arg string) string {
	if arg == "-" {
		return "the input"
	}
	return arg
}

// contactRef names a contact for a request: an argument that parses as a
// ULID is an id, anything else an email.
func contactRef(arg string) (id, email string) {
	arg = strings.TrimSpace(arg)
	if _, err := ulid.ParseStrict(arg); err == nil {
		return arg, ""
	}
	return "", arg
}

func showContactCommand(c *client) *cobra.Command {
	var asJSON bool
	var limit int32
	cmd := &cobra.Command{
		Use:   "show EMAIL|ID",
		Short: "Show a contact and what every broadcast did with it",
		Long: `Show one contact: its flags, segments and attributes, and its send history:
one line per broadcast that sent to it (or tried to), latest first, with the
status and the SMTP server's reply for failures.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ac, err := c.audience()
			if err != nil {
				return err
			}
			id, email := contactRef(args[0])
			resp, err := ac.GetContact(cmd.Context(), &pb.GetContactRequest{Id: id, Email: email, HistoryLimit: limit})
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			if asJSON {
				out, err := protojson.MarshalOptions{Multiline: true, EmitUnpopulated: true}.Marshal(resp)
				if err != nil {
					return err
				}
				fmt.Fprintln(w, string(out))
				return nil
			}
			printContact(w, resp)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.Flags().Int32Var(&limit, "limit", 0, "show at most this many broadcasts of the history (default 500)")
	return cmd
}

// eligibility says in words whether broadcasts reach the contact and, if
// not, why.
func eligibility(c *pb.Contact) string {
	if c.GetEligible() {
		return "receives broadcasts"
	}
	var why []string
	if !c.GetSubscribed() {
		why = append(why, "unsubscribed")
	}
	if c.GetDoNotContact() {
		why = append(why, "do-not-contact")
	}
	if c.GetSuppressed() {
		s := "suppressed"
		if r := c.GetSuppressedReason(); r != "" {
			s += " (" + r
			if c.GetSuppressedAt() != nil {
				s += ", " + when(c.GetSuppressedAt())
			}
			s += ")"
		}
		why = append(why, s)
	}
	if len(why) == 0 {
		why = append(why, "no address")
	}
	return "receives no broadcasts: " + strings.Join(why, ", ")
}

func when(ts *timestamppb.Timestamp) string {
	if ts == nil {
		return "-"
	}
	return ts.AsTime().UTC().Format("2006-01-02 15:04:05Z")
}

// statusLabel is the status's label from the enum's display option, so the
// CLI words a status as every other client does.
func statusLabel(s pb.SendStatus) string {
	if v := s.Descriptor().Values().ByNumber(protoreflect.EnumNumber(s)); v != nil {
		if d, ok := proto.GetExtension(v.Options(), pb.E_Display).(*pb.StatusDisplay); ok && d.GetLabel() != "" {
			return d.GetLabel()
		}
	}
	return s.String()
}

func printContact(w io.Writer, resp *pb.GetContactResponse) {
	c := resp.GetContact()
	fmt.Fprintf(w, "id          %s\n", c.GetId())
	fmt.Fprintf(w, "email       %s\n", shown(c.GetEmail()))
	fmt.Fprintf(w, "name        %s\n", shown(c.GetName()))
	fmt.Fprintf(w, "status      %s\n", shown(eligibility(c))) // a reason may come from a webhook
	segments := strings.Join(c.GetSegments(), ", ")
	if segments == "" {
		segments = "-"
	}
	fmt.Fprintf(w, "segments    %s\n", shown(segments))
	keys := slices.Sorted(maps.Keys(c.GetAttributes()))
	attrs := make([]string, len(keys))
	for i, k := range keys {
		attrs[i] = shown(k) + "=" + strconv.Quote(c.GetAttributes()[k])
	}
	if len(attrs) == 0 {
		attrs = []string{"-"}
	}
	fmt.Fprintf(w, "attributes  %s\n", strings.Join(attrs, " "))
	fmt.Fprintf(w, "created     %s\n", when(c.GetCreatedAt()))
	fmt.Fprintf(w, "updated     %s\n", when(c.GetUpdatedAt()))
	fmt.Fprintln(w)
	if len(resp.GetHistory()) == 0 {
		fmt.Fprintln(w, "no broadcast has sent to this contact")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "BROADCAST\tNAME\tSTATUS\tUPDATED\tREPLY")
	for _, h := range resp.GetHistory() {
		label := statusLabel(h.GetStatus())
		if h.GetStatus() == pb.SendStatus_SEND_STATUS_DEFERRED && h.GetBroadcastState() == pb.BroadcastState_BROADCAST_STATE_CANCELLED {
			label += " (never sent: broadcast cancelled)" // deferred reads as "will be retried" (tester)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", h.GetBroadcastId(), shown(h.GetBroadcastName()), label, when(h.GetUpdatedAt()), shown(h.GetReply()))
	}
	tw.Flush() //nolint:errcheck
	if resp.GetHistoryTruncated() {
		fmt.Fprintf(w, "(the latest %d broadcasts; --limit shows more)\n", len(resp.GetHistory()))
	}
}

func suppressCommand(c *client) *cobra.Command {
	var reason string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "suppress EMAIL|ID --reason TEXT",
		Short: "Keep a contact from receiving any broadcast, with a reason",
		Long: `Suppress a contact: no broadcast sends to it again, running ones from their
next page. The reason is kept and shown by "contacts show". An import never
lifts a suppression; "contacts unsuppress" does.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ac, err := c.audience()
			if err != nil {
				return err
			}
			id, email := contactRef(args[0])
			resp, err := ac.SuppressContact(cmd.Context(), &pb.SuppressContactRequest{Id: id, Email: email, Reason: reason})
			if err != nil {
				return err
			}
			ct := resp.GetContact()
			if asJSON {
				return jsonLine(cmd.OutOrStdout(), resp)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "suppressed %s (%s): %s\n", shown(ct.GetEmail()), ct.GetId(), shown(ct.GetSuppressedReason()))
			return nil
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why this contact must not be mailed (required)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the contact as it is now, as JSON")
	cmd.MarkFlagRequired("reason") //nolint:errcheck
	return cmd
}

func unsubscribeCommand(c *client) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "unsubscribe EMAIL|ID",
		Short: "Unsubscribe a contact from all broadcasts",
		Long: `Unsubscribe a contact: running broadcasts skip it from their next page, and
its messages still waiting (deferred) are not sent. An import never
re-subscribes it.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ac, err := c.audience()
			if err != nil {
				return err
			}
			id, email := contactRef(args[0])
			if _, err := ac.UnsubscribeContact(cmd.Context(), &pb.UnsubscribeContactRequest{Id: id, Email: email}); err != nil {
				return err
			}
			if asJSON {
				// The contact as it is now: what the unsubscribe did.
				resp, err := ac.GetContact(cmd.Context(), &pb.GetContactRequest{Id: id, Email: email, HistoryLimit: 1})
				if err != nil {
					return err
				}
				return jsonLine(cmd.OutOrStdout(), resp.GetContact())
			}
			fmt.Fprintf(cmd.OutOrStdout(), "unsubscribed %s\n", args[0])
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the contact as it is now, as JSON")
	return cmd
}

type csvResult struct {
	lines    []int // file line of each row sent, so server row numbers map back
	rejected []string
	records  int      // rows read after the header, sent or not
	noName   bool     // the header has no name column
	unread   []string // csvColumns.unread
	// utf8Local are the rows sent whose address's local part is not
	// ASCII: only a relay offering SMTPUTF8 can carry them.
	utf8Local []utf8LocalRow
}

// listedRejections is how many rejected rows the server lists in its
// reply at most (internal/api's maxRowErrors); it counts the rest.
const listedRejections = 1_000

// utf8LocalRow is a row sent (its number in the stream) whose address has
// a non-ASCII local part; email is kept for the first ones only, enough
// to name a few once the server's listed rejections are taken out.
type utf8LocalRow struct {
	row   int64
	email string
}

func (res *csvResult) noteUTF8Local(row int64, email string) {
	r := utf8LocalRow{row: row}
	if len(res.utf8Local) < listedRejections+3 {
		r.email = email
	}
	res.utf8Local = append(res.utf8Local, r)
}

// importedUTF8Local counts the non-ASCII local parts the server took (the
// rows it rejected and listed are left out) and names up to three.
// unlisted > 0 means some rejections were not listed, so the count may
// include a few of them.
func (res *csvResult) importedUTF8Local(rejected []*pb.RowError) (n int, first []string) {
	gone := make(map[int64]bool, len(rejected))
	for _, e := range rejected {
		gone[e.GetRow()] = true
	}
	for _, r := range res.utf8Local {
		if gone[r.row] {
			continue
		}
		if n++; len(first) < 3 && r.email != "" {
			first = append(first, r.email)
		}
	}
	return n, first
}

// line is the file line of the server's row number (counted from 1 over
// the rows sent), or the row number itself if it is out of range.
func (res *csvResult) line(row int64) int64 {
	if row < 1 || row > int64(len(res.lines)) {
		return row
	}
	return int64(res.lines[row-1])
}

// duplicateRow matches the server's rejection of a repeated email, which
// names the first row by its row number in the stream.
var duplicateRow = regexp.MustCompile(`^duplicate of row (\d+)$`)

// serverError rewrites row numbers in a server rejection as file lines.
func (res *csvResult) serverError(msg string) string {
	if m := duplicateRow.FindStringSubmatch(msg); m != nil {
		if row, err := strconv.ParseInt(m[1], 10, 64); err == nil {
			return fmt.Sprintf("duplicate of line %d", res.line(row))
		}
	}
	return msg
}

func allValidUTF8(fields []string) bool {
	for _, f := range fields {
		if !utf8.ValidString(f) {
			return false
		}
	}
	return true
}

// csvFormat says what the header must be, for errors about it.
const csvFormat = "a header row naming each column: email (required), name, unsubscribed, do_not_contact, and any other column as an attribute, in any order"

// csvColumns is what a CSV header says each column holds.
type csvColumns struct {
	keys  []string // every column's header, trimmed
	email int      // the email column
	name  int      // the name column, -1 if there is none
	attrs []int    // the attribute columns, in file order
	// flags are the columns that say a person may not be mailed
	// (unsubscribed, do_not_contact, subscribed): read, not stored as
	// attributes, so a list exported with its unsubscribes marked does not
	// come in as people to mail (a tester's "unsubscribed,true" row was
	// imported as subscribed).
	flags []flagColumn
	// unread are attribute columns whose name suggests they say who may
	// be mailed (status, opt_in, …), which import does not read: a note
	// names them.
	unread []string
}

// flagColumn is a column read as a yes/no flag of the contact.
type flagColumn struct {
	col  int
	kind string // "unsubscribed", "do_not_contact" or "subscribed"
}

// flagHeader maps a header (folded, with spaces and hyphens as
// underscores) to the flag it names.
var flagHeader = map[string]string{
	"unsubscribed": "unsubscribed", "do_not_contact": "do_not_contact", "donotcontact": "do_not_contact", "subscribed": "subscribed",
}

// consentWords are parts of a header that suggest the column says who may
// be mailed, though import does not read it.
var consentWords = []string{"status", "subscri", "opt_in", "opt_out", "optin", "optout", "consent", "blocklist", "blacklist", "suppress", "bounce", "complain"}

// yesNo reads a flag's value: "" is no, and anything but the usual
// spellings of yes and no is refused rather than guessed at.
func yesNo(v string) (bool, bool) {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "true", "yes", "y", "1", "x", "t":
		return true, true
	case "false", "no", "n", "0", "", "f":
		return false, true
	}
	return false, false
}

// parseHeader maps columns by their header. A header that would misplace
// data (no email column, a repeated or empty header) or that every row
// would be rejected for is refused before anything is sent.
func parseHeader(header []string) (*csvColumns, error) {
	cols := &csvColumns{keys: make([]string, len(header)), email: -1, name: -1}
	seen := make(map[string]int, len(header))
	for i, h := range header {
		if i == 0 {
			h = strings.TrimPrefix(h, "\ufeff") // the BOM Excel writes
		}
		h = strings.TrimSpace(h)
		cols.keys[i] = h
		if !utf8.ValidString(h) {
			return nil, errors.New("the CSV header is not valid UTF-8; save the file as UTF-8")
		}
		if h == "" {
			return nil, fmt.Errorf("column %d of the CSV header is empty: the file needs %s", i+1, csvFormat)
		}
		if strings.ContainsFunc(h, unicode.IsControl) {
			return nil, fmt.Errorf("column %d of the CSV header, %s, contains a tab, line break or other control character", i+1, strconv.Quote(h))
		}
		folded := strings.ToLower(h)
		if j, ok := seen[folded]; ok {
			if cols.keys[j] != h {
				return nil, fmt.Errorf("the CSV header names two columns %s and %s (columns %d and %d), the same but for case: each column needs a header of its own", strconv.Quote(cols.keys[j]), strconv.Quote(h), j+1, i+1)
			}
			return nil, fmt.Errorf("the CSV header names two columns %s (columns %d and %d): each column needs a header of its own", strconv.Quote(h), j+1, i+1)
		}
		seen[folded] = i
		flagName := strings.NewReplacer(" ", "_", "-", "_").Replace(folded)
		switch {
		case folded == "email":
			cols.email = i
		case folded == "name":
			cols.name = i
		case flagHeader[flagName] != "":
			cols.flags = append(cols.flags, flagColumn{col: i, kind: flagHeader[flagName]})
		default:
			for _, w := range consentWords {
				if strings.Contains(flagName, w) {
					cols.unread = append(cols.unread, h)
					break
				}
			}
			if n := utf8.RuneCountInString(h); n > maxImportAttrKey {
				return nil, fmt.Errorf("column %d of the CSV header, %.40q…, is %d characters; an attribute name may have at most %d", i+1, h, n, maxImportAttrKey)
			}
			cols.attrs = append(cols.attrs, i)
		}
	}
	if cols.email < 0 {
		quoted := make([]string, len(cols.keys))
		for i, k := range cols.keys {
			quoted[i] = strconv.Quote(k)
		}
		hint := ""
		for _, k := range cols.keys {
			if sep := strings.IndexAny(k, ";\t|"); sep >= 0 && strings.Contains(strings.ToLower(k), "email") {
				// email;name: a spreadsheet's export in a locale whose
				// lists use semicolons (tester).
				hint = fmt.Sprintf(" (the columns look separated by %q: rangecast reads commas; export the file with commas as separators)", k[sep:sep+1])
				break
			}
		}
		return nil, fmt.Errorf("the CSV header has no email column (its columns: %s)%s: the file needs %s", strings.Join(quoted, ", "), hint, csvFormat)
	}
	if n := len(cols.attrs); n > maxImportAttributes {
		return nil, fmt.Errorf("the CSV header has %d attribute columns; a contact may have at most %d attributes", n, maxImportAttributes)
	}
	return cols, nil
}

// row is the contact a record of the file describes, or why the record
// cannot be read as one (a flag that is neither yes nor no).
func (cols *csvColumns) row(rec, segments []string) (*pb.ContactRow, string) {
	row := &pb.ContactRow{Email: strings.TrimSpace(rec[cols.email]), Segments: segments}
	for _, f := range cols.flags {
		yes, ok := yesNo(rec[f.col])
		if !ok {
			return nil, fmt.Sprintf("%s is %s: give true or false (yes/no, 1/0)", cols.keys[f.col], strconv.Quote(clipped(rec[f.col], 40)))
		}
		switch {
		case f.kind == "unsubscribed" && yes, f.kind == "subscribed" && !yes && strings.TrimSpace(rec[f.col]) != "":
			row.Unsubscribed = true
		case f.kind == "do_not_contact" && yes:
			row.DoNotContact = true
		}
	}
	if cols.name >= 0 {
		row.Name = strings.TrimSpace(rec[cols.name])
	}
	if len(cols.attrs) > 0 {
		row.Attributes = make(map[string]string, len(cols.attrs))
		for _, i := range cols.attrs {
			row.Attributes[cols.keys[i]] = rec[i]
		}
	}
	return row, ""
}

// tooLarge says why a row of size bytes, more than a chunk may carry, is
// rejected: the field over the coordinator's limit, as the coordinator
// words it. No row within every limit comes near importChunkBytes (64
// attributes of 128 + 2,048 characters are at most 557,056 bytes), so the
// last sentence is for many long --segment names only.
func (cols *csvColumns) tooLarge(r *pb.ContactRow, size int) string {
	if n := utf8.RuneCountInString(r.GetEmail()); n > maxImportEmail {
		return fmt.Sprintf("email is %d characters; at most %d are allowed", n, maxImportEmail)
	}
	if n := utf8.RuneCountInString(r.GetName()); n > maxImportName {
		return fmt.Sprintf("name is %d characters; at most %d are allowed", n, maxImportName)
	}
	for _, i := range cols.attrs {
		k := cols.keys[i]
		if n := utf8.RuneCountInString(r.GetAttributes()[k]); n > maxImportAttrValue {
			return fmt.Sprintf("attribute %q is %d characters; at most %d are allowed", k, n, maxImportAttrValue)
		}
	}
	return fmt.Sprintf("the row is %d bytes; at most %d can be sent as one row", size, importChunkBytes)
}

// crLines makes a file whose lines end in a lone CR (classic Mac OS, some
// Excel exports) readable by encoding/csv, which ends a line only at LF:
// if the first line break is a CR not followed by LF, every CR becomes LF.
// Files with LF or CRLF line breaks pass through as they are. It streams:
// the decision needs at most one byte of look-ahead.
type crLines struct {
	r     *bufio.Reader
	state int // crUndecided, crAsIs or crToLF
}

const (
	crUndecided = iota
	crAsIs
	crToLF
)

func newCRLines(r io.Reader) *crLines { return &crLines{r: bufio.NewReader(r)} }

func (c *crLines) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	for i := 0; c.state == crUndecided && i < n; i++ {
		switch p[i] {
		case '\n':
			c.state = crAsIs
		case '\r':
			var next []byte
			if i+1 < n {
				next = p[i+1 : i+2]
			} else {
				next, _ = c.r.Peek(1) // nothing after it: a lone CR either way
			}
			c.state = crToLF
			if len(next) == 1 && next[0] == '\n' {
				c.state = crAsIs
			}
		}
	}
	if c.state == crToLF {
		for i, b := range p[:n] {
			if b == '\r' {
				p[i] = '\n'
			}
		}
	}
	return n, err
}

// readCSV streams rows to send in chunks. Rows the CSV reader itself cannot
// make sense of, or too large to send, are rejected here with their line;
// all others go to the server, which reports its own rejections by row
// number.
func readCSV(in io.Reader, segments []string, multiline bool, send func([]*pb.ContactRow) error) (*csvResult, error) {
	r := csv.NewReader(newCRLines(in))
	r.FieldsPerRecord = -1
	r.ReuseRecord = true
	header, err := r.Read()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("the CSV is empty: it needs %s, then one contact per line", csvFormat)
		}
		return nil, fmt.Errorf("read CSV header: %w", err)
	}
	cols, err := parseHeader(header)
	if err != nil {
		return nil, err
	}
	res := &csvResult{noName: cols.name < 0, unread: cols.unread}
	var chunk []*pb.ContactRow
	chunkBytes := 0
	flush := func() error {
		if len(chunk) == 0 {
			return nil
		}
		err := send(chunk)
		chunk, chunkBytes = nil, 0
		return err
	}
	for {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		res.records++
		if err != nil {
			var pe *csv.ParseError
			if errors.As(err, &pe) {
				res.rejected = append(res.rejected, parseRejection(pe))
				continue
			}
			return nil, err
		}
		// Only after a successful read: after a parse error in the first
		// field there is no field position, and FieldPos panics.
		line, _ := r.FieldPos(0)
		if n := recordLines(rec); n > 1 && !multiline {
			res.rejected = append(res.rejected, fmt.Sprintf("line %d: a quoted field runs over %d lines (to line %d), so lines %d–%d were read as this one row and none of them was imported; if a quote is unbalanced, fix it; if a value really holds line breaks, import with --multiline",
				line, n, line+n-1, line, line+n-1))
			continue
		}
		if n := recordLines(rec); n > 1 {
			if at, email, ok := rowInside(rec, cols); ok {
				res.rejected = append(res.rejected, fmt.Sprintf("line %d: a quoted field runs over %d lines (to line %d), and line %d inside it reads as a contact row of its own (%s): a quote is most likely unbalanced, so lines %d–%d were not imported; fix the quote and import the file again",
					line, n, line+n-1, line+at, shown(email), line, line+n-1))
				continue
			}
		}
		if !allValidUTF8(rec) {
			// gRPC cannot carry it: one such row would fail the whole stream.
			res.rejected = append(res.rejected, fmt.Sprintf("line %d: not valid UTF-8 (save the file as UTF-8)", line))
			continue
		}
		if len(rec) != len(cols.keys) {
			res.rejected = append(res.rejected, fmt.Sprintf("line %d: %d %s, the header has %d", line, len(rec), plural(int64(len(rec)), "column", "columns"), len(cols.keys)))
			continue
		}
		row, why := cols.row(rec, segments)
		if why != "" {
			res.rejected = append(res.rejected, fmt.Sprintf("line %d: %s", line, why))
			continue
		}
		size := proto.Size(row)
		if size > importChunkBytes {
			// Sent, it would fail the whole stream on gRPC's size limit.
			res.rejected = append(res.rejected, fmt.Sprintf("line %d: %s", line, cols.tooLarge(row, size)))
			continue
		}
		if chunkBytes+size > importChunkBytes {
			if err := flush(); err != nil {
				return nil, err
			}
		}
		res.lines = append(res.lines, line)
		if _, utf8Local, err := address.ASCIIDomain(row.GetEmail()); err == nil && utf8Local {
			res.noteUTF8Local(int64(len(res.lines)), row.GetEmail())
		}
		chunk = append(chunk, row)
		chunkBytes += size
		if len(chunk) == importChunk {
			if err := flush(); err != nil {
				return nil, err
			}
		}
	}
	if err := flush(); err != nil {
		return nil, err
	}
	return res, nil
}

// parseRejection says why a record could not be read. A quote that is
// never closed makes the reader take everything after it, to the end of
// the file, as one field: say which lines that was, or the summary reads
// as if the file ended there.
func parseRejection(pe *csv.ParseError) string {
	if pe.Line > pe.StartLine {
		return fmt.Sprintf("line %d: %v: lines %d–%d were read as one row, so none of them was imported; a quote opened there is never closed (fix it and import the file again)",
			pe.StartLine, pe.Err, pe.StartLine, pe.Line)
	}
	return fmt.Sprintf("line %d: %v", pe.StartLine, pe.Err)
}

// rowInside finds, in a record whose quoted fields run over several lines
// (--multiline), a continuation line that reads as a contact row of its
// own: as many columns as the header, an address in the email column. That
// is an unbalanced quote swallowing the rows after it, which --multiline
// took as one contact with a long attribute, and imported the rest of them
// nowhere, saying nothing (tester). It returns the line's offset from the
// record's first line and the address.
func rowInside(rec []string, cols *csvColumns) (int, string, bool) {
	at := 0
	for _, f := range rec {
		lines := strings.Split(f, "\n")
		for j, l := range lines[1:] {
			r := csv.NewReader(strings.NewReader(l))
			r.LazyQuotes = true
			fields, err := r.Read()
			if err != nil || len(fields) != len(cols.keys) {
				continue
			}
			if _, err := address.Canonical(strings.TrimSpace(fields[cols.email])); err == nil {
				return at + j + 1, strings.TrimSpace(fields[cols.email]), true
			}
		}
		at += len(lines) - 1
	}
	return 0, "", false
}

// recordLines is how many lines of the file a record read: one plus the
// line breaks inside its quoted fields (CR and CRLF arrive as LF:
// newCRLines).
func recordLines(rec []string) int {
	n := 1
	for _, f := range rec {
		n += strings.Count(f, "\n")
	}
	return n
}

func plural(n int64, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// lineOf reads the line number a rejection starts with ("line N: …").
func lineOf(rejection string) int {
	var n int
	fmt.Sscanf(rejection, "line %d", &n) //nolint:errcheck // every rejection is written with that prefix
	return n
}

// newAndUpdated says how many of the imported rows were new contacts and
// how many updated an existing one, when any did (" (3 new, 2 updated)"):
// importing a file again updates every row and adds nobody.
func newAndUpdated(resp *pb.ImportContactsResponse) string {
	if resp.GetUpdated() == 0 {
		return ""
	}
	return fmt.Sprintf(" (%d new, %d updated)", resp.GetImported()-resp.GetUpdated(), resp.GetUpdated())
}

// printImportJSON prints an import's result: the counts, and every
// rejected row listed (the reader's and the coordinator's) with its file
// line.
func printImportJSON(w io.Writer, resp *pb.ImportContactsResponse, res *csvResult, rejected int64) error {
	type row struct {
		Line  int    `json:"line"`
		Error string `json:"error"`
	}
	out := struct {
		Imported int64 `json:"imported"`
		Updated  int64 `json:"updated"`
		Erased   int64 `json:"erasedBefore"`
		Rejected int64 `json:"rejected"`
		Rows     []row `json:"rejectedRows"`
	}{Imported: resp.GetImported(), Updated: resp.GetUpdated(), Erased: resp.GetErased(), Rejected: rejected, Rows: []row{}}
	for _, r := range res.rejected {
		out.Rows = append(out.Rows, row{Line: lineOf(r), Error: r})
	}
	slices.SortStableFunc(out.Rows, func(a, b row) int { return cmp.Compare(a.Line, b.Line) })
	return json.NewEncoder(w).Encode(out)
}

func unsuppressCommand(c *client) *cobra.Command {
	var reason string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "unsuppress EMAIL|ID --reason TEXT",
		Short: "Lift a contact's suppression, with a reason",
		Long: `Lift a contact's suppression: a hard bounce a misconfigured relay answered
("User unknown" to everyone), a complaint withdrawn, an operator's own. Broadcasts
running send to it from their next page; a row a broadcast already failed stays
failed. The reason is logged by the server. An address erased before (GDPR
Art. 17) stays suppressed for good, and a suppression that changed while this
ran (a new bounce) is left as it is.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ac, err := c.audience()
			if err != nil {
				return err
			}
			id, email := contactRef(args[0])
			resp, err := ac.UnsuppressContact(cmd.Context(), &pb.UnsuppressContactRequest{Id: id, Email: email, Reason: reason})
			if err != nil {
				return err
			}
			if asJSON {
				return jsonLine(cmd.OutOrStdout(), resp)
			}
			ct := resp.GetContact()
			fmt.Fprintf(cmd.OutOrStdout(), "lifted the suppression of %s (%s), which was: %s\n", shown(ct.GetEmail()), ct.GetId(), shown(orNone(resp.GetWas())))
			if !ct.GetEligible() {
				fmt.Fprintln(cmd.OutOrStdout(), "(it still receives no broadcasts: it is unsubscribed, do-not-contact or has no address; \"contacts show\" says which)")
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why this contact may be mailed again (required; logged)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the contact as it is now, and the reason lifted, as JSON")
	cmd.MarkFlagRequired("reason") //nolint:errcheck
	return cmd
}

// orNone is s, or "(no reason recorded)" when it is empty.
func orNone(s string) string {
	if s == "" {
		return "(no reason recorded)"
	}
	return s
}

// clipped is s cut to n runes, with "…" where it was cut.
func clipped(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n]) + "…"
	}
	return s
}
