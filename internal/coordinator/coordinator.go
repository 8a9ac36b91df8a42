// Package coordinator holds one cursor per range for every running broadcast
// and turns cursor state into page jobs. It never enumerates recipients: its
// writes grow with pages, not messages.
package coordinator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/oklog/ulid/v2"

	"github.com/rangecast/rangecast/internal/bus"
	"github.com/rangecast/rangecast/internal/clock"
	"github.com/rangecast/rangecast/internal/ranges"
	"github.com/rangecast/rangecast/internal/store"
)

// Config wires the coordinator to its parts.
type Config struct {
	Store store.Store
	Bus   *bus.Bus
	Clock clock.Clock
	Log   *slog.Logger
	// PageLimit is the most contacts one page job walks.
	PageLimit int
	// Tick is how often a running broadcast's actor looks for work without a
	// report to prompt it; PausedTick the same while paused.
	Tick, PausedTick time.Duration
	// Redispatch is how long a page may stay unreported before the actor
	// dispatches it again (a lost job or a lost report). Longer than
	// bus.DuplicateWindow so the second copy is not deduplicated away.
	Redispatch time.Duration
	// Backoff is the first wait after a transient error; it doubles per
	// fruitless attempt, with jitter, up to MaxBackoff.
	Backoff, MaxBackoff time.Duration
	// Pacer, when set, is asked before every page too (the per-domain
	// governor plugs in here); nil grants everything.
	Pacer Pacer
	// Lookup, when the transport can answer it, settles in-doubt claims;
	// without it InDoubtPolicy decides.
	Lookup        Lookup
	InDoubtPolicy InDoubtPolicy
	// InDoubtAfter is the lease: a claim older than this with no outcome
	// is in doubt. Longer than any page can take.
	InDoubtAfter time.Duration
	// Name identifies this replica in the leader lease and logs.
	Name string
	// LeaseKey is the leader lease's key; replicas with the same key elect
	// one leader among them.
	LeaseKey string
	// MaxFruitless is how many resumptions of a range in a row may make no
	// progress before the broadcast is failed.
	MaxFruitless int
}

func (c Config) withDefaults() Config {
	if c.PageLimit <= 0 {
		c.PageLimit = 200
	}
	if c.Tick == 0 {
		c.Tick = 5 * time.Second
	}
	if c.PausedTick == 0 {
		c.PausedTick = 30 * time.Second
	}
	if c.Redispatch == 0 {
		c.Redispatch = bus.DuplicateWindow + time.Minute
	}
	if c.Backoff == 0 {
		c.Backoff = 10 * time.Second
	}
	if c.MaxBackoff == 0 {
		c.MaxBackoff = 10 * time.Minute
	}
	if c.Name == "" {
		host, _ := os.Hostname()
		c.Name = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	if c.LeaseKey == "" {
		c.LeaseKey = "coordinator"
	}
	if c.InDoubtAfter == 0 {
		c.InDoubtAfter = 5 * time.Minute
	}
	if c.InDoubtPolicy == "" {
		c.InDoubtPolicy = InDoubtSkip
	}
	if c.MaxFruitless == 0 {
		c.MaxFruitless = 8
	}
	if c.Clock == nil {
		c.Clock = clock.Real{}
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
	return c
}

// Pacer grants sending capacity per sending domain. Both the broadcast's own
// throttle and the pacer must grant before a page goes out; a page shrinks to
// what was granted, and what a page did not use is returned.
type Pacer interface {
	// Grant returns up to n messages for domain, or 0 and what it waits for.
	Grant(now time.Time, domain string, n int) (granted int, waiting string)
	Return(domain string, n int)
}

// Coordinator runs one actor per unfinished broadcast and feeds them reports.
type Coordinator struct {
	cfg Config

	mu      sync.Mutex
	actors  map[ulid.ULID]*actor
	ctx     context.Context // the current term as leader; nil or done when following
	leading bool
	wg      sync.WaitGroup

	// KVWrites counts writes to the broadcast bucket (cursor CAS, range
	// creation, state), so tests and benchmarks can show they scale with
	// pages, not messages.
	kvWrites counter
}

// New returns a coordinator; Run starts it.
func New(cfg Config) *Coordinator {
	return &Coordinator{cfg: cfg.withDefaults(), actors: map[ulid.ULID]*actor{}}
}

// KVWrites reports how many KV writes the coordinator has made.
func (c *Coordinator) KVWrites() int64 { return c.kvWrites.load() }

// Run serves as a follower until this coordinator wins the leader lease,
// then leads — resumes every running or paused broadcast and consumes
// reports — until the lease is lost or ctx ends, and repeats.
func (c *Coordinator) Run(ctx context.Context) error {
	for ctx.Err() == nil {
		leading, stop, ok := c.lead(ctx)
		if !ok {
			break
		}
		err := c.runLeader(leading)
		stop()
		c.wg.Wait()
		if err != nil && ctx.Err() == nil {
			c.cfg.Log.Error("leading failed; stepping down", "err", err)
			select {
			case <-ctx.Done():
			case <-c.cfg.Clock.After(leaseRenew):
			}
		}
	}
	return nil
}

// runLeader is one term as leader.
func (c *Coordinator) runLeader(ctx context.Context) error {
	c.mu.Lock()
	c.ctx = ctx
	c.mu.Unlock()
	if err := c.watchStates(ctx); err != nil {
		return fmt.Errorf("coordinator: watch broadcast states: %w", err)
	}
	bs, err := c.cfg.Store.ListBroadcasts(ctx)
	if ctx.Err() != nil {
		return nil // stopped before it started
	}
	if err != nil {
		return fmt.Errorf("coordinator: load broadcasts: %w", err)
	}
	for _, b := range bs {
		if b.State == store.StateRunning || b.State == store.StatePaused {
			if _, err := c.actorFor(ctx, b); err != nil {
				return err
			}
		}
	}
	cc, err := c.cfg.Bus.Reports.Consume(func(msg jetstream.Msg) { c.onReport(ctx, msg) })
	if err != nil {
		return fmt.Errorf("coordinator: consume reports: %w", err)
	}
	poison, err := c.cfg.Bus.JS.Conn().Subscribe(bus.MaxDeliveriesAdvisory, func(m *nats.Msg) { c.onPoison(ctx, m.Data) })
	if err != nil {
		return fmt.Errorf("coordinator: subscribe to delivery-limit advisories: %w", err)
	}
	defer poison.Unsubscribe() //nolint:errcheck
	<-ctx.Done()
	cc.Drain()
	<-cc.Closed()
	return nil
}

// onPoison handles a page job that reached its delivery limit: the job is
// taken out of the stream and its broadcast fails with the reason.
func (c *Coordinator) onPoison(ctx context.Context, data []byte) {
	var adv bus.MaxDeliveries
	if err := bus.Decode(data, &adv); err != nil {
		c.cfg.Log.Error("malformed delivery-limit advisory", "err", err)
		return
	}
	raw, err := c.cfg.Bus.PageStream.GetMsg(ctx, adv.StreamSeq)
	if err != nil {
		c.cfg.Log.Error("page at its delivery limit is gone", "seq", adv.StreamSeq, "err", err)
		return
	}
	var job bus.PageJob
	if err := bus.Decode(raw.Data, &job); err != nil {
		c.cfg.Log.Error("malformed page job at its delivery limit", "err", err)
		return
	}
	c.cfg.Log.Error("page reached its delivery limit", "broadcast", job.Broadcast, "range", job.Range, "from", job.From, "deliveries", adv.Deliveries)
	if id, err := ulid.ParseStrict(job.Broadcast); err == nil {
		a, err := c.actorByID(ctx, id)
		if err == nil && a != nil {
			select {
			case a.poisoned <- poisoned{job: job, deliveries: adv.Deliveries}:
			case <-ctx.Done():
			}
		}
	}
	c.cfg.Bus.PageStream.DeleteMsg(ctx, adv.StreamSeq) //nolint:errcheck
}

// refresh passes a broadcast's state, as the store has it now, to its actor
// (starting one for a broadcast that is running or paused).
func (c *Coordinator) refresh(ctx context.Context, rawID string) error {
	id, err := ulid.ParseStrict(rawID)
	if err != nil {
		return err
	}
	b, err := c.cfg.Store.GetBroadcast(ctx, id)
	if err != nil {
		return err
	}
	return c.kick(ctx, b)
}

func (c *Coordinator) onReport(ctx context.Context, msg jetstream.Msg) {
	var rep bus.Report
	if err := bus.Decode(msg.Data(), &rep); err != nil {
		c.cfg.Log.Error("malformed report dropped", "err", err)
		msg.Term() //nolint:errcheck
		return
	}
	id, err := ulid.ParseStrict(rep.Broadcast)
	if err != nil {
		c.cfg.Log.Error("report for a malformed broadcast id dropped", "broadcast", rep.Broadcast)
		msg.Term() //nolint:errcheck
		return
	}
	a, err := c.actorByID(ctx, id)
	if err != nil {
		c.cfg.Log.Warn("report not applied; retried", "broadcast", rep.Broadcast, "err", err)
		msg.NakWithDelay(time.Second) //nolint:errcheck
		return
	}
	if a == nil { // finished or unknown: nothing left to move
		msg.Ack() //nolint:errcheck
		return
	}
	if err := a.report(ctx, rep); err != nil {
		c.cfg.Log.Warn("report not applied; retried", "broadcast", rep.Broadcast, "err", err)
		msg.NakWithDelay(time.Second) //nolint:errcheck
		return
	}
	msg.Ack() //nolint:errcheck
}

// actorByID returns the running actor of a broadcast, starting one if the
// broadcast is unfinished; nil if there is nothing to coordinate.
func (c *Coordinator) actorByID(ctx context.Context, id ulid.ULID) (*actor, error) {
	c.mu.Lock()
	a := c.actors[id]
	c.mu.Unlock()
	if a != nil {
		return a, nil
	}
	b, err := c.cfg.Store.GetBroadcast(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if b.State != store.StateRunning && b.State != store.StatePaused {
		return nil, nil
	}
	return c.actorFor(ctx, b)
}

func (c *Coordinator) actorFor(ctx context.Context, b store.Broadcast) (*actor, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if a := c.actors[b.ID]; a != nil {
		return a, nil
	}
	if c.ctx == nil || c.ctx.Err() != nil {
		return nil, errFollower
	}
	a, err := newActor(ctx, c, b)
	if err != nil {
		return nil, err
	}
	c.actors[b.ID] = a
	c.wg.Add(1)
	activeBroadcasts.Inc()
	go func() {
		defer c.wg.Done()
		defer activeBroadcasts.Dec()
		a.run(c.ctx)
		c.mu.Lock()
		delete(c.actors, b.ID)
		c.mu.Unlock()
	}()
	return a, nil
}

// errFollower: only the leader runs actors; a follower's change reaches the
// leader through the state it writes to KV.
var errFollower = errors.New("not the leading coordinator")

// kick tells a broadcast's actor its state changed. On a follower it does
// nothing: the leader follows the state through KV.
func (c *Coordinator) kick(ctx context.Context, b store.Broadcast) error {
	if !c.Leading() {
		return nil
	}
	if b.State.Finished() {
		c.mu.Lock()
		a := c.actors[b.ID]
		c.mu.Unlock()
		if a != nil {
			a.notify(b)
		}
		return nil
	}
	a, err := c.actorFor(ctx, b)
	if errors.Is(err, errFollower) {
		return nil
	}
	if err != nil {
		return err
	}
	a.notify(b)
	return nil
}

// putState mirrors a broadcast's state to KV, where workers watch it.
func (c *Coordinator) putState(ctx context.Context, b store.Broadcast) error {
	_, err := c.cfg.Bus.Broadcasts.Put(ctx, bus.StateKey(b.ID.String()), bus.Encode(bus.StateRecord{State: string(b.State), Reason: b.Reason}))
	c.kvWrites.add(1)
	if err != nil {
		return fmt.Errorf("publish broadcast state: %w", err)
	}
	return nil
}

// writeRanges creates the range records of a newly accepted broadcast.
// Records that already exist (a retried start) are left as they are: a cursor
// never moves back.
func (c *Coordinator) writeRanges(ctx context.Context, b store.Broadcast) error {
	if b.SnapshotTotal == 0 {
		return nil
	}
	rs, err := ranges.Split(b.MinID, b.MaxID)
	if err != nil {
		return fmt.Errorf("split audience: %w", err)
	}
	for _, r := range rs {
		rec := bus.RangeRecord{Index: r.Index, Start: r.Start.String(), End: r.End.String(), Next: r.Start.String()}
		_, err := c.cfg.Bus.Broadcasts.Create(ctx, bus.RangeKey(b.ID.String(), r.Index), bus.Encode(rec))
		c.kvWrites.add(1)
		if err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
			return fmt.Errorf("write range %d: %w", r.Index, err)
		}
	}
	return nil
}

// rangeRecords reads a broadcast's range records (with their KV revisions).
func (c *Coordinator) rangeRecords(ctx context.Context, b store.Broadcast) ([]bus.RangeRecord, []uint64, error) {
	if b.SnapshotTotal == 0 || b.MinID == (ulid.ULID{}) {
		return nil, nil, nil
	}
	rs, err := ranges.Split(b.MinID, b.MaxID)
	if err != nil {
		return nil, nil, err
	}
	recs := make([]bus.RangeRecord, len(rs))
	revs := make([]uint64, len(rs))
	for i, r := range rs {
		e, err := c.cfg.Bus.Broadcasts.Get(ctx, bus.RangeKey(b.ID.String(), r.Index))
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			// Lost from KV (a hint, not the truth): start the range over;
			// the ledger's claims make a second walk send nothing.
			recs[i] = bus.RangeRecord{Index: r.Index, Start: r.Start.String(), End: r.End.String(), Next: r.Start.String()}
			continue
		}
		if err != nil {
			return nil, nil, fmt.Errorf("read range %d: %w", r.Index, err)
		}
		if err := bus.Decode(e.Value(), &recs[i]); err != nil {
			return nil, nil, err
		}
		revs[i] = e.Revision()
	}
	return recs, revs, nil
}

// backoff is the wait before retrying a range after n fruitless attempts:
// doubling from Backoff, capped, with up to 50% jitter so ranges that failed
// together do not retry together.
func (c *Coordinator) backoff(n int) time.Duration {
	d := c.cfg.Backoff
	for i := 1; i < n && d < c.cfg.MaxBackoff; i++ {
		d *= 2
	}
	d = min(d, c.cfg.MaxBackoff)
	return d/2 + time.Duration(rand.Int64N(int64(d/2)+1))
}

type counter struct {
	mu sync.Mutex
	n  int64
}

func (c *counter) add(n int64) { c.mu.Lock(); c.n += n; c.mu.Unlock(); kvWrites.Add(float64(n)) }
func (c *counter) load() int64 { c.mu.Lock(); defer c.mu.Unlock(); return c.n }
