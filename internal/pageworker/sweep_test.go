package pageworker

import (
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/rangecast/rangecast/internal/bus"
	"github.com/rangecast/rangecast/internal/store"
	"github.com/rangecast/rangecast/internal/testenv"
	"github.com/rangecast/rangecast/internal/transport"
)

// TestSweepNeverFailsARowInDoubt: a row the reconciler released to be sent
// again after an attempt that may have been delivered (store.InDoubtResent)
// ends unknown, not failed, when its resend is refused for good or given
// up on: "not delivered" may be untrue. The mark outlives a resend deferred
// in between. A row only ever deferred by a 451 still fails.
func TestSweepNeverFailsARowInDoubt(t *testing.T) {
	t.Parallel()
	for name, open := range bothStores {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			st := open(t)
			tr := &scripted{accepted: map[string]int{}}
			f := newCopiesFixture(t, st, 4, tr)
			f.w.cfg.MaxAttempts, f.w.cfg.RetryFor = 3, time.Nanosecond
			f.w.giveUpAt = f.w.cfg.giveUpAttempts()
			refused := &transport.SendError{Code: 550, Enhanced: "5.1.1", Text: "no such user", Stage: transport.StageRcpt}
			later := &transport.SendError{Code: 451, Enhanced: "4.3.0", Text: "try again later", Stage: transport.StageRcpt}
			answers := map[string]error{
				f.contacts[0].Email: refused, // in doubt, refused for good
				f.contacts[1].Email: later,   // in doubt, deferred to the end
				f.contacts[3].Email: refused, // a plain deferral, refused
			}
			tr.answer = func(to string) error { return answers[to] }
			ctx := t.Context()
			now := f.clk.Now()
			claims := make([]store.Claim, len(f.contacts))
			for i, c := range f.contacts {
				claims[i] = store.Claim{ContactID: c.ID, Email: c.Email, MessageID: "<" + c.ID.String() + "@example.com>"}
			}
			if _, err := st.Claim(ctx, f.b.ID, "w/A", claims, now); err != nil {
				t.Fatal(err)
			}
			// w/A died; the reconciler released three in doubt, and the
			// fourth had been deferred by a 451.
			outcomes := make([]store.Outcome, len(f.contacts))
			for i, c := range f.contacts {
				outcomes[i] = store.Outcome{ContactID: c.ID, Status: store.SendDeferred, RetryAt: now, Error: store.InDoubtResent}
			}
			outcomes[3].Error = "451 4.3.0 try again later"
			if err := st.RecordOutcomes(ctx, f.b.ID, "w/A", outcomes, now); err != nil {
				t.Fatal(err)
			}
			sweep := bus.PageJob{Broadcast: f.b.ID.String(), Range: bus.SweepRange, Limit: 100, Sweep: true}
			for round := range 3 {
				f.clk.Advance(24 * time.Hour)
				if _, err := f.w.RunPage(ctx, sweep, "w/S"); err != nil {
					t.Fatalf("sweep %d: %v", round, err)
				}
			}
			want := []struct {
				status store.SendStatus
				error  string
			}{
				{store.SendUnknown, store.InDoubtEndedPrefix + "smtp rcpt: 550"},
				{store.SendUnknown, store.InDoubtEndedPrefix + store.GaveUpPrefix + "3 attempts"},
				{store.SendSent, ""},
				{store.SendFailed, "smtp rcpt: 550"},
			}
			for i, c := range f.contacts {
				row, err := st.GetSend(ctx, f.b.ID, c.ID)
				if err != nil {
					t.Fatal(err)
				}
				if row.Status != want[i].status || !strings.HasPrefix(row.Error, want[i].error) {
					t.Errorf("contact %d: %s %q; want %s %q...", i, row.Status, row.Error, want[i].status, want[i].error)
				}
			}
			if tr.accepted[f.contacts[2].Email] != 1 {
				t.Errorf("the accepted resend went out %d times", tr.accepted[f.contacts[2].Email])
			}
		})
	}
}

// TestTarpittedRetryHoldsNoSweep: one retried recipient's server holds its
// reply until every other due row has been sent (a tarpit). The sweep must
// go on without it, as a page does (TestTarpittedSendHoldsNoPage): the next
// windows are claimed, never with the straggler's row again, and the
// straggler's outcome is settled as a retry's (deferred again, or unknown
// when its earlier attempt may have been delivered) before the sweep
// reports. Waiting for each window whole, the sweep would sit until the
// tarpit gave up (here 10 s, then the send fails). At every send the sweep
// holds at most its window and the worker's straggler tokens without an
// outcome.
func TestTarpittedRetryHoldsNoSweep(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		inDoubt bool  // the straggler's row was released by the reconciler
		answer  error // the tarpitted recipient's, once the others are sent
		want    store.SendStatus
		error   string
	}{
		{"accepted", false, nil, store.SendSent, ""},
		{"deferred again", false, &transport.SendError{Code: 451, Enhanced: "4.3.0", Text: "try again later", Stage: transport.StageData}, store.SendDeferred, store.DeferredAgainPrefix},
		{"refused in doubt", true, &transport.SendError{Code: 550, Enhanced: "5.1.1", Text: "no such user", Stage: transport.StageRcpt}, store.SendUnknown, store.InDoubtEndedPrefix},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			st, tr, f, cs := newTarpitFixture(t)
			slow := cs[1]
			ctx := t.Context()
			now := f.clk.Now()
			claims := make([]store.Claim, len(cs))
			outcomes := make([]store.Outcome, len(cs))
			for i, c := range cs {
				claims[i] = store.Claim{ContactID: c.ID, Email: c.Email, MessageID: "<" + c.ID.String() + "@example.com>"}
				outcomes[i] = store.Outcome{ContactID: c.ID, Status: store.SendDeferred, RetryAt: now, Error: "451 4.3.0 try again later"}
				if c.ID == slow.ID && tc.inDoubt {
					outcomes[i].Error = store.InDoubtResent
				}
			}
			if _, err := st.Claim(ctx, f.b.ID, "w/A", claims, now); err != nil {
				t.Fatal(err)
			}
			if err := st.RecordOutcomes(ctx, f.b.ID, "w/A", outcomes, now); err != nil {
				t.Fatal(err)
			}
			// The window being sent, and the straggler tokens (one page's worth).
			tr.answer = tarpitOne(t, st, f.b.ID, "w/S", 2*f.w.cfg.Concurrency, slow.Email, len(cs)-1, tc.answer)
			f.clk.Advance(time.Minute)
			sweep := bus.PageJob{Broadcast: f.b.ID.String(), Range: bus.SweepRange, Limit: 100, Sweep: true}
			rep, err := f.w.RunPage(ctx, sweep, "w/S")
			if err != nil {
				t.Fatal(err)
			}
			if rep.Claimed != len(cs) || rep.Sent < len(cs)-1 || rep.Class != "" {
				t.Fatalf("report %+v; want all %d claimed, the others sent, no stop", rep, len(cs))
			}
			for _, c := range cs {
				want, wantStatus, wantError := 1, store.SendSent, ""
				if c.ID == slow.ID {
					wantStatus, wantError = tc.want, tc.error
					if tc.answer != nil {
						want = 0
					}
				}
				if n := tr.accepted[c.Email]; n != want {
					t.Errorf("%s received %d copies, want %d", c.Email, n, want)
				}
				row, err := st.GetSend(ctx, f.b.ID, c.ID)
				if err != nil || row.Status != wantStatus || !strings.HasPrefix(row.Error, wantError) {
					t.Errorf("%s: row %s %q (%v), want %s %q...", c.Email, row.Status, row.Error, err, wantStatus, wantError)
				}
			}
			if held := len(f.w.late); held != 0 {
				t.Errorf("%d straggler tokens still held after the sweep", held)
			}
		})
	}
}

// TestSweepThatReachedNobodyStops: a sweep whose every send failed before
// its recipient was named reports a transient stop, with the error, so the
// coordinator counts it toward failing the broadcast. Against an overloaded
// relay that refuses some connects at once and lets others hang (a dropped
// SYN sent again), the hanging ones are stragglers: no window could judge
// itself whole, and a sweep of a few due rows (fewer than a window)
// reported no stop, swept again for ever.
func TestSweepThatReachedNobodyStops(t *testing.T) {
	t.Parallel()
	refused := &transport.SendError{Stage: transport.StageConnect, Err: &net.OpError{Op: "dial", Net: "tcp", Err: os.ErrDeadlineExceeded}}
	for _, tc := range []struct {
		name     string
		hang     time.Duration // the first row's connect, before its answer
		through  bool          // the first row is accepted
		wantStop bool
	}{
		{"refused at once", 0, false, true},
		{"a connect hangs", 60 * time.Millisecond, false, true},
		{"a connect hangs, then accepted", 60 * time.Millisecond, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			st := testenv.SQLite(t)
			tr := &scripted{accepted: map[string]int{}}
			f := newCopiesFixture(t, st, 3, tr) // fewer due rows than a window (4)
			f.w.cfg.StragglerAfter = 5 * time.Millisecond
			tr.answer = func(to string) error {
				if to != f.contacts[0].Email {
					return refused
				}
				time.Sleep(tc.hang)
				if tc.through {
					return nil
				}
				return refused
			}
			ctx := t.Context()
			f.deferredDue(t)
			f.clk.Advance(time.Minute)
			sweep := bus.PageJob{Broadcast: f.b.ID.String(), Range: bus.SweepRange, Limit: 100, Sweep: true}
			rep, err := f.w.RunPage(ctx, sweep, "w/S")
			if err != nil {
				t.Fatal(err)
			}
			if rep.Claimed != len(f.contacts) {
				t.Fatalf("report %+v; want all %d claimed", rep, len(f.contacts))
			}
			stopped := rep.Class == bus.ClassTransient && strings.Contains(rep.Error, "connect")
			if stopped != tc.wantStop {
				t.Fatalf("report %+v; want a transient stop with the connect error: %v", rep, tc.wantStop)
			}
			if !tc.wantStop && rep.Class != bus.ClassNone {
				t.Fatalf("report %+v; want no stop", rep)
			}
			for i, c := range f.contacts {
				row, err := st.GetSend(ctx, f.b.ID, c.ID)
				want := store.SendDeferred
				if tc.through && i == 0 {
					want = store.SendSent
				}
				if err != nil || row.Status != want {
					t.Errorf("%s: row %s (%v), want %s", c.Email, row.Status, err, want)
				}
			}
		})
	}
}
