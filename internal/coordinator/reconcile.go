package coordinator

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/rangecast/rangecast/internal/bus"

	"github.com/rangecast/rangecast/internal/store"
)

// Lookup answers "was the message with this Message-ID accepted?" for a
// transport that can tell (a provider's API, a capture server). It settles
// claims whose outcome was lost with the worker that made them.
type Lookup func(ctx context.Context, messageID string) (accepted bool, err error)

// InDoubtPolicy decides unresolvable in-doubt claims (no Lookup).
type InDoubtPolicy string

const (
	// InDoubtSkip marks them unknown: counted, shown, never sent again. A
	// possible gap is better than a possible second copy.
	InDoubtSkip InDoubtPolicy = "skip"
	// InDoubtResend releases them to be walked and sent again.
	InDoubtResend InDoubtPolicy = "resend"
)

// policy is the broadcast's in-doubt policy in force (PolicyOf).
func (a *actor) policy() InDoubtPolicy { return a.c.PolicyOf(a.b) }

// PolicyOf is b's own in-doubt policy, else the coordinator's.
func (c *Coordinator) PolicyOf(b store.Broadcast) InDoubtPolicy {
	if b.InDoubtPolicy != "" {
		return InDoubtPolicy(b.InDoubtPolicy)
	}
	return c.cfg.InDoubtPolicy
}

// reconcileBatch bounds the in-doubt claims settled in one round.
const reconcileBatch = 500

// reconcile settles claims whose owner is gone: its worker died (its
// liveness record lapsed), its run stopped making progress, or it handed the
// claim over (a connection lost after the data). An owner must have been
// seen gone for InDoubtAfter, on this coordinator's clock, before its claims
// are in doubt: nothing compares the worker's clock with ours. Accepted ones
// (by Lookup) are recorded sent; the rest are recorded deferred and due now,
// for the sweep to send again (a claim the cursor may have passed is never
// deleted), or, with no Lookup and the skip policy, recorded unknown.
// Paused broadcasts are reconciled too, so a pause after a crash does not
// leave claims in doubt until the resume, and so are cancelled and failed
// ones until none is left (settling).
func (a *actor) reconcile(ctx context.Context) {
	now := a.c.cfg.Clock.Now()
	if a.b.State == store.StateCompleted || a.b.State == store.StateDraft || now.Before(a.nextReconcile) {
		return
	}
	a.nextReconcile = now.Add(min(max(a.c.cfg.InDoubtAfter/4, time.Second), 10*time.Second))
	owners, err := a.c.cfg.Store.ClaimOwners(ctx, a.id)
	if err != nil {
		a.log().Warn("cannot read claim owners", "err", err)
		return
	}
	if len(owners) == 0 {
		clear(a.goneSince)
		return
	}
	live, err := a.c.liveOwners(ctx, now)
	if err != nil {
		a.log().Warn("cannot read worker liveness; in-doubt claims wait", "err", err)
		return
	}
	present := map[string]bool{}
	for _, owner := range owners {
		present[owner] = true
		if live[owner] {
			delete(a.goneSince, owner)
			continue
		}
		since, seen := a.goneSince[owner]
		if !seen {
			a.goneSince[owner] = now
			continue
		}
		if now.Sub(since) >= a.c.cfg.InDoubtAfter {
			a.settleGone(ctx, owner)
		}
	}
	for owner := range a.goneSince {
		if !present[owner] {
			delete(a.goneSince, owner)
		}
	}
}

// settling reconciles a broadcast that was cancelled or failed and
// reports whether claims are left: its actor stays until none is. A
// worker killed just before a cancel left claims that no page would ever
// settle, and the cancelled broadcast showed them "in flight or in doubt"
// for good, its recipients "Sending" (some of them mailed, unrecorded). A
// completed broadcast has none (completing waits for them).
func (a *actor) settling(ctx context.Context) bool {
	if a.b.State == store.StateCompleted {
		return false
	}
	a.reconcile(ctx)
	owners, err := a.c.cfg.Store.ClaimOwners(ctx, a.id)
	if err != nil {
		a.log().Warn("cannot read claim owners", "err", err)
		return true
	}
	return len(owners) > 0
}

// settleGone settles up to reconcileBatch in-doubt claims of one gone owner.
func (a *actor) settleGone(ctx context.Context, owner string) {
	doubts, err := a.c.cfg.Store.InDoubt(ctx, a.id, owner, reconcileBatch)
	if err != nil || len(doubts) == 0 {
		if err != nil {
			a.log().Warn("cannot read in-doubt claims", "err", err)
		}
		return
	}
	now := a.c.cfg.Clock.Now()
	var settled []store.Outcome
	resend := 0
	for _, d := range doubts {
		// To send one again, the row is recorded deferred and due now: the
		// sweep sends it through the claim rules, gate included. Deleting
		// the claim and moving the cursor back would lean on KV, a hint: a
		// lost rewind would leave the cursor past a contact with no row.
		again := store.Outcome{ContactID: d.ContactID, Status: store.SendDeferred, RetryAt: now}
		switch {
		case a.c.cfg.Lookup != nil:
			accepted, err := a.c.cfg.Lookup(ctx, d.MessageID)
			if err != nil {
				a.log().Warn("in-doubt lookup failed; retried later", "message_id", d.MessageID, "err", err)
				continue
			}
			if accepted {
				settled = append(settled, store.Outcome{ContactID: d.ContactID, Status: store.SendSent})
				continue
			}
			again.Error = "in doubt: the server has no record of it; sent again"
			settled, resend = append(settled, again), resend+1
		case a.policy() == InDoubtResend:
			again.Error = store.InDoubtResent
			settled, resend = append(settled, again), resend+1
		default:
			settled = append(settled, store.Outcome{ContactID: d.ContactID, Status: store.SendUnknown, Error: unknownReason(d.Error)})
		}
	}
	if err := a.c.cfg.Store.RecordOutcomes(ctx, a.id, owner, settled, now); err != nil {
		a.log().Warn("cannot record settled in-doubt claims", "err", err)
		return
	}
	for _, o := range settled {
		if o.Status == store.SendDeferred {
			inDoubtSettled.WithLabelValues("released").Inc()
		} else {
			inDoubtSettled.WithLabelValues(string(o.Status)).Inc()
		}
	}
	if resend > 0 {
		a.nextSweep = now // send them soon
	}
	a.log().Info("in-doubt claims settled", "owner", owner, "recorded", len(settled)-resend, "to_send_again", resend)
}

// unknownReason is why an in-doubt claim ends unknown: the worker's own
// account when it recorded one (the connection lost after the final dot,
// the reply to it timed out), which a claim handed over for settling
// carries; otherwise the worker stopped after the claim and before it
// recorded an outcome, anywhere from before the connection to after the
// final dot (a tester's relay that hung at connect left 80 claims so, none
// of them sent: the old wording said they were).
func unknownReason(recorded string) string {
	if strings.HasPrefix(recorded, "in doubt: ") {
		return recorded + "; not sent again, as it may have been delivered"
	}
	return "in doubt: the worker stopped after claiming it and before recording whether it was sent, and the transport cannot say whether it was accepted; not sent again, as it may have been delivered (broadcasts retry --include-unknown sends it)"
}

// liveOwners is the set of claim owners whose runs live workers list in
// their liveness records, read at most once per bus.WorkerBeat for all
// broadcasts. An error means "unknown": nobody's claims are settled on it.
func (c *Coordinator) liveOwners(ctx context.Context, now time.Time) (map[string]bool, error) {
	c.liveMu.Lock()
	defer c.liveMu.Unlock()
	if c.live != nil && now.Sub(c.liveRead) < bus.WorkerBeat && !now.Before(c.liveRead) {
		return c.live, nil
	}
	kv := c.cfg.Bus.Workers
	if kv == nil {
		return nil, errors.New("no worker liveness bucket")
	}
	keys, err := kv.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("list workers: %w", err)
	}
	live := map[string]bool{}
	for key := range keys.Keys() {
		var rec bus.WorkerRecord
		_, found, err := bus.GetJSON(ctx, kv, key, &rec)
		if err != nil {
			keys.Stop() //nolint:errcheck
			return nil, fmt.Errorf("read worker %s: %w", key, err)
		}
		if found {
			for _, owner := range rec.Runs {
				live[owner] = true
			}
		}
	}
	c.live, c.liveRead = live, now
	return live, nil
}
