package coordinator

import (
	"context"

	"github.com/oklog/ulid/v2"
)

// HasActor reports whether the coordinator runs an actor for broadcast id
// (for tests of which broadcasts get one).
func (c *Coordinator) HasActor(id ulid.ULID) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.actors[id] != nil
}

// Refresh is refresh: the leader following a broadcast's state as the store
// has it (what its watch of the state records does on each change).
func (c *Coordinator) Refresh(ctx context.Context, id string) error { return c.refresh(ctx, id) }
