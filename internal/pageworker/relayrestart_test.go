//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

// The transport looks at an idle pooled connection only on these platforms
// (internal/transport's idlecheck_unix.go): elsewhere a send into a
// connection the relay dropped still ends in doubt.

package pageworker

import (
	"testing"
	"time"

	"github.com/rangecast/rangecast/internal/capture"
	"github.com/rangecast/rangecast/internal/store"
	"github.com/rangecast/rangecast/internal/testenv"
	"github.com/rangecast/rangecast/internal/transport"
)

// TestRampStepAfterARelayRestart is the combination CI's chaos run met: a
// worker that lived through a relay restart still had connections to the
// old relay in its pool, and the page that carried the breaker's first
// ramp step sent into them. Every such send lost its replies, so the step
// was refused in full, the breaker opened again, and (with CHUNKING) the
// recipients were left in doubt. On a real SMTP conversation, the step must
// go out whole, with nothing in doubt.
func TestRampStepAfterARelayRestart(t *testing.T) {
	t.Parallel()
	relay, err := capture.Start("127.0.0.1:0", capture.WithLatency(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	tr, err := transport.NewSMTP(relay.URL() + "&pool=4")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	st := testenv.SQLite(t)
	before := newCopiesFixture(t, st, 12, tr)
	if _, err := before.w.RunPage(t.Context(), before.job(), "w/1"); err != nil {
		t.Fatal(err)
	}
	if relay.Count() != 12 {
		t.Fatalf("the relay took %d of 12 before its restart", relay.Count())
	}

	addr := relay.Addr()
	relay.Close()
	relay, err = capture.Start(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { relay.Close() })
	time.Sleep(50 * time.Millisecond) // the old relay's FINs cross loopback

	f := newCopiesFixture(t, st, 12, tr)
	rep, err := f.w.RunPage(t.Context(), f.rampStepJob(), "w/1")
	if err != nil {
		t.Fatal(err)
	}
	if pr := rep.Providers["example.org"]; pr.Sent != 12 || pr.Transient != 0 || pr.StepEnded {
		t.Errorf("the ramp step after the restart: %+v; want 12 sent, none refused, the step not ended", pr)
	}
	for _, c := range f.contacts {
		row, err := st.GetSend(t.Context(), f.b.ID, c.ID)
		if err != nil {
			t.Fatal(err)
		}
		if row.Status != store.SendSent {
			t.Errorf("%s: %s (%s)", c.Email, row.Status, row.Error)
		}
	}
	if relay.Count() != 12 {
		t.Errorf("the restarted relay took %d of 12", relay.Count())
	}
}
