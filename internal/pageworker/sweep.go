package pageworker

import (
	"context"
	"fmt"
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
func (w *Worker) runSweep(ctx, pageCtx context.Context, job bus.PageJob, owner string) (bus.Report, error) {
	rep := bus.Report{Broadcast: job.Broadcast, Range: bus.SweepRange, Epoch: job.Epoch, Limit: job.Limit, Sweep: true, Done: true, Probed: job.Probe}
	id, err := ulid.ParseStrict(job.Broadcast)
	if err != nil {
		return rep, fmt.Errorf("sweep job: broadcast id: %w", err)
	}
	l, err := w.load(pageCtx, id)
	if err != nil {
		return rep, err
	}
	rep.Domain = l.compiled.SendingDomain()
	h := newHolds(job)
	// One window at a time: claimed rows never outnumber the in-flight
	// window, so a kill -9 leaves at most a window in doubt.
	for taken := 0; taken < job.Limit && ctx.Err() == nil; {
		if state, err := w.states.Get(pageCtx, job.Broadcast); err != nil || state != store.StateRunning {
			break
		}
		w.refreshHolds(pageCtx, l, h)
		now := w.cfg.Clock.Now()
		// Eligibility is decided again now: ClaimDue drops rows whose
		// contact left the audience while deferred.
		// Retried as it is when it may have committed: ClaimDue returns
		// the rows this run holds already.
		var due []store.Due
		err := w.persist(ctx, owner, func() error {
			var err error
			due, err = w.cfg.Store.ClaimDue(pageCtx, l.b, owner, now, min(w.cfg.Concurrency, job.Limit-taken))
			return err
		})
		if err != nil {
			if taken == 0 {
				return rep, err
			}
			rep.Class, rep.Error = bus.ClassTransient, err.Error()
			break
		}
		if len(due) == 0 {
			break
		}
		taken += len(due)
		window := make([]store.Contact, len(due))
		mine := make(map[ulid.ULID]bool, len(due))
		row := make(map[ulid.ULID]store.Due, len(due)) // attempt and in-doubt flag by contact
		for k, d := range due {
			window[k], mine[d.ID], row[d.ID] = d.Contact, true, d
		}
		res, outcomes := w.deliver(pageCtx, l, window, mine, h, now)
		res.claimed = len(window)
		w.live.progress(owner, w.cfg.Clock.Now())
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
			attempt := row[o.ContactID].Attempt
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
			if o.Status == store.SendFailed && row[o.ContactID].InDoubt {
				outcomes[k] = store.Outcome{ContactID: o.ContactID, Status: store.SendUnknown, Error: store.InDoubtEndedPrefix + o.Error,
					NotAttempted: o.NotAttempted}
				res.failed--
			}
		}
		err = w.persist(ctx, owner, func() error {
			return w.cfg.Store.RecordOutcomes(pageCtx, l.b.ID, owner, outcomes, w.cfg.Clock.Now())
		})
		if err != nil {
			// Not recorded: the rows stay this run's claims until the
			// reconciler finds the run gone.
			rep.Class, rep.Error = bus.ClassTransient, err.Error()
			break
		}
		w.count(res)
		res.addTo(&rep)
		if res.stopAt >= 0 {
			rep.Class, rep.Error = res.class, res.err
			break
		}
	}
	return rep, nil
}
