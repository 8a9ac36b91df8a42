package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/rangecast/rangecast/internal/capture"
	pb "github.com/rangecast/rangecast/proto/rangecast/v1"
)

// syncBuffer collects a child process's output safely.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// devProcess is `rangecast dev` running as a child process on one folder.
type devProcess struct {
	t    *testing.T
	bin  string
	dir  string
	addr string
	cmd  *exec.Cmd
	out  *syncBuffer
}

func (d *devProcess) start() {
	t := d.t
	d.out = &syncBuffer{}
	d.cmd = exec.Command(d.bin, "dev", "--dir", d.dir, "--grpc-addr", d.addr,
		"--http-addr", "127.0.0.1:0", "--metrics-addr", "127.0.0.1:0",
		"--workers", "2", "--concurrency", "8", "--in-doubt-after", "3s", "--log-level", "warn")
	d.cmd.Stdout, d.cmd.Stderr = d.out, d.out
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	conn := d.conn()
	defer conn.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
		cancel()
		if err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("rangecast dev did not come up: %v\n%s", err, d.out.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (d *devProcess) conn() *grpc.ClientConn {
	conn, err := grpc.NewClient(d.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		d.t.Fatal(err)
	}
	return conn
}

func (d *devProcess) stop(sig syscall.Signal) {
	if err := d.cmd.Process.Signal(sig); err != nil {
		d.t.Fatal(err)
	}
	d.cmd.Wait() //nolint:errcheck // killed on purpose
}

// mailCount counts the messages the capture server has written so far.
func (d *devProcess) mailCount() int {
	files, _ := filepath.Glob(filepath.Join(d.dir, "mail", "*.eml"))
	return len(files)
}

func (d *devProcess) waitMail(n int) {
	deadline := time.Now().Add(time.Minute)
	for d.mailCount() < n {
		if time.Now().After(deadline) {
			d.t.Fatalf("only %d messages captured, waiting for %d\n%s", d.mailCount(), n, d.out.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestDevSurvivesInterruptAndKill runs a broadcast on `rangecast dev`,
// interrupts it with Ctrl-C (SIGINT), starts it again on the same folder,
// kills it with SIGKILL mid-broadcast, starts it again: the broadcast
// completes and every eligible contact has exactly one message in the
// capture folder.
func TestDevSurvivesInterruptAndKill(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the rangecast binary")
	}
	t.Parallel()
	dir := t.TempDir()
	bin := filepath.Join(dir, "rangecast")
	build := exec.Command("go", "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	d := &devProcess{t: t, bin: bin, dir: filepath.Join(dir, "state"), addr: freeAddr(t)}
	d.start()

	const contacts = 20000
	conn := d.conn()
	ctx := context.Background()
	want := map[string]bool{}
	stream, err := pb.NewAudienceServiceClient(conn).ImportContacts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var rows []*pb.ContactRow
	for i := range contacts {
		email := fmt.Sprintf("p%05d@example.org", i)
		row := &pb.ContactRow{Email: email, Name: fmt.Sprintf("P %d", i), Unsubscribed: i%20 == 7}
		if !row.Unsubscribed {
			want[email] = true
		}
		rows = append(rows, row)
		if len(rows) == 1000 {
			if err := stream.Send(&pb.ImportContactsRequest{Rows: rows}); err != nil {
				t.Fatal(err)
			}
			rows = nil
		}
	}
	if _, err := stream.CloseAndRecv(); err != nil {
		t.Fatal(err)
	}
	bc := pb.NewBroadcastServiceClient(conn)
	created, err := bc.CreateBroadcast(ctx, &pb.CreateBroadcastRequest{Name: "survivor", Content: &pb.BroadcastContent{
		FromAddress: "news@example.com", Subject: "Hi {{.Name}}", Html: "<p>Hello {{.Name}}</p><a href=\"{{.UnsubscribeURL}}\">Unsubscribe</a>"}})
	if err != nil {
		t.Fatal(err)
	}
	id := created.GetBroadcast().GetId()
	if _, err := bc.StartBroadcast(ctx, &pb.StartBroadcastRequest{Id: id}); err != nil {
		t.Fatal(err)
	}
	conn.Close()

	d.waitMail(len(want) / 5)
	d.stop(syscall.SIGINT)
	if !strings.Contains(d.out.String(), "letting in-flight sends finish") {
		t.Fatalf("Ctrl-C did not stop dev gracefully:\n%s", d.out.String())
	}
	afterInterrupt := d.mailCount()
	d.start()
	d.waitMail(afterInterrupt + len(want)/4)
	d.stop(syscall.SIGKILL)
	afterKill := d.mailCount()
	d.start()
	t.Cleanup(func() { d.stop(syscall.SIGINT) })

	conn = d.conn()
	defer conn.Close()
	bc = pb.NewBroadcastServiceClient(conn)
	deadline := time.Now().Add(2 * time.Minute)
	var b *pb.Broadcast
	for {
		resp, err := bc.GetBroadcast(ctx, &pb.GetBroadcastRequest{Id: id})
		if err != nil {
			t.Fatal(err)
		}
		b = resp.GetBroadcast()
		if b.GetState() == pb.BroadcastState_BROADCAST_STATE_COMPLETED {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("broadcast %s after restarts: %s, %d/%d ranges, sent %d, in doubt %d\n%s", id, b.GetState(),
				b.GetProgress().GetRangesDone(), b.GetProgress().GetRangesTotal(), b.GetProgress().GetSent(), b.GetProgress().GetInDoubt(), d.out.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
	msgs, err := capture.ReadDir(filepath.Join(d.dir, "mail"))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, m := range msgs {
		for _, to := range m.To {
			got[to]++
		}
	}
	missing, dup, extra := 0, 0, 0
	for email := range want {
		switch got[email] {
		case 0:
			missing++
		case 1:
		default:
			dup++
		}
	}
	for email := range got {
		if !want[email] {
			extra++
		}
	}
	if missing+dup+extra > 0 {
		t.Fatalf("after Ctrl-C and kill -9: %d missing, %d duplicated, %d not eligible (of %d eligible)", missing, dup, extra, len(want))
	}
	if p := b.GetProgress(); p.GetSent() != int64(len(want)) || p.GetUnknown() != 0 {
		t.Fatalf("ledger: sent %d, unknown %d; want %d sent", p.GetSent(), p.GetUnknown(), len(want))
	}
	t.Logf("%d eligible: %d captured before Ctrl-C, %d before kill -9, all %d exactly once at the end", len(want), afterInterrupt, afterKill, len(msgs))
}
