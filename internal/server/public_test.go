package server_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/mail"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/rangecast/rangecast/internal/server"
	pb "github.com/rangecast/rangecast/proto/rangecast/v1"
)

// TestDevStackOneClick: `rangecast dev` serves the public HTTP on a local
// port, its workers sign links to it with the key kept in the folder, and a
// link from captured mail unsubscribes (the wiring of the parts that
// internal/coordinator's end-to-end test exercises one by one).
func TestDevStackOneClick(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dir := t.TempDir()
	st, err := server.StartStack(ctx, server.StackOptions{Dir: dir, GRPCAddr: "127.0.0.1:0", Workers: 1,
		Log: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := st.Stop(); err != nil {
			t.Errorf("stack stop: %v", err)
		}
	})
	if !strings.HasPrefix(st.PublicURL, "http://127.0.0.1:") {
		t.Fatalf("PublicURL %q, want a local port", st.PublicURL)
	}
	if k, err := os.ReadFile(filepath.Join(dir, "unsubscribe.key")); err != nil || len(bytes.TrimSpace(k)) < 32 {
		t.Fatalf("dev unsubscribe key: %q %v", k, err)
	}
	conn, err := grpc.NewClient(st.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	imp, err := pb.NewAudienceServiceClient(conn).ImportContacts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := imp.Send(&pb.ImportContactsRequest{Rows: []*pb.ContactRow{{Email: "ada@example.org", Name: "Ada"}, {Email: "bob@example.org", Name: "Bob"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := imp.CloseAndRecv(); err != nil {
		t.Fatal(err)
	}
	bc := pb.NewBroadcastServiceClient(conn)
	run := func(name string) {
		t.Helper()
		created, err := bc.CreateBroadcast(ctx, &pb.CreateBroadcastRequest{Name: name, Content: &pb.BroadcastContent{
			FromAddress: "news@rangecast.test", Subject: "Hi {{.Name}}", Html: "<p>Hi</p><a href=\"{{.UnsubscribeURL}}\">Unsubscribe</a>"}})
		if err != nil {
			t.Fatal(err)
		}
		id := created.GetBroadcast().GetId()
		if _, err := bc.StartBroadcast(ctx, &pb.StartBroadcastRequest{Id: id}); err != nil {
			t.Fatal(err)
		}
		for {
			got, err := bc.GetBroadcast(ctx, &pb.GetBroadcastRequest{Id: id})
			if err != nil {
				t.Fatal(err)
			}
			if got.GetBroadcast().GetState() == pb.BroadcastState_BROADCAST_STATE_COMPLETED {
				return
			}
			select {
			case <-ctx.Done():
				b := got.GetBroadcast()
				t.Fatalf("broadcast %s not completed: %s %q; waiting for %q; sent %d, deferred %d, in doubt %d",
					name, b.GetState(), b.GetReason(), b.GetProgress().GetWaitingFor(), b.GetProgress().GetSent(), b.GetProgress().GetDeferred(), b.GetProgress().GetInDoubt())
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	run("first")
	var link string
	for _, m := range st.Capture.Messages() {
		pm, err := mail.ReadMessage(bytes.NewReader(m.Raw))
		if err != nil {
			t.Fatal(err)
		}
		if m.To[0] == "ada@example.org" {
			link = strings.Trim(pm.Header.Get("List-Unsubscribe"), "<>")
		}
	}
	if !strings.HasPrefix(link, st.PublicURL+"/u/") {
		t.Fatalf("Ada's List-Unsubscribe link %q does not point at %s", link, st.PublicURL)
	}
	resp, err := http.Post(link, "application/x-www-form-urlencoded", strings.NewReader("List-Unsubscribe=One-Click"))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "Unsubscribed") {
		t.Fatalf("one-click POST: %d %s", resp.StatusCode, body)
	}
	before := st.Capture.Count()
	run("second")
	var got []string
	for _, m := range st.Capture.Messages()[before:] {
		got = append(got, m.To...)
	}
	if len(got) != 1 || got[0] != "bob@example.org" {
		t.Errorf("second broadcast went to %v, want only bob@example.org", got)
	}
}
