// Package pageworker runs page jobs: it reads the next eligible contacts of a
// range, claims them in the ledger, sends, records outcomes and reports how
// far it got. Workers are stateless; any worker can run any page, and running
// a page twice sends nothing twice.
package pageworker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/oklog/ulid/v2"

	"github.com/rangecast/rangecast/internal/bus"
	"github.com/rangecast/rangecast/internal/clock"
	"github.com/rangecast/rangecast/internal/govstate"
	"github.com/rangecast/rangecast/internal/message"
	"github.com/rangecast/rangecast/internal/ranges"
	"github.com/rangecast/rangecast/internal/store"
	"github.com/rangecast/rangecast/internal/transport"
)

// Store is the part of the store a page worker uses. It is kept to what
// the worker calls, so a test double that must see every call (the
// simulation's gatedStore, which puts each one at the scheduler's mercy)
// stops compiling when the worker starts calling something new.
type Store interface {
	GetBroadcast(ctx context.Context, id ulid.ULID) (store.Broadcast, error)
	ContentRevision(ctx context.Context, id ulid.ULID) (int, error)
	EligiblePage(ctx context.Context, b store.Broadcast, from, until ulid.ULID, limit int) ([]store.Contact, error)
	Claim(ctx context.Context, broadcast ulid.ULID, owner string, claims []store.Claim, now time.Time) ([]ulid.ULID, error)
	RecordAndClaim(ctx context.Context, broadcast ulid.ULID, owner string, outcomes []store.Outcome, next []store.Claim, now time.Time) ([]ulid.ULID, error)
	RecordOutcomes(ctx context.Context, broadcast ulid.ULID, owner string, outcomes []store.Outcome, now time.Time) error
	ClaimDue(ctx context.Context, b store.Broadcast, owner string, now time.Time, limit int, sending []ulid.ULID, leave []string) ([]store.Due, error)
}

// Config wires a worker to its parts.
type Config struct {
	Store     Store
	Bus       *bus.Bus
	Transport transport.Transport
	Clock     clock.Clock
	Log       *slog.Logger
	// Concurrency is the in-flight window: at most this many messages are
	// claimed and unsent at once, so a kill -9 leaves at most this many in
	// doubt.
	Concurrency int
	// Pages is how many pages the worker runs at once, each claiming its
	// own windows (default 1): in flight is at most Pages × Concurrency
	// (the worker's send slots, shared by its pages), and a kill -9 leaves
	// at most InDoubtBound(Pages, Concurrency) in doubt. A page whose last
	// window is sending hands its turn to the next page, which fetches,
	// reads and claims meanwhile, so the slots do not sit idle between
	// pages.
	Pages int
	// ParkDelay is how long a page that could not be run (state unknown,
	// store unreachable) waits before JetStream offers it again.
	ParkDelay time.Duration
	// FetchWait bounds one pull, so a drain is noticed promptly.
	FetchWait time.Duration
	// MaxPageTime is how long a page is kept alive with heartbeats. A page
	// stuck past it (a hung worker) is handed to another worker, and one
	// that hangs every worker ends at the job's delivery limit.
	MaxPageTime time.Duration
	// Unsubscribe makes each message's one-click List-Unsubscribe link
	// (public base URL and signing key); nil sends none.
	Unsubscribe *message.Unsubscribe
	// DKIM signs each message with its From domain's keys; nil signs
	// nothing.
	DKIM *message.DKIM
	// SweepRetry caps when a swept deferred row that could not be sent (a
	// transient error) is due again: RetryAfter doubled per attempt, at
	// most this.
	SweepRetry time.Duration
	// MaxAttempts and RetryFor bound how long a recipient refused for a
	// transient reason is tried: the sweep that reaches it without sending
	// records the row failed, with the reason, once it has had at least
	// MaxAttempts attempts and its retry delays (each at least half the
	// doubling schedule's step) add up to at least RetryFor since its
	// first refusal. Ten attempts alone spanned under five minutes, less
	// than many servers greylist a new sender for (found by a tester: an
	// 8-minute greylist failed 9 of 400 recipients who were never
	// refused). Only attempts that named the recipient count (see
	// transport.BeforeRecipient).
	MaxAttempts int
	RetryFor    time.Duration
	// GreylistRetry is the least wait before a recipient a server
	// greylisted is tried again, when the reply names no wait of its own
	// ("try again in 300 seconds"). Greylisting servers refuse every
	// retry before their delay (5 minutes at postgrey, sqlgrey and
	// rspamd): the doubling from RetryAfter tried such a recipient 8
	// times in its first 150 s (found by a tester), which some servers
	// count against the sender.
	GreylistRetry time.Duration
	// ID names the worker in the owner of every claim it makes ("ID/run")
	// and in its liveness record; a random ULID when empty. Two workers
	// must never share one.
	ID string
	// RetryAfter is when a recipient refused with a transient error on a
	// page is due again (recorded deferred; jittered by up to half). Never
	// a release: another copy of the page may already have moved the
	// cursor past it.
	RetryAfter time.Duration
	// StoreRetryFor bounds how long a page keeps retrying a store write
	// whose outcome it knows (sent, failed) before it gives the rows up as
	// in doubt. A store outage shorter than this loses no knowledge.
	StoreRetryFor time.Duration
	// StragglerAfter is the least a window's sends may run on after the
	// last of the others ended (once at least half have) before the page
	// records the window without them and goes on (pipeline.wait); the
	// grace is three times the window's median send time when that is
	// longer. A server that tarpits one recipient for half a minute held
	// the whole page as long. Their outcomes are recorded with a later
	// window's. Default 20 ms; negative waits for every window whole.
	StragglerAfter time.Duration
	// States overrides where the worker reads a broadcast's state (tests
	// and the simulation); the KV watch otherwise.
	States StateSource
	// Jitter returns a random number in [0, n] for retry times;
	// rand.Int64N when nil. The simulation seeds its own.
	Jitter func(n int64) int64
}

// StateSource reads broadcasts' states. Get may answer from a cache;
// Fresh asks the source itself.
type StateSource interface {
	Get(ctx context.Context, broadcast string) (store.State, error)
	Fresh(ctx context.Context, broadcast string) (store.State, error)
}

func (c Config) withDefaults() Config {
	if c.Concurrency <= 0 {
		c.Concurrency = 16
	}
	if c.Pages <= 0 {
		c.Pages = 1
	}
	if c.ParkDelay == 0 {
		c.ParkDelay = 5 * time.Second
	}
	if c.FetchWait == 0 {
		c.FetchWait = 2 * time.Second
	}
	if c.MaxPageTime == 0 {
		c.MaxPageTime = 10 * time.Minute
	}
	if c.SweepRetry <= 0 {
		// Past the first few quick retries (a provider's random deferral is
		// gone in seconds), a recipient still refused is tried every 5 to
		// 10 minutes, as mail servers retry their queues.
		c.SweepRetry = 10 * time.Minute
	}
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = 10
	}
	if c.RetryFor <= 0 {
		c.RetryFor = DefaultRetryFor
	}
	if c.GreylistRetry <= 0 {
		c.GreylistRetry = 5 * time.Minute
	}
	if c.ID == "" {
		c.ID = ulid.Make().String()
	}
	if c.RetryAfter <= 0 {
		// A provider's random deferral is usually gone a second later;
		// the doubling (and the breaker's share rule) slow retries down
		// when it is not. One unlucky row refused three times in a row
		// then waits about 5 s in all, not 10.
		c.RetryAfter = time.Second
	}
	if c.StragglerAfter == 0 {
		c.StragglerAfter = 20 * time.Millisecond
	}
	if c.StoreRetryFor == 0 {
		c.StoreRetryFor = 15 * time.Minute
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

// Worker pulls page jobs and runs up to Config.Pages of them at once.
type Worker struct {
	cfg Config
	// giveUpAt is cfg.giveUpAttempts(): the attempt at which the sweep
	// gives a refused recipient up.
	giveUpAt int
	states   StateSource
	live     *liveness
	// slots bounds the sends in flight (Pages × Concurrency), whichever
	// pages they are of; turns (Pages of them) is what a page run holds
	// while it still claims windows.
	slots chan struct{}
	turns chan struct{}
	// late holds a token for each straggler whose outcome is not yet
	// committed (pipeline.wait): Pages × Concurrency of them, whichever
	// pages hold them, so stragglers add at most that to the claims a
	// worker holds without an outcome (InDoubtBound).
	late chan struct{}
	// senders run the sends (pipeline).
	senders senders
	// finishing are the pages waiting for their stragglers off their
	// pullers (handle); Run returns only after them.
	finishing sync.WaitGroup
	// governors follows the holds the leader's governors write, between
	// the page's dispatch and each window.
	governors *govstate.View

	mu         sync.Mutex
	broadcasts map[ulid.ULID]*loaded
}

// loaded is a broadcast's definition and compiled content, as of one
// content revision (an edit while paused makes the next).
type loaded struct {
	b        store.Broadcast
	compiled *message.Compiled
	// asked is the revision it was read for (a job's, or the KV state
	// record's): above b's when the store had an older one, as after a
	// restore of the database under a KV that kept its records. The store
	// is the truth then: the content is sent as read, and a page is not
	// stopped for that revision again and again. Such a copy is read
	// again after anomalyTTL: an edit made since may have the revision it
	// was asked for (KV's record, unchanged, would never say so).
	asked   int
	readAt  time.Time
	renders renderTally // template errors of this content, see haltRepeatedRenderErrors
	*sendTallies
}

// anomalyTTL bounds how long a worker keeps content read for a revision
// the store did not have (loaded.asked).
const anomalyTTL = time.Minute

// current is the newest revision l stands for: its content's, or the one
// it was read for when the store had none newer.
func (l *loaded) current() int { return max(l.b.ContentRevision, l.asked) }

// sendTallies are what a worker counts of a broadcast's sends whatever its
// content: kept across an edit of the content.
type sendTallies struct {
	refusals refusalTally // refusals that may be one recipient's, see refusals.go
	bounces  bounceTally  // hard bounces at send, see refusals.go
}

// New returns a worker; Run starts it.
func New(cfg Config) *Worker {
	cfg = cfg.withDefaults()
	w := &Worker{cfg: cfg, giveUpAt: cfg.giveUpAttempts(), states: cfg.States, live: newLiveness(cfg.ID, cfg.MaxPageTime), broadcasts: map[ulid.ULID]*loaded{},
		slots: make(chan struct{}, cfg.Pages*cfg.Concurrency), turns: make(chan struct{}, cfg.Pages),
		late:    make(chan struct{}, cfg.Pages*cfg.Concurrency),
		senders: senders{tasks: make(chan func())}}
	if cfg.Bus != nil && cfg.Bus.Governors != nil {
		w.governors = govstate.NewView(cfg.Bus.Governors)
	}
	return w
}

// Run pulls and runs pages until ctx is cancelled. A page in progress when
// ctx ends is not abandoned: sends in flight finish, outcomes are recorded,
// the partial cursor is reported, then Run returns.
// ID starts every claim owner this worker writes ("ID/7"): logged at its
// start, it tells an operator from the ledger, and from the coordinator's
// "in-doubt claims settled" lines, which process held a claim.
// Lapse tells the worker that its liveness record may have lapsed, as its
// first write of the record after a freeze finds by itself (liveness.beat):
// the page runs it has started send and claim nothing more. The
// simulation freezes and wakes page copies with it.
func (w *Worker) Lapse() { w.live.lapse() }

func (w *Worker) ID() string { return w.live.id }

func (w *Worker) Run(ctx context.Context) error {
	if w.states == nil {
		cache := newStateCache(w.cfg.Bus.Broadcasts)
		if err := cache.start(ctx); err != nil {
			if ctx.Err() != nil {
				return nil // stopped before it started
			}
			return err
		}
		w.states = cache
	}
	liveCtx, stopLive := context.WithCancel(context.WithoutCancel(ctx))
	defer stopLive()
	w.publishLiveness(liveCtx)
	go func() {
		select {
		case <-ctx.Done():
			w.cfg.Log.Info("page worker stopping: finishing the pages it runs", "id", w.live.id)
		case <-liveCtx.Done():
		}
	}()
	defer func() { w.cfg.Log.Info("page worker stopped", "id", w.live.id) }()
	// One puller more than turns: while a page's last window is sending,
	// the spare one has the turn and starts the next page.
	var pullers sync.WaitGroup
	for range w.cfg.Pages + 1 {
		pullers.Go(func() { w.pull(ctx) })
	}
	pullers.Wait()
	w.finishing.Wait()
	return nil
}

// pull fetches and runs one page at a time until ctx is cancelled, each
// once it holds a turn: a page job is fetched only when it can start.
func (w *Worker) pull(ctx context.Context) {
	for ctx.Err() == nil {
		select {
		case w.turns <- struct{}{}:
		case <-ctx.Done():
			return
		}
		var once sync.Once
		handoff := func() { once.Do(func() { <-w.turns }) }
		msg, err := w.cfg.Bus.Pages.Next(jetstream.FetchMaxWait(w.cfg.FetchWait))
		if err != nil {
			handoff()
			if errors.Is(err, jetstream.ErrNoMessages) || errors.Is(err, nats.ErrTimeout) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				continue
			}
			w.cfg.Log.Warn("fetch page failed", "err", err)
			select {
			case <-ctx.Done():
			case <-w.cfg.Clock.After(time.Second):
			}
			continue
		}
		w.handle(ctx, msg, handoff)
		handoff()
	}
}

// handle decides what to do with one job message and settles it with
// JetStream: Ack once the report is published, NakWithDelay to park a page of
// a paused broadcast, Term for a job that can never run. handoff gives up
// the page's turn (the page run calls it early; pull once handle returns).
func (w *Worker) handle(ctx context.Context, msg jetstream.Msg, handoff func()) {
	var job bus.PageJob
	if err := bus.Decode(msg.Data(), &job); err != nil {
		w.cfg.Log.Error("malformed page job dropped", "err", err)
		msg.Term() //nolint:errcheck
		return
	}
	log := w.cfg.Log.With("broadcast", job.Broadcast, "range", job.Range, "from", job.From)
	// Sends in flight must finish even when the worker is asked to stop, so
	// the page runs on a context that is not cancelled with ctx.
	pageCtx := context.WithoutCancel(ctx)
	began := w.cfg.Clock.Now()
	owner := w.live.start(began)
	stopBeat := w.heartbeat(msg, owner)
	var finish func() bus.Report // the page's stragglers, if it ends with some
	defer func() {
		if finish == nil {
			stopBeat()
			w.live.end(owner)
		}
	}()
	// A dependency outage (the store, KV) is not the page's fault: the page
	// waits here, kept ours by the heartbeat, and runs again when the
	// dependency answers. A NAK would count towards the delivery limit,
	// which is for pages that crash or hang workers, and would fail the
	// broadcast after a minute's outage.
	var rep bus.Report
	for attempt := 0; ; attempt++ {
		state, err := w.state(pageCtx, job.Broadcast)
		if err == nil {
			switch {
			case state == store.StatePaused:
				// Parked by dropping it: the coordinator re-issues every
				// range's page from its cursor on resume.
				pagesRun.WithLabelValues("parked").Inc()
				msg.Ack() //nolint:errcheck
				return
			case state != store.StateRunning:
				pagesRun.WithLabelValues("dropped").Inc()
				log.Info("page dropped", "state", state)
				msg.Ack() //nolint:errcheck
				return
			}
			if job.Sweep {
				rep, finish, err = w.runSweep(ctx, pageCtx, job, owner)
			} else {
				rep, finish, err = w.runPage(ctx, pageCtx, job, owner, handoff)
			}
			if err == nil {
				break
			}
			if !isOutage(err) {
				pagesRun.WithLabelValues("failed").Inc()
				// Nothing was reported: the coordinator's cursor did not
				// move, and JetStream offers the page again (to this or
				// another worker), up to the delivery limit.
				log.Error("page failed", "err", err)
				msg.NakWithDelay(w.cfg.ParkDelay) //nolint:errcheck
				return
			}
		}
		if !w.live.alive(owner, w.cfg.Clock.Now()) {
			// The run went quiet for longer than a page may (a call hung
			// before it failed): its heartbeat stopped and JetStream has
			// handed the page on, towards its delivery limit. Waiting on
			// would hold this worker for a page that is no longer its.
			log.Warn("page given up: it made no progress for the longest a page may take", "err", err)
			return
		}
		if ctx.Err() != nil {
			// Stopping: hand the page on rather than wait out the outage.
			log.Warn("page not run: a dependency is unavailable and the worker is stopping", "err", err)
			msg.NakWithDelay(w.cfg.ParkDelay) //nolint:errcheck
			return
		}
		pagesRun.WithLabelValues("waiting").Inc()
		log.Warn("page waits: a dependency is unavailable", "err", err, "attempt", attempt+1)
		w.live.progress(owner, w.cfg.Clock.Now())
		select {
		case <-ctx.Done():
		case <-w.cfg.Clock.After(backoff(attempt, w.cfg.ParkDelay)):
		}
	}
	if finish != nil {
		// Its stragglers' outcomes come before the report, and a server
		// holding them for a minute must not hold this puller as long:
		// with every puller waiting so, the worker fetched no page (a
		// tarpit at 1 % stopped it for seconds at a time). The page has
		// handed its turn on; the heartbeat and the run's liveness go on
		// until it is reported.
		w.finishing.Go(func() {
			defer stopBeat()
			defer w.live.end(owner)
			w.report(ctx, pageCtx, msg, job, owner, finish(), began, log)
		})
		return
	}
	w.report(ctx, pageCtx, msg, job, owner, rep, began, log)
}

// report publishes what a page learnt and acks its job.
func (w *Worker) report(ctx, pageCtx context.Context, msg jetstream.Msg, job bus.PageJob, owner string, rep bus.Report, began time.Time, log *slog.Logger) {
	pageSeconds.Observe(w.cfg.Clock.Now().Sub(began).Seconds())
	// The report is what the page learnt; a NATS hiccup should not cost a
	// delivery of the page, so it is retried for a while in place. One id
	// for every try (the run's owner is unique): a publish stored whose
	// acknowledgement was lost (NATS stalled) is not stored again, which
	// the governor counted twice, "sent today" past what was sent (tester:
	// 20,626 counted against 19,642 after a 25 s SIGSTOP of nats-server).
	for attempt := 0; ; attempt++ {
		_, err := w.cfg.Bus.JS.Publish(pageCtx, bus.ReportSubject(job.Broadcast), bus.Encode(rep), jetstream.WithMsgID(bus.ReportMsgID(owner)))
		if err == nil {
			break
		}
		if attempt >= 8 || ctx.Err() != nil {
			log.Error("report not published; page will run again", "err", err)
			msg.NakWithDelay(w.cfg.ParkDelay) //nolint:errcheck
			return
		}
		w.live.progress(owner, w.cfg.Clock.Now())
		<-w.cfg.Clock.After(backoff(attempt, 5*time.Second))
	}
	if err := msg.DoubleAck(pageCtx); err != nil {
		// The report is out; running the page again finds its claims and
		// sends nothing.
		log.Warn("page ack failed", "err", err)
	}
	switch {
	case rep.Class != bus.ClassNone:
		pagesRun.WithLabelValues("stopped").Inc()
	case rep.Done:
		pagesRun.WithLabelValues("done").Inc()
	default:
		pagesRun.WithLabelValues("walked").Inc()
	}
	switch rep.Class {
	case bus.ClassNone:
	case bus.ClassPaused, bus.ClassCancelled:
		// An operator's pause or cancel: routine, not a warning (a pause
		// storm wrote 988 warnings).
		log.Info("page stopped early", "sent", rep.Sent, "failed", rep.Failed, "deferred", rep.Deferred, "class", rep.Class)
		return
	default:
		log.Warn("page stopped early", "sent", rep.Sent, "failed", rep.Failed, "deferred", rep.Deferred, "class", rep.Class, "err", rep.Error)
		return
	}
	log.Debug("page done", "sent", rep.Sent, "failed", rep.Failed, "deferred", rep.Deferred, "done", rep.Done)
}

// heartbeat keeps the page ours while its run makes progress, however long
// one window's sends take or a store outage lasts; a dead worker's page goes
// to another worker once the ack wait passes without one, and so does a run
// that made no progress for MaxPageTime (a wedged send).
func (w *Worker) heartbeat(msg jetstream.Msg, owner string) (stop func()) {
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			case <-w.cfg.Clock.After(bus.PageHeartbeat):
				if !w.live.alive(owner, w.cfg.Clock.Now()) {
					w.cfg.Log.Warn("page made no progress for the longest a page may take; letting JetStream hand it on", "max", w.cfg.MaxPageTime)
					return
				}
				msg.InProgress() //nolint:errcheck // a lost heartbeat at worst lets the page run twice, which sends nothing twice
			}
		}
	}()
	return func() { close(done) }
}

// state is the broadcast's state: KV's (a watch, cheap), else the store's,
// which is the truth. A missing KV key is "not known yet" (a lagging mirror,
// a lost write), never "cancelled".
func (w *Worker) state(ctx context.Context, broadcast string) (store.State, error) {
	state, err := w.states.Get(ctx, broadcast)
	if err == nil && state != store.StateRunning {
		state, err = w.states.Fresh(ctx, broadcast)
	}
	if err == nil {
		return state, nil
	}
	id, perr := ulid.ParseStrict(broadcast)
	if perr != nil {
		return store.StateCancelled, nil // no broadcast can have this id: nothing to send
	}
	b, serr := w.cfg.Store.GetBroadcast(ctx, id)
	if errors.Is(serr, store.ErrNotFound) {
		return store.StateCancelled, nil
	}
	if serr != nil {
		return "", outage(fmt.Errorf("broadcast state: kv: %w; store: %w", err, serr))
	}
	return b.State, nil
}

// outageError marks an error of a dependency (the store, KV), not of the
// page: the page waits for it instead of counting a failed delivery.
type outageError struct{ err error }

func (e *outageError) Error() string { return e.err.Error() }
func (e *outageError) Unwrap() error { return e.err }

func outage(err error) error {
	if err == nil || errors.Is(err, store.ErrNotFound) {
		return err
	}
	return &outageError{err}
}

func isOutage(err error) bool {
	var o *outageError
	return errors.As(err, &o)
}

// backoff is the wait before retry attempt+1: doubling from 200 ms, at most
// limit.
func backoff(attempt int, limit time.Duration) time.Duration {
	d := 200 * time.Millisecond << min(attempt, 10)
	return min(d, limit)
}

// persist runs a store write whose outcome the page knows (what was sent,
// what failed) until it commits: a failover, a dropped connection or an
// ambiguous COMMIT must not turn known facts into "unknown". Every such
// write is safe to repeat (outcomes are fenced on the claim's owner and
// status; a claim returns the owner's rows again). It gives up after
// StoreRetryFor, or a few seconds after the worker is asked to stop.
func (w *Worker) persist(ctx context.Context, owner string, write func() error) error {
	clk := w.cfg.Clock
	start := clk.Now()
	var stopAt time.Time
	for attempt := 0; ; attempt++ {
		err := write()
		if err == nil || errors.Is(err, store.ErrNotRunning) {
			return err // a refused claim is an answer, not a failure to retry
		}
		now := clk.Now()
		if ctx.Err() != nil && stopAt.IsZero() {
			stopAt = now.Add(5 * time.Second)
		}
		if now.Sub(start) >= w.cfg.StoreRetryFor || (!stopAt.IsZero() && !now.Before(stopAt)) {
			return outage(err)
		}
		storeRetries.Inc()
		w.live.progress(owner, now)
		<-clk.After(backoff(attempt, 5*time.Second))
	}
}

// persistClaim runs a write that claims window (Claim, RecordAndClaim)
// through persist, and returns the contacts it claimed. A write tried more
// than once may have committed the first time, its answer lost. A contact
// erased in between is then held by this run, but the retry, which claims
// only contacts that still exist, does not return it: nobody would send it,
// and the reconciler would call it unknown when the run ends. So after a
// retry the run's own claims of the window that did not come back are
// recorded failed, never sent (store.ErasedBeforeSend). The outcome write
// is fenced on owner and status: a contact another run holds, or that has
// an outcome already, is left alone.
//
// The same holds when the retry is refused because the broadcast stopped
// running meanwhile (a pause): a refused claim still returns the run's own
// claims of contacts that exist, so a refusal after a retry means that
// whatever the first try claimed is of contacts erased since (simulation
// seed 1501249: the erased contact's claim was left to the reconciler,
// which settled it unknown although nothing was sent).
func (w *Worker) persistClaim(ctx, pageCtx context.Context, l *loaded, owner string, window []store.Contact, write func() ([]ulid.ULID, error)) ([]ulid.ULID, error) {
	var claimed []ulid.ULID
	tries := 0
	err := w.persist(ctx, owner, func() error {
		tries++
		var err error
		claimed, err = write()
		return err
	})
	if _, refused := notRunning(err); refused {
		claimed = nil // nothing of this window is held but the erased contacts' claims
	} else if err != nil {
		return claimed, err
	}
	if tries == 1 || len(claimed) == len(window) {
		return claimed, err
	}
	back := make(map[ulid.ULID]bool, len(claimed))
	for _, id := range claimed {
		back[id] = true
	}
	var gone []store.Outcome
	for _, c := range window {
		if !back[c.ID] {
			gone = append(gone, store.Outcome{ContactID: c.ID, Status: store.SendFailed, Error: store.ErasedBeforeSend})
		}
	}
	if err := w.persist(ctx, owner, func() error {
		return w.cfg.Store.RecordOutcomes(pageCtx, l.b.ID, owner, gone, w.cfg.Clock.Now())
	}); err != nil {
		// Left claimed: the reconciler settles them when the run is gone.
		w.cfg.Log.Warn("cannot record claims of erased contacts", "broadcast", l.b.ID, "err", err)
	}
	return claimed, err
}

// load returns the broadcast's definition and compiled content, read once
// per content revision: a job made after an edit (revision above the one
// held) reads it again.
func (w *Worker) load(ctx context.Context, id ulid.ULID, revision int) (*loaded, error) {
	w.mu.Lock()
	held, ok := w.broadcasts[id]
	w.mu.Unlock()
	if ok && held.current() >= revision &&
		(held.asked <= held.b.ContentRevision || w.cfg.Clock.Now().Sub(held.readAt) < anomalyTTL) {
		return held, nil
	}
	return w.read(ctx, id, revision)
}

// read reads the broadcast and compiles its content, for revision (what
// the reader was told the broadcast's revision is), and keeps it for the
// worker's next pages unless one read a newer one meanwhile.
func (w *Worker) read(ctx context.Context, id ulid.ULID, revision int) (*loaded, error) {
	b, err := w.cfg.Store.GetBroadcast(ctx, id)
	if err != nil {
		return nil, outage(err)
	}
	c := b.Content
	compiled, err := message.Compile(message.Template{FromName: c.FromName, FromAddress: c.FromAddress, Subject: c.Subject, HTML: c.HTML, Text: c.Text})
	if err != nil {
		return nil, fmt.Errorf("compile broadcast %s: %w", id, err)
	}
	l := &loaded{b: b, compiled: compiled, asked: revision, readAt: w.cfg.Clock.Now(), sendTallies: &sendTallies{}}
	w.mu.Lock()
	defer w.mu.Unlock()
	if cur, ok := w.broadcasts[id]; ok {
		if cur.b.ContentRevision > b.ContentRevision {
			return cur, nil // another page read a newer one meanwhile
		}
		l.sendTallies = cur.sendTallies
	}
	w.broadcasts[id] = l
	return l, nil
}

// runPage walks one page window by window, every claim held by owner. It
// returns the report to publish, or an error when the page could not be
// walked at all (an outage error when a dependency did not answer).
//
// handoff is called once the page will claim nothing more and at most one
// of its windows is without an outcome: the worker's next page may start
// then and use the slots this one's last window frees.
func (w *Worker) runPage(ctx, pageCtx context.Context, job bus.PageJob, owner string, handoff func()) (rep bus.Report, finish func() bus.Report, err error) {
	rep = bus.Report{Broadcast: job.Broadcast, Range: job.Range, Epoch: job.Epoch, From: job.From, Next: job.From, Limit: job.Limit, Probed: job.Probe, Issued: job.Issued}
	id, err := ulid.ParseStrict(job.Broadcast)
	if err != nil {
		return rep, nil, fmt.Errorf("page job: broadcast id: %w", err)
	}
	from, err1 := ulid.ParseStrict(job.From)
	until, err2 := ulid.ParseStrict(job.Until)
	if err := errors.Join(err1, err2); err != nil {
		return rep, nil, fmt.Errorf("page job: bounds: %w", err)
	}
	l, err := w.load(pageCtx, id, max(job.Content, w.revision(job.Broadcast)))
	if err != nil {
		return rep, nil, err
	}
	rep.Domain = l.compiled.SendingDomain()
	// Eligibility is decided now, at page time: an unsubscribe that landed
	// since the broadcast started is honoured here.
	limit := wholeWindows(job.Limit, w.cfg.Concurrency)
	contacts, err := w.cfg.Store.EligiblePage(pageCtx, l.b, from, until, limit)
	if err != nil {
		return rep, nil, outage(err)
	}
	h := newHolds(job)
	windows := slices.Collect(slices.Chunk(contacts, w.cfg.Concurrency))
	if len(windows) == 0 {
		rep.Done = true // nobody eligible is left in the range
		return rep, nil, nil
	}
	if stop, class := w.stopBefore(ctx, pageCtx, job, l, owner); stop {
		rep.Class = class
		return rep, nil, nil
	}
	// Claim before send: only rows this run holds may be sent. Windows are
	// claimed one ahead of the window being sent: the first two are claims
	// of their own, and window k+2 is claimed in the commit that records
	// window k's outcomes, so a window costs one commit and the next one's
	// sends start as this one's slots free up (pipeline). The claims without
	// an outcome are at most two windows, the one being sent and the one
	// behind it (each commit records one window as it claims one), and the
	// stragglers, sends that outlived their window's conclusion (as many
	// as the worker's straggler tokens, pipeline.wait). A claim
	// that may have committed is retried as it is: the retry gets this run's
	// claims back, so none is left behind unsent for the reconciler to call
	// unknown.
	p := newPipeline(w, pageCtx, l, "page", 1)
	// late are the stragglers of concluded windows (pipeline.wait): each is
	// concluded with the first window concluded after it ends, or at the
	// page's end, which waits for them. Each holds a token until its
	// outcome is committed (or, after a failed write, until its send has
	// ended and the page gives its claims up to the reconciler).
	var late []straggler
	defer func() {
		// A claimed window is sent whole, however the page ends; the
		// stragglers a finish is left with are its to wait for.
		if p.closeLaunched(); finish == nil {
			p.sends.Wait()
			w.giveLate(len(late))
		}
	}()
	// claimedOf counts each window's claims. While the page holds one
	// without an outcome the content cannot be edited (an edit needs none
	// out); a claim that takes rows when it held none (the first, or after
	// windows whose rows a duplicate copy of the page had taken) looks at
	// the store's revision (sendable). Nothing is sending then. So does a
	// claim that took more than one try: the page may have held nothing
	// between them (a first try that committed, its answer lost, having
	// claimed nothing).
	claimedOf := make([]int, len(windows))
	fresh := func(holding, tries int, claimed []ulid.ULID) {
		if (holding == 0 || tries > 1) && len(claimed) > 0 {
			l = w.sendable(ctx, pageCtx, l, owner)
			p.setContent(l)
		}
	}
	claim := func(k int) error {
		tries := 0
		claimed, err := w.persistClaim(ctx, pageCtx, l, owner, windows[k], func() ([]ulid.ULID, error) {
			tries++
			return w.cfg.Store.Claim(pageCtx, l.b.ID, owner, w.claimsFor(l, windows[k]), w.cfg.Clock.Now())
		})
		if err == nil {
			fresh(sum(claimedOf[:k]), tries, claimed)
			claimedOf[k] = len(claimed)
			w.release(pageCtx, p, l, h, windows[k], claimed, owner)
		}
		return err
	}
	if err := claim(0); err != nil {
		if class, refused := notRunning(err); refused {
			rep.Class = class // nothing claimed: the range resumes from here
			return rep, nil, nil
		}
		return rep, nil, err
	}
	released := 1
	var claimErr error // window 1's claim failed: the page ends after window 0
	if len(windows) > 1 {
		if stop, _ := w.stopBefore(ctx, pageCtx, job, l, owner); !stop {
			if claimErr = claim(1); claimErr == nil {
				released = 2
			}
		}
	}
	next := from
	stopped := false // the report's Next and Class are set; later windows only add counts
	if released == len(windows) && released == 1 {
		handoff()
	}
	for k := 0; k < released; k++ {
		window := windows[k]
		b, pending := p.wait()
		holding := sum(claimedOf[k:released]) + len(late) // before this window's outcomes and the next claim commit
		var over []straggler
		over, late = regroup(late, b, pending)
		judged := view(b, pending, over)
		res, outcomes := w.conclude(l, judged, len(pending))
		res.claimed = len(b.mine)
		w.live.progress(owner, w.cfg.Clock.Now())

		// Claim window k+2 only if it will be sent: a page that stops
		// here (a send error, a drain, a pause) must not leave claims
		// nobody sends. Window k+1 is claimed and goes out regardless.
		var following []store.Contact
		stop, class := stopped || res.stopAt >= 0 || claimErr != nil, bus.ClassNone
		if !stop && released < len(windows) {
			if stop, class = w.stopBefore(ctx, pageCtx, job, l, owner); !stop {
				following = windows[released]
			}
		}
		tries := 0
		claimed, err := w.persistClaim(ctx, pageCtx, l, owner, following, func() ([]ulid.ULID, error) {
			tries++
			return w.cfg.Store.RecordAndClaim(pageCtx, l.b.ID, owner, outcomes, w.claimsFor(l, following), w.cfg.Clock.Now())
		})
		if c, refused := notRunning(err); refused {
			// This window's outcomes are recorded; the next one is not
			// claimed, so the page stops after the windows sending now,
			// as if stopBefore had seen the state.
			following, err = nil, nil
			stop, class = true, c
		}
		if err != nil {
			// The outcomes of this window are not recorded: the cursor must
			// not pass it, and its claims (and those of the window behind
			// it, which is still sent) stay this run's until the
			// reconciler finds the run gone. Report what is safe: nor
			// may it pass a straggler without an outcome.
			if !stopped {
				rep.Next = next.String()
				rep.Class, rep.Error = bus.ClassTransient, err.Error()
			}
			late = append(late, over...) // their tokens too, once their sends have ended
			rep.Next = before(rep.Next, late)
			return rep, nil, nil
		}
		w.giveLate(len(over)) // their outcomes are committed
		if following != nil {
			fresh(holding, tries, claimed)
			claimedOf[released] = len(claimed)
			w.release(pageCtx, p, l, h, following, claimed, owner)
			released++
		}
		if following == nil && released-(k+1) <= 1 {
			handoff() // nothing more to claim; the last window is sending
		}
		w.count(res)
		res.addTo(&rep)
		if stopped {
			continue
		}
		if res.stopAt >= 0 {
			rep.Next = judged.window[res.stopAt].ID.String() // a straggler's may be an earlier window's
			rep.Class, rep.Error = res.class, res.err
			stopped = true
			continue
		}
		last := window[len(window)-1].ID
		n, ok := ranges.Next(last)
		if !ok || last == until {
			rep.Done = true
			rep.Next = last.String()
			stopped = true
			continue
		}
		next = n
		if claimErr != nil {
			rep.Next = next.String()
			stopped = true
			if c, refused := notRunning(claimErr); refused {
				rep.Class = c // window 1 was not claimed
				continue
			}
			// Window 1's claims may have committed: they stay this run's
			// until the reconciler finds the run gone.
			rep.Class, rep.Error = bus.ClassTransient, claimErr.Error()
			continue
		}
		if stop && k+1 == released {
			rep.Next = next.String()
			rep.Class = class // ClassNone when draining: report how far we got
			stopped = true
		}
	}
	if !stopped {
		rep.Next = next.String()
		rep.Done = len(contacts) < limit
	}
	if len(late) == 0 {
		return rep, nil, nil
	}
	// The page is reported once every row it claimed has an outcome (or
	// is the reconciler's after a failed write, as above): its stragglers
	// first. The next page has the turn meanwhile (handoff), and handle
	// waits for them off the puller.
	sends := late
	late = nil // their tokens are finish's to give back
	return rep, func() bus.Report { return w.finishLate(ctx, pageCtx, l, owner, sends, rep, stopped) }, nil
}

// finishLate waits for a page's stragglers and records their outcomes,
// judged as one window, and returns the page's report with them: a
// straggler that stopped the page moves its cursor back to it, and a
// failed write to before the first of them.
func (w *Worker) finishLate(ctx, pageCtx context.Context, l *loaded, owner string, sends []straggler, rep bus.Report, stopped bool) bus.Report {
	res, judged, err := w.recordLate(ctx, pageCtx, l, owner, sends, nil)
	if err != nil {
		// Not recorded: the rows stay this run's claims until the
		// reconciler finds the run gone. A stop the page had already
		// reported (a pause, a halt) keeps its class.
		if rep.Class == bus.ClassNone {
			rep.Class, rep.Error = bus.ClassTransient, err.Error()
		}
		rep.Next, rep.Done = before(rep.Next, sends), false
		return rep
	}
	w.count(res)
	res.addTo(&rep)
	if res.stopAt >= 0 {
		if !stopped {
			rep.Next, rep.Done = judged.window[res.stopAt].ID.String(), false
		}
		if rep.Class == bus.ClassNone {
			// Even on a page that walked its range to the end: its rows
			// are recorded as the stop's (a halt's deferrals), so the
			// report must carry it.
			rep.Class, rep.Error = res.class, res.err
		}
	}
	return rep
}

// recordLate waits for a run's last stragglers and records their outcomes,
// judged as one window apart from theirs, after settle (a sweep's retry
// rules; nil for none) has had its say; it gives their tokens back either
// way, since a failed write leaves them the reconciler's once the run is
// reported.
func (w *Worker) recordLate(ctx, pageCtx context.Context, l *loaded, owner string, sends []straggler, settle func(*windowResult, []store.Outcome)) (windowResult, *batch, error) {
	awaitAll(sends)
	judged := assemble(sends)
	// Judged apart from their windows: the whole-window rules do not
	// apply to the slow few (conclude's undecided).
	res, outcomes := w.conclude(l, judged, w.cfg.Concurrency)
	if settle != nil {
		settle(&res, outcomes)
	}
	err := w.persist(ctx, owner, func() error {
		return w.cfg.Store.RecordOutcomes(pageCtx, l.b.ID, owner, outcomes, w.cfg.Clock.Now())
	})
	w.giveLate(len(sends))
	w.live.progress(owner, w.cfg.Clock.Now())
	return res, judged, err
}

// release hands a claimed window to the pipeline, with the holds the
// governor has now.
func (w *Worker) release(ctx context.Context, p *pipeline, l *loaded, h *holds, window []store.Contact, claimed []ulid.ULID, owner string) {
	w.refreshHolds(ctx, l, h)
	p.start(w.prepare(window, ids(claimed), h, w.cfg.Clock.Now(), owner))
}

func sum(xs []int) (n int) {
	for _, x := range xs {
		n += x
	}
	return n
}

// sendable is the content to send the claims just taken with: l, unless
// the store holds a newer content revision. It is read once a run that
// held no claim has taken some, and an edit needs the broadcast paused with
// no claim out, so the revision read stays while the run holds claims
// (simulation seed 5028: a page whose first windows' rows a duplicate copy
// had taken held none through a pause, an edit and a resume, and its next
// window's claim found the new revision). The claim itself
// checks only the state: a job made before an edit and run after it, by a
// worker whose KV watch had not yet seen the edit (stopBefore), would
// otherwise send the old content. The read is retried as a store write is
// (persist); when the store still cannot say, the content held is sent (as
// before the check): the claims are taken, and leaving them unsent would
// make them the reconciler's unknowns.
func (w *Worker) sendable(ctx, pageCtx context.Context, l *loaded, owner string) *loaded {
	fresh := l
	err := w.persist(ctx, owner, func() error {
		n, err := w.cfg.Store.ContentRevision(pageCtx, l.b.ID)
		if err == nil && n > l.b.ContentRevision {
			fresh, err = w.read(pageCtx, l.b.ID, n)
		}
		return err
	})
	if err != nil {
		w.cfg.Log.Warn("cannot read the broadcast's content revision; sending the content held",
			"broadcast", l.b.ID, "revision", l.b.ContentRevision, "err", err)
		return l
	}
	return fresh
}

// RunPage walks one page job (a range's page or a sweep) with every claim
// held by owner, and returns the report it would publish. It is the page
// walk without JetStream: no heartbeat, no ack, no waiting out outages
// (an outage is an error); the simulation drives it directly.
func (w *Worker) RunPage(ctx context.Context, job bus.PageJob, owner string) (bus.Report, error) {
	w.live.progress(owner, w.cfg.Clock.Now()) // the run, from its start (Lapse ends it)
	var rep bus.Report
	var finish func() bus.Report
	var err error
	if job.Sweep {
		rep, finish, err = w.runSweep(ctx, ctx, job, owner)
	} else {
		rep, finish, err = w.runPage(ctx, ctx, job, owner, func() {})
	}
	if finish != nil {
		rep = finish()
	}
	return rep, err
}

// wholeWindows trims a page's limit to a whole number of in-flight windows.
// Windows run one after another, so a page of 200 walked 64 at a time ends
// with a window of 8 that keeps the server a fraction as busy for a whole
// round trip. The rows left go to the range's next page; the coordinator
// takes back the unused grant from the report's claimed count.
func wholeWindows(limit, window int) int {
	if limit <= window {
		return limit
	}
	return limit - limit%window
}

// stopBefore says whether the page must stop before its next window: the
// worker is draining, or the content was edited since the page read it, or
// the run can send nothing more (its liveness may have lapsed:
// liveness.stale) (ClassNone: report how far it got; the range's next page
// reads the new content, under a new run), or the broadcast is no longer
// running (paused, or cancelled and finished).
func (w *Worker) stopBefore(ctx, pageCtx context.Context, job bus.PageJob, l *loaded, owner string) (bool, bus.ErrorClass) {
	if ctx.Err() != nil || w.revision(job.Broadcast) > l.current() || w.live.stale(owner) {
		return true, bus.ClassNone
	}
	state, err := w.states.Get(pageCtx, job.Broadcast)
	switch {
	case err == nil && state == store.StateRunning:
		return false, bus.ClassNone
	case state.Finished():
		return true, bus.ClassCancelled
	default:
		return true, bus.ClassPaused
	}
}

// ContentRevisions is a StateSource that also knows each broadcast's
// content revision (the KV watch does: bus.StateRecord.Content).
type ContentRevisions interface {
	Revision(broadcast string) int
}

// revision is the broadcast's content revision as the state source knows
// it (0 when it does not). With the job's, it says when the content a page
// holds is older than the broadcast's: a job made before an edit and run
// after it (queued through the pause, or redelivered), or a page whose
// broadcast was paused, edited and resumed between two of its windows.
func (w *Worker) revision(broadcast string) int {
	if r, ok := w.states.(ContentRevisions); ok {
		return r.Revision(broadcast)
	}
	return 0
}

// notRunning says whether err is the store refusing a claim because the
// broadcast is not running, and the class a page stopped by it reports:
// the store's answer stands even when the worker's view of the state
// (stopBefore) still says running.
func notRunning(err error) (bus.ErrorClass, bool) {
	var nr *store.NotRunningError
	if !errors.As(err, &nr) {
		return bus.ClassNone, false
	}
	if nr.State == store.StatePaused {
		return bus.ClassPaused, true
	}
	return bus.ClassCancelled, true // finished, or gone
}

// claimsFor is the ledger claims of a window's contacts.
func (w *Worker) claimsFor(l *loaded, window []store.Contact) []store.Claim {
	if len(window) == 0 {
		return nil
	}
	domain := l.compiled.SendingDomain()
	claims := make([]store.Claim, len(window))
	for i, c := range window {
		claims[i] = store.Claim{ContactID: c.ID, Email: c.Email, MessageID: message.MessageID(l.b.ID, c.ID, domain)}
	}
	return claims
}

func ids(claimed []ulid.ULID) map[ulid.ULID]bool {
	mine := make(map[ulid.ULID]bool, len(claimed))
	for _, id := range claimed {
		mine[id] = true
	}
	return mine
}

// windowResult is what one in-flight window did.
type windowResult struct {
	claimed, sent, failed, deferred int
	// inDoubt: messages lost after the final dot (bus.Report.InDoubt).
	inDoubt int
	// providers is what each receiving provider did, for the governor.
	providers map[string]bus.ProviderResult
	// stopAt is the index in the window of the first contact whose claim was
	// released (not sent), or -1 when the window went through.
	stopAt int
	class  bus.ErrorClass
	err    string
	// reached and unreached count the window's sends by whether the
	// exchange got as far as naming the recipient (bus.Report.Reached);
	// unreachedErr is the last error of an unreached one.
	reached, unreached int
	unreachedErr       string
}

func (r windowResult) addTo(rep *bus.Report) {
	rep.Claimed += r.claimed
	rep.Sent += r.sent
	rep.Failed += r.failed
	rep.Deferred += r.deferred
	rep.InDoubt += r.inDoubt
	rep.Reached += r.reached
	rep.Unreached += r.unreached
	for p, pr := range r.providers {
		if rep.Providers == nil {
			rep.Providers = map[string]bus.ProviderResult{}
		}
		sum := rep.Providers[p]
		sum.Sent += pr.Sent
		sum.Transient += pr.Transient
		sum.Quota = sum.Quota || pr.Quota
		sum.Hold, sum.Linear = max(sum.Hold, pr.Hold), sum.Linear || pr.Linear
		sum.StepEnded = sum.StepEnded || pr.StepEnded
		if pr.Reply != "" {
			sum.Reply = pr.Reply
		}
		rep.Providers[p] = sum
	}
}

// provider records one send's result for its receiving provider.
func (r *windowResult) provider(p string, f func(*bus.ProviderResult)) {
	if r.providers == nil {
		r.providers = map[string]bus.ProviderResult{}
	}
	pr := r.providers[p]
	f(&pr)
	r.providers[p] = pr
}

func (w *Worker) count(res windowResult) {
	messages.WithLabelValues("sent").Add(float64(res.sent))
	messages.WithLabelValues("failed").Add(float64(res.failed))
	messages.WithLabelValues("deferred").Add(float64(res.deferred))
}

// batch is one window on its way through a page's pipeline: the contacts,
// which of them this run holds and which the governor holds, and, once
// done is closed, every send's error.
type batch struct {
	// owner is the run its claims were taken by: a send starts only while
	// it holds (liveness.sendable); one that does not is errLapsed.
	owner      string
	window     []store.Contact
	mine       map[ulid.ULID]bool
	providers  []string
	deferUntil []time.Time
	now        time.Time
	errs       []error
	attempted  int
	done       chan struct{}
	// finished gets the index of each send as it ends (its errs and took
	// entries set): pipeline.wait counts them, and a straggler's ends
	// later.
	finished chan int
	// took is how long each send took.
	took []time.Duration
	// lanes[i] is the carried ramp step contact i is sent under, nil for
	// none (holds.lane).
	lanes []*lane
	// giveUp is the page's holds.giveUp: the reason a held recipient of
	// each provider named fails with instead of waiting.
	giveUp map[string]string
}

// lane is the carried ramp step contact i is sent under, nil for none.
func (b *batch) lane(i int) *lane {
	if b.lanes == nil {
		return nil
	}
	return b.lanes[i]
}

// givenUpStep reports whether contact i, of provider, was sent under the
// ramp step of a provider given up (bus.PageJob's GiveUp).
func (b *batch) givenUpStep(i int, provider string) bool {
	_, given := b.giveUp[provider]
	return given && b.lane(i) != nil
}

// prepare decides, before a window is sent, which of its contacts are sent:
// those this run holds whose provider the governor does not hold.
func (w *Worker) prepare(window []store.Contact, mine map[ulid.ULID]bool, h *holds, now time.Time, owner string) *batch {
	b := &batch{owner: owner, window: window, mine: mine, providers: make([]string, len(window)), deferUntil: make([]time.Time, len(window)),
		now: now, errs: make([]error, len(window)), took: make([]time.Duration, len(window)), done: make(chan struct{}), finished: make(chan int, len(window)), giveUp: h.giveUp}
	for i, c := range window {
		if mine[c.ID] {
			b.providers[i], b.deferUntil[i] = h.check(c.Email)
			if b.deferUntil[i].IsZero() {
				b.attempted++
				if ln := h.lane(b.providers[i]); ln != nil {
					if b.lanes == nil {
						b.lanes = make([]*lane, len(window))
					}
					b.lanes[i] = ln
					ln.domains[strings.ToLower(c.Email[strings.LastIndexByte(c.Email, '@')+1:])] = true
				}
			}
		}
	}
	return b
}

// conclude says what became of each of a sent window's contacts: the
// outcome to record for every claimed one. A contact not sent for a reason
// that is not its own (a transient refusal, a quota, a channel error) is
// recorded deferred with a retry time, never released: another copy of
// this page may be past it already, and the cursor only moves forward.
// stopAt is the first such contact.
//
// undecided is how many sends of the window b stands for are not in it
// (its stragglers, still running), or, for stragglers judged apart from
// their windows, the window's size: the rules about a whole window
// (windowUnwell, nobody reached, a window all refused) count them as
// undecided attempts rather than judge the sends that ended first, or
// the slow ones alone, as a window.
func (w *Worker) conclude(l *loaded, b *batch, undecided int) (res windowResult, outcomes []store.Outcome) {
	res.stopAt = -1
	window, mine, providers, deferUntil, errs, attempted := b.window, b.mine, b.providers, b.deferUntil, b.errs, b.attempted
	// stepAttempts are the real attempts of given-up providers' ramp
	// steps: StepEnds judges them as the step's, so windowUnwell leaves
	// them out.
	stepAttempts, lapsed := 0, 0
	for i, err := range errs {
		if err == errStepEnded {
			// Not sent: the carried step ended at an earlier refusal. The
			// recipient waits like a held provider's, without an attempt.
			_, deferUntil[i] = b.lane(i).over()
			attempted--
		} else if err == errLapsed {
			deferUntil[i] = w.cfg.Clock.Now() // never sent: due at once
			attempted--
			lapsed++
		} else if err == errLaneBusy {
			deferUntil[i] = w.cfg.Clock.Now() // never sent: due at once
			attempted--
		} else if b.givenUpStep(i, providers[i]) {
			stepAttempts++
		}
	}
	if lapsed > 0 {
		w.cfg.Log.Warn("claims not sent: this worker's liveness may have lapsed since they were taken (the process was stopped or cut off from NATS); the reconciler settles them, or they are retried",
			"broadcast", l.b.ID, "owner", b.owner, "not_sent", lapsed)
	}
	haltRepeatedRenderErrors(errs, attempted, &l.renders)
	kinds := sendKinds(b)
	// answered is when the window's last reply came back, which is when a
	// deferral's wait starts: the server counts from its refusal, and a
	// send that waited for a slot behind slow ones may have been refused
	// minutes after the window began (b.now).
	answered := w.cfg.Clock.Now()
	haltLone := l.refusals.judge(kinds, answered, undecided)
	haltBounce := l.bounces.judge(kinds, answered, undecided)
	// A send refused before its recipient was named is charged to the
	// recipient only when its MAIL FROM was refused while others of the
	// window got through: then the relay works and the refusal is about
	// this message (a parameter it alone carries), and uncharged it would
	// wait for ever. A connection, TLS or login refused is never about the
	// message: a relay at its connection limit (421 at the greeting) let
	// one pooled connection through and charged the rest of the window,
	// attempt after attempt, towards failing recipients it never refused
	// (tester: attempts 6 to 9 with no RCPT ever seen).
	windowReached := slices.ContainsFunc(kinds, sendKind.reached)
	refused, firstRefused, refusedErr := 0, -1, ""

	for i, c := range window {
		if !mine[c.ID] {
			continue
		}
		if ln := b.lane(i); ln != nil {
			if ended, _ := ln.over(); ended {
				res.provider(providers[i], func(p *bus.ProviderResult) { p.StepEnded = true })
			}
		}
		if !deferUntil[i].IsZero() {
			if why, ok := b.giveUp[providers[i]]; ok && errs[i] != errLaneBusy {
				// The provider has accepted nothing for so long that the
				// coordinator gave up on it: failed, not attempted, and
				// reopenable (store.GaveUpPrefix) once it takes mail again.
				outcomes = append(outcomes, store.Outcome{ContactID: c.ID, Status: store.SendFailed, Error: why, NotAttempted: true})
				res.failed++
				continue
			}
			why := store.HeldReason(providers[i])
			switch errs[i] {
			case errStepEnded:
				why = store.StepEndedReason(providers[i])
			case errLapsed:
				why = "deferred: " + errLapsed.Error()
			case errLaneBusy:
				why = "deferred: " + providers[i] + " ramping back up, " + errLaneBusy.Error()
			}
			outcomes = append(outcomes, store.Outcome{ContactID: c.ID, Status: store.SendDeferred, RetryAt: deferUntil[i],
				Error: why, NotAttempted: true})
			res.deferred++
			continue
		}
		err := errs[i]
		switch {
		case kinds[i].reached():
			res.reached++
		case kinds[i] == sendEarly:
			res.unreached++
			res.unreachedErr = err.Error()
		}
		if err == nil {
			outcomes = append(outcomes, store.Outcome{ContactID: c.ID, Status: store.SendSent})
			res.sent++
			res.provider(providers[i], func(p *bus.ProviderResult) { p.Sent++ })
			continue
		}
		class := classOf(err)
		if class == transport.Recipient && !(haltBounce && kinds[i] == sendBounce) {
			why := err.Error()
			if se := (*transport.SendError)(nil); errors.As(err, &se) && se.Refused {
				why = store.NotSentPrefix + why // a retry may send it, once the relay can take it
			}
			outcomes = append(outcomes, store.Outcome{ContactID: c.ID, Status: store.SendFailed, Error: why, HardBounce: transport.HardBounce(err)})
			res.failed++
			continue
		}
		if kinds[i] == sendLone && !haltLone {
			// Rare enough to be this recipient's (refusals.go): failed
			// with the reply, never suppressed for it.
			outcomes = append(outcomes, store.Outcome{ContactID: c.ID, Status: store.SendFailed, Error: err.Error()})
			res.failed++
			continue
		}
		// Kept by the governor in KV and shown by status: the address
		// withheld, as in a reason (explainFor).
		reply := store.WithholdRecipient(transport.Reply(err), c.Email, c.Name)
		guide, guided := transport.Guide(err)
		switch {
		case guided && guide.Hold > 0:
			// The provider's own guidance: pause it as it asks, without
			// lowering the domain's ceiling for everyone else.
			res.provider(providers[i], func(p *bus.ProviderResult) {
				p.Hold, p.Linear, p.Reply = max(p.Hold, guide.Hold), p.Linear || guide.Linear, reply
			})
		case class == transport.Quota:
			res.provider(providers[i], func(p *bus.ProviderResult) { p.Quota, p.Reply = true, reply })
		case class == transport.Transient && !notTheProviders(err):
			res.provider(providers[i], func(p *bus.ProviderResult) { p.Transient++; p.Reply = reply })
		}
		var se *transport.SendError
		if errors.As(err, &se) && se.MaybeDelivered {
			// A connection lost after the final dot may have delivered the
			// message: hand the claim to the reconciler (no owner) rather
			// than risk a second copy.
			outcomes = append(outcomes, store.Outcome{ContactID: c.ID, Status: store.SendClaimed, Error: "in doubt: " + err.Error()})
			res.inDoubt++
			messages.WithLabelValues("in_doubt").Inc()
		} else {
			why := err.Error()
			if (kinds[i] == sendLone && haltLone) || (kinds[i] == sendBounce && haltBounce) {
				// Its own refusal, with the others', halted the broadcast:
				// the row an operator's resume --fail-refused fails.
				why = store.HaltedPrefix + why
			}
			outcomes = append(outcomes, store.Outcome{ContactID: c.ID, Status: store.SendDeferred, RetryAt: w.retryAt(answered, err), Error: why,
				NotAttempted: kinds[i] == sendEarly && !(windowReached && transport.RefusedAtMailFrom(err))})
			res.deferred++
			messages.WithLabelValues("retry").Inc()
		}
		if (class == transport.Transient || class == transport.Quota) && b.givenUpStep(i, providers[i]) {
			// The ramp step of a provider given up: StepEnds judges it
			// and the rest of its recipients fail as given up. Stopping
			// the page for it would count the range as making no
			// progress while its other recipients go out, and a broadcast
			// mostly to that provider would fail instead of completing
			// with them given up.
			continue
		}
		if class == transport.Transient {
			if aboutOneMailbox(err) {
				continue // deferred; says nothing of the server's health
			}
			// One recipient's 451 among many accepted is a provider's
			// ordinary deferral: the row goes out later and the page goes
			// on. The page stops only when the window looks unwell (below).
			refused++
			if firstRefused < 0 {
				firstRefused, refusedErr = i, store.WithholdRecipient(err.Error(), c.Email, c.Name)
			}
			continue
		}
		if res.stopAt < 0 {
			res.stopAt, res.class, res.err = i, busClass(class), explainFor(err, c)
		}
	}
	// Half or more of the window's real attempts refused for a transient
	// reason, and at least minStopRefusals of them: the server (or the
	// route to it) is struggling, so the page stops and the range backs
	// off, as for a quota or channel error. The floor keeps a provider's
	// ordinary few percent of deferrals from stopping a short window (one
	// refusal of the last two sends is half) and idling its range.
	if haltBounce && res.stopAt >= 0 && kinds[res.stopAt] == sendBounce {
		res.err = "the relay refused every recipient tried as an address that does not exist, which is more likely its mistake than the list's (does it relay for these domains, or take them for its own?); nobody was suppressed for the refusals that halted: " + res.err
	}
	if res.stopAt >= 0 && ((haltLone && kinds[res.stopAt] == sendLone) || (haltBounce && kinds[res.stopAt] == sendBounce)) {
		// The operator's way out when it is the recipients' after all
		// (a few that refuse on every try, swept together after each
		// resume, halted every resume until their attempts ran out).
		res.err += "; if the relay takes other recipients and these refuse on every try, resume with --fail-refused to fail them"
	}
	// A window that reached none of its recipients (every send failed at
	// connect, TLS, AUTH or MAIL FROM) is unwell however few it sent: its
	// rows are charged no attempt, so only the page's report, counted
	// toward no progress, ends a relay that never takes mail again (a
	// sweep of two due rows never met the rule above, and ran for ever).
	reachedNobody := res.unreached > 0 && res.reached == 0 && firstRefused >= 0 && undecided == 0
	if res.stopAt < 0 && (windowUnwell(refused, attempted-stepAttempts+undecided, w.cfg.Concurrency) || reachedNobody) {
		res.stopAt, res.class, res.err = firstRefused, bus.ClassTransient, refusedErr
	}
	return res, outcomes
}

// sendKinds says what each send of a sent window counts as for the
// refusal tally, in the window's order.
func sendKinds(b *batch) []sendKind {
	kinds := make([]sendKind, len(b.window))
	for i, c := range b.window {
		err := b.errs[i]
		switch {
		case !b.mine[c.ID] || !b.deferUntil[i].IsZero() || err == errStepEnded || err == errLapsed || errors.As(err, new(*renderError)):
			kinds[i] = sendUnsent
		case transport.BeforeRecipient(err):
			kinds[i] = sendEarly
		case err == nil:
			kinds[i] = sendAccepted
		case transport.MaybeOneRecipient(err):
			kinds[i] = sendLone
		case classOf(err) == transport.Recipient && transport.HardBounce(err):
			kinds[i] = sendBounce
		default:
			kinds[i] = sendOther
		}
	}
	return kinds
}

// minStopRefusals is the fewest transient refusals in a window that stop
// the page (see deliver). Below it the rows are deferred and retried, and a
// provider refusing everything still opens its breaker within a few
// windows.
const minStopRefusals = 3

// windowUnwell reports whether a window whose real attempts were refused
// refused times (for transient reasons) shows the server struggling. A
// worker whose windows hold fewer than minStopRefusals (Concurrency 1 or
// 2, for a relay that allows as many connections) needs all of a full
// window refused instead: with the floor at 3 its windows never stopped a
// page, so a relay refusing everyone was never reported as such and the
// broadcast went on until each recipient had failed by its attempts
// (simulation seed 500100, window 1).
func windowUnwell(refused, attempted, window int) bool {
	return refused >= min(minStopRefusals, window) && 2*refused >= attempted
}

// explainFor is transport.Explain(err), naming the recipient's contact
// when the server answered at RCPT or DATA: a message refused as spam
// halts the broadcast, and the operator needs to know whose message it
// was to look at it (and to suppress that contact, or change the content,
// before a resume, which tries that recipient first). A refusal at
// connect, AUTH or MAIL FROM is about no one recipient. The contact is
// named by id and its address withheld, in the reply too: a broadcast's
// reason is kept in the store, KV and logs, which an erasure does not
// reach (tester: the address stayed after the contact was erased).
func explainFor(err error, c store.Contact) string {
	msg := store.WithholdRecipient(transport.Explain(err), c.Email, c.Name)
	var se *transport.SendError
	if errors.As(err, &se) && (se.Stage == transport.StageRcpt || se.Stage == transport.StageData) {
		msg += " (sending to contact " + c.ID.String() + ")"
	}
	return msg
}

// errStepEnded marks a carried provider's recipient not sent because an
// earlier one of the step was refused: deferred, not attempted.
var errStepEnded = errors.New("ramp step ended by a refusal")

// errLaneBusy marks a carried provider's recipient not sent because every
// connection of the step was busy while the rest of its window was sent
// (lane.acquire): deferred, not attempted, and due at once, for a later
// window or sweep.
var errLaneBusy = errors.New("every connection of its ramp step busy")

// errLapsed marks a recipient not sent because the claim's lease ended
// before its send began (liveness.sendable): the reconciler may have
// settled the claim. Deferred, not attempted; if the claim is no longer
// this run's, the store refuses that outcome and keeps the reconciler's.
var errLapsed = errors.New("not sent: this worker's liveness may have lapsed since the claim (the process was stopped or cut off from NATS)")

// classOf is what a send's error means: transport.Classify's class, except
// that a message that could not be built for its contact is that
// recipient's failure.
func classOf(err error) transport.Class {
	var renderErr *renderError
	if errors.As(err, &renderErr) {
		return transport.Recipient
	}
	return transport.Classify(err)
}

// notTheProviders reports a transient refusal that says nothing of the
// recipient's provider, so neither a window's tally for its breaker nor a
// ramp step counts it: one mailbox's (aboutOneMailbox), or the relay's, at
// connect or AUTH, which every recipient goes through
// (transport.AtTheServer). Counted, a relay down for a minute opened a
// breaker per recipient domain (500 of them for a tester's list), each
// ramping back after it returned, and put every provider ramping back to
// open.
func notTheProviders(err error) bool { return aboutOneMailbox(err) || transport.AtTheServer(err) }

// aboutOneMailbox reports a temporary refusal of one mailbox (an enhanced
// status 4.2.x at RCPT or DATA: "452 4.2.2 mailbox full", "450 4.2.1 the
// user is receiving mail at a rate that prevents additional messages").
// The row is deferred and retried like any 4xx, bounded by its attempts,
// but it says nothing of the provider: counted, a tail of full mailboxes
// kept a provider's breaker re-opening every 30 s, ended its ramp steps,
// stopped pages as if the server were struggling, and kept "nothing
// accepted since" set, which gives a provider up after a day.
//
// Greylisting is the same ("450 4.7.1 <a@b>: Recipient address rejected:
// Greylisted"): a deferral of each new sender/recipient pair, which every
// recipient of a server meets once. Counted, a greylisting server opened
// its provider's breaker, let 5 new recipients through per ramp cycle,
// and failed the broadcast for no progress after 16 minutes (found by a
// tester). rspamd greylists with "451 4.7.1 Try again later"
// (rspamdGreylist), the default of mailcow and many other installs: counted
// as a provider's deferral, it opened the breaker, whose ramp probed new
// recipients each refused once more (found by a tester).
func aboutOneMailbox(err error) bool {
	var se *transport.SendError
	return errors.As(err, &se) && (se.Stage == transport.StageRcpt || se.Stage == transport.StageData) &&
		se.Code/100 == 4 && (strings.HasPrefix(se.Enhanced, "4.2.") || greylisting(se))
}

// reGreylist is a greylisting server's words (postgrey: "Greylisted, see
// http://postgrey.schweikert.ch/help/…").
var reGreylist = regexp.MustCompile(`(?i)gr[ae]y-? ?list`)

// isRecipientError reports whether err is the recipient's own failure (a bad
// address, a message that cannot be built for it), which says nothing about
// the provider.
func isRecipientError(err error) bool { return classOf(err) == transport.Recipient }

// isDeferral reports whether err is a provider's plain transient refusal,
// the kind a ramp step tolerates a share of: not a quota, nor a pause the
// provider's guidance asks for, nor a channel error.
func isDeferral(err error) bool {
	if g, ok := transport.Guide(err); ok && g.Hold > 0 {
		return false
	}
	return classOf(err) == transport.Transient
}

// retryAfterAttempt is when a swept row refused again is due: RetryAfter
// doubled per attempt so far, at most SweepRetry, jittered by up to half, so
// a provider's random deferrals cost seconds, not a minute each.
func (w *Worker) retryAfterAttempt(now time.Time, attempt int) time.Time {
	d := w.cfg.RetryAfter
	for i := 1; i < attempt && d < w.cfg.SweepRetry; i++ {
		d *= 2
	}
	d = min(d, w.cfg.SweepRetry)
	return now.Add(d/2 + time.Duration(w.cfg.Jitter(int64(d/2))))
}

// DefaultRetryFor is Config.RetryFor's default: longer than greylisting
// holds a new sender back (5 to 30 minutes at most servers), short enough
// that a broadcast's tail of refusing recipients ends within hours.
const DefaultRetryFor = time.Hour

// giveUpAttempts is the attempt at which the sweep gives a recipient still
// refused up: at least MaxAttempts, and enough that the delays before it,
// each at least half its step of the doubling schedule (the jitter's
// floor), add up to RetryFor. The delays are lower bounds (a row is never
// due before its time), so a recipient is tried for at least RetryFor.
func (c Config) giveUpAttempts() int {
	n, spanned, d := 1, time.Duration(0), c.RetryAfter
	for n < c.MaxAttempts || spanned < c.RetryFor {
		step := min(d, c.SweepRetry) / 2
		if d >= c.SweepRetry && n >= c.MaxAttempts {
			// Every step from here is the same: the rest at once, not
			// one loop turn per attempt (a tiny SweepRetry with a long
			// RetryFor would take billions).
			if step <= 0 {
				return n // no delay at all: RetryFor cannot be spanned
			}
			return n + int((c.RetryFor-spanned+step-1)/step)
		}
		spanned += step
		if d < c.SweepRetry {
			d += min(d, c.SweepRetry-d) // doubled, never past SweepRetry (nor overflowing)
		}
		n++
	}
	return n
}

// retryAt is when a row deferred after a transient refusal (err) is due
// again: RetryAfter, jittered by up to half so rows refused together do not
// all come back in one burst; for a greylisting server, not before its
// delay (greylistWait).
func (w *Worker) retryAt(now time.Time, err error) time.Time {
	due := w.retryAfterAttempt(now, 1)
	if wait, ok := greylistWait(err, w.cfg.GreylistRetry); ok {
		// An eighth over the delay, so a server counting from when it
		// saw the attempt (a little after now) has let it pass, and up to
		// a quarter more so recipients greylisted together spread out.
		if at := now.Add(wait + wait/8 + time.Duration(w.cfg.Jitter(int64(wait/4)))); at.After(due) {
			due = at
		}
	}
	return due
}

// greylistWait is how long to wait before trying a recipient a server
// greylisted (err) again: the wait its reply names ("Greylisted for 60
// seconds", "try again in 5 minutes"), 30 min at most, otherwise
// fallback. ok is false when err is not greylisting.
func greylistWait(err error, fallback time.Duration) (time.Duration, bool) {
	var se *transport.SendError
	if !errors.As(err, &se) || se.Code/100 != 4 || !greylisting(se) {
		return 0, false
	}
	// The recipient's address and a help URL can hold digits and a unit
	// ("<gaddr-30s-1@example.org>", ".../help/5m.example.html"): a tester's
	// recipient was tried every 35 s for it. Only a number after "for",
	// "in" or "after", outside them, is a wait.
	text := reAddressOrURL.ReplaceAllString(se.Text, " ")
	m := reNamedWait.FindStringSubmatch(text)
	if m == nil {
		return fallback, true
	}
	n, _ := strconv.Atoi(m[1])
	wait := time.Duration(n) * time.Second
	switch strings.ToLower(m[2])[0] {
	case 'm':
		wait = time.Duration(n) * time.Minute
	case 'h':
		wait = time.Duration(n) * time.Hour
	}
	if wait < time.Second {
		return fallback, true
	}
	// A longer wait is waited for 30 minutes at most, then the usual
	// schedule: falling back to 5 minutes retried a server that asked
	// for an hour ten times inside it (review).
	return min(wait, 30*time.Minute), true
}

// reNamedWait is a wait a reply names: "for 300 seconds", "in 5 minutes",
// "after 60s".
var reNamedWait = regexp.MustCompile(`(?i)\b(?:for|in|after)\s+(\d{1,5}) ?(seconds?|secs?|s|minutes?|mins?|m|hours?|hrs?|h)\b`)

// reAddressOrURL is an address in angle brackets, or a URL, of a reply.
var reAddressOrURL = regexp.MustCompile(`<[^>]*>|(?i)\bhttps?://\S+`)

// greylisting reports a greylisting server's reply: its words, or
// rspamd's bare one.
func greylisting(se *transport.SendError) bool {
	return reGreylist.MatchString(se.Text) || rspamdGreylist(se)
}

// rspamdGreylist is rspamd's greylisting reply, whose default text says
// nothing of greylisting ("451 4.7.1 Try again later", timeout 300 s): its
// recipients were retried 9 times in 208 s (found by a tester). Only that
// bare text at RCPT or DATA with 4.7.1; a longer one is read by its words.
func rspamdGreylist(se *transport.SendError) bool {
	return se.Enhanced == "4.7.1" && (se.Stage == transport.StageRcpt || se.Stage == transport.StageData) &&
		reBareTryLater.MatchString(se.Text)
}

var reBareTryLater = regexp.MustCompile(`(?i)^\W*try again later\W*$`)

// renderError marks a message that could not be built for one contact (bad
// address, template data): that contact's failure, not the channel's.
type renderError struct{ err error }

func (e *renderError) Error() string { return store.RenderFailedPrefix + e.err.Error() }
func (e *renderError) Unwrap() error { return e.err }

func (w *Worker) send(ctx context.Context, l *loaded, c store.Contact, now time.Time) error {
	if err := w.cfg.Unsubscribe.Usable(); err != nil {
		// No key every coordinator verifies with: a channel-wide
		// mistake, which halts the broadcast with this reason, never a
		// message whose unsubscribe links work for nobody.
		return err
	}
	m, err := Render(l.compiled, l.b, c, now, w.cfg.Unsubscribe, w.cfg.DKIM)
	if err != nil {
		return &renderError{err}
	}
	_, err = w.cfg.Transport.Send(ctx, m)
	return err
}

func busClass(c transport.Class) bus.ErrorClass {
	switch c {
	case transport.Transient:
		return bus.ClassTransient
	case transport.Quota:
		return bus.ClassQuota
	default:
		return bus.ClassChannel
	}
}

// refreshHolds adds the providers the governor holds now to a page's holds.
// Without an answer the page goes on with what it was dispatched with: the
// first refusal stops it anyway.
func (w *Worker) refreshHolds(ctx context.Context, l *loaded, h *holds) {
	if w.governors == nil {
		return
	}
	now := w.cfg.Clock.Now()
	held, ramping, err := w.governors.Ramping(ctx, l.compiled.SendingDomain(), now)
	if err != nil {
		w.cfg.Log.Debug("governor holds unreadable; page keeps its own", "err", err)
		return
	}
	h.refresh(held, ramping, now)
}
