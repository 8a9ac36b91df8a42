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
		rec := bus.WorkerRecord{Runs: w.live.active(w.cfg.Clock.Now())}
		if _, err := kv.Put(ctx, key, bus.Encode(rec)); err != nil {
			w.cfg.Log.Debug("liveness record not written", "err", err)
		}
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
