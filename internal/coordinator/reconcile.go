package coordinator

import (
	"context"
	"fmt"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/rangecast/rangecast/internal/ranges"
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

// policy is the broadcast's own in-doubt policy, else the coordinator's.
func (a *actor) policy() InDoubtPolicy {
	if a.b.InDoubtPolicy != "" {
		return InDoubtPolicy(a.b.InDoubtPolicy)
	}
	return a.c.cfg.InDoubtPolicy
}

// reconcileBatch bounds the in-doubt claims settled in one round.
const reconcileBatch = 500

// reconcile settles claims older than the lease that still have no outcome:
// their worker died between claim and outcome. Accepted ones (by Lookup) are
// recorded sent; the rest are released and their range's cursor moved back
// to them (a new epoch, so reports of older pages cannot jump past), or, with
// no Lookup and the skip policy, recorded unknown.
func (a *actor) reconcile(ctx context.Context) {
	now := a.c.cfg.Clock.Now()
	if a.b.State != store.StateRunning || now.Before(a.nextReconcile) {
		return
	}
	a.nextReconcile = now.Add(max(a.c.cfg.InDoubtAfter/4, time.Second))
	doubts, err := a.c.cfg.Store.InDoubt(ctx, a.id, now.Add(-a.c.cfg.InDoubtAfter), reconcileBatch)
	if err != nil || len(doubts) == 0 {
		if err != nil {
			a.log().Warn("cannot read in-doubt claims", "err", err)
		}
		return
	}
	var settled []store.Outcome
	var release []ulid.ULID
	for _, d := range doubts {
		switch {
		case a.c.cfg.Lookup != nil:
			accepted, err := a.c.cfg.Lookup(ctx, d.MessageID)
			if err != nil {
				a.log().Warn("in-doubt lookup failed; retried later", "message_id", d.MessageID, "err", err)
				continue
			}
			if accepted {
				settled = append(settled, store.Outcome{ContactID: d.ContactID, Status: store.SendSent})
			} else {
				release = append(release, d.ContactID)
			}
		case a.policy() == InDoubtResend:
			release = append(release, d.ContactID)
		default:
			settled = append(settled, store.Outcome{ContactID: d.ContactID, Status: store.SendUnknown,
				Error: "in doubt: the worker stopped between send and outcome, and the transport cannot say whether it was accepted"})
		}
	}
	if err := a.c.cfg.Store.RecordOutcomes(ctx, a.id, settled, now); err != nil {
		a.log().Warn("cannot record settled in-doubt claims", "err", err)
		return
	}
	// Move cursors back before releasing: if this stops half way, the
	// claims stay in doubt and the next round finds them again.
	rewound, err := a.rewind(ctx, release)
	if err != nil {
		a.log().Warn("cannot move cursors back for in-doubt claims", "err", err)
		return
	}
	if err := a.c.cfg.Store.Release(ctx, a.id, release); err != nil {
		a.log().Warn("cannot release in-doubt claims", "err", err)
		return
	}
	for _, o := range settled {
		inDoubtSettled.WithLabelValues(string(o.Status)).Inc()
	}
	inDoubtSettled.WithLabelValues("released").Add(float64(len(release)))
	a.log().Info("in-doubt claims settled", "recorded", len(settled), "released", len(release), "ranges_rewound", rewound)
}

// rewind moves the cursor of every range holding one of ids back to its
// lowest such id, under a new epoch.
func (a *actor) rewind(ctx context.Context, ids []ulid.ULID) (int, error) {
	rs := make([]ranges.Range, len(a.recs))
	for i, r := range a.recs {
		start, err1 := ulid.ParseStrict(r.Start)
		end, err2 := ulid.ParseStrict(r.End)
		if err1 != nil || err2 != nil {
			return 0, fmt.Errorf("range %d has malformed bounds", i)
		}
		rs[i] = ranges.Range{Index: i, Start: start, End: end}
	}
	lowest := map[int]ulid.ULID{}
	for _, id := range ids {
		i := ranges.Find(rs, id)
		if i < 0 {
			continue
		}
		if cur, ok := lowest[i]; !ok || id.Compare(cur) < 0 {
			lowest[i] = id
		}
	}
	for i, id := range lowest {
		rec := a.recs[i]
		// Even when the cursor has not passed the id yet, a page in flight
		// may have skipped it (it was still claimed when the page read it):
		// a new epoch voids that page's report, and the range is walked
		// again from the lower of the cursor and the id.
		rec.Next = minID(rec.Next, id.String())
		rec.Done, rec.Epoch = false, rec.Epoch+1
		if err := a.write(ctx, i, rec); err != nil {
			return 0, err
		}
		if o, ok := a.outstanding[i]; ok {
			a.giveBack(o.limit)
			delete(a.outstanding, i)
		}
		delete(a.notBefore, i)
	}
	return len(lowest), nil
}
