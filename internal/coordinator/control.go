package coordinator

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/oklog/ulid/v2"

	"github.com/rangecast/rangecast/internal/bus"
	"github.com/rangecast/rangecast/internal/ranges"
	"github.com/rangecast/rangecast/internal/store"
)

// BroadcastStatus is a broadcast with what "progress" means without a
// total.
type BroadcastStatus struct {
	Broadcast store.Broadcast
	Progress  Progress
	// Policy is the in-doubt policy the broadcast is settled by: its own,
	// or the coordinator's default when it named none.
	Policy InDoubtPolicy
}

// Progress is state of the walk: each range's cursor, the sums, and what
// sending waits for. A draft has none yet.
type Progress struct {
	RangesTotal, RangesDone int
	Ranges                  []RangeProgress
	PagesDispatched         int64
	// Sent to Unknown are the ledger's counts (InDoubt: claimed with no
	// outcome yet).
	Sent, Failed, Deferred, InDoubt, Unknown int64
	// SentAgainInDoubt is the part of Sent sent again after an attempt
	// that may have arrived (the in-doubt policy resend, or retry
	// --include-unknown): people who may have two copies.
	SentAgainInDoubt int64
	// LeftOut, once the broadcast has finished, is how many fewer
	// outcomes it has than its audience at start: contacts unsubscribed,
	// suppressed, erased or out of the segment before their page, whom the
	// suppression gate rightly left out, less any who joined the segment
	// since (a net figure); of a broadcast cancelled or failed, also those
	// its pages never reached. Without it the sums did not add up to the
	// audience and nothing said why.
	LeftOut int64
	// WaitingFor says what sending waits for ("daily ceiling reached …"),
	// empty when nothing holds it.
	WaitingFor string
}

// RangeProgress is one range's cursor and its KV sums.
type RangeProgress struct {
	Index            int
	Start, End, Next string
	Done             bool
	// Position is how far Next has moved through the range, 0..1.
	Position     float64
	Sent, Failed int64
}

// Start accepts a draft: snapshot, ranges, state running, actor.
func (c *Coordinator) Start(ctx context.Context, id ulid.ULID) (BroadcastStatus, error) {
	if err := c.preflightStart(ctx, id); err != nil {
		return BroadcastStatus{}, err
	}
	b, err := c.cfg.Store.AcceptBroadcast(ctx, id, c.cfg.Clock.Now())
	if errors.Is(err, store.ErrConflict) {
		// Perhaps the retry of a Start whose KV writes failed: finish them
		// (both are idempotent) before saying it was started already.
		cur, found, cerr := c.completeStart(ctx, id)
		if cerr != nil {
			return BroadcastStatus{}, unavailable(cerr)
		}
		if found {
			return BroadcastStatus{}, &StateError{ID: id, State: cur.State, From: []store.State{store.StateDraft}, Verb: "started"}
		}
	}
	if err != nil {
		return BroadcastStatus{}, err
	}
	// The store says running; KV catches up here. Range records are not
	// written now: a range without one is at its start (rangeRecords), and
	// its first report creates it, so a start costs one KV write however
	// many ranges. If this process dies in between, the actor started on
	// restart mirrors the state.
	if err := c.putState(ctx, b); err != nil {
		return BroadcastStatus{}, unavailable(err)
	}
	if err := c.kick(ctx, b); err != nil {
		return BroadcastStatus{}, unavailable(err)
	}
	// The broadcast was a draft until the accept: no range has a record
	// and the ledger has no row of it, so its status is the accepted
	// broadcast at the start of every range. Reading that back (32 KV
	// reads and the ledger's counts) was 4 ms of a start at any size.
	recs, err := rangesAtStart(b)
	if err != nil {
		return BroadcastStatus{}, unavailable(err)
	}
	return c.status(ctx, b, recs, store.Counts{}), nil
}

// completeStart writes what Start writes after the store (the state in KV)
// for a broadcast the store already has running or paused,
// and hands it to its actor: a Start that stopped half-way is whole again.
// It returns the broadcast as the store has it, if it could be read.
func (c *Coordinator) completeStart(ctx context.Context, id ulid.ULID) (store.Broadcast, bool, error) {
	b, err := c.cfg.Store.GetBroadcast(ctx, id)
	if err != nil {
		return b, false, nil // the store's own refusal says what there is to say
	}
	if b.State != store.StateRunning && b.State != store.StatePaused {
		return b, true, nil // a draft that failed to start, or finished: nothing to complete
	}
	if b, err = c.mirrorState(ctx, id); err != nil {
		return b, true, err
	}
	return b, true, c.kick(ctx, b)
}

// Pause stops a running broadcast's sends within the windows each worker
// has claimed (pageworker.InDoubtBound).
func (c *Coordinator) Pause(ctx context.Context, id ulid.ULID) (BroadcastStatus, error) {
	return c.transition(ctx, id, "paused", []store.State{store.StateRunning}, store.StatePaused, "paused by operator")
}

// Resume lets a paused broadcast send again, or a failed one carry on
// where it stopped: a broadcast fails when its pages make no progress (a
// relay that refused everyone for minutes, a page that crashed every
// worker), and once the operator has fixed the cause, its unsent audience
// can still be sent by this broadcast, which knows who already has the
// message; a new one would not. Like a resume after a pause it walks on
// from the cursors, under the same claims, so it cannot re-send. The
// ranges' counts of fruitless resumptions start again from zero first: the
// resume is the operator saying the cause is gone, and a range that failed
// the broadcast at its eighth fruitless page would otherwise fail it again
// at its first.
func (c *Coordinator) Resume(ctx context.Context, id ulid.ULID) (BroadcastStatus, error) {
	b, err := c.cfg.Store.GetBroadcast(ctx, id)
	if err != nil {
		return BroadcastStatus{}, err
	}
	if b.State == store.StateFailed {
		if err := c.forgetFruitless(ctx, b); err != nil {
			return BroadcastStatus{}, unavailable(err)
		}
	}
	return c.transition(ctx, id, "resumed", []store.State{store.StatePaused, store.StateFailed}, store.StateRunning, "")
}

// FailRefused fails a paused broadcast's recipients whose refusal halted
// it (store.FailHalted), ending unknown those whose earlier attempt may
// have arrived, and returns how many of each: the operator's answer to a
// halt by a few addresses that refuse on every try, before Resume. It
// changes nothing unless the broadcast is paused.
func (c *Coordinator) FailRefused(ctx context.Context, id ulid.ULID) (failed, unknown int64, err error) {
	b, err := c.cfg.Store.GetBroadcast(ctx, id)
	if err != nil {
		return 0, 0, err
	}
	failed, unknown, err = c.cfg.Store.FailHalted(ctx, id, c.cfg.Clock.Now())
	if errors.Is(err, store.ErrConflict) {
		msg := fmt.Sprintf("broadcast %s is %s: --fail-refused applies to a paused broadcast only; nothing was changed", id, b.State)
		if b.State == store.StateFailed {
			msg += " (a failed broadcast resumes without it)"
		}
		return 0, 0, &Error{Kind: WrongState, Err: err, Msg: msg}
	}
	if err != nil {
		return 0, 0, err
	}
	c.cfg.Log.Info("recipients whose refusal halted the broadcast failed by the operator", "broadcast", id.String(), "failed", failed, "unknown", unknown)
	return failed, unknown, nil
}

// forgetFruitless sets every range record's Fruitless count of b back to
// zero, by compare-and-set: b has failed, so no actor writes its records.
// A conflict (another coordinator's write) is an error; the operator's
// resume can be repeated.
func (c *Coordinator) forgetFruitless(ctx context.Context, b store.Broadcast) error {
	recs, revs, err := c.rangeRecords(ctx, b)
	if err != nil {
		return err
	}
	for i, rec := range recs {
		if rec.Fruitless == 0 {
			continue
		}
		rec.Fruitless = 0
		_, err := bus.PutAt(ctx, c.cfg.Bus.Broadcasts, bus.RangeKey(b.ID.String(), rec.Index), bus.Encode(rec), revs[i])
		c.kvWrites.add(1)
		if err != nil {
			return fmt.Errorf("range %d: %w", rec.Index, err)
		}
	}
	return nil
}

// Cancel ends a broadcast that has not finished; nothing more is sent.
func (c *Coordinator) Cancel(ctx context.Context, id ulid.ULID) (BroadcastStatus, error) {
	const reason = "cancelled by operator"
	if b, err := c.cfg.Store.GetBroadcast(ctx, id); err == nil && b.State == store.StateFailed {
		// A failed broadcast can be resumed; cancelled, it is final. Its
		// reason keeps why it stopped first, from failed only: resumed
		// in between, it is cancelled as any running one.
		st, err := c.transition(ctx, id, "cancelled", []store.State{store.StateFailed}, store.StateCancelled, reason+" after it failed: "+b.Reason)
		if !errors.As(err, new(*StateError)) {
			return st, err
		}
		// Moved on meanwhile (resumed, or cancelled by another call): as
		// any other, with the whole list of states in a refusal.
	}
	return c.transition(ctx, id, "cancelled", []store.State{store.StateDraft, store.StateRunning, store.StatePaused, store.StateFailed}, store.StateCancelled, reason)
}

func (c *Coordinator) transition(ctx context.Context, id ulid.ULID, verb string, from []store.State, to store.State, reason string) (BroadcastStatus, error) {
	b, err := c.cfg.Store.SetState(ctx, id, from, to, reason, c.cfg.Clock.Now())
	if errors.Is(err, store.ErrConflict) && b.State == to {
		// Most likely a retry of a transition whose KV write failed: the
		// store has it, KV may not, and workers follow KV. Bring KV level
		// before saying there was nothing to do; with NATS still away, say
		// the state holds, as the first call did.
		mctx, cancel := context.WithTimeout(ctx, natsAnswerWithin)
		_, err := c.mirrorState(mctx, id)
		cancel()
		if err != nil {
			return BroadcastStatus{}, notMirrored(id, b.State, err)
		}
	}
	if errors.Is(err, store.ErrConflict) {
		return BroadcastStatus{}, &StateError{ID: id, State: b.State, From: from, Verb: verb, Scheduled: !b.ScheduledAt.IsZero()}
	}
	if err != nil {
		return BroadcastStatus{}, err
	}
	// Logged as the actor's own transitions are: an operator's cancel,
	// pause or resume left no line in the coordinator's log (tester).
	// (Not counted in broadcastTransitions: that is the coordinator's own,
	// which alerts read.)
	c.cfg.Log.Info("broadcast state changed", "broadcast", id, "state", b.State, "reason", reason)
	// The change is committed; passing it on must not hold the caller for
	// as long as its deadline (none from the CLI) while NATS is away. The
	// write and the actor's start each get their own bound.
	mctx, cancel := context.WithTimeout(ctx, natsAnswerWithin)
	err = c.putState(mctx, b)
	cancel()
	if err != nil {
		return BroadcastStatus{}, notMirrored(id, b.State, err)
	}
	kctx, cancel := context.WithTimeout(ctx, natsAnswerWithin)
	err = c.kick(kctx, b)
	cancel()
	if err != nil {
		return BroadcastStatus{}, notMirrored(id, b.State, err)
	}
	return c.Status(ctx, id)
}

// natsAnswerWithin bounds the KV reads and writes of a call that can
// answer without them (Status) or has committed its change already
// (transition): NATS away must not hold an operator's call for its whole
// deadline.
const natsAnswerWithin = 5 * time.Second

// Status assembles what "progress" means without a total: state and reason,
// each range's cursor, sums, and what sending waits for.
func (c *Coordinator) Status(ctx context.Context, id ulid.ULID) (BroadcastStatus, error) {
	b, err := c.cfg.Store.GetBroadcast(ctx, id)
	if err != nil {
		return BroadcastStatus{}, err
	}
	var counts store.Counts
	if b.State != store.StateDraft {
		if counts, err = c.cfg.Store.Counts(ctx, id); err != nil {
			return BroadcastStatus{}, err
		}
	}
	return c.StatusWith(ctx, b, counts), nil
}

// StatusWith is Status of b as read, with the ledger's counts of it, for a
// caller that has both already (a report reads the counts with the rest of
// the ledger): counting a large broadcast's rows twice doubled its cost.
func (c *Coordinator) StatusWith(ctx context.Context, b store.Broadcast, counts store.Counts) BroadcastStatus {
	var recs []bus.RangeRecord
	var noCursors error
	if b.State != store.StateDraft {
		// The cursors are in KV; state and counts, the ledger's truth, are
		// in the store. Without NATS a status still says what was sent
		// (an operator asks most in an outage), and why the cursors are
		// missing.
		rctx, cancel := context.WithTimeout(ctx, natsAnswerWithin)
		recs, _, noCursors = c.rangeRecords(rctx, b)
		cancel()
		if noCursors != nil {
			recs = nil // a partial read would show ranges missing as not started
		}
	}
	s := c.status(ctx, b, recs, counts)
	if noCursors != nil {
		why := fmt.Sprintf("range cursors unknown: NATS did not answer the coordinator (%v)", noCursors)
		if natsDataLost(noCursors) {
			// Up, but without the bucket: its data was lost, and the
			// processes recreate what they need only at start (tester).
			why += "; if NATS lost its data, restart the coordinators and page workers: they recreate its streams and buckets, and the broadcast goes on"
		}
		s.Progress.WaitingFor = joinWaiting(why, s.Progress.WaitingFor)
	}
	return s
}

// LeftOut is Progress.LeftOut of b with the ledger's counts: 0 unless b
// has finished. Contacts who joined the segment after the start can be
// sent too, so the difference is floored at zero. For a broadcast
// cancelled or failed it counts, too, the audience its pages never
// reached: a tester's cancelled broadcast showed 1,476 sent of 6,988 and
// nothing said what became of the other 5,512.
func LeftOut(b store.Broadcast, counts store.Counts) int64 {
	if !b.State.Finished() {
		return 0
	}
	return max(0, b.SnapshotTotal-(counts.Sent+counts.Failed+counts.Deferred+counts.Claimed+counts.Unknown))
}

// status is b's status from its range records and the ledger's counts
// (none for a draft).
func (c *Coordinator) status(ctx context.Context, b store.Broadcast, recs []bus.RangeRecord, counts store.Counts) BroadcastStatus {
	var p Progress
	p.RangesTotal = len(recs)
	for _, r := range recs {
		p.Ranges = append(p.Ranges, RangeProgress{Index: r.Index, Start: r.Start, End: r.End, Next: r.Next, Done: r.Done,
			Position: position(r), Sent: r.Sent, Failed: r.Failed})
		if r.Done {
			p.RangesDone++
		}
		p.PagesDispatched += r.Dispatched
	}
	// The ledger is the truth; the KV sums can lag behind it by the
	// pages in flight.
	p.Sent, p.Failed, p.Deferred, p.InDoubt, p.Unknown = counts.Sent, counts.Failed, counts.Deferred, counts.Claimed, counts.Unknown
	p.SentAgainInDoubt = counts.SentAgainInDoubt
	p.LeftOut = LeftOut(b, counts)
	c.mu.Lock()
	a := c.actors[b.ID]
	c.mu.Unlock()
	if a != nil {
		p.WaitingFor = a.waiting()
		if b.State == store.StateRunning {
			// Why progress slowed, per receiving provider: held, open,
			// ramping back, or deferring a share of attempts.
			p.WaitingFor = joinWaiting(p.WaitingFor, c.providerWaiting(b))
		}
	} else if b.State == store.StateRunning {
		// A follower runs no actor; what the governor waits for is in KV,
		// and what the tail waits for in the ledger. Behind a load
		// balancer, every other status of a broadcast in its tail said
		// nothing of the deferred rows it waited for.
		p.WaitingFor = c.governorWaiting(ctx, b)
		if allDone(recs) {
			if pend, err := c.cfg.Store.Pending(ctx, b.ID); err == nil {
				p.WaitingFor = joinWaiting(tailWaiting(pend, c.cfg.Clock.Now(), "", ""), p.WaitingFor)
			}
		}
	}
	return BroadcastStatus{Broadcast: b, Progress: p, Policy: c.PolicyOf(b)}
}

// allDone says whether every range is walked (false for none known).
func allDone(recs []bus.RangeRecord) bool {
	for _, r := range recs {
		if !r.Done {
			return false
		}
	}
	return len(recs) > 0
}

// governorWaiting is what the sending domain's governor waits for, as the
// leader last wrote it: for a follower's answer, which has no actor.
func (c *Coordinator) governorWaiting(ctx context.Context, b store.Broadcast) string {
	if c.cfg.Governor == nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(ctx, natsAnswerWithin) // KV reads: NATS may be away
	defer cancel()
	s, err := c.storedDomain(ctx, sendingDomain(b), false)
	if err != nil {
		return "" // no state yet, or KV unreachable: nothing known to wait for
	}
	return s.Waiting
}

// providerWaiting is the leader's governor's per-provider summaries for
// the broadcast's sending domain, "" when every provider is plainly open.
func (c *Coordinator) providerWaiting(b store.Broadcast) string {
	g := c.domainHost()
	if g == nil || c.cfg.Governor == nil {
		return ""
	}
	s := g.brief(c.cfg.Clock.Now(), sendingDomain(b), 0)
	if s == nil {
		return ""
	}
	return s.Slowing
}

// joinWaiting joins what a broadcast waits for with its providers' summary,
// leaving out a summary the first already says.
func joinWaiting(waiting, providers string) string {
	switch {
	case providers == "" || strings.Contains(waiting, providers):
		return waiting
	case waiting == "":
		return providers
	}
	return waiting + "; " + providers
}

// position is how far a range's cursor has moved through it, 0..1. ULIDs
// are time-ordered, so this is a fair proxy for the share of the range done.
func position(r bus.RangeRecord) float64 {
	if r.Done {
		return 1
	}
	start, err1 := ulid.ParseStrict(r.Start)
	end, err2 := ulid.ParseStrict(r.End)
	next, err3 := ulid.ParseStrict(r.Next)
	if errors.Join(err1, err2, err3) != nil {
		return 0
	}
	return ranges.Position(ranges.Range{Index: r.Index, Start: start, End: end}, next)
}

// natsDataLost says whether err is that of a NATS that answers but lacks
// rangecast's streams or buckets (no responders for a KV's API, or the
// bucket or stream not found).
func natsDataLost(err error) bool {
	return errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrBucketNotFound) ||
		errors.Is(err, jetstream.ErrStreamNotFound) || errors.Is(err, jetstream.ErrNoStreamResponse)
}
