package storetest

import (
	"time"

	"github.com/rangecast/rangecast/internal/store"
)

var pendingCases = []testCase{
	{"MatchesCounts", testPendingMatchesCounts},
}

// Pending is what completion reads instead of Counts: the claimed, deferred
// and failed counts must equal Counts' at every step, with the earliest
// deferred row's retry time, and another broadcast's rows count for
// nothing.
func testPendingMatchesCounts(f *fixture) {
	ids := f.subscribers("open", 12)
	b := f.running("open", 0)
	other := f.running("other", 0)

	check := func(step string, want store.Pending) {
		f.t.Helper()
		got, err := f.s.Pending(f.ctx, b.ID)
		f.must(err, "Pending (%s)", step)
		if got.Claimed != want.Claimed || got.Deferred != want.Deferred || got.Failed != want.Failed || !got.NextDue.Equal(want.NextDue) ||
			got.NextError != want.NextError || got.NextAttempt != want.NextAttempt {
			f.t.Errorf("%s: Pending = %+v; want %+v", step, got, want)
		}
		c := f.counts(b)
		if got.Claimed != c.Claimed || got.Deferred != c.Deferred || got.Failed != c.Failed {
			f.t.Errorf("%s: Pending = %+v, Counts = %+v; want the same claimed, deferred and failed", step, got, c)
		}
	}
	check("no rows", store.Pending{})

	// The other broadcast has rows in every open state.
	f.deferAll(other, ids[:2], at(1), at(5))
	f.claim(other, ids[2:4], at(1))
	f.must(f.s.RecordOutcomes(f.ctx, other.ID, "w1/1", []store.Outcome{{ContactID: ids[2], Status: store.SendFailed, Error: "550 no"}}, at(1)), "fail other")
	check("only another broadcast's rows", store.Pending{})

	f.claim(b, ids, at(2))
	check("all claimed", store.Pending{Claimed: 12})
	outs := []store.Outcome{
		{ContactID: ids[0], Status: store.SendSent},
		{ContactID: ids[1], Status: store.SendSent},
		{ContactID: ids[2], Status: store.SendSent},
		{ContactID: ids[3], Status: store.SendFailed, Error: "550 5.1.1 no such user"},
		{ContactID: ids[4], Status: store.SendFailed, Error: "550 5.1.1 no such user"},
		{ContactID: ids[5], Status: store.SendDeferred, Error: "451 later", RetryAt: at(20)},
		{ContactID: ids[6], Status: store.SendDeferred, Error: "452 4.2.2 mailbox full", RetryAt: at(10)},
		{ContactID: ids[7], Status: store.SendDeferred, Error: "451 later", RetryAt: at(30)},
		// Handed to the reconciler: still claimed, by nobody.
		{ContactID: ids[8], Status: store.SendClaimed, Error: "connection lost after the final dot"},
	}
	f.must(f.s.RecordOutcomes(f.ctx, b.ID, "w1/1", outs, at(3)), "RecordOutcomes")
	check("outcomes written", store.Pending{Claimed: 4, Deferred: 3, NextDue: at(10), NextError: "452 4.2.2 mailbox full", NextAttempt: 1, Failed: 2})

	// A sweep moves the due row back to claimed.
	due, err := f.s.ClaimDue(f.ctx, b, "w2/1", at(10), 100, nil, nil)
	f.must(err, "ClaimDue")
	if len(due) != 1 || due[0].ID != ids[6] {
		f.t.Fatalf("ClaimDue = %+v; want the row due at %v", due, at(10))
	}
	check("one deferred row swept", store.Pending{Claimed: 5, Deferred: 2, NextDue: at(20), NextError: "451 later", NextAttempt: 1, Failed: 2})

	// An unsubscribe takes a deferred row out of the open states.
	f.must(f.unsubscribe("open0005@example.org", at(11)), "unsubscribe")
	check("a deferred contact unsubscribed", store.Pending{Claimed: 5, Deferred: 1, NextDue: at(30), NextError: "451 later", NextAttempt: 1, Failed: 2})

	// Every open row settled: nothing claimed or deferred, the failures stay.
	var rest []store.Outcome
	for _, id := range ids[9:] {
		rest = append(rest, store.Outcome{ContactID: id, Status: store.SendSent})
	}
	f.must(f.s.RecordOutcomes(f.ctx, b.ID, "w1/1", rest, at(12)), "RecordOutcomes rest")
	f.must(f.s.RecordOutcomes(f.ctx, b.ID, "w2/1", []store.Outcome{{ContactID: ids[6], Status: store.SendFailed, Error: "550 gone"}}, at(12)), "RecordOutcomes swept")
	f.deferredRowsSent(b, "w3/1", at(40))
	check("settled", store.Pending{Claimed: 1, Failed: 3})
}

// deferredRowsSent sweeps every deferred row of b due by now and records it sent.
func (f *fixture) deferredRowsSent(b store.Broadcast, owner string, now time.Time) {
	f.t.Helper()
	due, err := f.s.ClaimDue(f.ctx, b, owner, now, 1000, nil, nil)
	f.must(err, "ClaimDue")
	var outs []store.Outcome
	for _, d := range due {
		outs = append(outs, store.Outcome{ContactID: d.ID, Status: store.SendSent})
	}
	f.must(f.s.RecordOutcomes(f.ctx, b.ID, owner, outs, now), "RecordOutcomes swept")
}
