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
// lapsed (liveness.beat), so those claims' lease has ended. It sent them,
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
		mu.Unlock()
		if !again && len(seen) <= 4 { // the first window's sends: in flight when SIGSTOP lands
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

// TestLivenessLease: a claim's lease holds while the worker's record is
// surely there, and ends at a gap between two writes of it longer than
// lapseAfter (a frozen process, a slow or failed NATS), at a run quiet past
// maxQuiet, or once the last write began more than lapseAfter ago; a lease
// taken after the gap holds. With no record kept, every lease holds.
func TestLivenessLease(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2031, 3, 14, 9, 0, 0, 0, time.UTC)
	l := newLiveness("w", time.Minute)
	if !l.sendable(l.lease("w/1"), t0) {
		t.Fatal("no record kept: a lease must hold")
	}
	l.beat(t0, t0.Add(time.Millisecond))
	l.progress("w/1", t0)
	le := l.lease("w/1")
	for _, c := range []struct {
		at   time.Duration
		want bool
	}{{time.Second, true}, {lapseAfter, true}, {lapseAfter + time.Second, false}} {
		if got := l.sendable(le, t0.Add(c.at)); got != c.want {
			t.Errorf("%s after the last write began: sendable %v, want %v", c.at, got, c.want)
		}
	}
	if l.sendable(lease{owner: "w/9", epoch: le.epoch}, t0.Add(time.Second)) {
		t.Error("a run not listed in the record: sendable")
	}
	l.beat(t0.Add(3*time.Second), t0.Add(3*time.Second+time.Millisecond)) // on time
	if !l.sendable(le, t0.Add(4*time.Second)) {
		t.Error("a write on time ended the lease")
	}
	l.beat(t0.Add(6*time.Second), t0.Add(20*time.Second)) // a write that took 14 s
	if l.sendable(le, t0.Add(21*time.Second)) {
		t.Error("the lease held across a write that ended past lapseAfter")
	}
	l.progress("w/1", t0.Add(21*time.Second))
	l.beat(t0.Add(21*time.Second), t0.Add(21*time.Second))
	if fresh := l.lease("w/1"); !l.sendable(fresh, t0.Add(21*time.Second)) {
		t.Error("a lease taken after the gap does not hold")
	}
	if l.sendable(l.lease("w/1"), t0.Add(21*time.Second+2*time.Minute)) {
		t.Error("a run quiet past maxQuiet: sendable")
	}
}
