package pageworker

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rangecast/rangecast/internal/bus"
)

// liveness tells the reconciler which claims this worker still holds. Each
// page run claims under an owner of its own ("worker/run"); while the run
// makes progress (a window done, a store write retried) its owner is listed
// in the worker's KV record, rewritten every bus.WorkerBeat. A run that
// stopped making progress for longer than maxQuiet (a wedged send) drops out
// of the record, and a killed worker's record lapses after bus.WorkerTTL: in
// both cases the run's claims are in doubt and the reconciler settles them,
// within about a minute of the death and without comparing two machines'
// clocks.
type liveness struct {
	id       string
	maxQuiet time.Duration
	next     atomic.Uint64

	mu   sync.Mutex
	runs map[string]time.Time // owner → last progress, on this worker's clock
	// beatAt is when the last write of the worker's record that succeeded
	// began (zero while none has: no record is kept, as in tests and the
	// simulation); epoch moves on each time the record may have lapsed
	// between two writes (beat).
	beatAt time.Time
	epoch  uint64
}

// lapseAfter is how long after a write of the worker's record began the
// record is still surely there: it lives bus.WorkerTTL from its write,
// which began no earlier; two beats are kept in hand.
const lapseAfter = bus.WorkerTTL - 2*bus.WorkerBeat

// lease is what a claim was taken under: its run and the record's epoch.
// Its claims may be sent only while the lease holds (sendable).
type lease struct {
	owner string
	epoch uint64
}

// lease is taken just before a claim.
func (l *liveness) lease(owner string) lease {
	l.mu.Lock()
	defer l.mu.Unlock()
	return lease{owner: owner, epoch: l.epoch}
}

// beat records a write of the worker's record that began at began and
// succeeded at done. If more than lapseAfter passed from the beginning of
// the write before it to the end of this one (the process was frozen, NATS
// did not answer), the record may have lapsed meanwhile and the reconciler
// may have settled this worker's claims as a dead one's: every lease taken
// before ends.
func (l *liveness) beat(began, done time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.beatAt.IsZero() && done.Sub(l.beatAt) > lapseAfter {
		l.epoch++
	}
	l.beatAt = began
}

// sendable says whether a claim taken under le may be sent at now: the
// record has surely been there since (same epoch, and its last write began
// within lapseAfter), and the run has made progress within maxQuiet, so it
// is listed in it. A worker frozen past them (SIGSTOP, a VM paused) and
// woken sent the window it had claimed after the reconciler had settled
// those claims: under the resend policy another worker had sent them
// already, and each person got two copies (a tester).
func (l *liveness) sendable(le lease, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.beatAt.IsZero() {
		return true // no record kept (yet): nothing can lapse
	}
	at, ok := l.runs[le.owner]
	if !ok || now.Sub(at) > l.maxQuiet || le.epoch != l.epoch {
		return false
	}
	return now.Sub(l.beatAt) <= lapseAfter
}

func newLiveness(id string, maxQuiet time.Duration) *liveness {
	return &liveness{id: id, maxQuiet: maxQuiet, runs: map[string]time.Time{}}
}

// start begins a page run and returns its owner.
func (l *liveness) start(now time.Time) string {
	owner := l.id + "/" + strconv.FormatUint(l.next.Add(1), 10)
	l.progress(owner, now)
	return owner
}

// progress says the run is alive at now.
func (l *liveness) progress(owner string, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.runs[owner] = now
}

// end forgets a finished run: whatever it still holds is the reconciler's.
func (l *liveness) end(owner string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.runs, owner)
}

// alive says whether the run made progress within maxQuiet of now.
func (l *liveness) alive(owner string, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	at, ok := l.runs[owner]
	return ok && now.Sub(at) <= l.maxQuiet
}

// active lists the runs that made progress within maxQuiet of now.
func (l *liveness) active(now time.Time) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for owner, at := range l.runs {
		if now.Sub(at) <= l.maxQuiet {
			out = append(out, owner)
		}
	}
	slices.Sort(out)
	return out
}

// publishLiveness writes the worker's record now and then every
// bus.WorkerBeat until ctx ends (after the last page's drain, not at the
// stop signal: a draining page still holds claims). A failed write is
// retried on the next beat: the key's TTL is several beats.
func (w *Worker) publishLiveness(ctx context.Context) {
	kv := w.cfg.Bus.Workers
	if kv == nil {
		return
	}
	key := bus.WorkerKey(w.live.id)
	put := func(ctx context.Context) {
		began := w.cfg.Clock.Now()
		rec := bus.WorkerRecord{Runs: w.live.active(began)}
		if _, err := kv.Put(ctx, key, bus.Encode(rec)); err != nil {
			w.cfg.Log.Debug("liveness record not written", "err", err)
			return
		}
		w.live.beat(began, w.cfg.Clock.Now())
	}
	put(ctx)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-w.cfg.Clock.After(bus.WorkerBeat):
				put(ctx)
			}
		}
	}()
}
