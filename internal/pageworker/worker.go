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
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/oklog/ulid/v2"

	"github.com/rangecast/rangecast/internal/bus"
	"github.com/rangecast/rangecast/internal/clock"
	"github.com/rangecast/rangecast/internal/message"
	"github.com/rangecast/rangecast/internal/ranges"
	"github.com/rangecast/rangecast/internal/store"
	"github.com/rangecast/rangecast/internal/transport"
)

// Config wires a worker to its parts.
type Config struct {
	Store     store.Store
	Bus       *bus.Bus
	Transport transport.Transport
	Clock     clock.Clock
	Log       *slog.Logger
	// Concurrency is the in-flight window: at most this many messages are
	// claimed and unsent at once, so a kill -9 leaves at most this many in
	// doubt.
	Concurrency int
	// ParkDelay is how long a page that could not be run (state unknown,
	// store unreachable) waits before JetStream offers it again.
	ParkDelay time.Duration
	// FetchWait bounds one pull, so a drain is noticed promptly.
	FetchWait time.Duration
	// MaxPageTime is how long a page is kept alive with heartbeats. A page
	// stuck past it (a hung worker) is handed to another worker, and one
	// that hangs every worker ends at the job's delivery limit.
	MaxPageTime time.Duration
}

func (c Config) withDefaults() Config {
	if c.Concurrency <= 0 {
		c.Concurrency = 16
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
	if c.Clock == nil {
		c.Clock = clock.Real{}
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
	return c
}

// Worker pulls page jobs and runs them one at a time.
type Worker struct {
	cfg    Config
	states *stateCache

	mu         sync.Mutex
	broadcasts map[ulid.ULID]*loaded
}

// loaded is a broadcast's immutable definition and compiled content.
type loaded struct {
	b        store.Broadcast
	compiled *message.Compiled
}

// New returns a worker; Run starts it.
func New(cfg Config) *Worker {
	cfg = cfg.withDefaults()
	return &Worker{cfg: cfg, states: newStateCache(cfg.Bus.Broadcasts), broadcasts: map[ulid.ULID]*loaded{}}
}

// Run pulls and runs pages until ctx is cancelled. A page in progress when
// ctx ends is not abandoned: sends in flight finish, outcomes are recorded,
// the partial cursor is reported, then Run returns.
func (w *Worker) Run(ctx context.Context) error {
	if err := w.states.start(ctx); err != nil {
		return err
	}
	for ctx.Err() == nil {
		msg, err := w.cfg.Bus.Pages.Next(jetstream.FetchMaxWait(w.cfg.FetchWait))
		if err != nil {
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
		w.handle(ctx, msg)
	}
	return nil
}

// handle decides what to do with one job message and settles it with
// JetStream: Ack once the report is published, NakWithDelay to park a page of
// a paused broadcast, Term for a job that can never run.
func (w *Worker) handle(ctx context.Context, msg jetstream.Msg) {
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
	state, err := w.states.get(pageCtx, job.Broadcast)
	if err == nil && state != store.StateRunning {
		state, err = w.states.fresh(pageCtx, job.Broadcast)
	}
	if err != nil {
		log.Warn("broadcast state unknown; page retried later", "err", err)
		msg.NakWithDelay(w.cfg.ParkDelay) //nolint:errcheck
		return
	}
	switch {
	case state == store.StatePaused:
		// Parked by dropping it: the coordinator re-issues every range's
		// page from its cursor on resume. A NAK would count against the
		// job's delivery limit, which is for pages that crash workers.
		pagesRun.WithLabelValues("parked").Inc()
		msg.Ack() //nolint:errcheck
		return
	case state != store.StateRunning:
		pagesRun.WithLabelValues("dropped").Inc()
		log.Info("page dropped", "state", state)
		msg.Ack() //nolint:errcheck
		return
	}
	began := w.cfg.Clock.Now()
	stopBeat := w.heartbeat(msg)
	rep, err := w.runPage(ctx, pageCtx, msg, job)
	stopBeat()
	pageSeconds.Observe(w.cfg.Clock.Now().Sub(began).Seconds())
	if err != nil {
		pagesRun.WithLabelValues("failed").Inc()
		// Nothing was reported: the coordinator's cursor did not move, and
		// JetStream offers the page again (to this or another worker).
		log.Error("page failed", "err", err)
		msg.NakWithDelay(w.cfg.ParkDelay) //nolint:errcheck
		return
	}
	if _, err := w.cfg.Bus.JS.Publish(pageCtx, bus.ReportSubject(job.Broadcast), bus.Encode(rep)); err != nil {
		log.Error("report not published; page will run again", "err", err)
		msg.NakWithDelay(w.cfg.ParkDelay) //nolint:errcheck
		return
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
	if rep.Class != bus.ClassNone {
		log.Warn("page stopped early", "sent", rep.Sent, "failed", rep.Failed, "class", rep.Class, "err", rep.Error)
		return
	}
	log.Debug("page done", "sent", rep.Sent, "failed", rep.Failed, "done", rep.Done)
}

// heartbeat keeps the page ours while it runs, however long one window's
// sends take; a dead worker's page goes to another worker once the ack wait
// passes without one.
func (w *Worker) heartbeat(msg jetstream.Msg) (stop func()) {
	done := make(chan struct{})
	giveUp := w.cfg.Clock.After(w.cfg.MaxPageTime)
	go func() {
		for {
			select {
			case <-done:
				return
			case <-giveUp:
				w.cfg.Log.Warn("page still running after the longest a page may take; letting JetStream hand it on", "max", w.cfg.MaxPageTime)
				return
			case <-w.cfg.Clock.After(bus.PageHeartbeat):
				msg.InProgress() //nolint:errcheck // a lost heartbeat at worst lets the page run twice, which sends nothing twice
			}
		}
	}()
	return func() { close(done) }
}

func (w *Worker) load(ctx context.Context, id ulid.ULID) (*loaded, error) {
	w.mu.Lock()
	l, ok := w.broadcasts[id]
	w.mu.Unlock()
	if ok {
		return l, nil
	}
	b, err := w.cfg.Store.GetBroadcast(ctx, id)
	if err != nil {
		return nil, err
	}
	c := b.Content
	compiled, err := message.Compile(message.Template{FromName: c.FromName, FromAddress: c.FromAddress, Subject: c.Subject, HTML: c.HTML, Text: c.Text})
	if err != nil {
		return nil, fmt.Errorf("compile broadcast %s: %w", id, err)
	}
	l = &loaded{b: b, compiled: compiled}
	w.mu.Lock()
	w.broadcasts[id] = l
	w.mu.Unlock()
	return l, nil
}

// runPage walks one page window by window. It returns the report to publish,
// or an error when the page could not be walked at all.
func (w *Worker) runPage(ctx, pageCtx context.Context, msg jetstream.Msg, job bus.PageJob) (bus.Report, error) {
	rep := bus.Report{Broadcast: job.Broadcast, Range: job.Range, Epoch: job.Epoch, From: job.From, Next: job.From, Limit: job.Limit}
	id, err := ulid.ParseStrict(job.Broadcast)
	if err != nil {
		return rep, fmt.Errorf("page job: broadcast id: %w", err)
	}
	from, err1 := ulid.ParseStrict(job.From)
	until, err2 := ulid.ParseStrict(job.Until)
	if err := errors.Join(err1, err2); err != nil {
		return rep, fmt.Errorf("page job: bounds: %w", err)
	}
	l, err := w.load(pageCtx, id)
	if err != nil {
		return rep, err
	}
	// Eligibility is decided now, at page time: an unsubscribe that landed
	// since the broadcast started is honoured here.
	contacts, err := w.cfg.Store.EligiblePage(pageCtx, l.b, from, until, job.Limit)
	if err != nil {
		return rep, err
	}
	next := from
	for i := 0; i < len(contacts); i += w.cfg.Concurrency {
		window := contacts[i:min(i+w.cfg.Concurrency, len(contacts))]
		if ctx.Err() != nil {
			rep.Next = next.String()
			return rep, nil // draining: report how far we got
		}
		if state, err := w.states.get(pageCtx, job.Broadcast); err != nil || state != store.StateRunning {
			rep.Next = next.String()
			rep.Class = bus.ClassPaused
			if state.Finished() {
				rep.Class = bus.ClassCancelled
			}
			return rep, nil
		}
		res, err := w.sendWindow(pageCtx, l, window)
		if err != nil {
			// Outcomes of this window are not recorded: the cursor must not
			// pass it. Report what is safe.
			if i == 0 {
				return rep, err
			}
			rep.Next = next.String()
			rep.Class, rep.Error = bus.ClassTransient, err.Error()
			return rep, nil
		}
		rep.Claimed += res.claimed
		rep.Sent += res.sent
		rep.Failed += res.failed
		if res.stopAt >= 0 {
			rep.Next = window[res.stopAt].ID.String()
			rep.Class, rep.Error = res.class, res.err
			return rep, nil
		}
		last := window[len(window)-1].ID
		n, ok := ranges.Next(last)
		if !ok || last == until {
			rep.Done = true
			rep.Next = last.String()
			return rep, nil
		}
		next = n
	}
	rep.Next = next.String()
	rep.Done = len(contacts) < job.Limit
	return rep, nil
}

// windowResult is what one in-flight window did.
type windowResult struct {
	claimed, sent, failed int
	// stopAt is the index in the window of the first contact whose claim was
	// released (not sent), or -1 when the window went through.
	stopAt int
	class  bus.ErrorClass
	err    string
}

// sendWindow claims the window, sends what this attempt claimed, and records
// every outcome in one batch. Claims whose send failed for a reason that is
// not the recipient's are released, and the page stops there.
func (w *Worker) sendWindow(ctx context.Context, l *loaded, window []store.Contact) (windowResult, error) {
	res := windowResult{stopAt: -1}
	domain := l.compiled.SendingDomain()
	now := w.cfg.Clock.Now()
	claims := make([]store.Claim, len(window))
	for i, c := range window {
		claims[i] = store.Claim{ContactID: c.ID, Email: c.Email, MessageID: message.MessageID(l.b.ID, c.ID, domain)}
	}
	// Claim before send: only rows this attempt inserted may be sent.
	claimed, err := w.cfg.Store.Claim(ctx, l.b.ID, claims, now)
	if err != nil {
		return res, err
	}
	res.claimed = len(claimed)
	mine := make(map[ulid.ULID]bool, len(claimed))
	for _, id := range claimed {
		mine[id] = true
	}
	errs := make([]error, len(window))
	var wg sync.WaitGroup
	for i, c := range window {
		if !mine[c.ID] {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = w.send(ctx, l, c, now)
		}()
	}
	wg.Wait()

	var outcomes []store.Outcome
	var release []ulid.ULID
	for i, c := range window {
		if !mine[c.ID] {
			continue
		}
		err := errs[i]
		if err == nil {
			outcomes = append(outcomes, store.Outcome{ContactID: c.ID, Status: store.SendSent})
			res.sent++
			continue
		}
		var renderErr *renderError
		class := transport.Classify(err)
		if errors.As(err, &renderErr) {
			class = transport.Recipient
		}
		if class == transport.Recipient {
			outcomes = append(outcomes, store.Outcome{ContactID: c.ID, Status: store.SendFailed, Error: err.Error()})
			res.failed++
			continue
		}
		// A connection lost after the final dot may have delivered the
		// message: keep the claim (in doubt, for the reconciler) rather than
		// release it and risk a second copy.
		var se *transport.SendError
		if !errors.As(err, &se) || !se.MaybeDelivered {
			release = append(release, c.ID)
			messages.WithLabelValues("released").Inc()
		} else {
			messages.WithLabelValues("in_doubt").Inc()
		}
		if res.stopAt < 0 {
			res.stopAt, res.class, res.err = i, busClass(class), err.Error()
		}
	}
	if err := w.cfg.Store.RecordOutcomes(ctx, l.b.ID, outcomes, w.cfg.Clock.Now()); err != nil {
		return res, err
	}
	messages.WithLabelValues("sent").Add(float64(res.sent))
	messages.WithLabelValues("failed").Add(float64(res.failed))
	if err := w.cfg.Store.Release(ctx, l.b.ID, release); err != nil {
		return res, err
	}
	return res, nil
}

// renderError marks a message that could not be built for one contact (bad
// address, template data): that contact's failure, not the channel's.
type renderError struct{ err error }

func (e *renderError) Error() string { return "render: " + e.err.Error() }
func (e *renderError) Unwrap() error { return e.err }

func (w *Worker) send(ctx context.Context, l *loaded, c store.Contact, now time.Time) error {
	m, err := l.compiled.Render(message.Params{
		BroadcastID: l.b.ID,
		Contact:     message.Contact{ID: c.ID, Email: c.Email, Name: c.Name, Attributes: c.Attributes},
		Date:        now,
	})
	if err != nil {
		return &renderError{err}
	}
	return w.cfg.Transport.Send(ctx, m)
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
