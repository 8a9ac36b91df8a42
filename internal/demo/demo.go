// Package demo sends a real broadcast to generated contacts on the in-process
// stack and checks what the capture SMTP server received against the ledger:
// what `make run` shows a newcomer.
package demo

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/rangecast/rangecast/internal/server"
	"github.com/rangecast/rangecast/internal/store/postgres"
	pb "github.com/rangecast/rangecast/proto/rangecast/v1"
)

// Options configures a demo run.
type Options struct {
	Stack server.StackOptions
	// Postgres, when set, replaces the SQLite file with a throwaway schema
	// on this server.
	Postgres string
	Contacts int
	Keep     bool
}

var cities = []string{"Lisbon", "Nairobi", "Osaka", "Quito", "Tallinn", "Perth", "Oslo", "Accra"}

// ineligible reports whether generated contact i is unsubscribed (5%) or
// do-not-contact (2%), so the demo knows who must not receive mail without
// asking the system it checks.
func ineligible(i int) (unsubscribed, doNotContact bool) { return i%20 == 7, i%50 == 3 }

func email(i int) string { return fmt.Sprintf("person%07d@demo.rangecast.test", i) }

// Run performs the demo and returns an error if any check fails.
func Run(ctx context.Context, o Options, out io.Writer) error {
	if o.Contacts <= 0 {
		return errors.New("--contacts must be positive")
	}
	where := "SQLite"
	if o.Postgres != "" {
		schema := "rangecast_demo_" + randomHex(4)
		url, err := postgres.WithSchema(ctx, o.Postgres, schema)
		if err != nil {
			return err
		}
		if !o.Keep {
			defer postgres.DropSchema(context.WithoutCancel(ctx), o.Postgres, schema) //nolint:errcheck
		}
		o.Stack.DatabaseURL, where = url, "Postgres schema "+schema
	}
	fmt.Fprintf(out, "starting rangecast in one process: embedded NATS JetStream, %s, capture SMTP, coordinator, %d page workers\n", where, max(o.Stack.Workers, 1))
	st, err := server.StartStack(ctx, o.Stack)
	if err != nil {
		return err
	}
	defer st.Stop() //nolint:errcheck
	conn, err := grpc.NewClient(st.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()

	importStart := time.Now()
	want, err := importContacts(ctx, pb.NewAudienceServiceClient(conn), o.Contacts)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "imported %d contacts in %s (%d unsubscribed or do-not-contact)\n",
		o.Contacts, time.Since(importStart).Round(time.Millisecond), o.Contacts-len(want))

	bc := pb.NewBroadcastServiceClient(conn)
	created, err := bc.CreateBroadcast(ctx, &pb.CreateBroadcastRequest{
		Name: "Demo broadcast",
		Content: &pb.BroadcastContent{
			FromName: "Rangecast Demo", FromAddress: "hello@demo.rangecast.test",
			Subject: "Hello {{.Name}}, news from {{.Attributes.city}}",
			Html:    "<h1>Hi {{.Name}}!</h1><p>This message was sent exactly once to {{.Email}}.</p><p><a href=\"{{.UnsubscribeURL}}\">Unsubscribe</a></p>",
		},
	})
	if err != nil {
		return err
	}
	id := created.GetBroadcast().GetId()
	started := time.Now()
	if _, err := bc.StartBroadcast(ctx, &pb.StartBroadcastRequest{Id: id}); err != nil {
		return err
	}
	fmt.Fprintf(out, "broadcast %s started\n", id)
	final, err := watch(ctx, bc, id, out)
	if err != nil {
		return err
	}
	elapsed := time.Since(started)
	return summarize(out, final, want, o.Contacts, st, elapsed)
}

func importContacts(ctx context.Context, ac pb.AudienceServiceClient, n int) (map[string]bool, error) {
	stream, err := ac.ImportContacts(ctx)
	if err != nil {
		return nil, err
	}
	want := map[string]bool{}
	var rows []*pb.ContactRow
	for i := range n {
		unsub, dnc := ineligible(i)
		rows = append(rows, &pb.ContactRow{
			Email: email(i), Name: fmt.Sprintf("Person %d", i),
			Attributes:   map[string]string{"city": cities[i%len(cities)]},
			Unsubscribed: unsub, DoNotContact: dnc,
		})
		if !unsub && !dnc {
			want[email(i)] = true
		}
		if len(rows) == 1000 || i == n-1 {
			if err := stream.Send(&pb.ImportContactsRequest{Rows: rows}); err != nil {
				return nil, err
			}
			rows = nil
		}
	}
	resp, err := stream.CloseAndRecv()
	if err != nil {
		return nil, err
	}
	if len(resp.GetErrors()) > 0 {
		e := resp.GetErrors()[0]
		return nil, fmt.Errorf("import rejected %d rows, e.g. row %d: %s", len(resp.GetErrors()), e.GetRow(), e.GetError())
	}
	return want, nil
}

// watch follows the broadcast until it finishes, drawing one progress line
// (redrawn in place on a terminal).
func watch(ctx context.Context, bc pb.BroadcastServiceClient, id string, out io.Writer) (*pb.Broadcast, error) {
	stream, err := bc.WatchBroadcast(ctx, &pb.WatchBroadcastRequest{Id: id})
	if err != nil {
		return nil, err
	}
	tty := isTerminal(out)
	var last *pb.Broadcast
	var lastSent int64
	lastAt := time.Now()
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		last = resp.GetBroadcast()
		p := last.GetProgress()
		now := time.Now()
		rate := float64(p.GetSent()-lastSent) / now.Sub(lastAt).Seconds()
		lastSent, lastAt = p.GetSent(), now
		line := fmt.Sprintf("  %-9s ranges %2d/%d  %s  sent %6d/%d  failed %d  in flight %3d  %6.0f msg/s",
			stateName(last.GetState()), p.GetRangesDone(), p.GetRangesTotal(), bar(p), p.GetSent(), last.GetSnapshotTotal(),
			p.GetFailed(), p.GetInDoubt(), rate)
		if tty {
			fmt.Fprintf(out, "\r%s", line)
		} else {
			fmt.Fprintln(out, line)
		}
	}
	if tty {
		fmt.Fprintln(out)
	}
	if last == nil {
		return nil, errors.New("watch ended without a status")
	}
	return last, nil
}

func bar(p *pb.Progress) string {
	blocks := []rune(" ▁▂▃▄▅▆▇█")
	s := make([]rune, 0, len(p.GetRanges()))
	for _, r := range p.GetRanges() {
		i := int(r.GetPosition() * float64(len(blocks)-1))
		if r.GetDone() {
			i = len(blocks) - 1
		}
		s = append(s, blocks[i])
	}
	return "[" + string(s) + "]"
}

func summarize(out io.Writer, b *pb.Broadcast, want map[string]bool, contacts int, st *server.Stack, elapsed time.Duration) error {
	p := b.GetProgress()
	received := st.Capture.CountByRecipient()
	var duplicates, strangers, missing, total int
	for rcpt, n := range received {
		total += n
		if n > 1 {
			duplicates++
		}
		if !want[rcpt] {
			strangers++
		}
	}
	for e := range want {
		if received[e] == 0 {
			missing++
		}
	}
	fmt.Fprintf(out, "\nsummary of broadcast %s (%s)\n", b.GetId(), stateName(b.GetState()))
	fmt.Fprintf(out, "  contacts              %d\n", contacts)
	fmt.Fprintf(out, "  skipped (ineligible)  %d\n", contacts-int(b.GetSnapshotTotal()))
	fmt.Fprintf(out, "  sent (ledger)         %d\n", p.GetSent())
	fmt.Fprintf(out, "  received (SMTP)       %d messages to %d recipients\n", total, len(received))
	fmt.Fprintf(out, "  failed                %d\n", p.GetFailed())
	fmt.Fprintf(out, "  duplicates            %d\n", duplicates)
	fmt.Fprintf(out, "  missing               %d\n", missing)
	fmt.Fprintf(out, "  sent to ineligible    %d\n", strangers)
	fmt.Fprintf(out, "  elapsed               %s (%.0f messages/s)\n", elapsed.Round(time.Millisecond), float64(total)/elapsed.Seconds())
	var problems []string
	if b.GetState() != pb.BroadcastState_BROADCAST_STATE_COMPLETED {
		problems = append(problems, fmt.Sprintf("the broadcast ended %s: %s", stateName(b.GetState()), b.GetReason()))
	}
	if duplicates > 0 || missing > 0 || strangers > 0 || total != len(want) || p.GetSent() != int64(len(want)) {
		problems = append(problems, fmt.Sprintf("expected exactly %d messages, one per eligible contact", len(want)))
	}
	if len(problems) > 0 {
		return errors.New("demo check failed: " + fmt.Sprint(problems))
	}
	fmt.Fprintln(out, "  check                 ok: every eligible contact received exactly one message, nobody else did")
	return nil
}

func stateName(s pb.BroadcastState) string {
	names := map[pb.BroadcastState]string{
		pb.BroadcastState_BROADCAST_STATE_DRAFT: "draft", pb.BroadcastState_BROADCAST_STATE_RUNNING: "running",
		pb.BroadcastState_BROADCAST_STATE_PAUSED: "paused", pb.BroadcastState_BROADCAST_STATE_COMPLETED: "completed",
		pb.BroadcastState_BROADCAST_STATE_CANCELLED: "cancelled", pb.BroadcastState_BROADCAST_STATE_FAILED: "failed",
	}
	return names[s]
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b) //nolint:errcheck
	return hex.EncodeToString(b)
}
