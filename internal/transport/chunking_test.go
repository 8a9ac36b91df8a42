package transport

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/rangecast/rangecast/internal/message"
)

// chunkingExt is what a server that takes BDAT pipelined advertises.
var chunkingExt = []string{"PIPELINING", "CHUNKING", "8BITMIME", "SIZE 1000000"}

// TestChunkedMessageInOneWrite: where the server offers CHUNKING and
// PIPELINING, MAIL, RCPT and the whole message go out as one write
// (BDAT n LAST), and the server receives the message byte for byte.
func TestChunkedMessageInOneWrite(t *testing.T) {
	t.Parallel()
	srv := startRaw(t, &rawServer{ext: chunkingExt, record: true})
	tr := newSMTP(t, srv.url())
	m := msg(1, "a@example.org")
	reply, err := tr.Send(t.Context(), m)
	if err != nil {
		t.Fatal(err)
	}
	if reply != "250 2.0.0 Ok: queued as R1" {
		t.Errorf("reply = %q", reply)
	}
	reads, cmds, bodies := srv.received()
	want := fmt.Sprintf("MAIL FROM:<news@example.com> BODY=8BITMIME SIZE=%d\r\nRCPT TO:<a@example.org>\r\nBDAT %d LAST\r\n%s", len(m.Bytes), len(m.Bytes), m.Bytes)
	if !hasChunk(reads, want) {
		t.Errorf("MAIL, RCPT and the chunk did not arrive in one write; reads: %q", reads)
	}
	for _, c := range cmds {
		if c == "DATA" {
			t.Errorf("DATA sent to a server that offers CHUNKING; commands: %q", cmds)
		}
	}
	if len(bodies) != 1 || string(bodies[0]) != string(m.Bytes) {
		t.Errorf("bodies = %q", bodies)
	}
}

// TestChunkedSameBytesAsData: go-smtp's server (as the capture server and
// most of the sink run it) receives the same bytes whether the message went
// as a chunk or through DATA, for a body with leading dots, a bare LF and
// no final line break.
func TestChunkedSameBytesAsData(t *testing.T) {
	t.Parallel()
	body := "Subject: dots\r\nMessage-ID: <dots@example.com>\r\n\r\n.\r\n.leading dot\nbare LF\r\n..two\r\nno end"
	var got []string
	for _, query := range []string{"", "&chunking=0"} {
		srv := startCapture(t)
		tr := newSMTP(t, srv.URL()+query)
		m := message.Rendered{MessageID: "dots@example.com", From: "news@example.com", To: "a@example.org", Bytes: []byte(body)}
		if _, err := tr.Send(t.Context(), m); err != nil {
			t.Fatalf("%q: %v", query, err)
		}
		msgs := srv.Messages()
		if len(msgs) != 1 {
			t.Fatalf("%q: captured %d messages", query, len(msgs))
		}
		got = append(got, string(msgs[0].Raw))
	}
	want := strings.ReplaceAll(body, "dot\nbare", "dot\r\nbare") + "\r\n"
	if got[0] != want || got[1] != want {
		t.Fatalf("chunked %q\nDATA    %q\nwant    %q", got[0], got[1], want)
	}
}

// TestChunkedRecipientRefused: a recipient refused at RCPT is that
// recipient's (550 at RCPT, not maybe delivered), the server refuses and
// discards the chunk, and the connection, reset, carries the next message.
func TestChunkedRecipientRefused(t *testing.T) {
	t.Parallel()
	srv := startRaw(t, &rawServer{ext: chunkingExt, record: true, rcpt: func(to string) string {
		if strings.Contains(to, "gone@") {
			return "550 5.1.1 no such user"
		}
		return ""
	}})
	tr := newSMTP(t, srv.url()+"&pool=1")
	_, err := tr.Send(t.Context(), msg(1, "gone@example.org"))
	se := sendErr(t, err)
	if se.Stage != StageRcpt || se.Code != 550 || se.MaybeDelivered {
		t.Fatalf("refusal = %+v; want RCPT 550, not maybe delivered", se)
	}
	if _, err := tr.Send(t.Context(), msg(2, "here@example.org")); err != nil {
		t.Fatal(err)
	}
	_, cmds, bodies := srv.received()
	if len(bodies) != 1 || !strings.Contains(string(bodies[0]), "To: here@example.org") {
		t.Errorf("bodies = %q; want only the second message", bodies)
	}
	if n := srv.connections(); n != 1 {
		t.Errorf("%d connections; the refusal should have left the connection reusable (commands %q)", n, cmds)
	}
}

// TestChunkedLostWithMessageInHand: the chunk went out whole and the
// connection died before any reply, so the server may have accepted the
// message: maybe delivered, whichever of the three replies was missing.
func TestChunkedLostWithMessageInHand(t *testing.T) {
	t.Parallel()
	srv := startRaw(t, &rawServer{ext: chunkingExt, afterChunk: func() bool { return false }})
	tr := newSMTP(t, srv.url())
	_, err := tr.Send(t.Context(), msg(1, "a@example.org"))
	if se := sendErr(t, err); !se.MaybeDelivered {
		t.Fatalf("err = %+v; want maybe delivered", se)
	}
}

// TestChunkedLostOnPooledConnectionNotRetried: a pooled connection that
// was open when taken, whose server took the chunk and died before any
// reply, is not a stale pool: the message may have been delivered, so it
// is not sent again on a fresh connection.
func TestChunkedLostOnPooledConnectionNotRetried(t *testing.T) {
	t.Parallel()
	var chunks atomic.Int32
	srv := startRaw(t, &rawServer{ext: chunkingExt, afterChunk: func() bool { return chunks.Add(1) == 1 }})
	secondSendInDoubt(t, srv)
	if n := chunks.Load(); n != 2 {
		t.Errorf("the server read %d chunks; want 2 (the second message sent once)", n)
	}
}

// secondSendInDoubt sends a message to srv and then a second one on the
// pooled connection, which must end maybe delivered: not retried on a
// fresh connection.
func secondSendInDoubt(t *testing.T, srv *rawServer) {
	t.Helper()
	tr := newSMTP(t, srv.url())
	if _, err := tr.Send(t.Context(), msg(1, "a@example.org")); err != nil {
		t.Fatal(err)
	}
	_, err := tr.Send(t.Context(), msg(2, "b@example.org"))
	if se := sendErr(t, err); !se.MaybeDelivered {
		t.Fatalf("err = %+v; want maybe delivered", se)
	}
}

// TestChunkTakenAfterRefusalNotRetried: a server that answers MAIL on a
// reused connection with 421 and then takes the chunk anyway (not RFC 3030)
// has said it took the message. Read as a stale pool, the 421 had the
// message sent again on a fresh connection: a second copy.
func TestChunkTakenAfterRefusalNotRetried(t *testing.T) {
	t.Parallel()
	var mails atomic.Int32
	srv := startRaw(t, &rawServer{ext: chunkingExt, record: true, chunkAnyway: true, mail: func(string) string {
		if mails.Add(1) == 2 {
			return "421 4.3.2 Service shutting down"
		}
		return ""
	}})
	secondSendInDoubt(t, srv)
	if _, _, bodies := srv.received(); len(bodies) != 2 {
		t.Errorf("the server took %d messages; want 2 (the second sent once)", len(bodies))
	}
}

// TestChunkingOff: chunking=0 keeps to DATA where the server offers
// CHUNKING.
func TestChunkingOff(t *testing.T) {
	t.Parallel()
	srv := startRaw(t, &rawServer{ext: chunkingExt, record: true})
	tr := newSMTP(t, srv.url()+"&chunking=0")
	if _, err := tr.Send(t.Context(), msg(1, "a@example.org")); err != nil {
		t.Fatal(err)
	}
	_, cmds, _ := srv.received()
	if !strings.Contains(strings.Join(cmds, "\n"), "\nDATA") {
		t.Errorf("commands %q; want DATA", cmds)
	}
	if _, err := NewSMTP(srv.url() + "&chunking=maybe"); err == nil || !strings.Contains(err.Error(), "chunking") {
		t.Errorf("chunking=maybe: err = %v; want a refusal naming chunking", err)
	}
}
