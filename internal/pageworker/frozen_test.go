package pageworker

import (
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/rangecast/rangecast/internal/bus"
	"github.com/rangecast/rangecast/internal/store"
	"github.com/rangecast/rangecast/internal/testenv"
)

// TestFrozenRunSendsNothingTheReconcilerReleased: a worker frozen
// (SIGSTOP) mid-window for longer than its liveness record lives, whose
// run's claims the reconciler settled meanwhile (under the resend policy:
// released, and sent again by a sweep), sends none of the window it had
// claimed behind the one in flight once it wakes: its record may have
// lapsed (liveness.beat), so that run sends no more. It sent them,
// a second copy each (a tester's SIGSTOP of 40 s). The first window's
// sends, which may have reached the server before the freeze, are the
// policy's accepted risk and are not checked here.
func TestFrozenRunSendsNothingTheReconcilerReleased(t *testing.T) {
	t.Parallel()
	st := testenv.SQLite(t)
	ctx := t.Context()
	thaw := make(chan struct{})
	var inFlight sync.WaitGroup
	inFlight.Add(4)
	var mu sync.Mutex
	seen := map[string]bool{}
	tr := &scripted{accepted: map[string]int{}}
	f := newCopiesFixture(t, st, 8, tr) // windows of 4: the run claims both
	tr.answer = func(to string) error {
		mu.Lock()
		again := seen[to]
		seen[to] = true
		n := len(seen)
		mu.Unlock()
		if !again && n <= 4 { // the first window's sends: in flight when SIGSTOP lands
			inFlight.Done()
			<-thaw
		}
		return nil
	}
	// The worker keeps a liveness record, written a moment ago.
	now := f.clk.Now()
	f.w.live.beat(now, now)
	f.w.live.progress("w/A", now)
	frozen := make(chan struct{})
	go func() { inFlight.Wait(); close(frozen) }()
	job := f.job()
	job.Limit = 8
	done := make(chan struct{})
	go func() { defer close(done); f.w.RunPage(ctx, job, "w/A") }() //nolint:errcheck
	<-frozen
	var doubts []store.Send
	testenv.Eventually(t, "the run holds both windows' claims", 10*time.Second, func() bool {
		var err error
		doubts, err = st.InDoubt(ctx, f.b.ID, "w/A", 100)
		return err == nil && len(doubts) == 8
	})

	// Frozen: its record lapses, and the reconciler, under resend,
	// releases every claim it holds (settleGone); another worker's sweep
	// sends them.
	var settled []store.Outcome
	for _, d := range doubts {
		settled = append(settled, store.Outcome{ContactID: d.ContactID, Status: store.SendDeferred, RetryAt: f.clk.Now(), Error: store.InDoubtResent})
	}
	if err := st.RecordOutcomes(ctx, f.b.ID, "w/A", settled, f.clk.Now()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	var behind []string // claimed, never handed to the relay before the freeze
	for _, c := range f.contacts {
		if !seen[c.Email] {
			behind = append(behind, c.Email)
		}
	}
	mu.Unlock()
	sweep := bus.PageJob{Broadcast: f.b.ID.String(), Range: bus.SweepRange, Limit: 100, Sweep: true}
	other := New(Config{Store: st, Transport: tr, Clock: f.clk, Log: slog.New(slog.DiscardHandler), Concurrency: 4, States: running{}, ID: "w2"})
	if _, err := other.RunPage(ctx, sweep, "w2/S"); err != nil {
		t.Fatal(err)
	}

	// SIGCONT: the first write of the record after the freeze finds the
	// gap (40 s since the one before), before or after the sends go on.
	f.w.live.beat(now.Add(40*time.Second), now.Add(40*time.Second))
	close(thaw)
	<-done
	if len(behind) != 4 {
		t.Fatalf("%d contacts claimed behind the window in flight; want 4", len(behind))
	}
	for _, e := range behind {
		if n := tr.accepted[e]; n != 1 {
			t.Errorf("%s received %d copies: the woken run sent a window whose claims the reconciler had released", e, n)
		}
	}
}

// TestLivenessLease: a run's claims are sent while the worker's record
// has surely been there, listing the run, since the run began: no gap
// longer than lapseAfter between two writes of it (a frozen process, a slow
// or failed NATS), the last write begun within lapseAfter, and the run never
// left out of it for being quiet past maxQuiet. A run that started before a
// gap sends nothing more, and stops claiming (stale); one started after it
// sends. With no record kept, every claim is sent.
func TestLivenessLease(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2031, 3, 14, 9, 0, 0, 0, time.UTC)
	l := newLiveness("w", time.Minute)
	if !l.sendable(l.start(t0), t0) {
		t.Fatal("no record kept: a claim must be sent")
	}
	l.keep(t0)
	l.beat(t0, t0.Add(time.Millisecond))
	o := l.start(t0)
	for _, c := range []struct {
		at   time.Duration
		want bool
	}{{time.Second, true}, {lapseAfter, true}, {lapseAfter + time.Second, false}} {
		if got := l.sendable(o, t0.Add(c.at)); got != c.want {
			t.Errorf("%s after the last write began: sendable %v, want %v", c.at, got, c.want)
		}
	}
	if l.sendable("w/99", t0.Add(time.Second)) {
		t.Error("a run the worker does not know: sendable")
	}
	l.beat(t0.Add(3*time.Second), t0.Add(3*time.Second+time.Millisecond)) // on time
	if !l.sendable(o, t0.Add(4*time.Second)) || l.stale(o) {
		t.Error("a write on time ended the run's sends")
	}
	l.beat(t0.Add(6*time.Second), t0.Add(16*time.Second)) // a write that ended 13 s after the last one began
	if l.sendable(o, t0.Add(16*time.Second)) || !l.stale(o) {
		t.Error("the run still sends after a gap over lapseAfter between two writes")
	}
	l.progress(o, t0.Add(17*time.Second))
	if l.sendable(o, t0.Add(17*time.Second)) {
		t.Error("a run started before the gap sends again once it makes progress")
	}
	after := l.start(t0.Add(17 * time.Second))
	if !l.sendable(after, t0.Add(17*time.Second)) {
		t.Error("a run started after the gap does not send")
	}
	l.active(t0.Add(17*time.Second + 2*time.Minute)) // a write that leaves the quiet run out
	l.beat(t0.Add(17*time.Second+2*time.Minute), t0.Add(17*time.Second+2*time.Minute))
	l.progress(after, t0.Add(17*time.Second+2*time.Minute))
	if l.sendable(after, t0.Add(17*time.Second+2*time.Minute)) || !l.stale(after) {
		t.Error("a run left out of the record for being quiet sends again")
	}
}
