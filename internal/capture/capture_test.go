package capture

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"
)

func start(t *testing.T, opts ...Option) *Server {
	t.Helper()
	s, err := Start("127.0.0.1:0", opts...)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func dial(t *testing.T, s *Server) *smtp.Client {
	t.Helper()
	c, err := smtp.Dial(s.Addr())
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

const sample = "From: a@example.com\r\nTo: b@example.org\r\nSubject: =?utf-8?q?Gr=C3=BC=C3=9Fe?=\r\nMessage-ID: <id1@example.com>\r\n\r\nhello\r\n.dot line\r\n..two dots\r\n"

func send(c *smtp.Client, from string, to []string, body string) error {
	return c.SendMail(from, to, strings.NewReader(body))
}

func TestCapturesMessage(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	fixed := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	s := start(t, WithDir(dir), WithNow(func() time.Time { return fixed }))
	var hooked atomic.Int32
	s.OnMessage(func(m Message) { hooked.Add(1) })

	c := dial(t, s)
	if err := send(c, "a@example.com", []string{"B@Example.org", "c@example.org"}, sample); err != nil {
		t.Fatalf("send: %v", err)
	}
	if err := send(c, "a@example.com", []string{"b@example.org"}, sample); err != nil {
		t.Fatalf("second send on same connection: %v", err)
	}

	msgs := s.Messages()
	if len(msgs) != 2 || s.Count() != 2 {
		t.Fatalf("captured %d (Count %d), want 2", len(msgs), s.Count())
	}
	m := msgs[0]
	if m.Seq != 1 || msgs[1].Seq != 2 {
		t.Errorf("Seq = %d, %d", m.Seq, msgs[1].Seq)
	}
	if m.MessageID != "id1@example.com" || m.From != "a@example.com" || m.Subject != "Grüße" || !m.Received.Equal(fixed) {
		t.Errorf("message = %+v", m)
	}
	if strings.Join(m.To, ",") != "B@Example.org,c@example.org" {
		t.Errorf("To = %v", m.To)
	}
	// Dot-stuffing is undone: the stored message is what the client meant.
	if string(m.Raw) != sample {
		t.Errorf("Raw = %q, want %q", m.Raw, sample)
	}
	if got := s.CountByRecipient(); got["b@example.org"] != 2 || got["c@example.org"] != 1 || len(got) != 2 {
		t.Errorf("CountByRecipient = %v", got)
	}
	if hooked.Load() != 2 {
		t.Errorf("OnMessage called %d times, want 2", hooked.Load())
	}
	if s.Connections() != 1 {
		t.Errorf("Connections = %d, want 1", s.Connections())
	}
	b, err := os.ReadFile(filepath.Join(dir, "000001-id1@example.com.eml"))
	if err != nil || string(b) != sample {
		t.Errorf("eml file: %v %q", err, b)
	}
}

func TestScriptedReplies(t *testing.T) {
	t.Parallel()
	s := start(t,
		WithRcptHook(func(to string) *smtp.SMTPError {
			if to == "gone@example.org" {
				return &smtp.SMTPError{Code: 550, EnhancedCode: smtp.EnhancedCode{5, 1, 1}, Message: "no such user"}
			}
			return nil
		}),
		WithDataHook(func(m Message) *smtp.SMTPError {
			if m.Subject == "reject me" {
				return &smtp.SMTPError{Code: 554, EnhancedCode: smtp.EnhancedCode{5, 7, 1}, Message: "spam"}
			}
			return nil
		}),
	)
	c := dial(t, s)
	err := send(c, "a@example.com", []string{"gone@example.org"}, sample)
	var se *smtp.SMTPError
	if !errors.As(err, &se) || se.Code != 550 || se.EnhancedCode != (smtp.EnhancedCode{5, 1, 1}) {
		t.Fatalf("rcpt reply = %v", err)
	}
	if err := c.Reset(); err != nil {
		t.Fatal(err)
	}
	err = send(c, "a@example.com", []string{"ok@example.org"}, "Subject: reject me\r\n\r\nx\r\n")
	if !errors.As(err, &se) || se.Code != 554 {
		t.Fatalf("data reply = %v", err)
	}
	if s.Count() != 0 {
		t.Errorf("rejected messages were counted: %d", s.Count())
	}
}

func TestAuthRequired(t *testing.T) {
	t.Parallel()
	s := start(t, WithAuth("user", "secret"))

	c := dial(t, s)
	var se *smtp.SMTPError
	if err := send(c, "a@example.com", []string{"b@example.org"}, sample); !errors.As(err, &se) || se.Code != 530 {
		t.Fatalf("send without AUTH = %v, want 530", err)
	}

	c = dial(t, s)
	if err := c.Auth(sasl.NewPlainClient("", "user", "wrong")); !errors.As(err, &se) || se.Code != 535 {
		t.Fatalf("AUTH with wrong password = %v, want 535", err)
	}

	c = dial(t, s)
	if err := c.Auth(sasl.NewPlainClient("", "user", "secret")); err != nil {
		t.Fatalf("AUTH: %v", err)
	}
	if err := send(c, "a@example.com", []string{"b@example.org"}, sample); err != nil {
		t.Fatalf("send after AUTH: %v", err)
	}
	if s.Count() != 1 {
		t.Errorf("Count = %d", s.Count())
	}
}

func TestAnyCredentialsAcceptedByDefault(t *testing.T) {
	t.Parallel()
	s := start(t)
	c := dial(t, s)
	if err := c.Auth(sasl.NewPlainClient("", "anyone", "anything")); err != nil {
		t.Fatalf("AUTH: %v", err)
	}
}

func TestIncompleteDataNotCounted(t *testing.T) {
	t.Parallel()
	s := start(t)
	c := dial(t, s)
	if err := c.Mail("a@example.com", nil); err != nil {
		t.Fatal(err)
	}
	if err := c.Rcpt("b@example.org", nil); err != nil {
		t.Fatal(err)
	}
	w, err := c.Data()
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(w, "Subject: half\r\n\r\nhalf a mess")
	c.Close() // no final dot

	// A second, complete message proves the server is still serving and
	// gives the first connection time to be torn down.
	c2 := dial(t, s)
	if err := send(c2, "a@example.com", []string{"c@example.org"}, sample); err != nil {
		t.Fatal(err)
	}
	if n := s.Count(); n != 1 {
		t.Fatalf("Count = %d, want 1 (the cut-off message must not count)", n)
	}
}

func TestLatencyAndCloseDuringData(t *testing.T) {
	t.Parallel()
	s, err := Start("127.0.0.1:0", WithLatency(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	c, err := smtp.Dial(s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	errc := make(chan error, 1)
	go func() { errc <- send(c, "a@example.com", []string{"b@example.org"}, sample) }()

	deadline := time.After(5 * time.Second)
	for s.Connections() == 0 {
		select {
		case <-deadline:
			t.Fatal("client never connected")
		case <-time.After(5 * time.Millisecond):
		}
	}
	// Give the client time to reach DATA, so Close usually interrupts the
	// latency wait (the assertions hold either way).
	time.Sleep(100 * time.Millisecond)
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	select {
	case err := <-errc:
		if err == nil {
			t.Fatal("send succeeded although the server closed during DATA")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not interrupt a slow DATA")
	}
	if s.Count() != 0 {
		t.Errorf("Count = %d after interrupted DATA", s.Count())
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestURL(t *testing.T) {
	t.Parallel()
	s := start(t)
	if want := "smtp://" + s.Addr() + "?tls=none"; s.URL() != want {
		t.Errorf("URL = %q, want %q", s.URL(), want)
	}
	tlsSrv := start(t, WithImplicitTLS())
	if !strings.HasPrefix(tlsSrv.URL(), "smtps://127.0.0.1:") {
		t.Errorf("implicit TLS URL = %q", tlsSrv.URL())
	}
	if _, err := Start("127.0.0.1:0", WithStartTLS(), WithImplicitTLS()); err == nil {
		t.Error("conflicting TLS options accepted")
	}
}

// TestRestartKeepsMessages: a capture server started again on the same
// folder carries on from what it holds (rangecast dev after a restart).
func TestRestartKeepsMessages(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	first, err := Start("127.0.0.1:0", WithDir(dir))
	if err != nil {
		t.Fatal(err)
	}
	c, err := smtp.Dial(first.Addr())
	if err != nil {
		t.Fatal(err)
	}
	if err := send(c, "a@example.com", []string{"b@example.org"}, sample); err != nil {
		t.Fatal(err)
	}
	c.Close()
	first.Close()
	if err := os.WriteFile(filepath.Join(dir, "000002-half.eml.tmp"), []byte("From: x"), 0o644); err != nil {
		t.Fatal(err)
	}

	second := start(t, WithDir(dir))
	if left, _ := filepath.Glob(filepath.Join(dir, "*.tmp")); len(left) != 0 {
		t.Fatalf("a message never answered 250 is still in the folder: %v", left)
	}
	if second.Count() != 1 || !second.Accepted("id1@example.com") || second.Accepted("other@example.com") {
		t.Fatalf("after restart: count %d, accepted(id1) %v; want the one message kept", second.Count(), second.Accepted("id1@example.com"))
	}
	if got := second.CountByRecipient(); got["b@example.org"] != 1 {
		t.Fatalf("recipients after restart: %v", got)
	}
	c2 := dial(t, second)
	other := strings.Replace(sample, "id1@", "id2@", 1)
	if err := send(c2, "a@example.com", []string{"b@example.org"}, other); err != nil {
		t.Fatal(err)
	}
	msgs, err := ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 2 || msgs[1].Seq != 2 || msgs[1].MessageID != "id2@example.com" || msgs[1].To[0] != "b@example.org" {
		t.Fatalf("ReadDir = %+v; want two messages numbered on from the first", msgs)
	}
}
