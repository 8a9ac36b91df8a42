package cli

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/rangecast/rangecast/proto/rangecast/v1"
)

func (c *client) ops() (pb.BroadcastOpsServiceClient, error) {
	conn, err := c.dial()
	if err != nil {
		return nil, err
	}
	return pb.NewBroadcastOpsServiceClient(conn), nil
}

// opsCommands are the broadcasts subcommands of an operator's everyday
// work: before sending (preview, test, update, delete, schedule) and after
// (report, export, retry).
func opsCommands(c *client) []*cobra.Command {
	return []*cobra.Command{broadcastPreviewCommand(c), testCommand(c), scheduleCommand(c), unscheduleCommand(c),
		updateCommand(c), deleteCommand(c), reportCommand(c), exportCommand(c), retryCommand(c)}
}

func utc(ts *timestamppb.Timestamp) string {
	if ts == nil {
		return ""
	}
	return ts.AsTime().UTC().Format("2006-01-02 15:04:05") + " UTC"
}

func broadcastPreviewCommand(c *client) *cobra.Command {
	var contact string
	var asJSON, raw bool
	cmd := &cobra.Command{
		Use:   "preview ID --contact EMAIL",
		Short: "Show the message exactly as one contact would receive it (nothing is claimed or sent)",
		Long: `Render the broadcast for one contact through the page workers' render path:
headers (List-Unsubscribe, Message-ID, DKIM-Signature when the coordinator has
the keys), subject, text and HTML, as the contact would get them now. Nothing
is claimed or sent. --raw prints the RFC 5322 message itself (open it in a
mail client); --json every part as JSON.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			oc, err := c.ops()
			if err != nil {
				return err
			}
			resp, err := oc.PreviewBroadcast(cmd.Context(), &pb.PreviewBroadcastRequest{Id: args[0], ContactEmail: contact})
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			switch {
			case asJSON:
				return jsonLine(w, resp)
			case raw:
				_, err := w.Write(resp.GetRaw())
				return err
			}
			for _, h := range resp.GetHeaders() {
				fmt.Fprintf(w, "%s: %s\n", h.GetName(), shown(h.GetValue()))
			}
			if !resp.GetEligible() {
				fmt.Fprintln(w, "\n(this contact does not pass the suppression gate or is not in the segment: a page would not send it this message)")
			}
			if st := resp.GetStatus(); st != pb.SendStatus_SEND_STATUS_UNSPECIFIED {
				fmt.Fprintf(w, "\n(this contact's ledger row for the broadcast is %s)\n", sendWord(st))
			}
			fmt.Fprintf(w, "\n----- text -----\n%s\n----- html -----\n%s\n", shownBody(resp.GetText()), shownBody(resp.GetHtml()))
			return nil
		},
	}
	cmd.Flags().StringVar(&contact, "contact", "", "the contact's email address (required)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the message's parts as JSON")
	cmd.Flags().BoolVar(&raw, "raw", false, "print the raw RFC 5322 message")
	cmd.MarkFlagRequired("contact") //nolint:errcheck
	return cmd
}

// shownBody is a body for a terminal: its lines as they are, control
// characters within them escaped.
func shownBody(s string) string {
	lines := strings.Split(strings.ReplaceAll(s, "\r\n", "\n"), "\n")
	for i, l := range lines {
		lines[i] = shown(l)
	}
	return strings.Join(lines, "\n")
}

func sendWord(s pb.SendStatus) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "SEND_STATUS_"))
}

// errRefused: some test copies were not accepted (exit non-zero).
var errRefused = errors.New("some test copies were not accepted")

func testCommand(c *client) *cobra.Command {
	var to []string
	var contact string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "test ID --to EMAIL...",
		Short: "Send test copies to the given addresses, outside the ledger",
		Long: `Send copies of the broadcast to up to 20 addresses through the SMTP relay the
coordinator is configured with (the workers' --smtp-url). The copies are
outside the ledger: nothing is claimed or counted, and their Message-ID and
unsubscribe link name no contact. Each copy is rendered with the address's own
contact when there is one, else with --contact's data, else with the
audience's first eligible contact's.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			oc, err := c.ops()
			if err != nil {
				return err
			}
			resp, err := oc.TestBroadcast(cmd.Context(), &pb.TestBroadcastRequest{Id: args[0], To: to, ContactEmail: contact})
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			refused := 0
			for _, r := range resp.GetResults() {
				if !r.GetAccepted() {
					refused++
				}
			}
			if asJSON {
				if err := jsonLine(w, resp); err != nil {
					return err
				}
			} else {
				for _, r := range resp.GetResults() {
					if r.GetAccepted() {
						fmt.Fprintf(w, "sent test copy to %s: %s\n", r.GetTo(), shown(r.GetReply()))
					} else {
						fmt.Fprintf(w, "NOT sent to %s: %s\n", r.GetTo(), shown(r.GetReply()))
					}
				}
			}
			if refused > 0 {
				return errRefused
			}
			return nil
		},
	}
	cmd.Flags().Var(commaList(&to), "to", "address to send a copy to; repeat it or separate with commas (required)")
	cmd.Flags().StringVar(&contact, "contact", "", "render every copy with this contact's data")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print what was sent as JSON")
	cmd.MarkFlagRequired("to") //nolint:errcheck
	return cmd
}

// localLayouts are the forms --at takes with --tz.
var localLayouts = []string{"2006-01-02T15:04:05", "2006-01-02T15:04", "2006-01-02 15:04:05", "2006-01-02 15:04"}

// parseAt reads --at: RFC 3339 with its offset, or with tz a local time in
// that IANA zone.
func parseAt(at, tz string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, at); err == nil {
		if tz != "" {
			return time.Time{}, fmt.Errorf("--at %q has its own offset; drop --tz, or give a local time such as 2031-03-14 09:00", at)
		}
		return t, nil
	}
	if tz == "" {
		return time.Time{}, fmt.Errorf("--at %q: give RFC 3339 with an offset (2031-03-14T09:00:00Z, 2031-03-14T09:00:00+01:00), or a local time with --tz ZONE (--at '2031-03-14 09:00' --tz Europe/Paris)", at)
	}
	loc, err := time.LoadLocation(tz)
	if err != nil {
		return time.Time{}, fmt.Errorf("--tz %q is not a time zone: use an IANA name such as Europe/Paris or America/New_York", tz)
	}
	for _, l := range localLayouts {
		if wall, err := time.Parse(l, at); err == nil {
			return inZone(at, tz, wall, loc)
		}
	}
	return time.Time{}, fmt.Errorf("--at %q: with --tz, give a local time such as 2031-03-14 09:00 or 2031-03-14T09:00:00", at)
}

// inZone is the instant when loc's clocks read wall (parsed as UTC, read
// as a wall clock). A time the clocks skip when they go forward, or read
// twice when they go back, is refused: time.ParseInLocation would move the
// first by the gap and pick one of the second, so a broadcast would start
// an hour away from what its operator wrote, silently.
func inZone(at, tz string, wall time.Time, loc *time.Location) (time.Time, error) {
	var found []time.Time
	// Every offset loc has within a day of wall: a transition's two sides.
	for _, probe := range []time.Time{wall.Add(-24 * time.Hour), wall, wall.Add(24 * time.Hour)} {
		_, offset := probe.In(loc).Zone()
		t := wall.Add(-time.Duration(offset) * time.Second).In(loc)
		if t.Format(time.DateTime) == wall.Format(time.DateTime) && !slices.ContainsFunc(found, t.Equal) {
			found = append(found, t)
		}
	}
	switch len(found) {
	case 0:
		return time.Time{}, fmt.Errorf("--at %q does not exist in %s: the clocks go forward over it that day; give a time after the change, or an RFC 3339 time with its offset", at, tz)
	case 1:
		return found[0], nil
	default:
		slices.SortFunc(found, time.Time.Compare)
		return time.Time{}, fmt.Errorf("--at %q happens twice in %s: the clocks go back over it that day; give the one you mean as RFC 3339 with its offset (%s or %s)", at, tz, found[0].Format(time.RFC3339), found[1].Format(time.RFC3339))
	}
}

func scheduleCommand(c *client) *cobra.Command {
	var at, tz string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "schedule ID --at TIME",
		Short: "Start a draft by itself at a given time",
		Long: `Schedule a draft to start at TIME: RFC 3339 with an offset
(2031-03-14T09:00:00Z), or a local time with --tz (--at '2031-03-14 09:00'
--tz Europe/Paris). Whichever coordinator leads at that time starts it; the
time is kept in the database, so a failover loses nothing. The content is
checked against the audience now, as a start would. Scheduling again moves
the time; broadcasts unschedule clears it.`,
		Example: `  rangecast broadcasts schedule 01J9Z3K8M2T4V6X8Y0A2B4C6D8 --at 2031-03-14T09:00:00+01:00
  rangecast broadcasts schedule 01J9Z3K8M2T4V6X8Y0A2B4C6D8 --at '2031-03-14 09:00' --tz Europe/Paris`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			when, err := parseAt(at, tz)
			if err != nil {
				return err
			}
			oc, err := c.ops()
			if err != nil {
				return err
			}
			resp, err := oc.ScheduleBroadcast(cmd.Context(), &pb.ScheduleBroadcastRequest{Id: args[0], At: timestamppb.New(when)})
			if err != nil {
				return err
			}
			b := resp.GetBroadcast()
			if asJSON {
				return jsonLine(cmd.OutOrStdout(), b)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "scheduled %s to start at %s (%s)\n", b.GetId(), utc(b.GetScheduledAt()), when.Format(time.RFC3339))
			return nil
		},
	}
	cmd.Flags().StringVar(&at, "at", "", "when to start: RFC 3339, or a local time with --tz (required)")
	cmd.Flags().StringVar(&tz, "tz", "", "IANA time zone of a local --at, e.g. Europe/Paris")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the broadcast as JSON")
	cmd.MarkFlagRequired("at") //nolint:errcheck
	return cmd
}

func unscheduleCommand(c *client) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use: "unschedule ID", Short: "Clear a draft's start time; it waits for broadcasts start", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			oc, err := c.ops()
			if err != nil {
				return err
			}
			bc, err := c.broadcasts()
			if err != nil {
				return err
			}
			// Read first, for the words only: unscheduling is idempotent,
			// and a draft that had no start time should not be told it
			// was unscheduled.
			before, err := bc.GetBroadcast(cmd.Context(), &pb.GetBroadcastRequest{Id: args[0]})
			if err != nil {
				return err
			}
			resp, err := oc.UnscheduleBroadcast(cmd.Context(), &pb.UnscheduleBroadcastRequest{Id: args[0]})
			if err != nil {
				return err
			}
			if asJSON {
				return jsonLine(cmd.OutOrStdout(), resp.GetBroadcast())
			}
			if before.GetBroadcast().GetScheduledAt() == nil {
				fmt.Fprintf(cmd.OutOrStdout(), "%s was not scheduled; it is a draft waiting for broadcasts start\n", resp.GetBroadcast().GetId())
				return nil
			}
			fmt.Fprintf(cmd.OutOrStdout(), "unscheduled %s; it is a draft waiting for broadcasts start\n", resp.GetBroadcast().GetId())
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the broadcast as JSON")
	return cmd
}

func updateCommand(c *client) *cobra.Command {
	var name, from, fromName, subject, htmlFile, textFile, segment, inDoubt string
	var throttle int64
	var noUnsubLink, asJSON bool
	cmd := &cobra.Command{
		Use:   "update ID [flags]",
		Short: "Change a draft, a paused broadcast's content, or a started broadcast's throttle: only the flags given change",
		Long: `Change a draft's name, content, audience or settings; what is not given keeps
its value. The content is checked as at create (it must compile, show an
unsubscribe link, and render for a sample of the audience).

A paused broadcast's content (--from-name, --subject, --html, --text, and
--from within the same domain) can be changed too: the way out of a template
that fails for part of the list, which pauses the broadcast, or of a typo
found after the start. Messages claimed after the resume are rendered from
the new content; nobody already sent is sent again, and the recipients the
old content could not be rendered for (failed before anything was sent) are
rendered again. Its name, audience and settings stay as they were when it
started. While a message is still claimed without an outcome (a window
finishing after the pause) the edit is refused: run it again a little later.

A running, paused or failed broadcast's --throttle can change, given alone: to slow a
broadcast a provider complains about, or speed up one that goes too slowly.
The coordinator follows it within a few seconds; pages already handed to
workers finish at the old pace.`,
		Example: `  rangecast broadcasts update 01J9Z3K8M2T4V6X8Y0A2B4C6D8 --subject "Hello again {{.Name}}" --html news-v2.html
  rangecast broadcasts update 01J9Z3K8M2T4V6X8Y0A2B4C6D8 --throttle 20000`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			f := cmd.Flags()
			req := &pb.UpdateBroadcastRequest{Id: args[0]}
			str := func(flag, v string) *string {
				if !f.Changed(flag) {
					return nil
				}
				return &v
			}
			req.Name, req.FromAddress, req.FromName, req.Subject, req.Segment =
				str("name", name), str("from", from), str("from-name", fromName), str("subject", subject), str("segment", segment)
			for _, file := range []struct {
				flag, path string
				dst        **string
			}{{"html", htmlFile, &req.Html}, {"text", textFile, &req.Text}} {
				if !f.Changed(file.flag) {
					continue
				}
				s, err := readBody(file.flag, file.path)
				if err != nil {
					return err
				}
				*file.dst = &s
			}
			if f.Changed("throttle") {
				req.ThrottlePerHour = &throttle
			}
			if f.Changed("no-unsubscribe-link") {
				req.NoUnsubscribeLink = &noUnsubLink
			}
			if f.Changed("in-doubt-policy") {
				policy, ok := map[string]pb.InDoubtPolicy{"default": pb.InDoubtPolicy_IN_DOUBT_POLICY_UNSPECIFIED,
					"skip": pb.InDoubtPolicy_IN_DOUBT_POLICY_SKIP, "resend": pb.InDoubtPolicy_IN_DOUBT_POLICY_RESEND}[inDoubt]
				if !ok {
					return fmt.Errorf("--in-doubt-policy %q: use skip, resend or default", inDoubt)
				}
				req.InDoubtPolicy = &policy
			}
			if proto.Equal(req, &pb.UpdateBroadcastRequest{Id: args[0]}) {
				return errors.New("nothing to change: give at least one of --name, --from, --from-name, --subject, --html, --text, --segment, --throttle, --in-doubt-policy, --no-unsubscribe-link")
			}
			oc, err := c.ops()
			if err != nil {
				return err
			}
			resp, err := oc.UpdateBroadcast(cmd.Context(), req)
			if err != nil {
				return err
			}
			if asJSON {
				return jsonLine(cmd.OutOrStdout(), resp.GetBroadcast())
			}
			var changed []string
			local := cmd.LocalFlags()
			f.Visit(func(fl *pflag.Flag) {
				if fl.Name != "json" && local.Lookup(fl.Name) != nil { // not --addr and the other global flags
					changed = append(changed, "--"+fl.Name)
				}
			})
			what, then := "draft", ""
			if st := resp.GetBroadcast().GetState(); st != pb.BroadcastState_BROADCAST_STATE_DRAFT && req.ThrottlePerHour != nil {
				what, then = stateWord(st)+" broadcast", "; the coordinator follows it within a few seconds"
			} else if st == pb.BroadcastState_BROADCAST_STATE_PAUSED {
				what, then = "paused broadcast", "; resume it to send the new content"
				if n := resp.GetRerendered(); n > 0 {
					then = fmt.Sprintf("; resume it to send the new content (and to try again the %d %s the old content could not be rendered for)", n, plural(n, "recipient", "recipients"))
				}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "updated %s %s (%s)%s\n", what, resp.GetBroadcast().GetId(), strings.Join(changed, ", "), then)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&name, "name", "", "name shown in lists")
	f.StringVar(&from, "from", "", "From address")
	f.StringVar(&fromName, "from-name", "", "From display name")
	f.StringVar(&subject, "subject", "", "subject template")
	f.StringVar(&htmlFile, "html", "", "file with the HTML body template")
	f.StringVar(&textFile, "text", "", "file with the plain-text body template (an empty file: derived from the HTML)")
	f.StringVar(&segment, "segment", "", `send only to this segment's members; "" for every eligible contact`)
	f.Int64Var(&throttle, "throttle", 0, "at most this many messages per hour (0: no throttle)")
	f.StringVar(&inDoubt, "in-doubt-policy", "", "skip, resend, or default (the coordinator's)")
	f.BoolVar(&noUnsubLink, "no-unsubscribe-link", false, "accept a body without a visible unsubscribe link (--no-unsubscribe-link=false checks it again)")
	f.BoolVar(&asJSON, "json", false, "print the broadcast as JSON")
	return cmd
}

func deleteCommand(c *client) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use: "delete ID", Short: "Delete a draft (a started broadcast is kept: cancel it)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			oc, err := c.ops()
			if err != nil {
				return err
			}
			resp, err := oc.DeleteBroadcast(cmd.Context(), &pb.DeleteBroadcastRequest{Id: args[0]})
			if err != nil {
				return err
			}
			if asJSON {
				return jsonLine(cmd.OutOrStdout(), resp.GetBroadcast())
			}
			fmt.Fprintf(cmd.OutOrStdout(), "deleted draft %s %q\n", resp.GetBroadcast().GetId(), resp.GetBroadcast().GetName())
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the deleted draft as JSON")
	return cmd
}

// rate is a share as a percentage, or "-" without a sample.
func shareOf(r float64, sample int64) string {
	if sample == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f%%", r*100)
}

func alarmWord(threshold float64, minSample int64) string {
	if threshold < 0 {
		return "alarm off"
	}
	return fmt.Sprintf("alarm at %.2f%% once %d are counted", threshold*100, minSample)
}

func reportCommand(c *client) *cobra.Command {
	var asJSON bool
	var groups int32
	cmd := &cobra.Command{
		Use:   "report ID",
		Short: "Counts by ledger status and webhook outcome, bounce and complaint rates, failures by reply",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			oc, err := c.ops()
			if err != nil {
				return err
			}
			r, err := oc.ReportBroadcast(cmd.Context(), &pb.ReportBroadcastRequest{Id: args[0], FailureGroups: groups})
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			if asJSON {
				return jsonLine(w, r)
			}
			b := r.GetBroadcast()
			fmt.Fprintf(w, "broadcast  %s  %q  (%s)\n\n", b.GetId(), b.GetName(), stateWord(b.GetState()))
			tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "ledger status\tmessages")
			for _, s := range r.GetStatuses() {
				fmt.Fprintf(tw, "  %s\t%d\n", sendWord(s.GetStatus()), s.GetCount())
			}
			if n := r.GetLeftOut(); n > 0 {
				fmt.Fprintf(tw, "  left out (of %d at start)\t%d\n", b.GetSnapshotTotal(), n)
			}
			fmt.Fprintln(tw, "outcomes\t")
			fmt.Fprintf(tw, "  accepted by the SMTP server\t%d\n", r.GetAccepted())
			fmt.Fprintf(tw, "  delivered (or further)\t%d\n", r.GetDelivered())
			fmt.Fprintf(tw, "  opened (or clicked)\t%d\n", r.GetOpened())
			fmt.Fprintf(tw, "  clicked\t%d\n", r.GetClicked())
			fmt.Fprintf(tw, "  unsubscribed\t%d\n", r.GetUnsubscribed())
			fmt.Fprintf(tw, "  refused at send (address gone)\t%d\n", r.GetRefusedAtSend())
			fmt.Fprintf(tw, "  bounced after acceptance\t%d\n", r.GetBounced())
			fmt.Fprintf(tw, "  hard bounces, both\t%d\t%s of tried; %s\n", r.GetBounced()+r.GetRefusedAtSend(), shareOf(r.GetBounceRate(), r.GetAccepted()+r.GetRefusedAtSend()), alarmWord(r.GetBounceAlarm(), r.GetAlarmMinSample()))
			fmt.Fprintf(tw, "  complained\t%d\t%s of delivered; %s\n", r.GetComplained(), shareOf(r.GetComplaintRate(), r.GetDelivered()), alarmWord(r.GetComplaintAlarm(), r.GetAlarmMinSample()))
			fmt.Fprintln(tw, "webhook events (contacts, as kept)\t")
			for _, e := range r.GetEvents() {
				fmt.Fprintf(tw, "  %s\t%d\n", e.GetType(), e.GetContacts())
			}
			tw.Flush()
			if len(r.GetFailures()) > 0 {
				fmt.Fprintln(w, "\nfailures by reply")
				for _, g := range r.GetFailures() {
					fmt.Fprintf(w, "  %6d  %s  (e.g. %s)\n", g.GetCount(), shown(g.GetReply()), shown(g.GetExample()))
				}
			}
			if n := r.GetRetryable(); n > 0 {
				fmt.Fprintf(w, "\n%d failed after their transient attempts ran out: rangecast broadcasts retry %s sends them again\n", n, b.GetId())
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	cmd.Flags().Int32Var(&groups, "failures", 20, "show at most this many groups of failures")
	return cmd
}

// csvHeader is the export's first line.
var csvHeader = []string{"email", "status", "attempts", "reply", "claimed_at", "updated_at", "contact_id", "message_id", "earlier_maybe_delivered"}

// csvCell keeps a cell from being read as a formula by a spreadsheet
// (=, +, -, @ first; OWASP's CSV injection advice): data from contacts and
// servers ends up in one.
func csvCell(s string) string {
	if s != "" && strings.ContainsRune("=+-@\t\r", rune(s[0])) {
		return "'" + s
	}
	return s
}

func rfc3339(ts *timestamppb.Timestamp) string {
	if ts == nil {
		return ""
	}
	return ts.AsTime().UTC().Format(time.RFC3339Nano)
}

func exportCommand(c *client) *cobra.Command {
	var output string
	var statuses []string
	var sentAgain bool
	cmd := &cobra.Command{
		Use:   "export ID",
		Short: "Write the ledger's rows (all, or --status …) as CSV: email, status, attempts, reply, times",
		Long: `Stream the broadcast's ledger as CSV, one row per contact in contact id order
(email, status, attempts, reply or error, claimed_at, updated_at in UTC, contact
id, Message-ID, and whether an earlier attempt may have been delivered). The server reads the ledger in keyset pages and the CLI writes
each page as it arrives, so a broadcast of any size is exported in constant
memory. A cell that a spreadsheet would take for a formula (=, +, -, @ first)
is prefixed with '. --status keeps the rows in the statuses given: --status
unknown lists the messages whose fate nobody can know (the connection lost after
the final dot, a worker killed mid-window), which a report only counts;
--sent-again lists the people status counts as "sent again": sent after an
earlier attempt that may have been delivered, so they may have two copies.`,
		Example: `  rangecast broadcasts export 01J9Z3K8M2T4V6X8Y0A2B4C6D8 -o ledger.csv
  rangecast broadcasts export 01J9Z3K8M2T4V6X8Y0A2B4C6D8 --status unknown,failed`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) (err error) {
			oc, err := c.ops()
			if err != nil {
				return err
			}
			req := &pb.ExportBroadcastRequest{Id: args[0], SentAgainInDoubt: sentAgain}
			for _, name := range statuses {
				v, ok := pb.SendStatus_value["SEND_STATUS_"+strings.ToUpper(strings.TrimSpace(name))]
				if !ok || v == int32(pb.SendStatus_SEND_STATUS_UNSPECIFIED) {
					return fmt.Errorf("--status %q: use %s", name, strings.Join(sendStatusNames(), ", "))
				}
				req.Statuses = append(req.Statuses, pb.SendStatus(v))
			}
			stream, err := oc.ExportBroadcast(cmd.Context(), req)
			if err != nil {
				return err
			}
			if output == "" || output == "-" {
				_, err := writeExport(stream, cmd.OutOrStdout())
				return err
			}
			rows := 0
			err = replaceFile(output, func(w io.Writer) (err error) {
				rows, err = writeExport(stream, w)
				return err
			})
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "exported %d rows to %s\n", rows, output)
			return nil
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "write the CSV to this file instead of standard output")
	cmd.Flags().Var(commaList(&statuses), "status", "only rows in these statuses, comma-separated: "+strings.Join(sendStatusNames(), ", "))
	cmd.Flags().BoolVar(&sentAgain, "sent-again", false, "only the people who may have two copies: sent after an earlier attempt that may have been delivered (status's \"sent again\")")
	return cmd
}

// sendStatusNames are the ledger statuses as the CLI writes them, in the
// proto's order.
func sendStatusNames() []string {
	var names []string
	for v := int32(1); ; v++ {
		name, ok := pb.SendStatus_name[v]
		if !ok {
			return names
		}
		names = append(names, strings.ToLower(strings.TrimPrefix(name, "SEND_STATUS_")))
	}
}

func retryCommand(c *client) *cobra.Command {
	var unknown, asJSON bool
	cmd := &cobra.Command{
		Use:   "retry ID",
		Short: "Send again to the contacts that failed after their transient attempts ran out, or were never handed to the relay",
		Long: `Give the contacts of a completed broadcast whose messages failed after every
transient attempt (4xx replies, timeouts: "gave up after N attempts"), or were
never handed to the relay ("not handed to the relay: …": an address with a non-ASCII local
part and a relay without SMTPUTF8; retry once the relay offers it), a new
round of attempts. Their rows go back to deferred, due now, and the broadcast
runs again until they have an outcome; they are sent through the same claim
rules as every deferred message, and nobody whose message was accepted gets a
second copy. Messages refused for good (5xx for that address) are not retried.

--include-unknown also retries the messages marked unknown (a worker died
mid-send and the SMTP server could not say whether it took them): some of those
people may get a second copy.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			oc, err := c.ops()
			if err != nil {
				return err
			}
			resp, err := oc.RetryBroadcast(cmd.Context(), &pb.RetryBroadcastRequest{Id: args[0], IncludeUnknown: unknown})
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			if asJSON {
				return jsonLine(w, resp)
			}
			b := resp.GetBroadcast()
			if resp.GetFailed()+resp.GetUnknown() == 0 {
				fmt.Fprintf(w, "nothing to retry in %s: no message failed after its attempts ran out or without being handed to the relay%s\n", b.GetId(),
					map[bool]string{true: " and none is unknown", false: ""}[unknown])
				return nil
			}
			fmt.Fprintf(w, "retrying %d failed", resp.GetFailed())
			if unknown {
				fmt.Fprintf(w, " and %d unknown", resp.GetUnknown())
			}
			fmt.Fprintf(w, " messages of %s; it is %s (rangecast broadcasts watch %s)\n", b.GetId(), stateWord(b.GetState()), b.GetId())
			return nil
		},
	}
	cmd.Flags().BoolVar(&unknown, "include-unknown", false, "also retry messages marked unknown (some may then arrive twice)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON")
	return cmd
}

// writeExport writes an export stream to w as CSV and counts its rows. The
// stream's first Recv is where a missing broadcast's error arrives.
func writeExport(stream grpc.ServerStreamingClient[pb.ExportBroadcastResponse], w io.Writer) (rows int, err error) {
	cw := csv.NewWriter(w)
	header := false
	for {
		msg, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			return rows, err
		}
		if !header {
			if err := cw.Write(csvHeader); err != nil {
				return rows, err
			}
			header = true
		}
		for _, r := range msg.GetRows() {
			rec := []string{csvCell(r.GetEmail()), sendWord(r.GetStatus()), fmt.Sprint(r.GetAttempts()), csvCell(r.GetReply()),
				rfc3339(r.GetClaimedAt()), rfc3339(r.GetUpdatedAt()), r.GetContactId(), r.GetMessageId(), strconv.FormatBool(r.GetEarlierMaybeDelivered())}
			if err := cw.Write(rec); err != nil {
				return rows, err
			}
			rows++
		}
		cw.Flush()
		if err := cw.Error(); err != nil {
			return rows, err
		}
	}
	if !header {
		// The stream checked the broadcast exists; it has no rows.
		if err := cw.Write(csvHeader); err != nil {
			return rows, err
		}
	}
	cw.Flush()
	return rows, cw.Error()
}

// replaceFile writes path through write, all or nothing: into a temporary
// file beside it, renamed over path only once write and the close have
// succeeded. An export that failed (a missing broadcast, a coordinator
// gone mid-stream) had emptied the file it was to replace, or left a part
// of the ledger in it that read as the whole.
//
// A symlink is followed (its target is replaced, the link stays), a file
// replaced keeps its permissions, and what is not a regular file (a FIFO,
// /dev/stdout, /dev/null) is written in place: renaming over it replaced
// a tester's /dev/null, as root, with a file of the ledger. A new file is
// 0600: an export holds people's addresses.
func replaceFile(path string, write func(io.Writer) error) error {
	mode := os.FileMode(0o600)
	if real, err := filepath.EvalSymlinks(path); err == nil {
		path = real
		fi, err := os.Stat(path)
		if err != nil {
			return fmt.Errorf("--output: %w", err)
		}
		if !fi.Mode().IsRegular() {
			return writeInPlace(path, write)
		}
		mode = fi.Mode().Perm()
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.partial")
	if err != nil {
		return fmt.Errorf("--output: %w", err)
	}
	err = f.Chmod(mode)
	if err == nil {
		err = write(f)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name()) //nolint:errcheck // the error returned says more
	}
	return err
}

// writeInPlace writes to what is not a regular file (a FIFO, a device),
// which no rename can replace and nothing half-written can harm.
func writeInPlace(path string, write func(io.Writer) error) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("--output: %w", err)
	}
	err = write(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
