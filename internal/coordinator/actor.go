package coordinator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/oklog/ulid/v2"

	"github.com/rangecast/rangecast/internal/bus"
	"github.com/rangecast/rangecast/internal/governor"
	"github.com/rangecast/rangecast/internal/store"
)

// actor owns one broadcast's dispatch loop. Everything it keeps in memory
// (outstanding pages, backoffs) can be lost: a new actor re-derives work from
// the range records, and a page dispatched twice sends nothing twice.
type actor struct {
	c  *Coordinator
	id ulid.ULID
	// term is the leader term the actor runs in (its run's context):
	// cancelled, the actor is stepping down.
	term context.Context

	reports  chan reportReq
	kicks    chan store.Broadcast
	poisoned chan poisoned
	// done is closed when run has returned: nothing reads reports any more.
	done chan struct{}

	// Owned by the run goroutine.
	b           store.Broadcast
	recs        []bus.RangeRecord
	revs        []uint64
	outstanding map[int]page
	notBefore   map[int]time.Time
	lastErr     map[int]string
	dispatched  map[int]int64 // pages dispatched since the record was last written
	round       int
	issue       int
	// throttleWait is how long until the throttle can grant a page, when
	// the last dispatch round was held back by it.
	throttleWait time.Duration
	// pagesHeld: the last dispatch left a page waiting for tokens (the
	// domain's rate, or the broadcast's throttle); sweptLast: the last
	// grant went to a sweep. While both hold, sweeps give way: a sweep
	// asks only for the rows due, so takes the few tokens a page waits to
	// gather, and a steady trickle of due rows held the walk's first sends
	// back for good (under a throttle too: 0 pages and 625 sweeps in 10
	// minutes, review).
	pagesHeld, sweptLast bool
	throttle             *governor.Bucket
	// sweepWait is the limit (throttle, daily ceiling, rate) that held
	// back the last sweep of due rows; "" once one went out.
	sweepWait string
	// sweepRefused is the error of the last sweep, when it sent nobody
	// (every send refused, at connect for a relay that is down): once
	// every range is walked only sweeps run, and without it the status
	// said "due now" with nothing naming the cause.
	sweepRefused string
	// reloaded is when the range records were last re-read from KV;
	// stale asks for a re-read before the next dispatch (adopt).
	reloaded time.Time
	stale    bool
	// nextReconcile is when in-doubt claims are next looked for;
	// goneSince is when each claim owner was first seen gone.
	nextReconcile time.Time
	goneSince     map[string]time.Time
	// refusedPages counts page reports in a row, across ranges, that sent
	// nothing because the server refused every recipient they tried; one
	// counts only once refusedNext has passed (Coordinator.backoff after
	// the last one counted), so MaxFruitless of them are fruitless
	// resumptions spread over the backoff's time, as a range's own are.
	refusedPages int
	refusedNext  time.Time
	// refusedSince is when the run of refused pages began, refusedErr its
	// latest refusal: what status says while it lasts (refusedNote).
	refusedSince time.Time
	refusedErr   string
	// resumedAt is when the operator last resumed the broadcast, or when
	// this actor started (it cannot know of a resume before): the report
	// of a page issued before it (bus.Report.Issued) counts neither toward
	// refused pages nor toward its range's fruitless resumptions.
	// fruitlessBase is each range's fruitless count at the last resume:
	// the resume is a new try, and only the resumptions after it count
	// (in memory: a new leader counts the record's whole count, as before).
	resumedAt     time.Time
	fruitlessBase map[int]int
	// lastSent is when a page or sweep of the broadcast last sent, and
	// fruitlessAt when each range's last fruitless report came: a range
	// whose page sent nothing while others sent since its last such
	// report is not "no progress at all", and is not counted (fruitless).
	lastSent    time.Time
	fruitlessAt map[int]time.Time
	// forgetFruitless: the records' counts go back to zero (in KV, so a
	// new leader reads them so) at the next pass of the loop, after a
	// resume; fruitlessBase stands in until they are written.
	forgetFruitless bool
	// lostRuns counts, across ranges and sweeps, reports in a row whose
	// messages were lost after the final dot and that sent nothing, one
	// at most per lostPace (lostNext); see lostAfterDot.
	lostRuns int
	lostNext time.Time
	// lostSample sums the messages sent and lost after the final dot over
	// reports until it holds lostSampleSize attempts over lostPace;
	// lossySamples counts samples in a row that lost at least 1/lostShare
	// (lossyShare).
	lostSample   lostSample
	lossySamples int
	// moved: the report being applied moved a cursor (applyReport).
	moved bool
	// sweepSent: a sweep's report said it sent something (sentNobody).
	sweepSent bool
	// mirrored is when the state in KV was last brought level with the
	// store.
	mirrored time.Time
	// sweeps are the outstanding sweeps of due deferred rows, oldest
	// first (page.issue tells them apart); sweepsWanted is how many may be
	// out at once (sweepRoom); sweepIssue the last one's dedupe id;
	// sweepHeld whether the last one carries a provider's ramp step;
	// nextSweep is when deferred rows are next looked for.
	sweeps       []page
	sweepsWanted int
	sweepIssue   int
	sweepHeld    bool
	nextSweep    time.Time

	mu         sync.Mutex
	waitingFor string
}

type page struct {
	from  string
	limit int
	at    time.Time
	issue int // a sweep's dedupe id
}

type poisoned struct {
	job        bus.PageJob
	deliveries int
}

type reportReq struct {
	rep  bus.Report
	done chan error
}

func newActor(ctx context.Context, c *Coordinator, b store.Broadcast) (*actor, error) {
	recs, revs, err := c.rangeRecords(ctx, b)
	if err != nil {
		return nil, fmt.Errorf("broadcast %s: %w", b.ID, err)
	}
	a := &actor{
		c: c, id: b.ID, b: b, recs: recs, revs: revs,
		reports:     make(chan reportReq),
		done:        make(chan struct{}),
		goneSince:   map[string]time.Time{},
		kicks:       make(chan store.Broadcast, 1),
		poisoned:    make(chan poisoned, 8),
		outstanding: map[int]page{},
		notBefore:   map[int]time.Time{},
		lastErr:     map[int]string{},
		dispatched:  map[int]int64{},
		// Pages issued before this actor are another's (a leader before
		// this one): they count toward nothing (issuedBeforeResume).
		resumedAt:     c.cfg.Clock.Now(),
		fruitlessBase: map[int]int{},
		fruitlessAt:   map[int]time.Time{},
	}
	if b.ThrottlePerHour > 0 {
		a.throttle = a.newThrottle(c.cfg.Clock.Now())
	}
	return a, nil
}

// newThrottle is the bucket of the broadcast's --throttle. It holds at
// most a minute of the throttle (and at most a page), and starts with one
// worthwhile page (minPage), not full: an actor is made at every start,
// resume after a restart, leader change and coordinator restart, and a
// full bucket of a page each time sent a page at once however low the
// throttle (192 at once, again at every restart, under --throttle 10).
// Each new actor still adds up to minPage, which is small next to the
// throttle's hour (a tick's worth, at most a quarter page).
func (a *actor) newThrottle(now time.Time) *governor.Bucket {
	minute := int(min(a.b.ThrottlePerHour/60, int64(a.c.cfg.PageLimit)))
	return governor.NewBucketHolding(a.b.ThrottlePerHour, max(a.minPage(), minute), a.minPage(), now)
}

// errActorGone: the actor stopped (its broadcast finished, or the
// coordinator stopped leading) before it took the report.
var errActorGone = errors.New("the broadcast's actor has stopped")

// report hands a report to the actor and waits until it is applied.
func (a *actor) report(ctx context.Context, rep bus.Report) error {
	req := reportReq{rep: rep, done: make(chan error, 1)}
	select {
	case a.reports <- req:
	case <-a.done:
		// Reports are consumed one at a time: waiting out the timeout below
		// would hold every other broadcast's reports back.
		return errActorGone
	case <-ctx.Done():
		return ctx.Err()
	case <-a.c.cfg.Clock.After(30 * time.Second):
		return errors.New("actor busy")
	}
	select {
	case err := <-req.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// notify passes a new broadcast state to the actor, replacing any unread one.
func (a *actor) notify(b store.Broadcast) {
	for {
		select {
		case a.kicks <- b:
			return
		default:
			select {
			case <-a.kicks:
			default:
			}
		}
	}
}

func (a *actor) setWaiting(s string) {
	a.mu.Lock()
	a.waitingFor = s
	a.mu.Unlock()
}

func (a *actor) waiting() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.waitingFor
}

func (a *actor) log() interface {
	Info(string, ...any)
	Warn(string, ...any)
	Error(string, ...any)
} {
	return termLog{a.c.cfg.Log.With("broadcast", a.id.String()), a.term}
}

// termLog logs warnings at debug level once the leader term its context
// belongs to has ended (an actor's, a report's): the step-down cancels the
// term's calls, and their "context canceled" failures are the step-down,
// not faults (a leader frozen past its lease logged nine warnings on
// waking). What they left undone is the next leader's.
type termLog struct {
	*slog.Logger
	term context.Context // nil in tests that make actors by hand
}

func (l termLog) Warn(msg string, args ...any) {
	if l.term != nil && l.term.Err() != nil {
		l.Debug(msg+" (stepping down)", args...)
		return
	}
	l.Logger.Warn(msg, args...)
}

func (a *actor) run(ctx context.Context) {
	clk := a.c.cfg.Clock
	defer close(a.done)
	defer a.dropOutstanding()
	a.dispatch(ctx)
	for {
		tick := a.c.cfg.Tick
		if a.b.State == store.StatePaused {
			tick = a.c.cfg.PausedTick
		} else if a.throttleWait > 0 {
			// Throttled with nothing outstanding to report back: wake when
			// the next page's tokens are there rather than a tick later.
			tick = min(tick, a.throttleWait)
		}
		if a.b.State == store.StateRunning && len(a.sweeps) < a.sweepRoom() && !a.nextSweep.IsZero() {
			// Deferred rows come due (a second after a random 451) long
			// before a tick: wake for them, or the tail of a broadcast
			// waits a whole tick with nothing to report back.
			tick = min(tick, max(a.nextSweep.Sub(clk.Now()), 10*time.Millisecond))
		}
		select {
		case <-ctx.Done():
			return
		case req := <-a.reports:
			req.done <- a.apply(ctx, req.rep)
		case p := <-a.poisoned:
			if err := a.poison(ctx, p.job, p.deliveries); err != nil {
				a.log().Error("cannot fail the broadcast of a poison page", "err", err)
			}
		case b := <-a.kicks:
			a.adopt(b)
		case <-clk.After(tick):
			// KV is the record of the cursors; re-read it once a tick so an
			// actor that missed writes (another coordinator's, during a
			// split brain or a handover) catches up.
			if now := clk.Now(); now.Sub(a.reloaded) >= a.c.cfg.Tick {
				a.reloaded = now
				if err := a.reload(ctx); err != nil {
					a.log().Warn("cannot re-read range records", "err", err)
				}
			}
		}
		// The store is the truth and KV the workers' copy of it: once a
		// tick, bring KV level with the store (a lost or out-of-order write
		// would otherwise have workers drop every page of a running
		// broadcast, or send for a paused one), and follow the store here
		// too. Gated on time, not on the tick firing: reports keep the loop
		// busy.
		if now := clk.Now(); now.Sub(a.mirrored) >= a.c.cfg.Tick || now.Before(a.mirrored) {
			a.mirrored = now
			if b, err := a.c.mirrorState(ctx, a.id); err != nil {
				a.log().Warn("cannot bring the broadcast state in KV level with the store", "err", err)
			} else {
				a.adopt(b)
			}
		}
		if a.b.State.Finished() {
			if !a.settling(ctx) && a.retire() {
				return
			}
			continue
		}
		a.zeroFruitless(ctx)
		a.catchUp(ctx)
		a.reconcile(ctx)
		a.sweep(ctx)
		if a.finish(ctx) {
			if a.retire() {
				return
			}
			continue
		}
		a.dispatch(ctx)
	}
}

// retire takes the actor of a finished broadcast out of the coordinator's
// actors, unless a state change was handed to it meanwhile: then it reads
// that first. A Retry reopens a broadcast the moment it completes; its kick,
// given to an actor on its way out, was lost, and the broadcast stayed
// running with no actor to sweep its rows (TestRetryCommand, under load).
// Under c.mu, where kick looks actors up and notifies them, so a later kick
// finds no actor and starts a new one.
func (a *actor) retire() bool {
	a.c.mu.Lock()
	defer a.c.mu.Unlock()
	if len(a.kicks) > 0 {
		return false
	}
	if a.c.actors[a.id] == a {
		delete(a.c.actors, a.id)
	}
	return true
}

// adopt follows the store's state of the broadcast.
func (a *actor) adopt(b store.Broadcast) {
	if a.b.StartedAt.IsZero() && !b.StartedAt.IsZero() {
		// Made before the broadcast was accepted: its copy has no
		// snapshot, so no ranges, and "every range done" would hold at
		// once, completing the broadcast with its audience unsent. No
		// path of the engine makes such an actor now (kick and the
		// leader's scan start actors only for running or paused
		// broadcasts, and the accept writes the state and the snapshot in
		// one statement), but TestRetryCommand met one: it wrote a draft
		// running and back in the store, a new leader's first scan read
		// it running, and the broadcast's start reused that actor. Take
		// the accepted broadcast whole (its ranges, and settings a draft
		// may have had changed) and read its range records again.
		a.b = b
		a.throttle = nil
		if b.ThrottlePerHour > 0 {
			a.throttle = a.newThrottle(a.c.cfg.Clock.Now())
		}
		a.stale = true
	}
	if (a.b.State == store.StatePaused || a.b.State == store.StateFailed) && b.State == store.StateRunning {
		// Workers dropped the pages of the paused (or failed) broadcast:
		// issue every range's page afresh from its cursor, under a new
		// dedupe id (a copy being dropped right now must not hide it).
		a.dropOutstanding()
		a.issue++
		// The operator's resume is a new try: refused pages counted before
		// it (an outage the operator paused for, and reports of the pages
		// it cut short) do not count toward failing the broadcast after it.
		// Counted on, a relay outage of 31 s, paused through, failed the
		// broadcast 17 s after the resume with the relay taking mail
		// (simulation seed 51000927); a relay still down fails it again
		// within MaxFruitless counts at the backoff's pace.
		a.endRefusedRun()
		// Reports of pages issued before the resume come in after it for
		// as long as their sends took (and redeliveries later still):
		// counted, the refusals of an outage the operator paused through
		// failed the broadcast four minutes after the resume, with the
		// relay taking mail and the resume's own pages not yet reported
		// (simulation seed 14872).
		a.resumedAt = a.c.cfg.Clock.Now()
		for i, rec := range a.recs {
			a.fruitlessBase[i] = rec.Fruitless
		}
		a.forgetFruitless = true
	}
	if a.b.State == store.StateFailed && b.State == store.StateRunning {
		// Resumed after it failed (Coordinator.Resume), before this actor
		// retired: its runs of fruitless pages start again, and the range
		// records, whose counts Resume set back to zero, are read again.
		clear(a.notBefore)
		a.stale = true
	}
	a.b.State, a.b.Reason = b.State, b.Reason
	// The throttle changed after the start (SetThrottle): the
	// pages dispatched from now on follow it. Its bucket starts again as
	// a new actor's does (newThrottle: one worthwhile page, not full), so
	// a throttle lowered for a complaining provider holds at once. A
	// kick's copy read before the change and taken after the tick's
	// mirror can put the old throttle back until the next tick's.
	if b.ThrottlePerHour != a.b.ThrottlePerHour && !a.b.StartedAt.IsZero() {
		a.b.ThrottlePerHour = b.ThrottlePerHour
		a.throttle, a.throttleWait = nil, 0
		if b.ThrottlePerHour > 0 {
			a.throttle = a.newThrottle(a.c.cfg.Clock.Now())
		}
	}
	// Edited while paused (EditPaused): the pages issued from now on carry
	// the new revision, so the workers read the new content. Revisions
	// only grow; an older copy never takes an edit back.
	if b.ContentRevision > a.b.ContentRevision {
		a.b.Content, a.b.ContentRevision = b.Content, b.ContentRevision
	}
}

// catchUp re-reads the range records when adopt found them stale.
func (a *actor) catchUp(ctx context.Context) {
	if !a.stale {
		return
	}
	if err := a.reload(ctx); err != nil {
		a.log().Warn("cannot re-read range records", "err", err)
		return
	}
	a.stale, a.reloaded = false, a.c.cfg.Clock.Now()
}

// apply moves a range's cursor by compare-and-set. A report that does not
// move the cursor forward (a page walked twice, a late duplicate) changes
// nothing.
func (a *actor) apply(ctx context.Context, rep bus.Report) error {
	now := a.c.cfg.Clock.Now()
	a.stateMet(rep, now)
	a.moved = false
	err := a.applyReport(ctx, rep, now)
	if err == nil && a.moved && a.b.State == store.StateRunning {
		err = a.lostAfterDot(ctx, rep, now)
	}
	return err
}

// applyReport is apply without the watch for lost messages. It sets
// a.moved when the report moved a range's cursor or was a sweep's:
// a report ignored (another epoch, a copy, a redelivery of one applied
// already) says nothing new about the relay.
func (a *actor) applyReport(ctx context.Context, rep bus.Report, now time.Time) error {
	if rep.Sweep {
		a.moved = true
		return a.applySweep(ctx, rep)
	}
	i := rep.Range
	if i < 0 || i >= len(a.recs) {
		a.log().Warn("report for an unknown range ignored", "range", i)
		return nil
	}
	if rep.Epoch != a.recs[i].Epoch {
		// The page was dispatched before the reconciler moved this range
		// back; its claims are committed, and the re-walk skips them.
		reportsApplied.WithLabelValues("ignored").Inc()
		return nil
	}
	if o, ok := a.outstanding[i]; ok && o.from == rep.From {
		delete(a.outstanding, i)
		a.settle(o.limit, rep)
	}
	if rep.Sent > 0 {
		a.tookMail()
		a.lastSent = now
	}
	for attempt := 0; ; attempt++ {
		rec := a.recs[i]
		if rep.Epoch != rec.Epoch {
			// Re-read after a lost compare-and-set: another leader's
			// reconciler moved the range back meanwhile, and this page's
			// report no longer counts (found by the simulation: split
			// brain with a rewind carried a stale page past a released
			// claim).
			reportsApplied.WithLabelValues("ignored").Inc()
			return nil
		}
		advanced := !rec.Done && (rep.Done || after(rep.Next, rec.Next))
		if !advanced {
			reportsApplied.WithLabelValues("ignored").Inc()
			// A resumption is fruitless only at the range's cursor. A page
			// from before it (a redelivered report whose first application
			// moved the cursor, its answer lost; a stale copy) says nothing
			// about the range's position now: counted, one report
			// redelivered through a KV outage failed the broadcast
			// (simulation seed 1664).
			current := !rec.Done && !after(rec.Next, rep.From)
			if current && (rep.Class == bus.ClassTransient || rep.Class == bus.ClassQuota) {
				return a.fruitless(ctx, i, rep, now)
			}
			if rep.Class == bus.ClassChannel {
				return a.halt(ctx, rep)
			}
			return nil
		}
		rec.Next = maxID(rec.Next, rep.Next)
		rec.Done = rep.Done
		rec.Sent += int64(rep.Sent)
		rec.Failed += int64(rep.Failed)
		rec.Dispatched += a.dispatched[i]
		if rep.Sent > 0 {
			rec.Fruitless = 0 // a page that sent nothing and met no error proves nothing either way
		}
		err := a.write(ctx, i, rec)
		if errors.Is(err, jetstream.ErrKeyExists) && attempt < 5 {
			// Someone else wrote the record (a previous leader): re-read and
			// re-decide against what is there now.
			if err := a.reload(ctx); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return err
		}
		a.dispatched[i] = 0
		a.moved = true
		reportsApplied.WithLabelValues("advanced").Inc()
		break
	}
	switch rep.Class {
	case bus.ClassTransient, bus.ClassQuota:
		if rep.Sent == 0 {
			// The cursor moved past rows recorded deferred, but nothing
			// went out. A server that refuses everyone shows on every
			// range at once: many pages in a row, whatever their ranges
			// (ranges of a few contacts each would never reach
			// MaxFruitless on their own). One recipient refused for ever
			// while others are sent is that recipient's, bounded by its
			// attempts. Every range's page meets an outage of the relay
			// within the same second, so the pages count only at the
			// backoff's pace: counted per report, a 10 s relay outage
			// failed a 50,000-contact broadcast for good (make chaos).
			if failed, err := a.refused(ctx, rep, now); failed || err != nil {
				return err
			}
			return a.fruitless(ctx, i, rep, now)
		}
		a.notBefore[i] = now.Add(a.c.backoff(1))
		a.lastErr[i] = rep.Error
	case bus.ClassChannel:
		return a.halt(ctx, rep)
	}
	return nil
}

// tookMail notes a page or sweep that sent: it ends a run of refused
// pages. After such a run (a relay that was down), the ranges backing off
// from their refusals go again now, not at their backoffs: after a 60 s
// relay outage those had grown to a minute or more, and the ranges sat
// idle that long with the relay taking mail (make chaos -relay-outage 60s).
func (a *actor) tookMail() {
	if a.refusedPages > 0 {
		clear(a.notBefore)
	}
	a.endRefusedRun()
}

// endRefusedRun ends a run of refused pages (a page that sent, or the
// operator's resume): its count, pace and what status says of it.
func (a *actor) endRefusedRun() {
	a.refusedPages, a.refusedNext, a.refusedSince, a.refusedErr = 0, time.Time{}, time.Time{}, ""
}

// refused counts a page or sweep that sent nothing because the server
// refused every recipient it tried, at the backoff's pace, and fails the
// broadcast after MaxFruitless of them in a row (failed is then true).
// Sweeps count too, when they carry on a run of refused pages or nobody
// was sent at all (applySweep): once every range is walked only sweeps
// run, and a relay that refuses everyone would otherwise be met only by
// each row's own attempts, failing every recipient one by one and
// completing (TestTransientForeverFailsTheBroadcast, when its pages'
// reports came in one burst). A page issued before the last resume is not
// counted (issuedBeforeResume).
func (a *actor) refused(ctx context.Context, rep bus.Report, now time.Time) (failed bool, err error) {
	if a.issuedBeforeResume(rep) {
		return false, nil
	}
	a.refusedErr = rep.Error
	if now.Before(a.refusedNext) {
		return false, nil
	}
	if a.refusedPages == 0 {
		a.refusedSince = now
	}
	a.refusedPages++
	a.refusedNext = now.Add(a.c.backoff(a.refusedPages))
	if a.refusedPages < a.c.cfg.MaxFruitless {
		return false, nil
	}
	what := "every recipient tried was refused"
	if rep.Reached == 0 && rep.Unreached > 0 {
		// Refused at connect, TLS, AUTH or MAIL FROM: no recipient was
		// named, so none refused anything (found by a tester).
		what = "no send reached a recipient (refused before RCPT)"
	}
	reason := fmt.Sprintf("%d pages in a row made no progress: %s; last error: %s", a.refusedPages, what, rep.Error)
	return true, a.transition(ctx, []store.State{store.StateRunning}, store.StateFailed, reason)
}

// lostPace is the least time between two reports lostAfterDot counts,
// and lostHalt how many it counts before it halts the broadcast.
const (
	lostPace = time.Second
	lostHalt = 2
)

// inDoubtFate says what becomes of messages lost after the final dot, and
// when: the reconciler settles them once their claims have been in doubt
// for InDoubtAfter, seen at ticks (PausedTick apart once the halt has
// paused the broadcast), so "recorded unknown" was said a minute before a
// status showed it (tester), and under the resend policy it was untrue.
func (a *actor) inDoubtFate() string {
	within := (a.c.cfg.InDoubtAfter + 2*max(a.c.cfg.Tick, a.c.cfg.PausedTick)).Round(time.Second)
	switch {
	case a.c.cfg.Lookup != nil:
		return fmt.Sprintf("they may have been delivered: within %s the reconciler asks the server which were, records those sent and sends the rest again", within)
	case a.policy() == InDoubtResend:
		return fmt.Sprintf("they may have been delivered; under the resend policy the reconciler releases them within %s to be sent again after the resume", within)
	}
	return fmt.Sprintf("they may have been delivered, so they are not sent again: the reconciler records them unknown within %s (in flight or in doubt until then)", within)
}

// lostAfterDot halts the broadcast (paused, with the reason: a channel-wide
// fault, for a person to look at) when the relay keeps taking messages
// without confirming them (each recorded unknown, maybe delivered, never
// sent again), in either of two ways:
//   - pages that sent nothing and lost at least minLost messages after the
//     final dot, in lostHalt paces with nothing accepted anywhere in
//     between. Without it such a relay (one that drops every connection
//     after the dot, or one slower than the SMTP timeout) turned a whole
//     audience into unknowns, a 600-contact broadcast completing with
//     every message unknown and an empty reason. A relay restart loses
//     the messages in flight at that moment, within one pace, and then
//     refuses connections or accepts again: counted once, it does not
//     halt.
//   - lostHalt samples in a row that lost a tenth or more of their
//     attempts (lossyShare): a relay that drops a fifth of its messages
//     after the dot still accepts the rest, and turned a fifth of a
//     2,000-contact audience into unknowns without a halt (found by a
//     tester).
func (a *actor) lostAfterDot(ctx context.Context, rep bus.Report, now time.Time) error {
	if a.lossyShare(rep, now) {
		reason := fmt.Sprintf("the relay took messages and then closed the connection, or did not answer in time, after the final dot, for a tenth or more of them twice in a row (%d of the last %d tried; %s); %scheck the relay, or raise timeout= in the SMTP URL if it is slow, then resume",
			a.lostSample.lost, a.lostSample.sent+a.lostSample.lost, a.inDoubtFate(), lastError(rep))
		if err := a.halt(ctx, bus.Report{Error: reason}); err != nil {
			return err
		}
		a.lossySamples, a.lostSample = 0, lostSample{}
		return nil
	}
	if rep.Sent > 0 {
		a.lostRuns, a.lostNext = 0, time.Time{}
		return nil
	}
	if rep.InDoubt < minLost || now.Before(a.lostNext) {
		return nil
	}
	a.lostRuns++
	a.lostNext = now.Add(lostPace)
	if a.lostRuns < lostHalt {
		return nil
	}
	reason := fmt.Sprintf("the relay took messages and then closed the connection, or did not answer in time, after the final dot, again and again with nothing confirmed in between (%d in the last page; %s); %scheck the relay, or raise timeout= in the SMTP URL if it is slow, then resume", rep.InDoubt, a.inDoubtFate(), lastError(rep))
	if err := a.halt(ctx, bus.Report{Error: reason}); err != nil {
		return err // the count is kept: the next such report halts
	}
	a.lostRuns, a.lostNext = 0, time.Time{}
	return nil
}

// lostSample is the messages sent and lost after the final dot since
// start.
type lostSample struct {
	start      time.Time
	sent, lost int
}

// lossyShare adds rep to the current sample and, when the sample is full,
// judges it: it reports whether lostHalt samples in a row lost at least
// 1/lostShare of their attempts after the final dot. A sample is full when
// it holds lostSampleSize attempts and spans lostPace: samples of
// attempts, not pages (a page's share depends on where it stopped, and
// pages cut short by their losses reset a per-page count under load), and
// of time, so that a relay restart, which loses every window in flight at
// once (more than a sample's attempts with many workers), fills one
// sample, not two. A relay that drops a fifth of its messages keeps doing
// it, sample after sample.
func (a *actor) lossyShare(rep bus.Report, now time.Time) bool {
	if a.lostSample.start.IsZero() {
		a.lostSample.start = now
	}
	a.lostSample.sent += rep.Sent
	a.lostSample.lost += rep.InDoubt
	attempts := a.lostSample.sent + a.lostSample.lost
	if attempts < lostSampleSize || now.Sub(a.lostSample.start) < lostPace {
		return false
	}
	if a.lostSample.lost >= minLost && a.lostSample.lost*lostShare >= attempts {
		a.lossySamples++
	} else {
		a.lossySamples = 0
	}
	if a.lossySamples >= lostHalt {
		return true // the sample is kept for the reason, then cleared
	}
	a.lostSample = lostSample{}
	return false
}

// lastError is the report's error as the end of a reason, or nothing.
func lastError(rep bus.Report) string {
	if rep.Error == "" {
		return ""
	}
	return "last error: " + rep.Error + "; "
}

// minLost is the fewest messages lost after the final dot in one report
// that lostAfterDot counts, as minStopRefusals is for a window's
// refusals: one or two are a connection's bad luck.
const minLost = 3

// lostShare and lostSampleSize: a sample of at least lostSampleSize
// attempts (and lostPace) of which at least 1/lostShare were lost after
// the final dot is lossy (lossyShare).
const (
	lostShare      = 10
	lostSampleSize = 100
)

// stateMet has run read the store's state right after this report when
// its page stopped at a pause or an end the actor does not hold: the
// store refused its claims, or the worker saw the state in KV. Until the
// tick's mirror, the actor would otherwise redispatch every range's page
// as fast as their reports came back (2,143 pages in 2 s in
// TestPausedInStoreStopsRedispatch, a pause whose KV write was lost). At
// most once per mirrorSoon, should a worker's view lag the store instead.
func (a *actor) stateMet(rep bus.Report, now time.Time) {
	if a.b.State == store.StateRunning && (rep.Class == bus.ClassPaused || rep.Class == bus.ClassCancelled) &&
		now.Sub(a.mirrored) >= mirrorSoon {
		a.mirrored = time.Time{}
	}
}

// mirrorSoon is the least time between two reads of the store's state that
// reports ask for (stateMet).
const mirrorSoon = 100 * time.Millisecond

// write stores a range record by compare-and-set on the revision read.
func (a *actor) write(ctx context.Context, i int, rec bus.RangeRecord) error {
	rev, err := bus.PutAt(ctx, a.c.cfg.Bus.Broadcasts, bus.RangeKey(a.id.String(), i), bus.Encode(rec), a.revs[i])
	a.c.kvWrites.add(1)
	if err != nil {
		if bus.IsConflict(err) {
			return fmt.Errorf("range %d: %w", i, jetstream.ErrKeyExists)
		}
		return fmt.Errorf("write range %d: %w", i, err)
	}
	a.recs[i], a.revs[i] = rec, rev
	return nil
}

func (a *actor) reload(ctx context.Context) error {
	recs, revs, err := a.c.rangeRecords(ctx, a.b)
	if err != nil {
		return err
	}
	a.recs, a.revs = recs, revs
	return nil
}

// fruitless handles a range that made no progress because of a transient
// error: back off, and after MaxFruitless in a row fail the broadcast with
// the reason rather than retry forever.
//
// A page issued before the operator's last resume backs the range off but
// is not counted: the resume is a new try (as for refused), and a range
// whose count an outage paused through had brought near the limit failed
// the broadcast on the late report of a page from before the pause.
func (a *actor) fruitless(ctx context.Context, i int, rep bus.Report, now time.Time) error {
	rec := a.recs[i]
	// The record's count went back to zero since (the range sent) or is
	// another leader's lower one: the base goes no higher.
	a.fruitlessBase[i] = min(a.fruitlessBase[i], rec.Fruitless)
	since := rec.Fruitless - a.fruitlessBase[i] // resumptions since the last resume
	prev := a.fruitlessAt[i]
	if a.fruitlessAt == nil {
		a.fruitlessAt = map[int]time.Time{}
	}
	a.fruitlessAt[i] = now
	// Not counted either: a page that sent nothing while the broadcast
	// sent since this range's last such page. Mail is going out, so the
	// cause is where this page ran (a worker holding none of the
	// connections a relay allows: every page it took met 421 while the
	// other worker sent), not the broadcast; counted, a range that kept
	// landing on that worker failed a broadcast the relay was taking 50
	// messages a second of (a tester). The range backs off all the same.
	if a.issuedBeforeResume(rep) || (!prev.IsZero() && a.lastSent.After(prev)) {
		a.notBefore[i] = now.Add(a.c.backoff(max(since, 1)))
		a.lastErr[i] = rep.Error
		return nil
	}
	rec.Fruitless++
	since++
	if err := a.write(ctx, i, rec); err != nil {
		return err
	}
	if since >= a.c.cfg.MaxFruitless {
		reason := fmt.Sprintf("range %d made no progress in %d attempts; last error: %s", i, since, rep.Error)
		return a.transition(ctx, []store.State{store.StateRunning}, store.StateFailed, reason)
	}
	a.notBefore[i] = now.Add(a.c.backoff(since))
	a.lastErr[i] = rep.Error
	return nil
}

// zeroFruitless writes each range record's fruitless count back to zero
// after a resume (forgetFruitless): the resume is a new try, and a leader
// taking over after it, which knows nothing of fruitlessBase, would
// otherwise count a range's resumptions from before it too and fail the
// broadcast at its first refused page. Only ranges with a count are
// written. A failed write (another leader's, a KV outage) is tried again
// at the next pass; the base stands in meanwhile.
func (a *actor) zeroFruitless(ctx context.Context) {
	if !a.forgetFruitless {
		return
	}
	for i, rec := range a.recs {
		if rec.Fruitless == 0 || rec.Done {
			continue
		}
		rec.Fruitless = 0
		if err := a.write(ctx, i, rec); err != nil {
			a.log().Warn("cannot start a range's count of fruitless resumptions afresh; tried again shortly", "range", i, "err", err)
			return
		}
		a.fruitlessBase[i] = 0
	}
	a.forgetFruitless = false
}

// issuedBeforeResume: the report's page was issued before the operator's
// last resume (or before this actor started). Its report can come minutes
// after its sends (a slow page, redeliveries), and it says nothing of the
// relay since. Counted, an outage's late reports failed a broadcast four
// minutes after the resume, with the relay taking mail again (simulation
// seed 14872). A report without Issued (a worker older than it) counts.
func (a *actor) issuedBeforeResume(rep bus.Report) bool {
	return !rep.Issued.IsZero() && rep.Issued.Before(a.resumedAt)
}

// poison fails the broadcast when one of its pages reached the delivery
// limit: it crashed or hung every worker that took it.
func (a *actor) poison(ctx context.Context, job bus.PageJob, deliveries int) error {
	reason := fmt.Sprintf("page of range %d from %s was handed out %d times and never finished (each worker crashed, hung or timed out on it)", job.Range, job.From, deliveries)
	return a.transition(ctx, []store.State{store.StateRunning, store.StatePaused}, store.StateFailed, reason)
}

// halt pauses the broadcast on a channel-wide error: a human must look.
func (a *actor) halt(ctx context.Context, rep bus.Report) error {
	return a.transition(ctx, []store.State{store.StateRunning}, store.StatePaused, "sending halted: "+rep.Error)
}

func (a *actor) transition(ctx context.Context, from []store.State, to store.State, reason string) error {
	b, err := a.c.cfg.Store.SetState(ctx, a.id, from, to, reason, a.c.cfg.Clock.Now())
	if errors.Is(err, store.ErrConflict) {
		a.b.State, a.b.Reason = b.State, b.Reason
		return nil // someone else moved it first; their state stands
	}
	if err != nil {
		return err
	}
	a.b.State, a.b.Reason = b.State, b.Reason
	broadcastTransitions.WithLabelValues(string(to)).Inc()
	a.log().Info("broadcast state changed", "state", b.State, "reason", reason)
	return a.c.putState(ctx, b)
}

// tailWaiting is what a broadcast whose ranges are all walked waits for,
// from its pending rows (p) at now: claims to settle, or deferred rows to
// come due or to be sent. sweepWait and sweepRefused are the leader's last
// sweep's hold and refusal ("" unknown: a follower's status).
func tailWaiting(p store.Pending, now time.Time, sweepWait, sweepRefused string) string {
	switch {
	case p.Claimed > 0:
		return fmt.Sprintf("all ranges walked; %d messages in flight or in doubt", p.Claimed)
	case p.Deferred == 0:
		return ""
	case p.NextDue.After(now):
		return fmt.Sprintf("all ranges walked; %s deferred, next due %s UTC%s", messages(p.Deferred), p.NextDue.UTC().Format(time.TimeOnly), nextWhy(p))
	case sweepWait != "":
		return fmt.Sprintf("all ranges walked; %s deferred, due now and held: %s", messages(p.Deferred), sweepWait)
	case sweepRefused != "":
		return fmt.Sprintf("all ranges walked; %s deferred, due now; the last retry sent nobody: %s", messages(p.Deferred), sweepRefused)
	}
	return fmt.Sprintf("all ranges walked; %s deferred, due now", messages(p.Deferred))
}

// nextWhy says why the row due next was deferred, and how often it was
// tried: deferred rows of a mailbox that stays full are retried until the
// workers' retry-for and then fail, which "next due" alone did not say.
func nextWhy(p store.Pending) string {
	if p.NextError == "" {
		return ""
	}
	why := strings.TrimPrefix(p.NextError, store.DeferredAgainPrefix)
	if len(why) > 160 {
		why = strings.ToValidUTF8(why[:160], "") + "…"
	}
	return fmt.Sprintf(" (the next: %s; %d attempts so far; a recipient refused on every try fails after the workers' --retry-for)", why, p.NextAttempt)
}

// finish completes the broadcast once every range is done and no claim is
// without an outcome.
func (a *actor) finish(ctx context.Context) bool {
	if a.b.State != store.StateRunning {
		return false
	}
	for _, r := range a.recs {
		if !r.Done {
			return false
		}
	}
	if len(a.sweeps) > 0 {
		a.setWaiting("all ranges walked; sending deferred messages")
		return false
	}
	// One statement, so a row moving between claimed and deferred (a sweep
	// of an earlier term) is seen in one state or the other. Pending reads
	// only the rows still claimed, deferred or failed: checked on every
	// tick while the last claims settle, Counts would read the whole
	// ledger of the broadcast each time.
	p, err := a.c.cfg.Store.Pending(ctx, a.id)
	if err != nil {
		a.log().Warn("cannot check pending claims", "err", err)
		return false
	}
	if p.Claimed > 0 {
		a.setWaiting(tailWaiting(p, a.c.cfg.Clock.Now(), a.sweepWait, a.sweepRefused))
		return false
	}
	// This actor's records may be stale (a split brain, a handover): another
	// leader's reconciler may have moved a range back and released its
	// claim for a re-walk. It writes KV before it releases, and the counts
	// above were read first, so the records read now show that rewind.
	if err := a.reload(ctx); err != nil {
		a.log().Warn("cannot re-read range records before completing", "err", err)
		return false
	}
	for _, r := range a.recs {
		if !r.Done {
			return false
		}
	}
	if p.Deferred > 0 {
		a.setWaiting(tailWaiting(p, a.c.cfg.Clock.Now(), a.sweepWait, a.sweepRefused))
		return false
	}
	if err := a.transition(ctx, []store.State{store.StateRunning}, store.StateCompleted, a.completionSummary(ctx, p.Failed)); err != nil {
		a.log().Warn("cannot complete broadcast", "err", err)
		return false
	}
	a.setWaiting("")
	return a.b.State.Finished()
}

// completionSummary is failureSummary, and how many messages ended
// unknown (lost after the final dot, or in doubt when a worker died: maybe
// delivered, not sent again) or were sent again in doubt (the resend
// policy: maybe two copies), which are otherwise seen only by asking for
// the counts. Read once, when the broadcast completes.
func (a *actor) completionSummary(ctx context.Context, failed int64) string {
	parts := []string{a.failureSummary(ctx, failed)}
	// Doubts, not Counts: Counts reads every row of the broadcast, which
	// at completion was a third of make bench's rows read per message.
	if unknown, again, err := a.c.cfg.Store.Doubts(ctx, a.id); err == nil {
		if unknown > 0 {
			parts = append(parts, fmt.Sprintf("%s unknown (maybe delivered, not sent again; retry --include-unknown sends them again, at the risk of a second copy)", messages(unknown)))
		}
		if again > 0 {
			parts = append(parts, fmt.Sprintf("%s sent again after an attempt that may have arrived (in-doubt policy resend, or retry --include-unknown: maybe two copies)", messages(again)))
		}
	}
	return strings.Join(slices.DeleteFunc(parts, func(s string) bool { return s == "" }), "; ")
}

// failureSummary says, for a finished broadcast, how many messages failed
// (failed, read with nothing left claimed or deferred, so final) and shows
// one reply, so the failures are seen without digging.
func (a *actor) failureSummary(ctx context.Context, failed int64) string {
	if failed == 0 {
		return ""
	}
	sample, err := a.c.cfg.Store.Failures(ctx, a.id, 1)
	if err != nil || len(sample) == 0 {
		return messages(failed) + " failed"
	}
	// The contact by id, its address withheld (explainFor's reason): a
	// reason outlives an erasure in KV and logs.
	summary := fmt.Sprintf("%s failed, e.g. contact %s: %s", messages(failed), sample[0].ContactID, store.ReplaceAddress(sample[0].Error, sample[0].Email, store.Recipient))
	if strings.HasPrefix(sample[0].Error, store.NotSentPrefix) {
		summary += fmt.Sprintf(" (never handed to the relay: rangecast broadcasts retry %s sends such messages again once the relay can take them)", a.id)
	}
	return summary
}

// dispatch publishes the next page of every range that has none outstanding,
// as far as the throttle grants.
func (a *actor) dispatch(ctx context.Context) {
	if a.b.State != store.StateRunning {
		if a.b.State == store.StatePaused {
			a.setWaiting("paused: " + a.b.Reason)
		}
		return
	}
	if strings.HasPrefix(a.waiting(), "paused: ") {
		// Resumed: a broadcast whose ranges are all walked sets no
		// waiting below, and status said "paused" while it ran (tester).
		a.setWaiting("")
	}
	now := a.c.cfg.Clock.Now()
	waiting, unfinished := "", false
	a.throttleWait, a.pagesHeld = 0, false
	// Start each round one range further on, so a throttle that grants only
	// a few pages at a time spreads them over all ranges.
	a.round++
	for k := range a.recs {
		i := (k + a.round) % len(a.recs)
		rec := a.recs[i]
		if o, ok := a.outstanding[i]; ok && now.Sub(o.at) >= a.c.cfg.Redispatch {
			// Given up on: its grant ends here; a late report of it
			// still counts what it sent. Before the done test: a range
			// another leader's write (read at a reload) marked done keeps
			// a page here whose report that leader took.
			delete(a.outstanding, i)
			a.giveBack(o.limit)
		}
		if rec.Done {
			continue
		}
		unfinished = true
		if _, ok := a.outstanding[i]; ok {
			continue
		}
		if now.Before(a.notBefore[i]) {
			waiting = fmt.Sprintf("range %d retries at %s after: %s", i, a.notBefore[i].UTC().Format(time.TimeOnly), a.lastErr[i])
			continue
		}
		limit := a.c.cfg.PageLimit
		if a.throttle != nil {
			limit = a.throttle.Take(now, limit)
			if limit < a.minPage() {
				// Pages of a few messages each cost a KV write and a
				// report apiece; wait for a worthwhile page instead.
				a.throttle.Return(limit)
				limit = 0
			}
			if limit == 0 {
				a.pagesHeld = true
				a.throttleWait = max(a.throttle.WaitFor(now, a.minPage()), 10*time.Millisecond)
				waiting = fmt.Sprintf("throttle of %d/hour; next page in %s", a.b.ThrottlePerHour, max(a.throttleWait.Round(time.Second), time.Second))
				break
			}
		}
		granted, why := a.pace(now, limit)
		if granted < a.c.cfg.PageLimit && why.Refused() {
			waiting = why.Text // refused or shrunk: say which limit binds
		}
		if limit = granted; limit == 0 {
			if why.Limit == governor.LimitRate {
				a.throttleWait = a.rateWait(now, why.Until)
				a.pagesHeld = true
			}
			break
		}
		a.pagesHeld, a.sweptLast = false, false
		job := bus.PageJob{Broadcast: a.id.String(), Range: i, From: rec.Next, Until: rec.End, Limit: limit, Epoch: rec.Epoch, Issue: a.issue,
			Content: a.b.ContentRevision, Issued: now}
		if pacer := a.c.pacer(); pacer != nil {
			// A page carries a ramp step only for a provider given up
			// (Holds): its held rows fail then instead of waiting for a
			// sweep to carry the step.
			h := pacer.Holds(now, a.domain(), false, a.b.StartedAt)
			job.Defer, job.GiveUp, job.Probe, job.Conns, job.StepShare, job.StepFloor = h.Defer, h.GiveUp, h.Probe, h.Conns, h.StepShare, h.StepFloor
		}
		if err := a.c.cfg.Pages.PublishPage(ctx, job, now); err != nil {
			a.log().Warn("dispatch failed; retried on the next tick", "range", i, "err", err)
			a.giveBack(limit)
			break
		}
		pagesDispatched.Inc()
		a.outstanding[i] = page{from: rec.Next, limit: limit, at: now}
		a.dispatched[i]++
	}
	if unfinished {
		a.setWaiting(strings.Join(slices.DeleteFunc([]string{a.refusedNote(), waiting}, func(s string) bool { return s == "" }), "; "))
	}
}

// refusedNote says, while a run of refused pages lasts, since when nothing
// was sent and why, and how far the run is from failing the broadcast. The
// other reasons to wait (a provider's share of deferrals, a range's
// backoff) would otherwise hide a relay refusing every connection for
// minutes, while the workers' logs said so at once (tester).
func (a *actor) refusedNote() string {
	if a.refusedPages == 0 || a.refusedErr == "" {
		return ""
	}
	return fmt.Sprintf("every page since %s UTC sent nothing: %s (%d of %d such pages in a row, counted at the backoff's pace, fail the broadcast)",
		a.refusedSince.UTC().Format(time.TimeOnly), a.refusedErr, a.refusedPages, a.c.cfg.MaxFruitless)
}

// rateWait is when to dispatch again after the domain's rate (its token
// bucket) granted nothing: when the governor says a worthwhile page's
// tokens are back (until), at most a tick. A whole tick capped a domain at
// a burst per tick: --rate 2 --burst 2 sent 0.4/s, the default 50/s 40/s.
func (a *actor) rateWait(now, until time.Time) time.Duration {
	return min(a.c.cfg.Tick, max(until.Sub(now), time.Millisecond))
}

// minPage is the smallest throttled page worth dispatching: what the
// throttle refills in one tick, between 1 and a quarter of a full page.
func (a *actor) minPage() int {
	perTick := int(float64(a.b.ThrottlePerHour) / 3600 * a.c.cfg.Tick.Seconds())
	return max(1, min(a.c.cfg.PageLimit/4, perTick))
}

// pace asks the pacer (the domain's governor) for up to limit messages the
// throttle has already granted, and returns to the throttle what the pacer
// would not grant. Both must grant before anything goes out.
func (a *actor) pace(now time.Time, limit int) (granted int, why governor.Refusal) {
	pacer := a.c.pacer()
	if pacer == nil {
		return limit, governor.Refusal{}
	}
	granted, why = pacer.Grant(now, a.domain(), limit)
	if a.throttle != nil {
		a.throttle.Return(limit - granted)
	}
	return granted, why
}

// giveBack ends a grant of n that sent nothing (a dispatch that failed, a
// page given up on or dropped by a pause): the throttle and the pacer get it
// all back.
func (a *actor) giveBack(n int) {
	if n <= 0 {
		return
	}
	if a.throttle != nil {
		a.throttle.Return(n)
	}
	if p := a.c.pacer(); p != nil {
		p.Settle(a.domain(), n, 0)
	}
}

// settle ends the grant of a reported page: the throttle gets back what
// was not claimed, the governor what was not sent (the report's sends are
// counted by Observe when the report is applied).
func (a *actor) settle(granted int, rep bus.Report) {
	if a.throttle != nil && granted > rep.Claimed {
		a.throttle.Return(granted - rep.Claimed)
	}
	if p := a.c.pacer(); p != nil {
		p.Settle(a.domain(), granted, rep.Sent)
	}
}

// dropOutstanding ends the grants of every page and sweep still out: they
// will be re-issued (resume) or never run (the actor stops). Grants must
// not outlive their pages, or the governor's in-flight count only grows.
func (a *actor) dropOutstanding() {
	for i, o := range a.outstanding {
		a.giveBack(o.limit)
		delete(a.outstanding, i)
	}
	for _, s := range a.sweeps {
		a.giveBack(s.limit)
	}
	a.sweeps = nil
}

// domain is the sending domain the governor paces this broadcast under.
func (a *actor) domain() string { return sendingDomain(a.b) }

// sendingDomain is the domain of b's From address, lower-cased: the
// governor that paces it.
func sendingDomain(b store.Broadcast) string {
	addr := b.Content.FromAddress
	return strings.ToLower(addr[strings.LastIndexByte(addr, '@')+1:])
}

// after reports whether ULID string x sorts after y. ULID strings sort like
// the ids they encode.
func after(x, y string) bool { return x > y }

func minID(x, y string) string {
	if after(x, y) {
		return y
	}
	return x
}

func maxID(x, y string) string {
	if after(x, y) {
		return x
	}
	return y
}

// messages is "1 message" or "n messages" (a tester read "1 messages
// failed").
func messages(n int64) string {
	return fmt.Sprintf("%d %s", n, store.Plural(n, "message", "messages"))
}
