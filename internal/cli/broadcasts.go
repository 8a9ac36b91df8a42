package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	pb "github.com/rangecast/rangecast/proto/rangecast/v1"
)

func broadcastsCommand(c *client) *cobra.Command {
	cmd := &cobra.Command{Use: "broadcasts", Aliases: []string{"broadcast", "b"}, Short: "Create, start, pause and watch broadcasts"}
	cmd.AddCommand(createCommand(c), listCommand(c), statusCommand(c), watchCommand(c))
	cmd.AddCommand(opsCommands(c)...) // broadcasts_ops.go
	cmd.AddCommand(resumeCommand(c))
	type action struct {
		use, short string
		call       func(context.Context, pb.BroadcastServiceClient, string) (*pb.Broadcast, error)
	}
	for _, a := range []action{
		{"start", "Accept a draft: snapshot the audience and start sending", func(ctx context.Context, bc pb.BroadcastServiceClient, id string) (*pb.Broadcast, error) {
			r, err := bc.StartBroadcast(ctx, &pb.StartBroadcastRequest{Id: id})
			return r.GetBroadcast(), err
		}},
		{"pause", "Stop sending within two in-flight windows per running page; resume later", func(ctx context.Context, bc pb.BroadcastServiceClient, id string) (*pb.Broadcast, error) {
			r, err := bc.PauseBroadcast(ctx, &pb.PauseBroadcastRequest{Id: id})
			return r.GetBroadcast(), err
		}},
		{"cancel", "Stop a broadcast for good", func(ctx context.Context, bc pb.BroadcastServiceClient, id string) (*pb.Broadcast, error) {
			r, err := bc.CancelBroadcast(ctx, &pb.CancelBroadcastRequest{Id: id})
			return r.GetBroadcast(), err
		}},
	} {
		var asJSON bool
		sub := &cobra.Command{
			Use: a.use + " ID", Short: a.short, Args: cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				bc, err := c.broadcasts()
				if err != nil {
					return err
				}
				b, err := a.call(cmd.Context(), bc, args[0])
				if err != nil {
					return err
				}
				if a.use == "start" {
					warnEmptyAudience(cmd.ErrOrStderr(), b)
				}
				if asJSON {
					return jsonLine(cmd.OutOrStdout(), b)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s %s\n", b.GetId(), stateWord(b.GetState()))
				return nil
			},
		}
		sub.Flags().BoolVar(&asJSON, "json", false, "print the broadcast as JSON")
		cmd.AddCommand(sub)
	}
	return cmd
}

// warnEmptyAudience says so when a broadcast started with nobody eligible:
// it completes at once with nobody sent, which an operator who imported
// into another segment, or whose list is all unsubscribed, should hear
// before reading a "completed" (tester).
func warnEmptyAudience(w io.Writer, b *pb.Broadcast) {
	if b.GetStartedAt() == nil || b.GetSnapshotTotal() != 0 {
		return
	}
	audience, preview := "no contact", "rangecast segments preview"
	if seg := b.GetSegment(); seg != "" {
		audience, preview = fmt.Sprintf("no member of segment %s", shown(seg)), "rangecast segments preview "+shown(seg)
	}
	fmt.Fprintf(w, "warning: %s is eligible to receive this broadcast (unsubscribed, suppressed, do-not-contact or erased ones are left out): it completes with nobody sent; `%s` counts who is left out and why\n", audience, preview)
}

func createCommand(c *client) *cobra.Command {
	var name, from, fromName, subject, htmlFile, textFile, segment, requestID, inDoubt string
	var throttle int64
	var noUnsubLink, asJSON bool
	cmd := &cobra.Command{
		Use:   "create",
		Short: "Create a draft broadcast (prints its id)",
		Example: `  rangecast broadcasts create --name "November news" --from news@example.com \
    --subject "Hello {{.Name}}" --html news.html --segment newsletter --throttle 50000`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			html, err := readBody("html", htmlFile)
			if err != nil {
				return err
			}
			var text string
			if textFile != "" {
				if text, err = readBody("text", textFile); err != nil {
					return err
				}
			}
			policy, ok := map[string]pb.InDoubtPolicy{"": pb.InDoubtPolicy_IN_DOUBT_POLICY_UNSPECIFIED,
				"skip": pb.InDoubtPolicy_IN_DOUBT_POLICY_SKIP, "resend": pb.InDoubtPolicy_IN_DOUBT_POLICY_RESEND}[inDoubt]
			if !ok {
				return fmt.Errorf("--in-doubt-policy %q: use skip or resend", inDoubt)
			}
			bc, err := c.broadcasts()
			if err != nil {
				return err
			}
			resp, err := bc.CreateBroadcast(cmd.Context(), &pb.CreateBroadcastRequest{
				Name: name, Segment: segment, ThrottlePerHour: throttle, RequestId: requestID, InDoubtPolicy: policy,
				NoUnsubscribeLink: noUnsubLink,
				Content:           &pb.BroadcastContent{FromName: fromName, FromAddress: from, Subject: subject, Html: html, Text: text},
			})
			if err != nil {
				return err
			}
			if asJSON {
				return jsonLine(cmd.OutOrStdout(), resp.GetBroadcast())
			}
			fmt.Fprintln(cmd.OutOrStdout(), resp.GetBroadcast().GetId())
			return nil
		},
	}
	f := cmd.Flags()
	f.BoolVar(&asJSON, "json", false, "print the draft as JSON instead of its id")
	f.StringVar(&name, "name", "", "name shown in lists (required)")
	f.StringVar(&from, "from", "", "From address, e.g. news@example.com (required)")
	f.StringVar(&fromName, "from-name", "", "From display name")
	f.StringVar(&subject, "subject", "", "subject, a Go template over the contact: {{.Name}}, {{.Email}}, {{.Attributes.key}} (required)")
	f.StringVar(&htmlFile, "html", "", `file with the HTML body template (required); it must show the contact's unsubscribe link, e.g. <a href="{{.UnsubscribeURL}}">Unsubscribe</a>`)
	f.StringVar(&textFile, "text", "", "file with the plain-text body template (default: derived from the HTML); when given, it must contain {{.UnsubscribeURL}} too")
	f.BoolVar(&noUnsubLink, "no-unsubscribe-link", false, "accept a body without a visible unsubscribe link (it links to a preference page of your own); the List-Unsubscribe header is sent either way, and status shows the choice")
	f.StringVar(&segment, "segment", "", "send only to this segment's members")
	f.Int64Var(&throttle, "throttle", 0, "at most this many messages per hour (0: no throttle)")
	f.StringVar(&requestID, "request-id", "", "idempotency key: repeating the command with it returns the same draft")
	f.StringVar(&inDoubt, "in-doubt-policy", "", "messages whose outcome was lost with a crashed worker, where the SMTP server cannot be asked: skip (mark unknown, never a second copy) or resend (never a gap); default: the coordinator's")
	for _, req := range []string{"name", "from", "subject", "html"} {
		cmd.MarkFlagRequired(req) //nolint:errcheck
	}
	return cmd
}

func listCommand(c *client) *cobra.Command {
	var asJSON bool
	var limit int
	cmd := &cobra.Command{
		Use: "list", Short: "List broadcasts, newest first", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			bc, err := c.broadcasts()
			if err != nil {
				return err
			}
			// Page by page: the server answers at most 500 at a time.
			resp := &pb.ListBroadcastsResponse{}
			for token := ""; ; {
				size := 500
				if limit > 0 {
					size = min(size, limit-len(resp.Broadcasts))
				}
				page, err := bc.ListBroadcasts(cmd.Context(), &pb.ListBroadcastsRequest{PageSize: int32(size), PageToken: token})
				if err != nil {
					return err
				}
				resp.Broadcasts = append(resp.Broadcasts, page.GetBroadcasts()...)
				token = page.GetNextPageToken()
				if token == "" || (limit > 0 && len(resp.Broadcasts) >= limit) {
					resp.NextPageToken = token
					break
				}
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
			fmt.Fprintf(w, "%-26s  %-10s  %10s  %-23s  %s\n", "ID", "STATE", "AUDIENCE", "SCHEDULED", "NAME")
			for _, b := range resp.GetBroadcasts() {
				sched := "-"
				// A schedule that never started it (cancelled first)
				// is no schedule to show (tester).
				if b.GetScheduledAt() != nil && (b.GetState() == pb.BroadcastState_BROADCAST_STATE_DRAFT || b.GetStartedAt() != nil) {
					sched = utc(b.GetScheduledAt())
				}
				fmt.Fprintf(w, "%-26s  %-10s  %10d  %-23s  %s\n", b.GetId(), stateWord(b.GetState()), b.GetSnapshotTotal(), sched, shown(b.GetName()))
			}
			if resp.GetNextPageToken() != "" {
				fmt.Fprintf(w, "(the newest %d; --limit 0 lists every one)\n", len(resp.GetBroadcasts()))
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.Flags().Var(atLeast(&limit, 100, 0), "limit", "list at most this many, newest first; 0 for all")
	return cmd
}

func statusCommand(c *client) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use: "status ID", Short: "Show a broadcast's state and progress", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			bc, err := c.broadcasts()
			if err != nil {
				return err
			}
			resp, err := bc.GetBroadcast(cmd.Context(), &pb.GetBroadcastRequest{Id: args[0]})
			if err != nil {
				return err
			}
			if asJSON {
				out, err := protojson.MarshalOptions{Multiline: true, EmitUnpopulated: true}.Marshal(resp.GetBroadcast())
				if err != nil {
					return err
				}
				fmt.Fprintln(cmd.OutOrStdout(), string(out))
				return nil
			}
			printStatus(cmd.OutOrStdout(), resp.GetBroadcast())
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the full status as JSON")
	return cmd
}

func watchCommand(c *client) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "watch ID",
		Short: "Follow a broadcast's progress until it finishes",
		Long: `Follow a broadcast live: each range's cursor as a bar, ranges done, sent, failed,
deferred and in doubt, messages per second, and what sending waits for. On a
terminal this is a live view (q leaves it; the broadcast carries on); otherwise,
one line per update. --json prints each status as a JSON object per line.
It exits non-zero when the broadcast ends failed or cancelled, and 0 when it
completes or the watch is left early.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			bc, err := c.broadcasts()
			if err != nil {
				return err
			}
			// A draft that is not scheduled would be watched for ever: it
			// sends nothing until someone starts it.
			got, err := bc.GetBroadcast(cmd.Context(), &pb.GetBroadcastRequest{Id: args[0]})
			if err != nil {
				return err
			}
			if b := got.GetBroadcast(); b.GetState() == pb.BroadcastState_BROADCAST_STATE_DRAFT && b.GetScheduledAt() == nil {
				return fmt.Errorf("broadcast %s is a draft and not scheduled: start it (broadcasts start %s) or schedule it, then watch it", args[0], args[0])
			}
			open := func() (statusStream, error) {
				return bc.WatchBroadcast(cmd.Context(), &pb.WatchBroadcastRequest{Id: args[0]})
			}
			first, err := open()
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			stream := &resumingStream{cur: first, open: open, notice: cmd.ErrOrStderr(), ctx: cmd.Context()}
			if asJSON {
				return endedBadly(watchJSON(out, stream))
			}
			if f, ok := out.(*os.File); ok && isTerminal(f) {
				stream.notice = io.Discard // the live view redraws the screen
				last, err := watchLive(stream, f)
				if last != nil {
					printStatus(out, last)
				}
				return endedBadly(last, err)
			}
			last, err := watchPlain(out, stream)
			if last != nil {
				printStatus(out, last)
			}
			return endedBadly(last, err)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print each status as one JSON object per line")
	return cmd
}

// quietCancel treats Ctrl-C, the way to leave a watch, as a normal end.
func quietCancel(err error) error {
	if status.Code(err) == codes.Canceled || errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

func stateWord(s pb.BroadcastState) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "BROADCAST_STATE_"))
}

// progressLine is one line of progress, for logs and non-terminals.
func progressLine(b *pb.Broadcast) string {
	p := b.GetProgress()
	line := fmt.Sprintf("%s  %-9s ranges %2d/%-2d  sent %d  failed %d  deferred %d  in flight/doubt %d  unknown %d",
		time.Now().Format(time.TimeOnly), stateWord(b.GetState()), p.GetRangesDone(), p.GetRangesTotal(),
		p.GetSent(), p.GetFailed(), p.GetDeferred(), p.GetInDoubt(), p.GetUnknown())
	if n := p.GetLeftOut(); n > 0 {
		line += fmt.Sprintf("  left out %d", n)
	}
	if w := p.GetWaitingFor(); w != "" {
		line += "  (" + w + ")"
	}
	return line
}

func printStatus(w io.Writer, b *pb.Broadcast) {
	p := b.GetProgress()
	fmt.Fprintf(w, "broadcast  %s  %q\n", b.GetId(), b.GetName()) // %q escapes
	fmt.Fprintf(w, "state      %s", stateWord(b.GetState()))
	if b.GetReason() != "" {
		fmt.Fprintf(w, " (%s)", shown(b.GetReason()))
	}
	fmt.Fprintln(w)
	if b.GetSegment() != "" {
		fmt.Fprintf(w, "segment    %s\n", shown(b.GetSegment()))
	}
	if at := b.GetScheduledAt(); at != nil {
		if b.GetState() == pb.BroadcastState_BROADCAST_STATE_DRAFT {
			fmt.Fprintf(w, "scheduled  starts by itself at %s\n", utc(at))
		} else if b.GetStartedAt() == nil {
			fmt.Fprintf(w, "scheduled  for %s, and %s before it started\n", utc(at), stateWord(b.GetState()))
		} else if st := b.GetStartedAt(); st.AsTime().Before(at.AsTime()) {
			// Started before its time: the schedule did not start it (tester).
			fmt.Fprintf(w, "scheduled  for %s, but started by hand before it, at %s\n", utc(at), utc(st))
		} else {
			fmt.Fprintf(w, "scheduled  for %s\n", utc(at))
		}
	}
	if b.GetNoUnsubscribeLink() {
		fmt.Fprintf(w, "unsubscribe  no link in the body (created with --no-unsubscribe-link); List-Unsubscribe header only\n")
	}
	if b.GetState() == pb.BroadcastState_BROADCAST_STATE_DRAFT {
		return
	}
	fmt.Fprintf(w, "audience   %d eligible at start (a snapshot, for display)\n", b.GetSnapshotTotal())
	if p.GetRangesTotal() == 0 && strings.Contains(p.GetWaitingFor(), "range cursors unknown") {
		// Not "0 of 0 done" while NATS does not answer (tester).
		fmt.Fprintln(w, "ranges     unknown: NATS did not answer (see waiting)")
	} else {
		fmt.Fprintf(w, "ranges     %d of %d done\n", p.GetRangesDone(), p.GetRangesTotal())
	}
	fmt.Fprintf(w, "sent %d  failed %d  deferred %d  in flight or in doubt %d  unknown %d  pages %d\n",
		p.GetSent(), p.GetFailed(), p.GetDeferred(), p.GetInDoubt(), p.GetUnknown(), p.GetPagesDispatched())
	if n := p.GetSentAgainInDoubt(); n > 0 {
		fmt.Fprintf(w, "sent again %d of the sent after an attempt that may have arrived (in-doubt policy resend, or retry --include-unknown): they may have two copies, or more where an attempt was lost after the final dot again\n", n)
	}
	if n := p.GetLeftOut(); n > 0 {
		fmt.Fprintf(w, "left out   %d of the audience at start: %s\n", n, leftOutWhy(b.GetState()))
	}
	if n := p.GetDeferred(); n > 0 && b.GetState() == pb.BroadcastState_BROADCAST_STATE_CANCELLED {
		// Deferred reads as "will be retried"; after a cancel nothing
		// is (tester).
		fmt.Fprintf(w, "not sent   the %d deferred will not be retried: the broadcast was cancelled before their retry (a transient refusal or a held provider; `broadcasts export` lists them with their last reply)\n", n)
	}
	if p.GetWaitingFor() != "" {
		fmt.Fprintf(w, "waiting    %s\n", shown(p.GetWaitingFor()))
	}
	var cells strings.Builder
	for _, r := range p.GetRanges() {
		cells.WriteString(cell(r))
	}
	if cells.Len() > 0 {
		fmt.Fprintf(w, "cursors    %s\n", cells.String())
	}
}

// cell draws one range's cursor position as a single block character.
func cell(r *pb.RangeProgress) string {
	if r.GetDone() {
		return "█"
	}
	blocks := []string{" ", "▁", "▂", "▃", "▄", "▅", "▆", "▇"}
	return blocks[min(int(r.GetPosition()*float64(len(blocks))), len(blocks)-1)]
}

func resumeCommand(c *client) *cobra.Command {
	var asJSON, failRefused bool
	cmd := &cobra.Command{
		Use:   "resume ID",
		Short: "Continue a paused broadcast where it stopped, or a failed one once its cause is fixed",
		Long: `Continue a paused broadcast where it stopped, or a failed one once its cause is
fixed. Nobody already sent is sent again.

A broadcast halted by refusals that may be each recipient's own (a "550 5.7.1"
from a mailbox's filter, "User unknown" from everyone at once) halts again
when a resume retries the same addresses. When the relay takes other
recipients and these refuse on every try, --fail-refused fails them first,
with their replies, suppressing nobody; the rest goes on.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			bc, err := c.broadcasts()
			if err != nil {
				return err
			}
			r, err := bc.ResumeBroadcast(cmd.Context(), &pb.ResumeBroadcastRequest{Id: args[0], FailRefused: failRefused})
			if err != nil {
				return err
			}
			if asJSON && failRefused {
				return jsonLine(cmd.OutOrStdout(), r) // the broadcast and how many were failed
			}
			if asJSON {
				return jsonLine(cmd.OutOrStdout(), r.GetBroadcast())
			}
			b := r.GetBroadcast()
			if failRefused {
				w := cmd.OutOrStdout()
				switch n, u := r.GetFailedRefused(), r.GetUnknownRefused(); {
				case n+u == 0:
					fmt.Fprintln(w, "no recipient's refusal had halted it: nothing failed")
				case u == 0:
					fmt.Fprintf(w, "failed %d %s whose refusal halted it\n", n, plural(n, "recipient", "recipients"))
				default:
					fmt.Fprintf(w, "failed %d %s whose refusal halted it, and ended %d unknown (an earlier attempt may have arrived)\n",
						n, plural(n, "recipient", "recipients"), u)
				}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s %s\n", b.GetId(), stateWord(b.GetState()))
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the broadcast as JSON (with --fail-refused: the broadcast, failedRefused and unknownRefused)")
	cmd.Flags().BoolVar(&failRefused, "fail-refused", false, "first fail the recipients whose refusal halted the broadcast (paused broadcasts only)")
	return cmd
}

// readBody reads the file a body flag names, refusing one that is not UTF-8
// by its flag and file: the server's "the request holds text that is not
// valid UTF-8" named neither (tester).
func readBody(flag, path string) (string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("--%s: %w", flag, err)
	}
	if !utf8.Valid(raw) {
		at := 0
		for at < len(raw) {
			r, n := utf8.DecodeRune(raw[at:])
			if r == utf8.RuneError && n <= 1 {
				break
			}
			at += n
		}
		return "", fmt.Errorf("--%s %s is not valid UTF-8 text (first at byte %d; a file in another encoding, such as Latin-1 or UTF-16?); convert it, e.g. with iconv -t UTF-8", flag, path, at)
	}
	return string(raw), nil
}

// leftOutWhy says who a finished broadcast's left-out count is: those the
// suppression gate left out, and, of one that did not complete, those its
// pages never reached.
func leftOutWhy(state pb.BroadcastState) string {
	const gate = "unsubscribed, suppressed, erased or out of the segment before their page"
	switch state {
	case pb.BroadcastState_BROADCAST_STATE_CANCELLED:
		return "never sent, the broadcast cancelled before their page (or " + gate + ")"
	case pb.BroadcastState_BROADCAST_STATE_FAILED:
		return "never sent, the broadcast failed before their page (or " + gate + ")"
	}
	return gate
}
