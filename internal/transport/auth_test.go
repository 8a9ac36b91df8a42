package transport

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rangecast/rangecast/internal/capture"
)

// A relay that offers only LOGIN (many Exchange and hosting relays) gets
// LOGIN, not the PLAIN the transport used to send regardless.
func TestAuthLoginOnlyServer(t *testing.T) {
	t.Parallel()
	srv := startCapture(t, capture.WithAuth("user", "s3cret"), capture.WithAuthMechanisms("LOGIN"))
	tr := newSMTP(t, strings.Replace(srv.URL(), "smtp://", "smtp://user:s3cret@", 1))
	for i := range 3 { // a new connection, then a pooled one
		if _, err := tr.Send(context.Background(), msg(i, "a@example.org")); err != nil {
			t.Fatalf("send %d through a LOGIN-only relay: %v", i, err)
		}
	}
	if srv.Count() != 3 {
		t.Fatalf("server holds %d messages, want 3", srv.Count())
	}

	bad := newSMTP(t, strings.Replace(srv.URL(), "smtp://", "smtp://user:wrong@", 1))
	_, err := bad.Send(context.Background(), msg(9, "a@example.org"))
	var se *SendError
	if !errors.As(err, &se) || se.Stage != StageAuth || se.Code != 535 || Classify(err) != Channel {
		t.Fatalf("wrong password over LOGIN: %v, want a channel-wide 535 at auth", err)
	}
}

// A relay that refused our credentials is not asked again by every send:
// the sends that follow within authRetryAfter get the same refusal without
// a connection, and the next one after it tries again (tester: a wrong
// password cost 128 failed logins in a second, what locks an account).
func TestAuthRefusalNotRepeatedPerSend(t *testing.T) {
	t.Parallel()
	srv := startCapture(t, capture.WithAuth("user", "s3cret"), capture.WithAuthMechanisms("PLAIN", "LOGIN"))
	bad := newSMTP(t, strings.Replace(srv.URL(), "smtp://", "smtp://user:wrong@", 1))
	var first string
	for i := range 20 {
		_, err := bad.Send(context.Background(), msg(i, "a@example.org"))
		var se *SendError
		if !errors.As(err, &se) || se.Stage != StageAuth || se.Code != 535 || Classify(err) != Channel {
			t.Fatalf("send %d with a wrong password: %v, want the relay's 535 at auth", i, err)
		}
		if i == 0 {
			first = err.Error()
		} else if err.Error() != first {
			t.Fatalf("send %d: %q; want the relay's refusal as it was (%q)", i, err, first)
		}
	}
	if n := srv.Connections(); n != 1 {
		t.Fatalf("%d connections for 20 sends with a refused password; want 1", n)
	}
	// The refusal lapses: the next send tries the credentials again.
	bad.authRefused.mu.Lock()
	bad.authRefused.until = time.Now()
	bad.authRefused.mu.Unlock()
	if _, err := bad.Send(context.Background(), msg(21, "a@example.org")); err == nil {
		t.Fatal("a wrong password was accepted")
	}
	if n := srv.Connections(); n != 2 {
		t.Fatalf("%d connections after the refusal lapsed; want 2", n)
	}
}

// Sends starting together with credentials not yet proven dial one at a
// time: a wrong password costs one login, not one per send in flight
// (verifier: 16 at once per worker); once proven, they connect in
// parallel.
func TestAuthUnprovenConnectsOneAtATime(t *testing.T) {
	t.Parallel()
	srv := startCapture(t, capture.WithAuth("user", "s3cret"), capture.WithAuthMechanisms("PLAIN", "LOGIN"))
	sendAll := func(tr *SMTP, n int) []error {
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() { _, errs[i] = tr.Send(context.Background(), msg(100+i, "a@example.org")) })
		}
		wg.Wait()
		return errs
	}
	bad := newSMTP(t, strings.Replace(srv.URL(), "smtp://", "smtp://user:wrong@", 1)+"&pool=16")
	for i, err := range sendAll(bad, 16) {
		var se *SendError
		if !errors.As(err, &se) || se.Code != 535 {
			t.Fatalf("send %d of 16 with a wrong password: %v; want the 535", i, err)
		}
	}
	if n := srv.Connections(); n != 1 {
		t.Fatalf("%d connections for 16 sends at once with a wrong password; want 1", n)
	}
	good := newSMTP(t, strings.Replace(srv.URL(), "smtp://", "smtp://user:s3cret@", 1)+"&pool=16")
	for i, err := range sendAll(good, 16) {
		if err != nil {
			t.Fatalf("send %d of 16 with the right password: %v", i, err)
		}
	}
	if srv.Count() != 16 {
		t.Fatalf("%d messages received; want 16", srv.Count())
	}
}

// The hold keeps only refusals: a connection lost during AUTH (a cancel, a
// timeout) is not kept; when a refusal lapses, one caller tries again and
// the others keep it until that one's answer; refusals in a row hold longer;
// an accepted login ends it.
func TestAuthHold(t *testing.T) {
	t.Parallel()
	var h authHold
	now := time.Unix(1_800_000_000, 0)
	h.refused(now, &SendError{Stage: StageAuth, Err: errors.New("use of closed network connection")})
	if h.held(now) != nil {
		t.Fatal("a connection lost during AUTH was kept as a refusal")
	}
	refusal := &SendError{Stage: StageAuth, Code: 535, Enhanced: "5.7.8", Text: "bad credentials"}
	h.refused(now, refusal)
	if se := h.held(now.Add(time.Second)); se == nil || se.Code != 535 {
		t.Fatalf("held = %v; want the 535", se)
	}
	lapsed := now.Add(authRetryAfter)
	if h.held(lapsed) != nil {
		t.Fatal("the first send after the hold lapsed did not get to try again")
	}
	if h.held(lapsed.Add(time.Millisecond)) == nil {
		t.Fatal("a second send went to try the credentials while the first was trying")
	}
	h.refused(lapsed, refusal) // the probe refused too: twice as long
	if h.held(lapsed.Add(authRetryAfter+time.Second)) == nil {
		t.Fatal("a second refusal in a row held no longer than the first")
	}
	h.accepted()
	if h.held(lapsed.Add(time.Second)) != nil {
		t.Fatal("an accepted login did not end the hold")
	}
	h.refused(now, &SendError{Stage: StageAuth, local: true, Err: errors.New("the URL has credentials but relay does not offer AUTH")})
	if h.held(now) == nil {
		t.Fatal("a local refusal of the credentials setting was not kept")
	}
}

// A server whose mechanisms rangecast cannot speak is refused before any
// credentials are sent, naming what was offered and what is supported.
func TestAuthNoCommonMechanism(t *testing.T) {
	t.Parallel()
	srv := startCapture(t, capture.WithAuth("user", "pw"), capture.WithAuthMechanisms("CRAM-MD5", "GSSAPI"))
	tr := newSMTP(t, strings.Replace(srv.URL(), "smtp://", "smtp://user:pw@", 1))
	_, err := tr.Send(context.Background(), msg(1, "a@example.org"))
	var se *SendError
	if !errors.As(err, &se) || se.Stage != StageAuth || Classify(err) != Channel {
		t.Fatalf("err = %v, want a channel-wide auth failure", err)
	}
	for _, want := range []string{"AUTH CRAM-MD5 GSSAPI", "PLAIN", "LOGIN", "XOAUTH2"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not name %s", err, want)
		}
	}

	// Forcing a mechanism the server does not offer says so too.
	srv2 := startCapture(t, capture.WithAuth("user", "pw"), capture.WithAuthMechanisms("PLAIN"))
	tr2 := newSMTP(t, strings.Replace(srv2.URL(), "smtp://", "smtp://user:pw@", 1)+"&auth=login")
	if _, err := tr2.Send(context.Background(), msg(1, "a@example.org")); err == nil || !strings.Contains(err.Error(), "offers AUTH PLAIN") {
		t.Fatalf("auth=login against a PLAIN-only server: %v", err)
	}
}

// XOAUTH2 reads its token from a file and reads it again when the file
// changes, so a refreshed token is used by the next connection. A long
// token goes after the server's empty challenge, keeping the AUTH line
// within RFC 4954's 512 bytes.
func TestAuthXOAuth2TokenFile(t *testing.T) {
	t.Parallel()
	tokenPath := filepath.Join(t.TempDir(), "token")
	writeToken := func(tok string, mod time.Time) {
		t.Helper()
		if err := os.WriteFile(tokenPath, []byte(tok+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(tokenPath, mod, mod); err != nil {
			t.Fatal(err)
		}
	}
	first := "ya29." + strings.Repeat("a", 700)
	writeToken(first, time.Unix(1_700_000_000, 0))

	srv1 := startCapture(t, capture.WithAuth("sender@example.com", first), capture.WithAuthMechanisms("LOGIN", "XOAUTH2"))
	url := func(s *capture.Server) string {
		return strings.Replace(s.URL(), "smtp://", "smtp://sender%40example.com@", 1) + "&token_file=" + tokenPath + "&pool=1"
	}
	tr := newSMTP(t, url(srv1))
	if _, err := tr.Send(context.Background(), msg(1, "a@example.org")); err != nil {
		t.Fatalf("XOAUTH2 with a %d-byte token: %v", len(first), err)
	}

	// The token is refreshed; a server that accepts only the new one sees
	// it on the next connection.
	second := "ya29.second"
	writeToken(second, time.Unix(1_700_003_600, 0))
	srv2 := startCapture(t, capture.WithAuth("sender@example.com", second), capture.WithAuthMechanisms("XOAUTH2"))
	tr2 := newSMTP(t, url(srv2))
	tr2.creds.token = tr.creds.token // the same file, as one process would hold it
	if _, err := tr2.Send(context.Background(), msg(2, "a@example.org")); err != nil {
		t.Fatalf("after the token file changed: %v", err)
	}

	// An expired token: the server's JSON challenge, an empty reply, 535.
	writeToken("ya29.expired", time.Unix(1_700_007_200, 0))
	tr3 := newSMTP(t, url(srv2))
	_, err := tr3.Send(context.Background(), msg(3, "a@example.org"))
	var se *SendError
	if !errors.As(err, &se) || se.Stage != StageAuth || se.Code != 535 {
		t.Fatalf("expired token: %v, want 535 at auth", err)
	}
	if srv1.Count()+srv2.Count() != 2 {
		t.Fatalf("%d + %d messages received, want 2", srv1.Count(), srv2.Count())
	}

	// A new token of the same length written with the same modification
	// time (a ..data swap, cp -p, a coarse clock) is read too (tester: a
	// worker kept the stale one until restarted).
	writeToken("tok-K1", time.Unix(1_577_836_800, 0))
	srv3 := startCapture(t, capture.WithAuth("sender@example.com", "tok-K1"), capture.WithAuthMechanisms("XOAUTH2"))
	tr4 := newSMTP(t, url(srv3)+"&idle=1ms")
	if _, err := tr4.Send(context.Background(), msg(4, "a@example.org")); err != nil {
		t.Fatalf("first token of the swap: %v", err)
	}
	writeToken("tok-K2", time.Unix(1_577_836_800, 0))
	srv4 := startCapture(t, capture.WithAuth("sender@example.com", "tok-K2"), capture.WithAuthMechanisms("XOAUTH2"))
	tr5 := newSMTP(t, url(srv4))
	tr5.creds.token = tr4.creds.token // the same file, as one process would hold it
	if _, err := tr5.Send(context.Background(), msg(5, "a@example.org")); err != nil {
		t.Fatalf("a token swapped at the same size and time: %v", err)
	}
}

func TestParseEHLOAuth(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		reply string
		want  []string
	}{
		{"mx.example.com\nPIPELINING\nAUTH PLAIN LOGIN", []string{"PLAIN", "LOGIN"}},
		{"mx.example.com\nAUTH=LOGIN PLAIN\nauth login xoauth2", []string{"LOGIN", "PLAIN", "XOAUTH2"}},
		{"mx.example.com\nAUTH LOGIN PLAIN XOAUTH2 OAUTHBEARER", []string{"LOGIN", "PLAIN", "XOAUTH2", "OAUTHBEARER"}},
		{"mx.example.com\nSIZE 100", nil},
	} {
		e := parseEHLO([]byte(tc.reply))
		if !slices.Equal(e.authMechs, tc.want) || e.auth != (tc.want != nil) {
			t.Errorf("%q: auth %v mechs %q, want %q", tc.reply, e.auth, e.authMechs, tc.want)
		}
	}
}

// A server that ignores LOGIN's initial response asks for the user name.
func TestLoginClientAnswersUsernamePrompt(t *testing.T) {
	t.Parallel()
	cr := &credentials{user: "u", pass: "p", addr: "relay:587"}
	sc, err := cr.client([]string{"LOGIN"})
	if err != nil {
		t.Fatal(err)
	}
	if mech, ir, err := sc.Start(); mech != "LOGIN" || string(ir) != "u" || err != nil {
		t.Fatalf("Start = %s %q %v", mech, ir, err)
	}
	for challenge, want := range map[string]string{"Username:": "u", "User Name\x00": "u", "Password:": "p"} {
		if got, err := sc.Next([]byte(challenge)); err != nil || string(got) != want {
			t.Errorf("Next(%q) = %q, %v; want %q", challenge, got, err, want)
		}
	}
}
