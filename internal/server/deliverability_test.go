package server_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"log/slog"
	"mime"
	"mime/multipart"
	"net/mail"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/emersion/go-msgauth/dkim"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/rangecast/rangecast/internal/capture"
	"github.com/rangecast/rangecast/internal/message"
	"github.com/rangecast/rangecast/internal/server"
	pb "github.com/rangecast/rangecast/proto/rangecast/v1"
)

// writeDKIMKey writes a new key as PKCS#8 PEM and returns its path.
func writeDKIMKey(t *testing.T, dir, name string, k any) string {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestDeliverabilityEndToEnd runs the whole system against a relay that
// offers only AUTH LOGIN, with two DKIM selectors (RSA and Ed25519) for the
// sending domain: a broadcast without a visible unsubscribe link is refused
// at create, one with {{.UnsubscribeURL}} is sent, and every received
// message, broadcast and transactional, carries signatures go-msgauth's
// verifier accepts, over the List-Unsubscribe fields too; the link in the
// body is the header's.
func TestDeliverabilityEndToEnd(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	dir := t.TempDir()
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	_, edKey, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	keys := []string{
		"rangecast.test=rc2026a:" + writeDKIMKey(t, dir, "rsa.pem", rsaKey),
		"rangecast.test=rc2026b:" + writeDKIMKey(t, dir, "ed.pem", edKey),
	}
	relay, err := capture.Start("127.0.0.1:0", capture.WithAuth("relayuser", "relay-pass"), capture.WithAuthMechanisms("LOGIN"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { relay.Close() })
	smtpURL := strings.Replace(relay.URL(), "smtp://", "smtp://relayuser:relay-pass@", 1)

	// An unreadable key stops the stack before anything starts.
	if _, err := server.StartStack(ctx, server.StackOptions{Dir: filepath.Join(dir, "bad"), GRPCAddr: "127.0.0.1:0",
		DKIMKeys: []string{"rangecast.test=s1:" + filepath.Join(dir, "missing.pem")}}); err == nil || !strings.Contains(err.Error(), "missing.pem") {
		t.Fatalf("StartStack with a missing key: %v", err)
	}

	st, err := server.StartStack(ctx, server.StackOptions{Dir: filepath.Join(dir, "stack"), GRPCAddr: "127.0.0.1:0", Workers: 1,
		SMTPURL: smtpURL, DKIMKeys: keys,
		Log: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := st.Stop(); err != nil {
			t.Errorf("stack stop: %v", err)
		}
	})
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

	// No link: refused, saying how to add one.
	noLink := &pb.BroadcastContent{FromAddress: "news@rangecast.test", Subject: "Hi {{.Name}}", Html: "<p>Hi {{.Name}}</p>"}
	_, err = bc.CreateBroadcast(ctx, &pb.CreateBroadcastRequest{Name: "no link", Content: noLink})
	if s, _ := status.FromError(err); s.Code() != codes.InvalidArgument || !strings.Contains(s.Message(), "{{.UnsubscribeURL}}") || !strings.Contains(s.Message(), "--no-unsubscribe-link") {
		t.Fatalf("create without a link: %v, want InvalidArgument saying how to add one", err)
	}
	// ... unless asked for, which status shows.
	waived, err := bc.CreateBroadcast(ctx, &pb.CreateBroadcastRequest{Name: "own preference page", Content: noLink, NoUnsubscribeLink: true})
	if err != nil {
		t.Fatalf("create with no_unsubscribe_link: %v", err)
	}
	got, err := bc.GetBroadcast(ctx, &pb.GetBroadcastRequest{Id: waived.GetBroadcast().GetId()})
	if err != nil || !got.GetBroadcast().GetNoUnsubscribeLink() {
		t.Fatalf("GetBroadcast of the waived broadcast: no_unsubscribe_link %v, %v", got.GetBroadcast().GetNoUnsubscribeLink(), err)
	}

	created, err := bc.CreateBroadcast(ctx, &pb.CreateBroadcastRequest{Name: "with link", Content: &pb.BroadcastContent{
		FromAddress: "news@rangecast.test", Subject: "Hi {{.Name}}",
		Html: `<p>Hi {{.Name}}</p><p><a href="{{.UnsubscribeURL}}">Unsubscribe</a></p>`,
		Text: "Hi {{.Name}}\nUnsubscribe: {{.UnsubscribeURL}}\n"}})
	if err != nil {
		t.Fatal(err)
	}
	if created.GetBroadcast().GetNoUnsubscribeLink() {
		t.Error("a broadcast created with its link shows no_unsubscribe_link")
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
		b := got.GetBroadcast()
		if b.GetState() == pb.BroadcastState_BROADCAST_STATE_COMPLETED {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("broadcast not completed: %s %q; sent %d", b.GetState(), b.GetReason(), b.GetProgress().GetSent())
		case <-time.After(50 * time.Millisecond):
		}
	}

	tx := pb.NewTransactionalServiceClient(conn)
	sent, err := tx.Send(ctx, &pb.SendRequest{IdempotencyKey: "receipt-1", FromAddress: "orders@rangecast.test", To: "ada@example.org",
		Subject: "Your receipt", Text: "Thanks for your order.", Wait: durationpb.New(20 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	if s := sent.GetMessage().GetStatus(); s != pb.TransactionalStatus_TRANSACTIONAL_STATUS_SENT {
		t.Fatalf("transactional message %s: %v", s, sent.GetMessage())
	}

	// What the relay received.
	d, err := message.LoadDKIM(keys)
	if err != nil {
		t.Fatal(err)
	}
	zone := map[string]string{}
	for _, k := range d.Keys() {
		rec, err := k.Record()
		if err != nil {
			t.Fatal(err)
		}
		zone[k.RecordName()] = rec
	}
	lookup := &dkim.VerifyOptions{LookupTXT: func(name string) ([]string, error) {
		if rec, ok := zone[name]; ok {
			return []string{rec}, nil
		}
		return nil, errors.New("no such record " + name)
	}}
	msgs := relay.Messages()
	if len(msgs) != 3 {
		t.Fatalf("relay received %d messages, want 2 broadcast + 1 transactional", len(msgs))
	}
	var broadcasts int
	for _, m := range msgs {
		vs, err := dkim.VerifyWithOptions(bytes.NewReader(m.Raw), lookup)
		if err != nil || len(vs) != 2 {
			t.Fatalf("%s: %d verifications, %v; want one per selector", m.MessageID, len(vs), err)
		}
		for _, v := range vs {
			if v.Err != nil || v.Domain != "rangecast.test" {
				t.Errorf("%s: signature of %s: %v", m.MessageID, v.Domain, v.Err)
			}
		}
		pm, err := mail.ReadMessage(bytes.NewReader(m.Raw))
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(m.MessageID, "tx.") {
			if !strings.HasPrefix(pm.Header.Get("Feedback-ID"), "transactional:rangecast.test:") {
				t.Errorf("transactional Feedback-ID %q", pm.Header.Get("Feedback-ID"))
			}
			continue
		}
		broadcasts++
		for _, v := range vs {
			signed := strings.ToLower(strings.Join(v.HeaderKeys, ":"))
			if !strings.Contains(signed, "list-unsubscribe:") || !strings.Contains(signed, "list-unsubscribe-post") {
				t.Errorf("%s: h= %v lacks the List-Unsubscribe fields", m.MessageID, v.HeaderKeys)
			}
		}
		if want := id + ":rangecast.test:broadcast:rangecast"; pm.Header.Get("Feedback-ID") != want {
			t.Errorf("Feedback-ID %q, want %q", pm.Header.Get("Feedback-ID"), want)
		}
		header := strings.Trim(pm.Header.Get("List-Unsubscribe"), "<>")
		if !strings.HasPrefix(header, st.PublicURL+"/u/") {
			t.Fatalf("List-Unsubscribe %q", header)
		}
		html, text := bodies(t, pm)
		hrefs := regexp.MustCompile(`href="([^"]*)"`).FindAllStringSubmatch(html, -1)
		if len(hrefs) != 1 || hrefs[0][1] != header {
			t.Errorf("%s: body links %q, want the header's %q", m.MessageID, hrefs, header)
		}
		if !strings.Contains(text, "Unsubscribe: "+header+"\r\n") && !strings.Contains(text, "Unsubscribe: "+header+"\n") {
			t.Errorf("%s: text part lacks the header's link:\n%s", m.MessageID, text)
		}
	}
	if broadcasts != 2 {
		t.Errorf("%d broadcast messages, want 2", broadcasts)
	}
}

// bodies returns the decoded HTML and text parts of a multipart/alternative
// message.
func bodies(t *testing.T, m *mail.Message) (html, text string) {
	t.Helper()
	_, params, err := mime.ParseMediaType(m.Header.Get("Content-Type"))
	if err != nil {
		t.Fatal(err)
	}
	mr := multipart.NewReader(m.Body, params["boundary"])
	for {
		p, err := mr.NextPart()
		if err != nil {
			break
		}
		var b bytes.Buffer
		if _, err := b.ReadFrom(p); err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(p.Header.Get("Content-Type"), "text/html") {
			html = b.String()
		} else {
			text = b.String()
		}
	}
	return html, text
}
