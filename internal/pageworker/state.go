package pageworker

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/rangecast/rangecast/internal/bus"
	"github.com/rangecast/rangecast/internal/store"
)

// stateCache mirrors every broadcast's state from KV through a watch, so a
// pause reaches a worker between two windows without a round trip per window.
type stateCache struct {
	kv jetstream.KeyValue

	mu        sync.RWMutex
	states    map[string]store.State
	revisions map[string]int // content revisions (bus.StateRecord.Content)
}

// errStateNotMirrored: KV holds no state for the broadcast.
var errStateNotMirrored = errors.New("broadcast state not in KV")

func newStateCache(kv jetstream.KeyValue) *stateCache {
	return &stateCache{kv: kv, states: map[string]store.State{}, revisions: map[string]int{}}
}

func (s *stateCache) start(ctx context.Context) error {
	w, err := s.kv.Watch(ctx, bus.StateKeys)
	if err != nil {
		return fmt.Errorf("watch broadcast states: %w", err)
	}
	go func() {
		defer w.Stop() //nolint:errcheck
		for e := range w.Updates() {
			if e == nil {
				continue // end of the initial values
			}
			id := e.Key()[:len(e.Key())-len(".state")]
			if e.Operation() != jetstream.KeyValuePut {
				s.set(id, bus.StateRecord{})
				continue
			}
			var rec bus.StateRecord
			if bus.Decode(e.Value(), &rec) == nil {
				s.set(id, rec)
			}
		}
	}()
	return nil
}

func (s *stateCache) set(id string, rec bus.StateRecord) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if rec.State == "" {
		delete(s.states, id)
		return
	}
	s.states[id] = store.State(rec.State)
	s.revisions[id] = max(s.revisions[id], rec.Content) // only grows; a deleted key keeps it
}

// Revision is the newest content revision KV has shown for the broadcast
// (0 when none): see ContentRevisions.
func (s *stateCache) Revision(id string) int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.revisions[id]
}

// get returns the cached state, falling back to a KV read for a broadcast
// the watch has not delivered yet.
func (s *stateCache) Get(ctx context.Context, id string) (store.State, error) {
	s.mu.RLock()
	st, ok := s.states[id]
	s.mu.RUnlock()
	if ok {
		return st, nil
	}
	return s.Fresh(ctx, id)
}

// Fresh reads the state from KV itself, past the watch. The coordinator
// writes the state before it dispatches, so a page dispatched on resume
// never meets the stale "paused" a lagging watch may still hold.
func (s *stateCache) Fresh(ctx context.Context, id string) (store.State, error) {
	e, err := s.kv.Get(ctx, bus.StateKey(id))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		// Not mirrored yet, or a KV write was lost: unknown, not
		// cancelled. The worker asks the store; the leader puts the key
		// back.
		return "", errStateNotMirrored
	}
	if err != nil {
		return "", err
	}
	var rec bus.StateRecord
	if err := bus.Decode(e.Value(), &rec); err != nil {
		return "", err
	}
	s.set(id, rec)
	return store.State(rec.State), nil
}
