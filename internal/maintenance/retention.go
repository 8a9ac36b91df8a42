package maintenance

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/rangecast/rangecast/internal/clock"
)

// RetentionConfig bounds what is kept only for a while. Delivery events are the
// raw webhook log (the ledger keeps each recipient's status without them);
// finished transactional messages hold their payload, which for a password
// reset is a secret, and their idempotency key, which is what a client's
// retry is matched against.
type RetentionConfig struct {
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

// Validate refuses retentions shorter than what rangecast promises: a
// transactional replay within 24 h, and a redelivered webhook event
// recognised as such; and a negative interval.
func (r RetentionConfig) Validate() error {
	if r.Interval < 0 {
		return fmt.Errorf("RetentionConfig.Interval is %s; a duration cannot be negative", r.Interval)
	}
	if r.Receipts != 0 && r.Receipts < MinReceiptRetention {
		return fmt.Errorf("--transactional-retention %s is too short: a client may retry Send with the same idempotency key for %s and must get the same message back", r.Receipts, MinReceiptRetention)
	}
	if r.Events != 0 && r.Events < MinEventRetention {
		return fmt.Errorf("--event-retention %s is too short: keep delivery events at least %s, past the days a provider may redeliver an event, so a redelivered event is recognised", r.Events, MinEventRetention)
	}
	return nil
}

func (r RetentionConfig) withDefaults() RetentionConfig {
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

// PurgeStore is what retention deletes from.
type PurgeStore interface {
	// PurgeEvents and PurgeReceipts delete up to limit rows older than
	// before and say how many they deleted.
	PurgeEvents(ctx context.Context, before time.Time, limit int) (int64, error)
	PurgeReceipts(ctx context.Context, before time.Time, limit int) (int64, error)
	// FoldReputation folds up to limit pending reputation changes of
	// broadcasts no alarm reads any more into their sums.
	FoldReputation(ctx context.Context, limit int) (int64, error)
}

// Retention is the purge as a service: once when Run starts, then every
// Interval, in batches.
type Retention struct {
	cfg   RetentionConfig
	store PurgeStore
	clock clock.Clock
	log   *slog.Logger
}

// NewRetention returns the purge of st; Run starts it.
func NewRetention(cfg RetentionConfig, st PurgeStore, clk clock.Clock, log *slog.Logger) *Retention {
	if clk == nil {
		clk = clock.Real{}
	}
	if log == nil {
		log = slog.Default()
	}
	return &Retention{cfg: cfg.withDefaults(), store: st, clock: clk, log: log}
}

// Run purges at once and then every Interval until ctx ends.
func (r *Retention) Run(ctx context.Context) {
	for {
		r.Purge(ctx)
		select {
		case <-ctx.Done():
			return
		case <-r.clock.After(r.cfg.Interval):
		}
	}
}

// Purge deletes in batches until a batch comes back short. A failure is
// logged and left to the next interval: nothing depends on the purge
// having run, only the tables' size.
func (r *Retention) Purge(ctx context.Context) {
	now := r.clock.Now()
	for _, p := range []struct {
		table string
		run   func(context.Context, time.Time, int) (int64, error)
		keep  time.Duration
	}{
		{"delivery_events", r.store.PurgeEvents, r.cfg.Events},
		{"outbound_receipts", r.store.PurgeReceipts, r.cfg.Receipts},
		// Not a purge by age: pending reputation changes of broadcasts no
		// alarm reads any more, folded into their sums.
		{"broadcast_reputation_deltas", func(ctx context.Context, _ time.Time, limit int) (int64, error) {
			return r.store.FoldReputation(ctx, limit)
		}, 0},
	} {
		var total int64
		for ctx.Err() == nil {
			n, err := p.run(ctx, now.Add(-p.keep), purgeBatch)
			if err != nil {
				if ctx.Err() == nil {
					r.log.Warn("purge failed; retried at the next interval", "table", p.table, "err", err)
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
			r.log.Info("purged rows past their retention", "table", p.table, "rows", total, "kept", p.keep)
		}
	}
}
