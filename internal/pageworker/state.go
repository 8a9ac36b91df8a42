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

	mu     sync.RWMutex
	states map[string]store.State
}

// errStateNotMirrored: KV holds no state for the broadcast.
var errStateNotMirrored = errors.New("broadcast state not in KV")

func newStateCache(kv jetstream.KeyValue) *stateCache {
	return &stateCache{kv: kv, states: map[string]store.State{}}
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
				s.set(id, "")
				continue
			}
			var rec bus.StateRecord
			if bus.Decode(e.Value(), &rec) == nil {
				s.set(id, store.State(rec.State))
			}
		}
	}()
	return nil
}

func (s *stateCache) set(id string, st store.State) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st == "" {
		delete(s.states, id)
		return
	}
	s.states[id] = st
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
	s.set(id, store.State(rec.State))
	return store.State(rec.State), nil
}
