package coordinator

import (
	"context"
	"errors"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/oklog/ulid/v2"

	"github.com/rangecast/rangecast/internal/bus"
	"github.com/rangecast/rangecast/internal/maintenance"
	"github.com/rangecast/rangecast/internal/store"
)

// runMaintenance starts the leader's maintenance services for the term
// (ctx): the reputation alarm over the broadcasts this leader runs, the
// purges, and the start of scheduled drafts (schedule.go).
func (c *Coordinator) runMaintenance(ctx context.Context) {
	alarm := maintenance.NewAlarm(c.cfg.Alarms, maintenance.AlarmDeps{
		Store: c.cfg.Store, Baselines: alarmBaselines{c}, Running: c.actorIDs, Pause: c.alarmPause,
		Clock: c.cfg.Clock, Log: c.cfg.Log,
	})
	retention := maintenance.NewRetention(c.cfg.Retention, c.cfg.Store, c.cfg.Clock, c.cfg.Log)
	for _, run := range []func(context.Context){alarm.Run, retention.Run, c.runSchedule} {
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			run(ctx)
		}()
	}
}

// actorIDs lists the broadcasts this leader runs an actor for.
func (c *Coordinator) actorIDs() []ulid.ULID {
	c.mu.Lock()
	defer c.mu.Unlock()
	ids := make([]ulid.ULID, 0, len(c.actors))
	for id := range c.actors {
		ids = append(ids, id)
	}
	return ids
}

// alarmPause pauses a running broadcast for the alarm's reason through the
// path an operator's Pause takes.
func (c *Coordinator) alarmPause(ctx context.Context, id ulid.ULID, reason string) error {
	if _, err := c.transition(ctx, id, "paused", []store.State{store.StateRunning}, store.StatePaused, reason); err != nil {
		return err
	}
	broadcastTransitions.WithLabelValues(string(store.StatePaused)).Inc()
	return nil
}

// alarmBaselines keep the alarm's baselines in the broadcast bucket.
type alarmBaselines struct{ c *Coordinator }

// Baseline is the reputation stored when an alarm last paused the
// broadcast; zero when none did.
func (b alarmBaselines) Baseline(ctx context.Context, id ulid.ULID) store.Reputation {
	var r store.Reputation
	e, err := b.c.cfg.Bus.Broadcasts.Get(ctx, bus.AlarmKey(id.String()))
	if err != nil {
		if !errors.Is(err, jetstream.ErrKeyNotFound) {
			b.c.cfg.Log.Warn("alarm baseline unreadable; counting from zero", "broadcast", id, "err", err)
		}
		return r
	}
	if err := bus.Decode(e.Value(), &r); err != nil {
		b.c.cfg.Log.Warn("alarm baseline malformed; counting from zero", "broadcast", id, "err", err)
	}
	return r
}

func (b alarmBaselines) SetBaseline(ctx context.Context, id ulid.ULID, r store.Reputation) error {
	_, err := b.c.cfg.Bus.Broadcasts.Put(ctx, bus.AlarmKey(id.String()), bus.Encode(r))
	return err
}
