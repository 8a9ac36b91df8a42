package transport

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/textproto"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rangecast/rangecast/internal/message"
)

func sendErr(t *testing.T, err error) *SendError {
	t.Helper()
	var se *SendError
	if !errors.As(err, &se) {
		t.Fatalf("err = %v (%T), want *SendError", err, err)
	}
	return se
}

// stuffed is what a body looks like on the wire after DATA.
func stuffed(body string) string { return string(appendData(nil, []byte(body))) }

func TestPipelinedCommandsInOneWrite(t *testing.T) {
	t.Parallel()
	srv := startRaw(t, &rawServer{ext: []string{"PIPELINING", "8BITMIME", "SIZE 1000000"}, record: true})
	tr := newSMTP(t, srv.url())
	m := msg(1, "a@example.org")
	reply, err := tr.Send(t.Context(), m)
	if err != nil {
		t.Fatal(err)
	}
	if reply != "250 2.0.0 Ok: queued as R1" {
		t.Errorf("reply = %q", reply)
	}
	reads, _, bodies := srv.received()
	envelope := fmt.Sprintf("MAIL FROM:<news@example.com> BODY=8BITMIME SIZE=%d\r\nRCPT TO:<a@example.org>\r\nDATA\r\n", len(m.Bytes))
	if !hasChunk(reads, envelope) {
		t.Errorf("MAIL, RCPT and DATA did not arrive in one write; reads: %q", reads)
	}
	if !hasChunk(reads, stuffed(string(m.Bytes))) {
		t.Errorf("body and final dot did not arrive in one write; reads: %q", reads)
	}
	if len(bodies) != 1 || string(bodies[0]) != string(m.Bytes) {
		t.Errorf("bodies = %q", bodies)
	}
}

func TestWithoutPipeliningOneCommandAtATime(t *testing.T) {
	t.Parallel()
	srv := startRaw(t, &rawServer{record: true})
	tr := newSMTP(t, srv.url())
	for i := range 2 {
		if _, err := tr.Send(t.Context(), msg(i, "a@example.org")); err != nil {
			t.Fatal(err)
		}
	}
	reads, cmds, bodies := srv.received()
	for _, want := range []string{"MAIL FROM:<news@example.com>\r\n", "RCPT TO:<a@example.org>\r\n", "DATA\r\n"} {
		if !hasChunk(reads, want) {
			t.Errorf("%q was not written on its own; reads: %q", want, reads)
		}
	}
	wantCmds := []string{"EHLO localhost", "MAIL FROM:<news@example.com>", "RCPT TO:<a@example.org>", "DATA",
		"MAIL FROM:<news@example.com>", "RCPT TO:<a@example.org>", "DATA"}
	if strings.Join(cmds, "|") != strings.Join(wantCmds, "|") {
		t.Errorf("commands = %q, want %q", cmds, wantCmds)
	}
	if len(bodies) != 2 || srv.connections() != 1 {
		t.Errorf("%d bodies over %d connections, want 2 over 1", len(bodies), srv.connections())
	}
}

func hasChunk(reads [][]byte, want string) bool {
	for _, r := range reads {
		if string(r) == want {
			return true
		}
	}
	return false
}

// hooks are the reply hooks of a rawServer.
type hooks struct {
	mail, rcpt func(string) string
	data       func(mailOK, rcptOK bool) string
	end        func([]byte) string
}

// Refusals while pipelined: the first refusal is reported as it was said,
// the replies that follow from it are read (so the connection stays in
// step), no body is sent, and the connection is reused after RSET.
func TestPipelinedRefusals(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		srv   hooks
		stage string
		code  int
		enh   string
		text  string
		class Class
	}{
		{
			name:  "MAIL refused",
			srv:   hooks{mail: func(string) string { return "553 5.1.8 sender domain not allowed" }},
			stage: StageMail, code: 553, enh: "5.1.8", text: "sender domain not allowed", class: Channel,
		},
		{
			name:  "RCPT 550",
			srv:   hooks{rcpt: func(string) string { return "550 5.1.1 no such user here" }},
			stage: StageRcpt, code: 550, enh: "5.1.1", text: "no such user here", class: Recipient,
		},
		{
			name:  "RCPT 451 multi-line",
			srv:   hooks{rcpt: func(string) string { return "451-4.3.0 greylisted,\r\n451 4.3.0 come back later" }},
			stage: StageRcpt, code: 451, enh: "4.3.0", text: "greylisted,\ncome back later", class: Transient,
		},
		{
			name:  "DATA refused",
			srv:   hooks{data: func(bool, bool) string { return "554 5.7.1 not today" }},
			stage: StageData, code: 554, enh: "5.7.1", text: "not today", class: Channel,
		},
		{
			name:  "final dot refused",
			srv:   hooks{end: func([]byte) string { return "550 5.6.0 content rejected" }},
			stage: StageData, code: 550, enh: "5.6.0", text: "content rejected", class: Channel,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// Only the first message is refused; the second must go through
			// on the same connection.
			var calls atomic.Int32
			first := func() bool { return calls.Load() == 1 }
			s := &rawServer{ext: []string{"PIPELINING"}, record: true}
			if h := tc.srv.mail; h != nil {
				s.mail = func(a string) string {
					if calls.Add(1) == 1 {
						return h(a)
					}
					return ""
				}
			} else {
				s.mail = func(string) string { calls.Add(1); return "" }
			}
			if h := tc.srv.rcpt; h != nil {
				s.rcpt = func(a string) string {
					if first() {
						return h(a)
					}
					return ""
				}
			}
			if h := tc.srv.data; h != nil {
				s.data = func(mailOK, rcptOK bool) string {
					if first() {
						return h(mailOK, rcptOK)
					}
					return "354 go ahead"
				}
			}
			if h := tc.srv.end; h != nil {
				s.end = func(b []byte) string {
					if first() {
						return h(b)
					}
					return ""
				}
			}
			srv := startRaw(t, s)
			tr := newSMTP(t, srv.url())

			_, err := tr.Send(t.Context(), msg(1, "someone@example.org"))
			se := sendErr(t, err)
			if se.Stage != tc.stage || se.Code != tc.code || se.Enhanced != tc.enh || se.Text != tc.text || se.Err != nil || se.MaybeDelivered {
				t.Errorf("SendError = %+v, want stage %s %d %s %q", *se, tc.stage, tc.code, tc.enh, tc.text)
			}
			if c := Classify(err); c != tc.class {
				t.Errorf("Classify = %v, want %v", c, tc.class)
			}
			if _, err := tr.Send(t.Context(), msg(2, "someone@example.org")); err != nil {
				t.Fatalf("second send: %v", err)
			}
			_, cmds, bodies := srv.received()
			if srv.connections() != 1 {
				t.Errorf("Connections = %d, want 1 (reused after the refusal)", srv.connections())
			}
			want := "EHLO localhost|MAIL FROM:<news@example.com>|RCPT TO:<someone@example.org>|DATA|RSET|" +
				"MAIL FROM:<news@example.com>|RCPT TO:<someone@example.org>|DATA"
			if got := strings.Join(cmds, "|"); got != want {
				t.Errorf("commands:\n got %s\nwant %s", got, want)
			}
			wantBodies := 1
			if tc.srv.end != nil {
				wantBodies = 2 // the refused one was received, then refused
			}
			if len(bodies) != wantBodies {
				t.Errorf("server received %d bodies, want %d", len(bodies), wantBodies)
			}
		})
	}
}

// A server that answers DATA with 354 although it refused the recipient is
// waiting for a body. The transport must not send the message, and must
// not reuse a connection in that state.
func TestPipelinedDataAcceptedAfterRefusal(t *testing.T) {
	t.Parallel()
	srv := startRaw(t, &rawServer{
		ext:    []string{"PIPELINING"},
		record: true,
		rcpt: func(to string) string {
			if strings.HasPrefix(to, "TO:<gone@") {
				return "550 5.1.1 no such user"
			}
			return ""
		},
		data: func(bool, bool) string { return "354 go ahead" },
	})
	tr := newSMTP(t, srv.url()+"&timeout=10s")
	begin := time.Now()
	_, err := tr.Send(t.Context(), msg(1, "gone@example.org"))
	if se := sendErr(t, err); se.Stage != StageRcpt || se.Code != 550 {
		t.Fatalf("SendError = %+v, want the RCPT refusal", *se)
	}
	// Reusing the connection would send RSET into the data the server is
	// waiting for, and wait for a reply until the timeout.
	if took := time.Since(begin); took > 5*time.Second {
		t.Errorf("Send took %v: it tried to reuse a connection stuck in DATA", took)
	}
	if _, err := tr.Send(t.Context(), msg(2, "ok@example.org")); err != nil {
		t.Fatal(err)
	}
	_, _, bodies := srv.received()
	if len(bodies) != 1 || !bytes.Contains(bodies[0], []byte("ok@example.org")) {
		t.Errorf("bodies = %q, want only the second message", bodies)
	}
	if srv.connections() != 2 {
		t.Errorf("Connections = %d, want 2 (the aborted one is not reused)", srv.connections())
	}
}

// MaybeDelivered is set only when the connection fails after the final dot
// went out and before its reply.
func TestConnectionLostWhere(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		kill     string // the server drops the connection instead of answering this
		stage    string
		inDoubt  bool
		pipeline bool
	}{
		{"pipelined, before any reply", "MAIL", StageMail, false, true},
		{"pipelined, at RCPT", "RCPT", StageRcpt, false, true},
		{"one at a time, at DATA", "DATA", StageData, false, false},
		{"after the final dot", "END", StageData, true, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l := listen(t)
			ext := "250 ENHANCEDSTATUSCODES\r\n"
			if tc.pipeline {
				ext = "250-PIPELINING\r\n" + ext
			}
			go func() {
				c, err := l.Accept()
				if err != nil {
					return
				}
				defer c.Close()
				br := bufio.NewReader(c)
				fmt.Fprint(c, "220 x ESMTP\r\n")
				for {
					line, err := br.ReadString('\n')
					if err != nil {
						return
					}
					verb, _, _ := strings.Cut(strings.TrimSpace(line), " ")
					if verb == tc.kill {
						return
					}
					switch verb {
					case "EHLO":
						fmt.Fprint(c, "250-x\r\n"+ext)
					case "MAIL", "RCPT":
						fmt.Fprint(c, "250 2.0.0 Ok\r\n")
					case "DATA":
						fmt.Fprint(c, "354 go\r\n")
						if _, err := readBody(br); err != nil || tc.kill == "END" {
							return
						}
						fmt.Fprint(c, "250 2.0.0 queued\r\n")
					}
				}
			}()
			tr := newSMTP(t, "smtp://"+l.Addr().String()+"?tls=none")
			_, err := tr.Send(t.Context(), msg(1, "a@example.org"))
			se := sendErr(t, err)
			if se.Stage != tc.stage || se.Code != 0 || se.MaybeDelivered != tc.inDoubt {
				t.Errorf("SendError = %+v, want stage %s without reply, MaybeDelivered %v", *se, tc.stage, tc.inDoubt)
			}
			if c := Classify(err); c != Transient {
				t.Errorf("Classify = %v, want Transient", c)
			}
		})
	}
}

// Bodies that need stuffing or a final line break arrive exactly as
// rendered at an independent server (go-smtp's, which undoes the stuffing).
func TestBodiesOnTheWire(t *testing.T) {
	t.Parallel()
	srv := startCapture(t)
	tr := newSMTP(t, srv.URL())
	cases := []struct{ body, want string }{
		{"Subject: a\r\n\r\n.\r\n..\r\n.x\r\n", ""},
		{".starts with a dot\r\n\r\nbody\r\n", ""},
		{"Subject: b\r\n\r\nno line break at the end", "Subject: b\r\n\r\nno line break at the end\r\n"},
		{"Subject: c\r\n\r\nends with a dot\r\n.", "Subject: c\r\n\r\nends with a dot\r\n.\r\n"},
		// Bare LFs become CRLF, as textproto's DotWriter made them.
		{"Subject: d\n\n.\nx\n", "Subject: d\r\n\r\n.\r\nx\r\n"},
		{"Subject: e\r\n\r\nends with CR\r", "Subject: e\r\n\r\nends with CR\r\n"},
	}
	for i, tc := range cases {
		want := tc.want
		if want == "" {
			want = tc.body
		}
		m := message.Rendered{MessageID: fmt.Sprintf("b%d@x", i), From: "news@example.com", To: fmt.Sprintf("r%d@example.org", i), Bytes: []byte(tc.body)}
		if _, err := tr.Send(t.Context(), m); err != nil {
			t.Fatalf("body %q: %v", tc.body, err)
		}
		got := srv.Messages()
		if len(got) != i+1 || string(got[i].Raw) != want {
			t.Errorf("body %q arrived as %q, want %q", tc.body, got[len(got)-1].Raw, want)
		}
	}
	if srv.Connections() != 1 {
		t.Errorf("Connections = %d, want 1", srv.Connections())
	}
}

func TestMailParameters(t *testing.T) {
	t.Parallel()
	srv := startRaw(t, &rawServer{ext: []string{"PIPELINING", "smtputf8", "SIZE"}, record: true})
	tr := newSMTP(t, srv.url())
	m := msg(1, "jürgen@example.org")
	if _, err := tr.Send(t.Context(), m); err != nil {
		t.Fatal(err)
	}
	_, cmds, _ := srv.received()
	want := fmt.Sprintf("MAIL FROM:<news@example.com> SIZE=%d SMTPUTF8", len(m.Bytes))
	if len(cmds) < 2 || cmds[1] != want {
		t.Errorf("commands = %q, want %q second", cmds, want)
	}

	// Without SMTPUTF8 a non-ASCII local part is refused before anything
	// is written: that recipient's failure, not the channel's.
	plain := startRaw(t, &rawServer{ext: []string{"PIPELINING"}, record: true})
	tr2 := newSMTP(t, plain.url())
	_, err := tr2.Send(t.Context(), m)
	if se := sendErr(t, err); se.Stage != StageRcpt || se.Code != 0 || !se.Refused {
		t.Errorf("SendError = %+v, want a local refusal at RCPT", *se)
	}
	if c := Classify(err); c != Recipient {
		t.Errorf("Classify = %v, want recipient", c)
	}
	if _, cmds, _ := plain.received(); len(cmds) != 1 {
		t.Errorf("commands = %q, want only EHLO", cmds)
	}
	_, err = tr2.Send(t.Context(), message.Rendered{MessageID: "x", From: "a@x", To: "b@y>\r\nRCPT TO:<c@z", Bytes: []byte("x\r\n")})
	if se := sendErr(t, err); se.Stage != StageRcpt || se.Code != 0 || !se.Refused || Classify(err) != Recipient {
		t.Errorf("SendError = %+v, want a local refusal at RCPT", *se)
	}
}

// One recipient the server cannot take fails alone: the same connection
// then delivers the next message. A domain goes out as IDNA A-labels, so
// an ASCII local part at an IDN domain needs no SMTPUTF8. A sender that
// needs SMTPUTF8 is every message's problem: Channel.
func TestRecipientRefusedAlone(t *testing.T) {
	t.Parallel()
	srv := startRaw(t, &rawServer{ext: []string{"PIPELINING"}, record: true})
	tr := newSMTP(t, srv.url())
	for _, to := range []string{"jürgen@example.org", "a@-bad-.example", "ok@bücher.example"} {
		_, err := tr.Send(t.Context(), msg(1, to))
		switch to {
		case "ok@bücher.example":
			if err != nil {
				t.Fatalf("send to %s: %v", to, err)
			}
		default:
			if c := Classify(err); c != Recipient {
				t.Errorf("send to %s: %v classified %v, want recipient", to, err, c)
			}
		}
	}
	_, cmds, _ := srv.received()
	if !slices.Contains(cmds, "RCPT TO:<ok@xn--bcher-kva.example>") {
		t.Errorf("commands = %q, want the domain as A-labels", cmds)
	}
	if srv.connections() != 1 {
		t.Errorf("connections = %d, want 1 (a local refusal keeps the connection)", srv.connections())
	}

	m := msg(2, "x@example.org")
	m.From = "nachrichten@bücher.example"
	if _, err := tr.Send(t.Context(), m); err != nil {
		t.Errorf("ASCII sender at an IDN domain: %v", err)
	}
	m.From = "jürgen@example.com"
	_, err := tr.Send(t.Context(), m)
	if c := Classify(err); c != Channel {
		t.Errorf("non-ASCII sender without SMTPUTF8: %v classified %v, want channel", err, c)
	}
}

// The client parses every real reply exactly as go-smtp's client did, so
// Classify, which was tuned on go-smtp's parsing, sees the same values.
func TestRealRepliesParsedLikeGoSMTP(t *testing.T) {
	t.Parallel()
	for _, tc := range realReplies {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			want := realReply(t, tc.stage, tc.raw)

			l := listen(t)
			raw := strings.Join(tc.raw, "\r\n") + "\r\n"
			go func() {
				c, err := l.Accept()
				if err == nil {
					scriptedServer(c, tc.stage, raw)
					c.Close()
				}
			}()
			u := "smtp://" + l.Addr().String() + "?tls=none"
			if tc.stage == StageAuth {
				u = "smtp://user:secret@" + l.Addr().String() + "?tls=none"
			}
			tr := newSMTP(t, u)
			_, err := tr.Send(t.Context(), msg(1, "someone@example.org"))
			got := sendErr(t, err)
			if got.Stage != want.Stage || got.Code != want.Code || got.Enhanced != want.Enhanced || got.Text != want.Text {
				t.Errorf("parsed %+v\n   go-smtp %+v", *got, *want)
			}
		})
	}
}

func TestParseReplyLine(t *testing.T) {
	t.Parallel()
	cases := []struct {
		line string
		code int
		more bool
		text string
		ok   bool
	}{
		{"250 ok", 250, false, "ok", true},
		{"250-PIPELINING", 250, true, "PIPELINING", true},
		{"250", 250, false, "", true},
		{"250 ", 250, false, "", true},
		{"25", 0, false, "", false},
		{"2500 x", 0, false, "", false},
		{"099 x", 0, false, "", false},
		{"2x0 x", 0, false, "", false},
		{"", 0, false, "", false},
	}
	for _, tc := range cases {
		code, more, text, ok := parseReplyLine([]byte(tc.line))
		if code != tc.code || more != tc.more || string(text) != tc.text || ok != tc.ok {
			t.Errorf("parseReplyLine(%q) = %d %v %q %v", tc.line, code, more, text, ok)
		}
	}
}

// FuzzReadReply: whatever textproto (go-smtp's reader) made of a reply, the
// client makes the same code and text of it.
func FuzzReadReply(f *testing.F) {
	for _, r := range realReplies {
		f.Add(strings.Join(r.raw, "\r\n") + "\r\n")
	}
	f.Add("250-x\r\n251 y\r\n250 z\r\n")
	f.Add("250-x\r\nnot a reply line\r\n250 z\r\n")
	f.Add("220 hi\n")
	f.Fuzz(func(t *testing.T, in string) {
		if len(in) > 2000 || !strings.HasSuffix(in, "\n") {
			return // textproto takes an unterminated last line; we do not
		}
		wantCode, wantText, wantErr := textproto.NewReader(bufio.NewReader(strings.NewReader(in))).ReadResponse(0)
		c := &client{br: bufio.NewReaderSize(strings.NewReader(in), maxReplyLine)}
		code, err := c.readReply()
		if wantErr != nil {
			return // we may be more lenient ("250" alone), never stricter
		}
		if err != nil || code != wantCode || string(c.text) != wantText {
			t.Fatalf("readReply(%q) = %d %q %v; textproto %d %q", in, code, c.text, err, wantCode, wantText)
		}
	})
}

// dotSpec is the DATA encoding spelled out byte by byte: the definition
// appendData must match.
func dotSpec(body []byte) []byte {
	var out []byte
	bol := true
	for _, b := range body {
		if bol && b == '.' {
			out = append(out, '.')
		}
		if b == '\n' && (len(out) == 0 || out[len(out)-1] != '\r') {
			out = append(out, '\r')
		}
		out = append(out, b)
		bol = b == '\n'
	}
	switch {
	case bytes.HasSuffix(out, []byte("\r\n")):
	case bytes.HasSuffix(out, []byte("\r")):
		out = append(out, '\n')
	default:
		out = append(out, '\r', '\n')
	}
	return append(out, ".\r\n"...)
}

func FuzzAppendData(f *testing.F) {
	for _, s := range []string{"", ".", "\n", "\r", "a\r\n.b\r\n", ".\r\n.\r\n", "a\n.\n", "x\r.y", "..\r\n..", "a\r\r\nb", "\r\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		prefix := []byte("DATA\r\n") // appendData appends after queued bytes
		got := appendData(bytes.Clone(prefix), body)
		if !bytes.HasPrefix(got, prefix) {
			t.Fatalf("prefix overwritten: %q", got)
		}
		got = got[len(prefix):]
		if want := dotSpec(body); !bytes.Equal(got, want) {
			t.Fatalf("appendData(%q) = %q, want %q", body, got, want)
		}
		// textproto's DotWriter, which go-smtp used, agrees except on a
		// quirk of its own: after "\r\r" it adds a CR before the LF.
		if !bytes.Contains(body, []byte("\r\r")) {
			var buf bytes.Buffer
			bw := bufio.NewWriter(&buf)
			w := textproto.NewWriter(bw).DotWriter()
			w.Write(body)
			w.Close()
			if !bytes.Equal(got, buf.Bytes()) {
				t.Fatalf("appendData(%q) = %q, textproto %q", body, got, buf.Bytes())
			}
		}
		// The end of the data is where it should be, and nowhere else.
		if i := bytes.Index(append([]byte("\r\n"), got...), []byte("\r\n.\r\n")); i != len(got)-3 {
			t.Fatalf("appendData(%q) = %q: end of data at %d", body, got, i)
		}
	})
}

// A connection closed by the pool or Close does not leak: Close says QUIT.
func TestCloseSaysQuit(t *testing.T) {
	t.Parallel()
	srv := startRaw(t, &rawServer{ext: []string{"PIPELINING"}, record: true})
	tr, err := NewSMTP(srv.url())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Send(context.Background(), msg(1, "a@example.org")); err != nil {
		t.Fatal(err)
	}
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	_, cmds, _ := srv.received()
	if len(cmds) == 0 || cmds[len(cmds)-1] != "QUIT" {
		t.Errorf("commands = %q, want QUIT last", cmds)
	}
}

var _ net.Conn = recordingConn{}
