package coordinator

import "github.com/oklog/ulid/v2"

// HasActor reports whether the coordinator runs an actor for broadcast id
// (for tests of which broadcasts get one).
func (c *Coordinator) HasActor(id ulid.ULID) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.actors[id] != nil
}
