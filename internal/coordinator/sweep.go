package coordinator

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/rangecast/rangecast/internal/bus"
	"github.com/rangecast/rangecast/internal/governor"
	"github.com/rangecast/rangecast/internal/store"
)

// sweepEvery bounds how often an actor looks for due deferred rows when it
// has no sweep outstanding; a tick is the other bound.
const sweepEvery = 5 * time.Second

// sweep dispatches sweeps of the broadcast's deferred rows whose retry time
// has come, paced by the governor like any page. Ranges do not wait for
// them: their cursors passed the deferred rows long ago.
//
// A sweep takes at most a page of due rows, and one worker sends it a
// window at a time. One sweep out at a time retried a large backlog (a
// greylisting provider deferring a third of a million-contact list) at one
// window's pace, however many workers ran: 300,000 rows, 192 a sweep, is
// 1,500 sweeps in a row. So while sweeps come back full, more go out at
// once (sweepRoom); each claims its own rows (Store.ClaimDue moves them to
// claimed under its owner), so two never send the same row.
func (a *actor) sweep(ctx context.Context) {
	if a.b.State != store.StateRunning {
		return
	}
	now := a.c.cfg.Clock.Now()
	out := a.sweeps[:0]
	for _, s := range a.sweeps {
		if now.Sub(s.at) >= a.c.cfg.Redispatch {
			a.giveBack(s.limit) // given up on
			continue
		}
		out = append(out, s)
	}
	a.sweeps = out
	room := a.sweepRoom() - len(a.sweeps)
	if room <= 0 || now.Before(a.nextSweep) {
		return
	}
	a.nextSweep = now.Add(min(sweepEvery, a.c.cfg.Tick))
	due, first, err := a.c.cfg.Store.NextDue(ctx, a.id, now)
	if err != nil {
		a.log().Warn("cannot look for due deferred messages", "err", err)
		return
	}
	if first.IsZero() {
		return // nothing deferred
	}
	if due == 0 { // none due yet: look again when the first is
		a.nextSweep = minTime(first, a.nextSweep)
		return
	}
	// No more sweeps than the due rows fill: the ones out may take them
	// all already.
	room = min(room, int((due+int64(a.c.cfg.PageLimit)-1)/int64(a.c.cfg.PageLimit))-len(a.sweeps))
	for range room {
		if !a.dispatchSweep(ctx, now) {
			return
		}
	}
}

// sweepRoom is how many sweeps may be out at once: one while any range is
// still walked, so retries do not take workers from first sends (with
// sweeps beside the pages, a real-process run at 20 ms walked its 20,000
// contacts in 22 s instead of 14 s); once every range is walked,
// sweepsWanted, which grows by one with each sweep that comes back full
// (it took all it could, so more may be due), so doubles while all do, and
// drops back to one when one does not; never more than the ranges, the
// broadcast's pages in flight during its walk.
func (a *actor) sweepRoom() int {
	for _, r := range a.recs {
		if !r.Done {
			return 1
		}
	}
	return max(1, min(a.sweepsWanted, len(a.recs)))
}

// dispatchSweep sends one sweep out; false when none could go (held by the
// throttle or the governor, or not published).
func (a *actor) dispatchSweep(ctx context.Context, now time.Time) bool {
	if len(a.sweeps) > 0 && a.sweepHeld {
		// The last sweep carries a provider's ramp step (a probe, or the
		// next step of connections): one sweep at a time then, as the ramp
		// is judged one step at a time. A sweep beside the one carrying
		// the step held the provider's recipients for the breaker's whole
		// open time (TestGmailRateLimitHoldsTenMinutesThenRampsBack). A
		// provider merely held (its breaker open, given up) is held for
		// every sweep alike, and sweeps of the others go on side by side.
		return false
	}
	if a.pagesHeld && a.sweptLast {
		// The pages' turn (pagesHeld): look again when they may have
		// had it.
		a.nextSweep = minTime(a.nextSweep, now.Add(max(a.throttleWait, 10*time.Millisecond)))
		return false
	}
	// A whole page's worth, as pages ask: the domain's rate grants at
	// least a quarter of it (governor's worthwhile), so a sweep under a
	// rate-bound walk waits for 48 tokens as the pages do, and takes turns
	// with them (above). Asking for only the rows due made many small
	// sweeps, and in a relay outage their refusals failed the broadcast
	// for no progress where pages alone did not (simulation seed 9064).
	limit := a.c.cfg.PageLimit
	if a.throttle != nil {
		// The pages' floor (minPage): a sweep of the one or two tokens
		// back since the last costs a job and a report apiece, under a
		// low throttle a sweep per message.
		if limit = a.throttle.Take(now, limit); limit < a.minPage() {
			a.throttle.Return(limit)
			a.sweepWait = fmt.Sprintf("throttle of %d/hour", a.b.ThrottlePerHour)
			a.nextSweep = minTime(a.nextSweep, now.Add(max(a.throttle.WaitFor(now, a.minPage()), 10*time.Millisecond)))
			return false
		}
	}
	limit, why := a.pace(now, limit)
	if limit == 0 {
		// Said in status (complete's waiting): rows due and not sent,
		// with the limit that holds them (the daily ceiling), not a
		// "next due" time in the past.
		a.sweepWait = why.Text
		if why.Limit == governor.LimitRate {
			// Look again when the tokens are back, as pages do
			// (rateWait), not a sweep interval later.
			a.nextSweep = minTime(a.nextSweep, now.Add(a.rateWait(now, why.Until)))
		}
		return false
	}
	a.sweepWait = ""
	a.sweptLast = true
	// The dedupe id is the dispatch time, unique across leader terms, and
	// made unique among the sweeps dispatched within one millisecond.
	a.sweepIssue = max(a.sweepIssue+1, int(now.UnixMilli()))
	job := bus.PageJob{Broadcast: a.id.String(), Range: bus.SweepRange, Sweep: true, Limit: limit, Issue: a.sweepIssue,
		Content: a.b.ContentRevision, Issued: now}
	if pacer := a.c.pacer(); pacer != nil {
		// Sweeps carry the breakers' probes: their rows are the held
		// providers' recipients, so a probe is not spent on a page that
		// has none (pages carry a given-up provider's too: only its rows
		// refused on a real attempt still wait for a sweep).
		h := pacer.Holds(now, a.domain(), true, a.b.StartedAt)
		job.Defer, job.GiveUp, job.Probe, job.Conns, job.StepShare, job.StepFloor = h.Defer, h.GiveUp, h.Probe, h.Conns, h.StepShare, h.StepFloor
	}
	a.sweepHeld = len(job.Probe) > 0
	if err := a.c.cfg.Pages.PublishPage(ctx, job, now); err != nil {
		a.log().Warn("sweep dispatch failed; retried on the next tick", "err", err)
		a.giveBack(limit)
		return false
	}
	pagesDispatched.Inc()
	a.sweeps = append(a.sweeps, page{limit: limit, at: now, issue: job.Issue})
	return true
}

// applySweep settles a sweep's report. It moves no cursor: the rows it sent
// are recorded in the ledger, and what it could not send is deferred again.
func (a *actor) applySweep(ctx context.Context, rep bus.Report) error {
	// The sweep it reports; the oldest out for a report from a worker
	// older than sweeps' issues. None for a sweep given up on already
	// (Redispatch: its grant was given back) or another leader's: another
	// sweep's grant would end with it still running.
	i := slices.IndexFunc(a.sweeps, func(s page) bool { return s.issue == rep.Issue })
	if rep.Issue == 0 && len(a.sweeps) > 0 {
		i = 0
	}
	if i >= 0 {
		a.settle(a.sweeps[i].limit, rep)
		a.sweeps = slices.Delete(a.sweeps, i, i+1)
	}
	// A sweep stopped by a window with half its attempts refused, while
	// the sweep as a whole had at least as many accepted as refused
	// (deferredTail), is a tail of recipients deferring, which is what a
	// sweep's rows are: every one was refused before, and a greylisting
	// provider refuses a share of them again. A relay that takes a
	// trickle (1 of 50) is refusing, and is paused as before, as is a
	// sweep stopped with no refusal (a store error).
	refused := 0
	for _, p := range rep.Providers {
		refused += p.Transient
	}
	deferredTail := rep.Class == bus.ClassTransient && refused > 0 && rep.Sent >= refused
	switch {
	case rep.Class == bus.ClassNone && rep.Limit > 0 && rep.Claimed >= rep.Limit:
		// More are due than one sweep takes: one more for each full one,
		// so the sweeps out double while all come back full.
		a.sweepsWanted = min(max(a.sweepsWanted, 1)+1, max(1, len(a.recs)))
	case deferredTail:
		// Half as many: the relay took mail, so not back to one.
		a.sweepsWanted = max(1, a.sweepsWanted/2)
	default:
		a.sweepsWanted = 1
	}
	now := a.c.cfg.Clock.Now()
	if rep.Sent > 0 {
		a.tookMail()
		a.sweepSent, a.sweepRefused = true, ""
	}
	switch rep.Class {
	case bus.ClassTransient, bus.ClassQuota:
		if rep.Sent == 0 {
			a.sweepRefused = rep.Error
		}
		if deferredTail {
			// No pause of every sweep: the stopped sweep's rows that
			// were refused wait for their own retry times (growing with
			// their attempts), and the rows it did not claim are as due
			// as before. Paused as a struggling relay, a tail deferring
			// 30 % drained at 12-20 messages a second whatever the
			// workers (a 5-10 s pause every few sweeps).
			a.nextSweep = now
			break
		}
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
