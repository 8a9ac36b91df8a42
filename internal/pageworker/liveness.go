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
	runs map[string]*run // by owner
	// kept: the worker keeps a record (publishLiveness); without one (tests,
	// the simulation) nothing can lapse. beatAt is when the last write of it
	// that succeeded began (its first try, before any succeeded); epoch moves
	// on each time the record may have lapsed between two writes (beat).
	kept   bool
	beatAt time.Time
	epoch  uint64
}

// run is one page run's liveness: its last progress, the record's epoch
// when it started, and whether a write of the record left it out (quiet
// past maxQuiet), after which the reconciler may settle its claims.
type run struct {
	at      time.Time
	epoch   uint64
	dropped bool
}

func newLiveness(id string, maxQuiet time.Duration) *liveness {
	return &liveness{id: id, maxQuiet: maxQuiet, runs: map[string]*run{}}
}

// lapseAfter bounds, with the record's life (bus.WorkerTTL from its write,
// which began no earlier), how far apart two writes of it may be, from the
// beginning of one to the end of the next, for it to have surely been
// there in between, and how long after the last write began a claim is
// still sent: a beat is kept in hand. The reconciler then waits
// --in-doubt-after more before it settles anything.
const lapseAfter = bus.WorkerTTL - bus.WorkerBeat

// start begins a page run and returns its owner.
func (l *liveness) start(now time.Time) string {
	owner := l.id + "/" + strconv.FormatUint(l.next.Add(1), 10)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.runs[owner] = &run{at: now, epoch: l.epoch}
	return owner
}

// progress says the run is alive at now.
func (l *liveness) progress(owner string, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if r, ok := l.runs[owner]; ok {
		r.at = now
		return
	}
	l.runs[owner] = &run{at: now, epoch: l.epoch}
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
	r, ok := l.runs[owner]
	return ok && now.Sub(r.at) <= l.maxQuiet
}

// keep says the worker keeps a record, from now: until its first write
// succeeds, now stands for the last one's beginning.
func (l *liveness) keep(now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.kept, l.beatAt = true, now
}

// beat records a write of the worker's record that began at began and
// succeeded at done. If more than lapseAfter passed from the beginning of
// the write before it to the end of this one (the process was frozen, NATS
// did not answer), the record may have lapsed meanwhile and the reconciler
// may have settled this worker's claims as a dead one's: the epoch moves
// on, and the runs that started before it send nothing more (sendable).
func (l *liveness) beat(began, done time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.kept && done.Sub(l.beatAt) > lapseAfter {
		l.epoch++
	}
	l.kept, l.beatAt = true, began
}

// sendable says whether a claim of owner's run may be sent at now: the
// record has surely been there, listing the run, since the run began (no
// epoch since, the run never left out of it, the last write begun within
// lapseAfter). A worker frozen (SIGSTOP, a VM paused) past the record's
// life and woken sent the window it had claimed after the reconciler had
// settled those claims: under the resend policy another worker had sent
// them already, and each person got two copies (a tester). A run is never
// sendable again once the epoch moved past its start: its later claims
// may be settled too, by a reconciler still seeing it gone (a reviewer).
func (l *liveness) sendable(owner string, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	r, ok := l.runs[owner]
	if ok && (r.dropped || r.epoch != l.epoch) {
		return false
	}
	if !l.kept {
		return true // no record kept: only a lapse told (Lapse) ends a run
	}
	return ok && now.Sub(r.at) <= l.maxQuiet && now.Sub(l.beatAt) <= lapseAfter
}

// stale says whether the run can send nothing more (sendable would refuse
// every claim it took): a page run stops claiming then.
func (l *liveness) stale(owner string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	r, ok := l.runs[owner]
	return ok && (r.dropped || r.epoch != l.epoch)
}

// lapse ends every run started so far, as a gap between two writes of the
// record does (beat).
func (l *liveness) lapse() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.epoch++
}

// active lists the runs that made progress within maxQuiet of now; a run
// left out is dropped for good (sendable).
func (l *liveness) active(now time.Time) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for owner, r := range l.runs {
		if now.Sub(r.at) <= l.maxQuiet && !r.dropped {
			out = append(out, owner)
		} else {
			r.dropped = true
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
	w.live.keep(w.cfg.Clock.Now())
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
