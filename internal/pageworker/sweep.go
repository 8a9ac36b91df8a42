package pageworker

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/rangecast/rangecast/internal/bus"
	"github.com/rangecast/rangecast/internal/store"
)

// runSweep sends a broadcast's deferred rows whose retry time has come. The
// rows are claimed by moving them from deferred back to claimed, held by
// owner (only the sweep that moved a row sends it); the cursor of their
// range passed them long ago, so a row this sweep cannot send goes back to
// deferred, never released: a released row would be skipped for good. A
// failed window's row can still be in doubt (connection lost after the
// data): the reconciler settles it like any other.
//
// A send that outlives its window (a straggler, pipeline.wait: a server
// that tarpits a retried recipient for half a minute) does not hold the
// sweep: its window is recorded without it, the next window is claimed
// (never the straggler's row again: ClaimDue's sending), and its outcome
// is recorded with a later window's, or by finish, which the worker runs
// off its puller, before the sweep is reported.
func (w *Worker) runSweep(ctx, pageCtx context.Context, job bus.PageJob, owner string) (rep bus.Report, finish func() bus.Report, err error) {
	rep = bus.Report{Broadcast: job.Broadcast, Range: bus.SweepRange, Epoch: job.Epoch, Limit: job.Limit, Issue: job.Issue, Issued: job.Issued, Sweep: true, Done: true, Probed: job.Probe}
	id, err := ulid.ParseStrict(job.Broadcast)
	if err != nil {
		return rep, nil, fmt.Errorf("sweep job: broadcast id: %w", err)
	}
	l, err := w.load(pageCtx, id, max(job.Content, w.revision(job.Broadcast)))
	if err != nil {
		return rep, nil, err
	}
	rep.Domain = l.compiled.SendingDomain()
	h := newHolds(job)
	// One window at a time: the claims without an outcome are the window
	// being sent and the stragglers (each holding one of the worker's
	// straggler tokens), so a kill -9 leaves no more in doubt than a page.
	p := newPipeline(w, pageCtx, l, "sweep", 0)
	var late []straggler
	unreached := ""                   // the last error of a send that reached no recipient (reachedNobody)
	rows := map[ulid.ULID]store.Due{} // attempt and in-doubt flag of each row claimed and not yet recorded
	defer func() {
		// Every claimed window is sent whole; the stragglers a finish is
		// left with are its to wait for.
		if p.closeLaunched(); finish == nil {
			p.sends.Wait()
			w.giveLate(len(late))
		}
	}()
	// onlyLanes: the last window was the carried steps' recipients alone
	// and gave some back (errLaneBusy); the next claims no more than the
	// steps' free connections while they have some, so a backlog of the
	// ramping provider alone (a hold over) goes out through its step
	// without rows claimed only to be given back.
	onlyLanes := false
	// A sweep carrying a ramp step claims for at most StepFor: a step
	// into a tarpit (20-40 s a message, 192 rows on one connection) ran
	// for an hour, long past the coordinator's giving up on the sweep (3
	// minutes), so another sweep carried the next step beside it, and the
	// ramp was judged only at its end (verifier).
	var stepUntil time.Time
	if len(job.Probe) > 0 {
		stepUntil = w.cfg.Clock.Now().Add(StepFor)
	}
	for taken := 0; taken < job.Limit && ctx.Err() == nil; {
		if state, err := w.states.Get(pageCtx, job.Broadcast); err != nil || state != store.StateRunning || w.revision(job.Broadcast) > l.current() || w.live.stale(owner) {
			break // paused, or edited since the sweep read the content (the next sweep reads it), or the run lapsed
		}
		if !stepUntil.IsZero() && !w.cfg.Clock.Now().Before(stepUntil) {
			break // the step has had its time: judged now, the next goes with the next sweep
		}
		w.refreshHolds(pageCtx, l, h)
		now := w.cfg.Clock.Now()
		sending := make([]ulid.ULID, len(late))
		for k, s := range late {
			sending[k] = s.b.window[s.i].ID
		}
		// Eligibility is decided again now: ClaimDue drops rows whose
		// contact left the audience while deferred.
		// Retried as it is when it may have committed: ClaimDue returns
		// the rows this run holds already, but for the stragglers'.
		// A carried ramp step whose connections are all busy (a slow
		// provider's) has its domains left due: the window takes other
		// providers' retries meanwhile, and when nothing else is due the
		// sweep waits for one of the step's sends to end, or a moment for
		// other retries to come due.
		leave, free := h.busy()
		limit := min(w.cfg.Concurrency, job.Limit-taken)
		if onlyLanes && len(leave) == 0 {
			limit = min(limit, free)
		}
		var due []store.Due
		if limit > 0 {
			err := w.persist(ctx, owner, func() error {
				var err error
				due, err = w.cfg.Store.ClaimDue(pageCtx, l.b, owner, now, limit, sending, leave)
				return err
			})
			if err != nil {
				if taken == 0 {
					return rep, nil, err
				}
				rep.Class, rep.Error = bus.ClassTransient, err.Error()
				break
			}
		}
		if len(due) == 0 {
			if len(leave) == 0 || !h.waitFreed(ctx, pageCtx, w.cfg.Clock.After(laneRecheck)) {
				break
			}
			continue
		}
		taken += len(due)
		// Between two windows a sweep may hold no claim (none straggles),
		// so an edit can come between them: such a window looks
		// (sendable). Stragglers hold claims, so no edit came.
		if len(late) == 0 {
			l = w.sendable(ctx, pageCtx, l, owner)
			p.setContent(l)
		}
		window := make([]store.Contact, len(due))
		mine := make(map[ulid.ULID]bool, len(due))
		for k, d := range due {
			window[k], mine[d.ID], rows[d.ID] = d.Contact, true, d
		}
		p.start(w.prepare(window, mine, h, now, owner))
		b, pending := p.wait()
		var over []straggler
		over, late = regroup(late, b, pending)
		res, outcomes := w.conclude(l, view(b, pending, over), len(pending))
		back := givenBack(b, pending)
		rampGivenBack.Add(float64(back))
		// Rows given back are claimed again, by a later window or sweep:
		// not this sweep's share of its limit, nor of its throttle.
		res.claimed = len(window) - back
		taken -= back
		onlyLanes = back > 0 && stepsAlone(b)
		w.live.progress(owner, w.cfg.Clock.Now())
		w.settleDue(&res, outcomes, rows)
		err = w.persist(ctx, owner, func() error {
			return w.cfg.Store.RecordOutcomes(pageCtx, l.b.ID, owner, outcomes, w.cfg.Clock.Now())
		})
		if err != nil {
			// Not recorded: the rows stay this run's claims until the
			// reconciler finds the run gone.
			rep.Class, rep.Error = bus.ClassTransient, err.Error()
			late = append(late, over...) // their tokens too, once their sends have ended
			return rep, nil, nil
		}
		w.giveLate(len(over)) // their outcomes are committed
		for _, o := range outcomes {
			delete(rows, o.ContactID)
		}
		w.count(res)
		res.addTo(&rep)
		unreached = cmp.Or(res.unreachedErr, unreached)
		if res.stopAt >= 0 {
			rep.Class, rep.Error = res.class, res.err
			break
		}
		if back > 0 && back == len(window) && !h.waitFreed(ctx, pageCtx, w.cfg.Clock.After(laneRecheck)) {
			// Nothing but rows given back (their domain not yet known to
			// be the step's, or spelt another way): wait as for a claim
			// that found nothing, not claim them straight back.
			break
		}
	}
	if len(late) == 0 {
		reachedNobody(&rep, unreached)
		return rep, nil, nil
	}
	sends := late
	late = nil // their tokens are finish's to give back
	return rep, func() bus.Report { return w.finishSweep(ctx, pageCtx, l, owner, sends, rows, rep, unreached) }, nil
}

// reachedNobody stops a sweep that reached none of its recipients (every
// send failed at connect, TLS, AUTH or MAIL FROM) as its windows would
// have (conclude's reachedNobody), when none could say so: each had a send
// still outstanding when it was concluded, and its last stragglers are
// judged apart from any window. Against an overloaded relay that refuses
// some connects at once and lets others hang, the hanging ones are
// stragglers (when every send hangs, none is: the window waits whole); a
// sweep of a few due rows then reported no stop, and the coordinator, hearing of no refusal, swept them
// again for ever (the rows are charged no attempt) instead of failing the
// broadcast. why is the last unreached send's error.
func reachedNobody(rep *bus.Report, why string) {
	if rep.Class == bus.ClassNone && rep.Sent == 0 && rep.Reached == 0 && rep.Unreached > 0 && why != "" {
		rep.Class, rep.Error = bus.ClassTransient, why
	}
}

// finishSweep waits for a sweep's stragglers and records their outcomes,
// judged as one window apart from theirs (conclude's undecided), and
// returns the sweep's report with them.
func (w *Worker) finishSweep(ctx, pageCtx context.Context, l *loaded, owner string, sends []straggler, rows map[ulid.ULID]store.Due, rep bus.Report, unreached string) bus.Report {
	res, _, err := w.recordLate(ctx, pageCtx, l, owner, sends, func(res *windowResult, outcomes []store.Outcome) {
		w.settleDue(res, outcomes, rows)
	})
	if err != nil {
		// Not recorded: the rows stay this run's claims until the
		// reconciler finds the run gone.
		if rep.Class == bus.ClassNone {
			rep.Class, rep.Error = bus.ClassTransient, err.Error()
		}
		return rep
	}
	w.count(res)
	res.addTo(&rep)
	if res.stopAt >= 0 && rep.Class == bus.ClassNone {
		rep.Class, rep.Error = res.class, res.err
	}
	reachedNobody(&rep, cmp.Or(res.unreachedErr, unreached))
	return rep
}

// settleDue turns a sweep window's outcomes into what its rows, retried
// already, are recorded as (rows: each row's attempt and in-doubt flag).
func (w *Worker) settleDue(res *windowResult, outcomes []store.Outcome, rows map[ulid.ULID]store.Due) {
	// A row cannot wait for ever: after its attempts (giveUpAttempts)
	// it fails with the reason, so the broadcast finishes and the
	// failure is seen.
	answered := w.cfg.Clock.Now() // the deferrals' waits count from here, as in conclude
	for k, o := range outcomes {
		if o.Status != store.SendDeferred || o.NotAttempted {
			// Held, or refused before the recipient was named: not an
			// attempt, so it never fails for it.
			continue
		}
		attempt := rows[o.ContactID].Attempt
		if attempt >= w.giveUpAt {
			outcomes[k] = store.Outcome{ContactID: o.ContactID, Status: store.SendFailed,
				Error: fmt.Sprintf("%s%d attempts; last: %s", store.GaveUpPrefix, attempt, o.Error)}
			res.deferred--
			res.failed++
			continue
		}
		if at := w.retryAfterAttempt(answered, attempt); at.After(o.RetryAt) {
			outcomes[k].RetryAt = at // a greylisting server's wait (retryAt) may be later
		}
		outcomes[k].Error = store.DeferredAgainPrefix + o.Error
	}
	// A row whose earlier attempt may have been delivered (the
	// reconciler released it to be sent again) never ends failed,
	// whether refused now or given up on: "not delivered" may be
	// untrue. It ends unknown, with this attempt's reason.
	for k, o := range outcomes {
		if o.Status == store.SendFailed && rows[o.ContactID].InDoubt {
			outcomes[k] = store.Outcome{ContactID: o.ContactID, Status: store.SendUnknown, Error: store.InDoubtEndedPrefix + o.Error,
				NotAttempted: o.NotAttempted}
			res.failed--
		}
	}
}

// StepFor bounds how long a sweep carrying a ramp step claims: well
// within the coordinator's giving up on a sweep (Redispatch, 3 minutes)
// and a probe's lease (governor.ProbeLease, 5 minutes), so one step is
// judged before the next goes, whatever the provider's pace.
const StepFor = time.Minute

// laneRecheck is how long a sweep waiting for a busy ramp step's
// connection goes without looking for other retries come due.
const laneRecheck = time.Second

// stepsAlone reports whether every recipient of window b sent or given
// back went under a carried ramp step: none of the window's sends was
// another provider's.
func stepsAlone(b *batch) bool {
	for i, c := range b.window {
		if b.mine[c.ID] && b.deferUntil[i].IsZero() && b.lane(i) == nil {
			return false
		}
	}
	return true
}

// givenBack counts a window's recipients given back unsent because their
// ramp step's connections were busy (errLaneBusy): claimed and at once due
// again, they are charged to no throttle. The stragglers (pending) are
// still running.
func givenBack(b *batch, pending []int) int {
	n := 0
	for i := range b.errs {
		if !slices.Contains(pending, i) && b.errs[i] == errLaneBusy { // a straggler's is still being written
			n++
		}
	}
	return n
}
