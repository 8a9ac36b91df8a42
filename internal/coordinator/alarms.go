package coordinator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/oklog/ulid/v2"

	"github.com/rangecast/rangecast/internal/bus"
	"github.com/rangecast/rangecast/internal/store"
)

// Alarms are the reputation alarms: a running broadcast whose hard-bounce
// rate or complaint rate passes its threshold pauses itself, with the reason
// shown, before it damages the sending domain's reputation further. Mailbox
// providers judge a sender by exactly these two numbers.
type Alarms struct {
	// BounceRate is the hard-bounce share of accepted messages that pauses
	// a broadcast (default 0.02). Negative turns the alarm off.
	BounceRate float64
	// ComplaintRate is the complaint share of delivered messages that
	// pauses a broadcast (default 0.001). Negative turns the alarm off.
	ComplaintRate float64
	// MinSample is how many accepted (for bounces) or delivered (for
	// complaints) messages a rate needs before it counts (default 1000):
	// one complaint in the first ten messages is not a trend.
	MinSample int64
	// Interval is how often the leader checks running broadcasts (default
	// 30 s).
	Interval time.Duration
}

// Alarm defaults.
const (
	DefaultBounceAlarm    = 0.02
	DefaultComplaintAlarm = 0.001
	DefaultAlarmSample    = 1000
	DefaultAlarmInterval  = 30 * time.Second
)

func (a Alarms) withDefaults() Alarms {
	if a.BounceRate == 0 {
		a.BounceRate = DefaultBounceAlarm
	}
	if a.ComplaintRate == 0 {
		a.ComplaintRate = DefaultComplaintAlarm
	}
	if a.MinSample <= 0 {
		a.MinSample = DefaultAlarmSample
	}
	if a.Interval <= 0 {
		a.Interval = DefaultAlarmInterval
	}
	return a
}

// Check returns why a broadcast with reputation r must pause, or "" when it
// may carry on. since is the reputation when the alarm last paused it (zero
// when it never did): after an operator resumes, only what happened since
// counts, so the same bounces do not pause it again.
func (a Alarms) Check(r, since store.Reputation) string {
	a = a.withDefaults()
	accepted, bounced := r.Accepted-since.Accepted, r.Bounced-since.Bounced
	delivered, complained := r.Delivered-since.Delivered, r.Complained-since.Complained
	if a.BounceRate >= 0 && accepted >= a.MinSample && bounced > 0 && float64(bounced) > a.BounceRate*float64(accepted) {
		return fmt.Sprintf("auto-paused: hard-bounce rate %s (%d of %d accepted) passed %s; clean the list, then resume",
			percent(float64(bounced)/float64(accepted)), bounced, accepted, percent(a.BounceRate))
	}
	if a.ComplaintRate >= 0 && delivered >= a.MinSample && complained > 0 && float64(complained) > a.ComplaintRate*float64(delivered) {
		return fmt.Sprintf("auto-paused: complaint rate %s (%d of %d delivered) passed %s; check who this audience is and what they were promised, then resume",
			percent(float64(complained)/float64(delivered)), complained, delivered, percent(a.ComplaintRate))
	}
	return ""
}

func percent(f float64) string {
	s := fmt.Sprintf("%.2f", f*100)
	for len(s) > 1 && s[len(s)-1] == '0' {
		s = s[:len(s)-1]
	}
	if s[len(s)-1] == '.' {
		s = s[:len(s)-1]
	}
	return s + "%"
}

// runAlarms checks every running broadcast each Interval while this
// coordinator leads (ctx is the term). It pauses through the path
// PauseBroadcast takes (store state, KV state record, actor kick), so
// workers stop within one in-flight window.
func (c *Coordinator) runAlarms(ctx context.Context) {
	a := c.cfg.Alarms.withDefaults()
	if a.BounceRate < 0 && a.ComplaintRate < 0 {
		return
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		// Reputation when the alarm paused each broadcast, for this term.
		paused := map[ulid.ULID]store.Reputation{}
		for {
			select {
			case <-ctx.Done():
				return
			case <-c.cfg.Clock.After(a.Interval):
			}
			c.checkAlarms(ctx, a, paused)
		}
	}()
}

func (c *Coordinator) checkAlarms(ctx context.Context, a Alarms, paused map[ulid.ULID]store.Reputation) {
	c.mu.Lock()
	ids := make([]ulid.ULID, 0, len(c.actors))
	for id := range c.actors {
		ids = append(ids, id)
	}
	c.mu.Unlock()
	for _, id := range ids {
		if ctx.Err() != nil {
			return
		}
		b, err := c.cfg.Store.GetBroadcast(ctx, id)
		if err != nil || b.State != store.StateRunning {
			continue
		}
		// The store keeps these sums as the ledger changes (migration 008),
		// so a check costs the same for 1,000 contacts as for 1,000,000;
		// counting the ledger here made a broadcast's checks O(n²).
		r, err := c.cfg.Store.Reputation(ctx, id)
		if err != nil {
			c.cfg.Log.Warn("reputation alarm check failed", "broadcast", id, "err", err)
			continue
		}
		base, ok := paused[id]
		if !ok {
			// A pause of an earlier term (or another leader) still sets
			// the baseline: the bounces it paused for have been seen.
			base = c.alarmBaseline(ctx, id)
			paused[id] = base
		}
		reason := a.Check(r, base)
		if reason == "" {
			continue
		}
		if _, err := c.transition(ctx, id, "paused", []store.State{store.StateRunning}, store.StatePaused, reason); err != nil {
			c.cfg.Log.Warn("reputation alarm could not pause the broadcast", "broadcast", id, "err", err)
			continue
		}
		paused[id] = r
		if _, err := c.cfg.Bus.Broadcasts.Put(ctx, bus.AlarmKey(id.String()), bus.Encode(r)); err != nil {
			c.cfg.Log.Warn("alarm baseline not stored; a new leader may pause this broadcast again for the same events", "broadcast", id, "err", err)
		}
		broadcastTransitions.WithLabelValues(string(store.StatePaused)).Inc()
		c.cfg.Log.Warn("broadcast auto-paused by a reputation alarm", "broadcast", id, "reason", reason,
			"accepted", r.Accepted, "delivered", r.Delivered, "bounced", r.Bounced, "complained", r.Complained)
	}
}

// alarmBaseline is the reputation stored when an alarm last paused the
// broadcast; zero when none did.
func (c *Coordinator) alarmBaseline(ctx context.Context, id ulid.ULID) store.Reputation {
	var r store.Reputation
	e, err := c.cfg.Bus.Broadcasts.Get(ctx, bus.AlarmKey(id.String()))
	if err != nil {
		if !errors.Is(err, jetstream.ErrKeyNotFound) {
			c.cfg.Log.Warn("alarm baseline unreadable; counting from zero", "broadcast", id, "err", err)
		}
		return r
	}
	if err := bus.Decode(e.Value(), &r); err != nil {
		c.cfg.Log.Warn("alarm baseline malformed; counting from zero", "broadcast", id, "err", err)
	}
	return r
}
