package coordinator

import (
	"context"
	"fmt"
	"time"

	"github.com/rangecast/rangecast/internal/bus"
	"github.com/rangecast/rangecast/internal/store"
)

// sweepEvery bounds how often an actor looks for due deferred rows when it
// has no sweep outstanding; a tick is the other bound.
const sweepEvery = 5 * time.Second

// sweep dispatches a sweep of the broadcast's deferred rows whose retry time
// has come, one at a time, paced by the governor like any page. Ranges do
// not wait for it: their cursors passed the deferred rows long ago.
func (a *actor) sweep(ctx context.Context) {
	if a.b.State != store.StateRunning {
		return
	}
	now := a.c.cfg.Clock.Now()
	if a.sweeping != nil {
		if now.Sub(a.sweeping.at) < a.c.cfg.Redispatch {
			return
		}
		a.giveBack(a.sweeping.limit) // given up on
		a.sweeping = nil
	}
	if now.Before(a.nextSweep) {
		return
	}
	a.nextSweep = now.Add(min(sweepEvery, a.c.cfg.Tick))
	n, due, err := a.c.cfg.Store.NextDue(ctx, a.id)
	if err != nil {
		a.log().Warn("cannot look for due deferred messages", "err", err)
		return
	}
	if n == 0 {
		return
	}
	if due.After(now) {
		a.nextSweep = minTime(due, a.nextSweep)
		return
	}
	limit := a.c.cfg.PageLimit
	if a.throttle != nil {
		if limit = a.throttle.Take(now, limit); limit == 0 {
			a.sweepWait = fmt.Sprintf("throttle of %d/hour", a.b.ThrottlePerHour)
			return
		}
	}
	limit, why := a.pace(now, limit)
	if limit == 0 {
		// Said in status (complete's waiting): rows due and not sent,
		// with the limit that holds them (the daily ceiling), not a
		// "next due" time in the past.
		a.sweepWait = why.Text
		return
	}
	a.sweepWait = ""
	// The dedupe id is the dispatch time: unique across leader terms.
	job := bus.PageJob{Broadcast: a.id.String(), Range: bus.SweepRange, Sweep: true, Limit: limit, Issue: int(now.UnixMilli())}
	if pacer := a.c.pacer(); pacer != nil {
		// Sweeps carry the breakers' probes: their rows are the held
		// providers' recipients, so a probe is not spent on a page that
		// has none (pages carry a given-up provider's too: only its rows
		// refused on a real attempt still wait for a sweep).
		h := pacer.Holds(now, a.domain(), true, a.b.StartedAt)
		job.Defer, job.GiveUp, job.Probe, job.Conns, job.StepShare, job.StepFloor = h.Defer, h.GiveUp, h.Probe, h.Conns, h.StepShare, h.StepFloor
	}
	if err := a.c.cfg.Pages.PublishPage(ctx, job, now); err != nil {
		a.log().Warn("sweep dispatch failed; retried on the next tick", "err", err)
		a.giveBack(limit)
		return
	}
	pagesDispatched.Inc()
	a.sweeping = &page{limit: limit, at: now}
}

// applySweep settles a sweep's report. It moves no cursor: the rows it sent
// are recorded in the ledger, and what it could not send is deferred again.
func (a *actor) applySweep(ctx context.Context, rep bus.Report) error {
	if a.sweeping != nil {
		a.settle(a.sweeping.limit, rep)
		a.sweeping = nil
	}
	now := a.c.cfg.Clock.Now()
	if rep.Sent > 0 {
		a.refusedPages, a.refusedNext, a.sweepSent = 0, time.Time{}, true
	}
	switch rep.Class {
	case bus.ClassTransient, bus.ClassQuota:
		a.nextSweep = now.Add(a.c.backoff(1))
		// A refused sweep goes on a count that pages began (a run of
		// refused pages, nothing sent since) or counts when the broadcast
		// has sent nobody at all, or when the sweep reached no recipient
		// (every send failed at connect, TLS, AUTH or MAIL FROM): the
		// relay refuses everyone, and those refusals are no recipient's
		// attempts, so nothing else would end the broadcast. Otherwise the
		// sweep's rows are recipients that keep refusing while others were
		// sent (a tail of greylisting or full mailboxes): each ends by its
		// own attempts and the broadcast completes.
		reachedNobody := rep.Unreached > 0 && rep.Reached == 0
		if rep.Sent == 0 && (a.refusedPages > 0 || a.sentNobody() || reachedNobody) {
			if _, err := a.refused(ctx, rep, now); err != nil {
				return err
			}
		}
	case bus.ClassChannel:
		return a.halt(ctx, rep)
	default:
		a.nextSweep = now // more may be due
	}
	return nil
}

// sentNobody: no range has recorded a message sent, and no sweep this
// actor heard of sent one (sweeps move no cursor, so their sends are not
// in the range records).
func (a *actor) sentNobody() bool {
	if a.sweepSent {
		return false
	}
	for _, r := range a.recs {
		if r.Sent > 0 {
			return false
		}
	}
	return true
}

func minTime(x, y time.Time) time.Time {
	if x.Before(y) {
		return x
	}
	return y
}
