package coordinator

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/rangecast/rangecast/internal/bus"
)

// leaseRenew is how often the leader renews its lease, and how often a
// follower tries to take a lapsed one: a third of the lease's life.
const leaseRenew = bus.LeaseTTL / 3

// lead blocks until this coordinator holds the leader lease (or ctx ends),
// then returns a context that is cancelled the moment the lease is lost, and
// a release func that steps down (deleting the lease) and waits for it.
// The lease is a KV key created by the leader and renewed by
// compare-and-set; the bucket's TTL lets a dead leader's key lapse.
func (c *Coordinator) lead(ctx context.Context) (context.Context, context.CancelFunc, bool) {
	kv, key := c.cfg.Bus.Lease, c.cfg.LeaseKey
	var rev uint64
	for {
		r, err := kv.Create(ctx, key, []byte(c.cfg.Name))
		if err == nil {
			rev = r
			break
		}
		if !errors.Is(err, jetstream.ErrKeyExists) && ctx.Err() == nil {
			c.cfg.Log.Warn("leader lease unavailable", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil, nil, false
		case <-c.cfg.Clock.After(leaseRenew):
		}
	}
	leading, cancel := context.WithCancel(ctx)
	// The term's last governor state is written before the lease goes, so
	// the successor loads it rather than racing it.
	flushed := make(chan struct{})
	c.mu.Lock()
	c.termFlushed = flushed
	c.mu.Unlock()
	c.setLeader(true)
	c.cfg.Log.Info("leading", "coordinator", c.cfg.Name)
	stepped := make(chan struct{})
	go func() {
		defer close(stepped)
		defer cancel()
		defer c.setLeader(false)
		for {
			select {
			case <-leading.Done():
				select {
				case <-flushed:
				case <-c.cfg.Clock.After(5 * time.Second):
				}
				// Step down cleanly so a successor need not wait for the TTL.
				kv.Delete(context.WithoutCancel(ctx), key, jetstream.LastRevision(rev)) //nolint:errcheck
				return
			case <-c.cfg.Clock.After(leaseRenew):
			}
			r, err := kv.Update(leading, key, []byte(c.cfg.Name), rev)
			if err != nil {
				c.cfg.Log.Warn("leader lease lost; stepping down", "err", err)
				return
			}
			rev = r
		}
	}()
	release := func() {
		cancel()
		<-stepped
	}
	return leading, release, true
}

func (c *Coordinator) setLeader(on bool) {
	c.mu.Lock()
	c.leading = on
	c.mu.Unlock()
	if on {
		leaderGauge.Set(1)
	} else {
		leaderGauge.Set(0)
	}
}

// Leading reports whether this coordinator holds the leader lease and runs
// the broadcasts' actors. Every replica serves the API.
func (c *Coordinator) Leading() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.leading
}

// watchStates keeps the leader's actors in step with broadcast states
// written by any replica: a start, pause, resume or cancel through a
// follower reaches the actor through KV.
func (c *Coordinator) watchStates(ctx context.Context) error {
	w, err := c.cfg.Bus.Broadcasts.Watch(ctx, bus.StateKeys, jetstream.UpdatesOnly())
	if err != nil {
		return err
	}
	go func() {
		defer w.Stop() //nolint:errcheck
		for e := range w.Updates() {
			if e == nil || e.Operation() != jetstream.KeyValuePut {
				continue
			}
			id := e.Key()[:len(e.Key())-len(".state")]
			if err := c.refresh(ctx, id); err != nil && ctx.Err() == nil {
				c.cfg.Log.Warn("cannot follow a broadcast's new state", "broadcast", id, "err", err)
			}
		}
	}()
	return nil
}
