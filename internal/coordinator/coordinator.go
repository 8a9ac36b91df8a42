// Package coordinator is the broadcast engine: it holds one cursor per range
// for every running broadcast and turns cursor state into page jobs. It never
// enumerates recipients: its writes grow with pages, not messages. It speaks
// domain types only (Start, Status, DomainStatus…, refusals as Error and
// StateError); internal/api serves it over gRPC.
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
	"golang.org/x/sync/errgroup"

	"github.com/rangecast/rangecast/internal/bus"
	"github.com/rangecast/rangecast/internal/clock"
	"github.com/rangecast/rangecast/internal/governor"
	"github.com/rangecast/rangecast/internal/maintenance"
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
	// Governor, when set, runs a governor per sending domain (daily
	// ceiling, rate, hourly limit, provider breakers and holds) with its
	// state in KV; it paces every page.
	Governor *GovernorConfig
	// Pacer replaces the governor with another pacer (tests); nil and no
	// Governor grant everything.
	Pacer Pacer
	// Lookup, when the transport can answer it, settles in-doubt claims;
	// without it InDoubtPolicy decides.
	Lookup        Lookup
	InDoubtPolicy InDoubtPolicy
	// InDoubtAfter is how long a claim's owner must have been seen gone
	// (its worker's liveness record lapsed, or its run no longer listed)
	// before the claim is in doubt and settled. It covers a liveness record
	// rewritten late; a dead worker's claims are settled about
	// bus.WorkerTTL + InDoubtAfter after the death.
	InDoubtAfter time.Duration
	// Name identifies this replica in the leader lease and logs.
	Name string
	// LeaseKey is the leader lease's key; replicas with the same key elect
	// one leader among them.
	LeaseKey string
	// Alarms pause a running broadcast whose hard-bounce or complaint
	// rate passes its threshold (maintenance.Alarm; zero values are the
	// defaults).
	Alarms maintenance.AlarmConfig
	// Retention bounds how long delivery events and finished transactional
	// messages are kept (maintenance.Retention; zero values are the
	// defaults).
	Retention maintenance.RetentionConfig
	// MaxFruitless is how many resumptions of a range in a row may make no
	// progress before the broadcast is failed.
	MaxFruitless int
	// Pages publishes page jobs; Bus when nil. The simulation replaces it
	// (and Bus's buckets) to drive the engine without NATS.
	Pages PagePublisher
	// Jitter returns a random number in [0, n]; backoffs are jittered with
	// it. rand.Int64N when nil; the simulation seeds its own.
	Jitter func(n int64) int64
}

// PagePublisher hands page jobs to workers.
type PagePublisher interface {
	PublishPage(ctx context.Context, job bus.PageJob, now time.Time) error
}

func (c Config) withDefaults() Config {
	if c.PageLimit <= 0 {
		c.PageLimit = ranges.PageSize
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
		c.InDoubtAfter = 20 * time.Second
	}
	if c.InDoubtPolicy == "" {
		c.InDoubtPolicy = InDoubtSkip
	}
	if c.MaxFruitless == 0 {
		c.MaxFruitless = 8
	}
	if c.Pages == nil && c.Bus != nil {
		c.Pages = c.Bus
	}
	if c.Jitter == nil {
		c.Jitter = func(n int64) int64 { return rand.Int64N(n + 1) }
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
// what was granted, and what a page did not send is returned.
type Pacer interface {
	// Grant returns up to n messages for domain; fewer, with the limit
	// that binds, when it cannot grant them all.
	Grant(now time.Time, domain string, n int) (granted int, why governor.Refusal)
	// Settle ends a grant of granted messages of which sent went out.
	Settle(domain string, granted, sent int)
	// Observe takes a report once it is applied: what it sent (counted
	// whether or not its grant is still open), and what each receiving
	// provider answered.
	Observe(now time.Time, domain string, rep bus.Report)
	// Holds names the providers whose recipients a page must defer now
	// (with when to retry) and, for a sweep (or a page, for a provider
	// given up), the half-open ones whose ramp step it carries. started is
	// when the page's broadcast started: only refusals since then count
	// toward giving its recipients up.
	Holds(now time.Time, domain string, sweep bool, started time.Time) ProviderHolds
}

// ProviderHolds is what a page is told about receiving providers
// (bus.PageJob's Defer, GiveUp, Probe, Conns, StepShare and StepFloor).
type ProviderHolds struct {
	// Defer: providers whose recipients wait, and until when.
	Defer map[string]time.Time
	// GiveUp: held providers whose recipients fail instead, with the
	// reason (GovernorConfig.GiveUpAfter).
	GiveUp map[string]string
	// Probe: half-open providers whose ramp step the page carries, on
	// Conns[provider] connections, until its refusals are at least
	// StepFloor and StepShare of its attempts (governor.StepEnds).
	Probe     []string
	Conns     map[string]int
	StepShare float64
	StepFloor int
}

// Coordinator runs one actor per unfinished broadcast and feeds them reports.
type Coordinator struct {
	cfg Config

	// live caches the claim owners live workers list (liveOwners).
	liveMu   sync.Mutex
	live     map[string]bool
	liveRead time.Time

	mu      sync.Mutex
	actors  map[ulid.ULID]*actor
	ctx     context.Context // the current term as leader; nil or done when following
	leading bool
	wg      sync.WaitGroup
	// pace is this term's pacer: Config.Pacer, or the governors hosted for
	// the term.
	pace Pacer
	host *domainHost
	// termFlushed is closed once this term's governor state is written.
	termFlushed chan struct{}
	// observed remembers the reports the governor has counted.
	observed seen

	// KVWrites counts writes to the broadcast bucket (cursor CAS, range
	// creation, state), so tests and benchmarks can show they scale with
	// pages, not messages.
	kvWrites counter
}

// New returns a coordinator; Run starts it.
func New(cfg Config) *Coordinator {
	return &Coordinator{cfg: cfg.withDefaults(), actors: map[ulid.ULID]*actor{}}
}

// pacer is the current term's pacer, nil for none.
func (c *Coordinator) pacer() Pacer {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pace
}

// domainHost is the current term's governors, nil when following.
func (c *Coordinator) domainHost() *domainHost {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.leading {
		return nil
	}
	return c.host
}

// KVWrites reports how many KV writes the coordinator has made.
func (c *Coordinator) KVWrites() int64 { return c.kvWrites.load() }

// Run serves as a follower until this coordinator wins the leader lease,
// then leads — resumes every running or paused broadcast and consumes
// reports — until the lease is lost or ctx ends, and repeats. A
// configuration it cannot run with is refused at once.
func (c *Coordinator) Run(ctx context.Context) error {
	if err := c.cfg.validate(); err != nil {
		return fmt.Errorf("coordinator: %w", err)
	}
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
	var host *domainHost
	pace := c.cfg.Pacer
	c.mu.Lock()
	flushed := c.termFlushed
	c.mu.Unlock()
	if pace == nil && c.cfg.Governor != nil {
		host = newDomainHost(ctx, c.cfg.Bus.Governors, *c.cfg.Governor, c.cfg.Clock, c.cfg.Log)
		pace = host
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			defer close(flushed)
			host.run()
		}()
	} else {
		close(flushed)
	}
	c.mu.Lock()
	c.ctx = ctx
	c.pace, c.host = pace, host
	c.mu.Unlock()
	if err := c.watchStates(ctx); err != nil {
		if ctx.Err() != nil {
			return nil // stopped before it started
		}
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
		if b.State == store.StateCancelled || b.State == store.StateFailed {
			// A worker that died just before the cancel (or the failure)
			// left claims only this broadcast's actor settles (settling):
			// a leader before this one may have stopped before it had.
			if owners, err := c.cfg.Store.ClaimOwners(ctx, b.ID); err != nil {
				return fmt.Errorf("coordinator: claims of finished broadcasts: %w", err)
			} else if len(owners) > 0 {
				if _, err := c.actorFor(ctx, b); err != nil {
					return err
				}
			}
			continue
		}
		if b.State != store.StateRunning && b.State != store.StatePaused {
			continue
		}
		// KV may not say yet what the store says (a Start or Resume
		// between its two writes, or one that died there); workers drop
		// the pages of a broadcast KV does not show running.
		if b, err = c.mirrorState(ctx, b.ID); err != nil {
			return fmt.Errorf("coordinator: mirror broadcast state: %w", err)
		}
		if b.State == store.StateRunning || b.State == store.StatePaused {
			if _, err := c.actorFor(ctx, b); err != nil {
				return err
			}
		}
	}
	c.runMaintenance(ctx) // reputation alarm and purges (maintenance.go)
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
	if msg.Subject() == bus.UsageSubject {
		c.onUsage(msg)
		return
	}
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
		termLog{c.cfg.Log, ctx}.Warn("report not applied; retried", "broadcast", rep.Broadcast, "err", err)
		msg.NakWithDelay(time.Second) //nolint:errcheck
		return
	}
	// The governor counts what was sent before the page's grant ends (in
	// apply), so a grant in between never sees the mail neither in flight
	// nor counted; and once per report, however often it is redelivered.
	if p := c.pacer(); p != nil && rep.Domain != "" && c.observed.first(msg) {
		p.Observe(c.cfg.Clock.Now(), rep.Domain, rep)
	}
	if a != nil { // nil: finished or unknown, no cursor left to move
		if err := a.report(ctx, rep); err != nil {
			// An actor gone since the lookup: the redelivery finds its
			// successor, or the broadcast finished and nothing to apply to.
			termLog{c.cfg.Log, ctx}.Warn("report not applied; retried", "broadcast", rep.Broadcast, "err", err)
			msg.NakWithDelay(time.Second) //nolint:errcheck
			return
		}
	}
	msg.Ack() //nolint:errcheck
}

// onUsage counts mail sent outside pages (transactional) in its sending
// domain's governor.
func (c *Coordinator) onUsage(msg jetstream.Msg) {
	var u bus.Usage
	if err := bus.Decode(msg.Data(), &u); err != nil || u.Domain == "" {
		c.cfg.Log.Error("malformed usage report dropped", "err", err)
		msg.Term() //nolint:errcheck
		return
	}
	if p := c.pacer(); p != nil {
		p.Observe(c.cfg.Clock.Now(), u.Domain, bus.Report{Sent: u.Sent, Providers: u.Providers})
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
	return c.actorForLocked(ctx, b)
}

// actorForLocked is actorFor with c.mu held.
func (c *Coordinator) actorForLocked(ctx context.Context, b store.Broadcast) (*actor, error) {
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
	a.term = c.ctx
	c.actors[b.ID] = a
	c.wg.Add(1)
	activeBroadcasts.Inc()
	go func() {
		defer c.wg.Done()
		defer activeBroadcasts.Dec()
		a.run(c.ctx)
		c.mu.Lock()
		if c.actors[b.ID] == a { // a retired actor is out already, maybe replaced
			delete(c.actors, b.ID)
		}
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
	// Looked up (or started) and notified under c.mu, the lock an actor
	// retires under (actor.retire): the kick reaches an actor that reads
	// it, or finds none and starts one.
	c.mu.Lock()
	defer c.mu.Unlock()
	if b.State != store.StateRunning && b.State != store.StatePaused {
		// Finished, or not started yet (a draft, a scheduled one): an
		// actor there has pages to drop or claims to settle; none is
		// started, as an actor of a draft would hold a copy of it made
		// before its accept.
		if a := c.actors[b.ID]; a != nil {
			a.notify(b)
		}
		return nil
	}
	a, err := c.actorForLocked(ctx, b)
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
	// Not a plain Put: two racing transitions (a pause and a resume, an
	// alarm's halt and an operator's resume) could then leave KV with the
	// older state for good. mirrorState reads the store after the revision
	// it writes at, so the last write always carries the store's state.
	if _, err := c.mirrorState(ctx, b.ID); err != nil {
		return fmt.Errorf("publish broadcast state: %w", err)
	}
	return nil
}

// mirrorState makes a broadcast's state in KV what the store has, before an
// actor dispatches its pages, and returns the broadcast as read. The write is
// a compare-and-set on the revision read before the store, so a transition
// written meanwhile (store first, then KV) is never overwritten with the
// older state.
func (c *Coordinator) mirrorState(ctx context.Context, id ulid.ULID) (store.Broadcast, error) {
	key := bus.StateKey(id.String())
	for attempt := 0; ; attempt++ {
		var rec bus.StateRecord
		rev, _, err := bus.GetJSON(ctx, c.cfg.Bus.Broadcasts, key, &rec)
		if err != nil {
			return store.Broadcast{}, err
		}
		b, err := c.cfg.Store.GetBroadcast(ctx, id)
		if err != nil || rec.State == string(b.State) && rec.Content == b.ContentRevision {
			return b, err
		}
		_, err = bus.PutAt(ctx, c.cfg.Bus.Broadcasts, key, bus.Encode(bus.StateRecord{State: string(b.State), Reason: b.Reason, Content: b.ContentRevision}), rev)
		c.kvWrites.add(1)
		if !bus.IsConflict(err) || attempt >= 3 {
			return b, err
		}
	}
}

// rangeRecords reads a broadcast's range records (with their KV revisions).
// The ranges themselves are the broadcast's (its id bounds and range starts,
// fixed when it was accepted); a range with no record has not reported yet,
// or its record was lost, and is at its start: its first report creates the
// record (revision 0), and the ledger's claims make a second walk of what a
// lost record had passed send nothing.
func (c *Coordinator) rangeRecords(ctx context.Context, b store.Broadcast) ([]bus.RangeRecord, []uint64, error) {
	recs, err := rangesAtStart(b)
	if err != nil || len(recs) == 0 {
		return nil, nil, err
	}
	revs := make([]uint64, len(recs))
	// The records are read rangeReaders at a time: one after another, a
	// read per range was most of a status call's time and held up an
	// actor's first pages (32 round trips to NATS at the default).
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(rangeReaders)
	for i, r := range recs {
		g.Go(func() error {
			e, err := c.cfg.Bus.Broadcasts.Get(gctx, bus.RangeKey(b.ID.String(), r.Index))
			if errors.Is(err, jetstream.ErrKeyNotFound) {
				return nil // at its start
			}
			if err != nil {
				return fmt.Errorf("read range %d: %w", r.Index, err)
			}
			var rec bus.RangeRecord
			if err := bus.Decode(e.Value(), &rec); err != nil {
				return err
			}
			recs[i] = rec
			revs[i] = e.Revision()
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, nil, err
	}
	return recs, revs, nil
}

// rangesAtStart are b's range records as they stand before any page of
// it: each cursor at its range's start. None for an empty audience.
func rangesAtStart(b store.Broadcast) ([]bus.RangeRecord, error) {
	if b.SnapshotTotal == 0 || b.MinID == (ulid.ULID{}) {
		return nil, nil
	}
	rs, err := ranges.SplitAt(b.MinID, b.MaxID, b.RangeStarts)
	if err != nil {
		return nil, err
	}
	recs := make([]bus.RangeRecord, len(rs))
	for i, r := range rs {
		recs[i] = bus.RangeRecord{Index: r.Index, Start: r.Start.String(), End: r.End.String(), Next: r.Start.String()}
	}
	return recs, nil
}

// rangeReaders is how many range records rangeRecords reads at once.
const rangeReaders = 8

// backoff is the wait before retrying a range after n fruitless attempts:
// doubling from Backoff, capped, with up to 50% jitter so ranges that failed
// together do not retry together.
func (c *Coordinator) backoff(n int) time.Duration {
	d := c.cfg.Backoff
	for i := 1; i < n && d < c.cfg.MaxBackoff; i++ {
		d *= 2
	}
	d = min(d, c.cfg.MaxBackoff)
	return d/2 + time.Duration(c.cfg.Jitter(int64(d/2)))
}

type counter struct {
	mu sync.Mutex
	n  int64
}

func (c *counter) add(n int64) { c.mu.Lock(); c.n += n; c.mu.Unlock(); kvWrites.Add(float64(n)) }
func (c *counter) load() int64 { c.mu.Lock(); defer c.mu.Unlock(); return c.n }

// seen remembers the stream sequences of the last reports it was shown, so
// a report redelivered after a NAK is counted once.
type seen struct {
	mu   sync.Mutex
	set  map[uint64]bool
	ring [4096]uint64
	next int
}

// first reports whether msg is shown for the first time (true when its
// sequence cannot be read: counting twice is the cautious side).
func (s *seen) first(msg jetstream.Msg) bool {
	md, err := msg.Metadata()
	if err != nil {
		return true
	}
	seq := md.Sequence.Stream
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.set == nil {
		s.set = make(map[uint64]bool, len(s.ring))
	}
	if s.set[seq] {
		return false
	}
	delete(s.set, s.ring[s.next])
	s.ring[s.next], s.set[seq] = seq, true
	s.next = (s.next + 1) % len(s.ring)
	return true
}
