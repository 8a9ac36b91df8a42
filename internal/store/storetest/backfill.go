package storetest

import (
	"testing"

	"github.com/rangecast/rangecast/internal/store"
)

// ReputationBackfill checks that a store upgraded mid-broadcast to the
// running reputation sums (migration 008) starts from the ledger it has
// and keeps counting from there. remigrate must undo migration 008 on s
// (drop what it created, forget it and 020, which adds to its tables, were
// applied) and apply them again.
func ReputationBackfill(t *testing.T, s store.Store, remigrate func(t *testing.T)) {
	f := newFixture(t, s)
	ids := f.subscribers("backfill", 6)
	b := f.running("backfill", 0)
	f.claim(b, ids, at(2))
	f.must(f.s.RecordOutcomes(f.ctx, b.ID, "w1/1", []store.Outcome{
		{ContactID: ids[0], Status: store.SendSent}, {ContactID: ids[1], Status: store.SendSent},
		{ContactID: ids[2], Status: store.SendSent}, {ContactID: ids[3], Status: store.SendSent},
		{ContactID: ids[4], Status: store.SendFailed, Error: "550"},
	}, at(3)), "RecordOutcomes")
	f.event(b, ids[0], store.EventDelivered, "")
	f.event(b, ids[1], store.EventBounced, "")
	f.event(b, ids[2], store.EventComplained, "")
	f.event(b, ids[3], store.EventUnsubscribed, "")
	f.sameReputation("before the upgrade", b, ids)

	remigrate(t)
	f.sameReputation("after the upgrade", b, ids)
	// Counting goes on from the backfilled sums.
	f.event(b, ids[5], store.EventDelivered, "") // still claimed: accepted now
	f.event(b, ids[0], store.EventComplained, "")
	f.sameReputation("after the upgrade, more events", b, ids)
	if r, _ := f.s.Reputation(f.ctx, b.ID); r != (store.Reputation{Accepted: 5, Delivered: 3, Bounced: 1, Complained: 2}) {
		t.Errorf("Reputation = %+v, want 5 accepted, 3 delivered, 1 bounced, 2 complained", r)
	}
}
