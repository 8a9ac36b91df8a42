package coordinator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/rangecast/rangecast/internal/maintenance"
	"github.com/rangecast/rangecast/internal/store"
)

// scheduleBatch bounds how many due drafts one look starts.
const scheduleBatch = 100

// runSchedule starts scheduled drafts whose time has come, for as long as
// this term as leader lasts (ctx). The times are in the store, so whichever
// coordinator leads starts them: a failover loses no schedule, and a start
// that raced another leader's is refused by the store's state check
// (AcceptBroadcast takes only a draft).
func (c *Coordinator) runSchedule(ctx context.Context) {
	for {
		c.startDue(ctx)
		select {
		case <-ctx.Done():
			return
		case <-c.cfg.Clock.After(c.cfg.Tick):
		}
	}
}

// startDue starts the drafts due now. A draft that cannot start because of
// what it is (its content no longer renders for its audience) is
// unscheduled with the reason, so it is not tried every tick; an outage is
// tried again on the next tick.
func (c *Coordinator) startDue(ctx context.Context) {
	now := c.cfg.Clock.Now()
	ids, err := c.cfg.Store.DueScheduled(ctx, now, scheduleBatch)
	if err != nil {
		if ctx.Err() == nil {
			c.cfg.Log.Warn("cannot look for scheduled broadcasts", "err", err)
		}
		return
	}
	for _, id := range ids {
		if ctx.Err() != nil {
			return
		}
		_, err := c.Start(ctx, id)
		switch kind := KindOf(err); {
		case err == nil:
			scheduledStarts.Inc()
			c.cfg.Log.Info("scheduled broadcast started", "broadcast", id)
		case kind == WrongState:
			// Started (or cancelled) meanwhile by someone else: nothing due.
		case kind == PreflightFailed || kind == InvalidContent:
			c.unscheduleFailed(ctx, id, err, now)
		default:
			c.cfg.Log.Warn("scheduled broadcast not started; retried", "broadcast", id, "err", err)
		}
	}
}

// unscheduleFailed takes a draft that failed its start check off the
// schedule and shows why in its reason. The reason is written first: the
// two are separate writes, and in this order nobody (a status read, a
// restart between them) sees a draft taken off its schedule without saying
// why; a crash after the first leaves it scheduled, and the next tick tries
// it and unschedules it again.
func (c *Coordinator) unscheduleFailed(ctx context.Context, id ulid.ULID, cause error, now time.Time) {
	reason := fmt.Sprintf("scheduled start at %s UTC failed: %v", now.UTC().Format(time.DateTime), cause)
	if _, err := c.cfg.Store.SetState(ctx, id, []store.State{store.StateDraft}, store.StateDraft, reason, now); err != nil {
		if !errors.Is(err, store.ErrConflict) { // a conflict: no longer a draft, nothing to unschedule
			c.cfg.Log.Warn("cannot record why a scheduled broadcast did not start; retried", "broadcast", id, "err", err)
		}
		return
	}
	if _, err := c.cfg.Store.ScheduleDraft(ctx, id, time.Time{}, now); err != nil {
		c.cfg.Log.Warn("cannot unschedule a broadcast that failed to start", "broadcast", id, "err", err)
		return
	}
	c.cfg.Log.Error("scheduled broadcast did not start; unscheduled", "broadcast", id, "err", cause)
}

// Alarms is the reputation alarm configuration this coordinator runs with,
// defaults filled in: what a report compares a broadcast's rates with.
func (c *Coordinator) Alarms() maintenance.AlarmConfig { return c.cfg.Alarms.Defaulted() }
