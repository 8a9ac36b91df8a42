package pageworker

import (
	"fmt"
	"net"
	"strings"
	"syscall"
	"testing"

	"github.com/rangecast/rangecast/internal/bus"
	"github.com/rangecast/rangecast/internal/store"
	"github.com/rangecast/rangecast/internal/transport"
)

// TestFullMailboxesSayNothingOfTheProvider: temporary refusals of single
// mailboxes (452 4.2.2 mailbox full) defer those recipients, with an
// attempt, but neither stop the page as a struggling server would nor
// count toward the provider's breaker; a 451 4.3.0 on as many does both.
func TestFullMailboxesSayNothingOfTheProvider(t *testing.T) {
	t.Parallel()
	full := &transport.SendError{Code: 452, Enhanced: "4.2.2", Text: "Mailbox full", Stage: transport.StageRcpt}
	later := &transport.SendError{Code: 451, Enhanced: "4.3.0", Text: "try again later", Stage: transport.StageRcpt}
	for name, open := range bothStores {
		for _, tc := range []struct {
			what      string
			err       error
			stops     bool
			transient bool
		}{
			{"full mailboxes", full, false, false},
			{"a struggling server", later, true, true},
		} {
			t.Run(name+"/"+tc.what, func(t *testing.T) {
				t.Parallel()
				st := open(t)
				// Three recipients in four are refused, so every window
				// looks unwell by the refusals alone.
				tr := &scripted{accepted: map[string]int{}, answer: func(to string) error {
					var i int
					fmt.Sscanf(to, "p%d@", &i) //nolint:errcheck // the fixture's addresses
					if i%4 != 0 {
						return tc.err
					}
					return nil
				}}
				f := newCopiesFixture(t, st, 24, tr)
				rep, err := f.w.RunPage(t.Context(), f.job(), "w/1")
				if err != nil {
					t.Fatal(err)
				}
				if stopped := rep.Class == bus.ClassTransient; stopped != tc.stops {
					t.Errorf("report class %q (done %v); want the page stopped: %v", rep.Class, rep.Done, tc.stops)
				}
				if counted := rep.Providers["example.org"].Transient > 0; counted != tc.transient {
					t.Errorf("provider result %+v; want transient refusals counted for the breaker: %v", rep.Providers["example.org"], tc.transient)
				}
				for _, c := range f.contacts {
					row, err := st.GetSend(t.Context(), f.b.ID, c.ID)
					if err != nil {
						continue // not reached: the page stopped before it
					}
					if row.Status == store.SendDeferred && (row.Attempt != 1 || !strings.Contains(row.Error, tc.err.(*transport.SendError).Text)) {
						t.Errorf("%s: deferred with %d attempts (%s)", c.Email, row.Attempt, row.Error)
					}
				}
			})
		}
	}
}

// TestRelayFailuresSayNothingOfTheProvider: a send that fails talking to
// the SMTP server itself (connect, TLS, greeting, AUTH) stops the page and
// defers its recipients, but is not counted toward their provider's
// breaker: every recipient goes through that one server, so a relay down
// for a minute opened a breaker per recipient domain. A deferral at MAIL
// FROM or RCPT still counts.
func TestRelayFailuresSayNothingOfTheProvider(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		what      string
		err       error
		transient bool
	}{
		{"connection refused", &transport.SendError{Stage: transport.StageConnect, Err: &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}}, false},
		{"421 at the greeting", &transport.SendError{Code: 421, Enhanced: "4.3.2", Text: "Service not available", Stage: transport.StageConnect}, false},
		{"454 at STARTTLS", &transport.SendError{Code: 454, Enhanced: "4.7.0", Text: "TLS not available due to local problem", Stage: transport.StageConnect}, false},
		{"454 at AUTH", &transport.SendError{Code: 454, Enhanced: "4.7.0", Text: "Temporary authentication failure", Stage: transport.StageAuth}, false},
		{"421 at MAIL FROM", &transport.SendError{Code: 421, Enhanced: "4.7.0", Text: "[TSS04] Messages from 192.0.2.1 temporarily deferred", Stage: transport.StageMail}, true},
	} {
		t.Run(tc.what, func(t *testing.T) {
			t.Parallel()
			st := bothStores["sqlite"](t)
			tr := &scripted{accepted: map[string]int{}, answer: func(string) error { return tc.err }}
			f := newCopiesFixture(t, st, 24, tr)
			rep, err := f.w.RunPage(t.Context(), f.job(), "w/1")
			if err != nil {
				t.Fatal(err)
			}
			if rep.Class != bus.ClassTransient || rep.Sent != 0 {
				t.Fatalf("report class %q, sent %d; want the page stopped, nobody sent", rep.Class, rep.Sent)
			}
			if counted := rep.Providers["example.org"].Transient > 0; counted != tc.transient {
				t.Errorf("provider result %+v; want refusals counted toward the provider's breaker: %v", rep.Providers["example.org"], tc.transient)
			}
			deferred := 0
			for _, c := range f.contacts {
				if row, err := st.GetSend(t.Context(), f.b.ID, c.ID); err == nil && row.Status == store.SendDeferred {
					deferred++
				}
			}
			if deferred == 0 {
				t.Error("no recipient deferred")
			}
		})
	}
}
