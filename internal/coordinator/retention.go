package coordinator

import (
	"context"
	"fmt"
	"time"
)

// Retention bounds what is kept only for a while. Delivery events are the
// raw webhook log (the ledger keeps each recipient's status without them);
// finished transactional messages hold their payload, which for a password
// reset is a secret, and their idempotency key, which is what a client's
// retry is matched against.
type Retention struct {
	// Events is how long a delivery event is kept after it was received
	// (default 90 days, at least 7 days). It must outlast providers'
	// redelivery of an event, so a redelivered event is still recognised
	// as one.
	Events time.Duration
	// Receipts is how long a finished (sent, failed, unknown) transactional
	// message is kept after its last attempt (default 7 days; at least
	// 24 h, the replay guarantee of TransactionalService.Send).
	Receipts time.Duration
	// Interval is how often the leader purges (default 1 h).
	Interval time.Duration
}

// Retention defaults and bounds.
const (
	DefaultEventRetention   = 90 * 24 * time.Hour
	DefaultReceiptRetention = 7 * 24 * time.Hour
	MinReceiptRetention     = 24 * time.Hour
	// MinEventRetention outlasts providers' webhook redelivery (they retry
	// the same event id for up to a few days), so a redelivered event is
	// still recognised as a repeat.
	MinEventRetention    = 7 * 24 * time.Hour
	DefaultPurgeInterval = time.Hour
	// purgeBatch bounds one DELETE, so a first purge of a large backlog
	// holds no lock for long and is spread over many short statements.
	purgeBatch = 5000
)

// Check refuses retentions shorter than what rangecast promises: a
// transactional replay within 24 h, and a redelivered webhook event
// recognised as such.
func (r Retention) Check() error {
	if r.Receipts != 0 && r.Receipts < MinReceiptRetention {
		return fmt.Errorf("transactional retention %s is too short: a client may retry Send with the same idempotency key for %s and must get the same message back", r.Receipts, MinReceiptRetention)
	}
	if r.Events != 0 && r.Events < MinEventRetention {
		return fmt.Errorf("event retention %s is too short: keep delivery events at least %s, past the days a provider may redeliver an event, so a redelivered event is recognised", r.Events, MinEventRetention)
	}
	return nil
}

func (r Retention) withDefaults() Retention {
	if r.Events <= 0 {
		r.Events = DefaultEventRetention
	}
	if r.Receipts <= 0 {
		r.Receipts = DefaultReceiptRetention
	}
	r.Receipts = max(r.Receipts, MinReceiptRetention)
	r.Events = max(r.Events, MinEventRetention)
	if r.Interval <= 0 {
		r.Interval = DefaultPurgeInterval
	}
	return r
}

// runRetention purges once at the start of the term and then every
// Interval while this coordinator leads (ctx is the term).
func (c *Coordinator) runRetention(ctx context.Context) {
	r := c.cfg.Retention.withDefaults()
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		for {
			c.purge(ctx, r)
			select {
			case <-ctx.Done():
				return
			case <-c.cfg.Clock.After(r.Interval):
			}
		}
	}()
}

// purge deletes in batches until a batch comes back short. A failure is
// logged and left to the next interval: nothing depends on the purge
// having run, only the tables' size.
func (c *Coordinator) purge(ctx context.Context, r Retention) {
	now := c.cfg.Clock.Now()
	for _, p := range []struct {
		table string
		run   func(context.Context, time.Time, int) (int64, error)
		keep  time.Duration
	}{
		{"delivery_events", c.cfg.Store.PurgeEvents, r.Events},
		{"outbound_receipts", c.cfg.Store.PurgeReceipts, r.Receipts},
		// Not a purge by age: pending reputation changes of broadcasts no
		// alarm reads any more, folded into their sums.
		{"broadcast_reputation_deltas", func(ctx context.Context, _ time.Time, limit int) (int64, error) {
			return c.cfg.Store.FoldReputation(ctx, limit)
		}, 0},
	} {
		var total int64
		for ctx.Err() == nil {
			n, err := p.run(ctx, now.Add(-p.keep), purgeBatch)
			if err != nil {
				if ctx.Err() == nil {
					c.cfg.Log.Warn("purge failed; retried at the next interval", "table", p.table, "err", err)
				}
				break
			}
			total += n
			purged.WithLabelValues(p.table).Add(float64(n))
			if n < purgeBatch {
				break
			}
		}
		if total > 0 && p.keep > 0 {
			c.cfg.Log.Info("purged rows past their retention", "table", p.table, "rows", total, "kept", p.keep)
		}
	}
}
