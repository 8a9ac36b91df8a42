package storetest

import (
	"github.com/oklog/ulid/v2"

	"github.com/rangecast/rangecast/internal/store"
)

var inDoubtCases = []testCase{
	{"OlderThanLease", testInDoubtOlderThanLease},
	{"UnknownIsCountedNotPending", testUnknownCounted},
	{"FailuresLatestFirst", testFailuresLatestFirst},
}

// Failures lists failed rows with their replies, the latest first.
func testFailuresLatestFirst(f *fixture) {
	ids := f.subscribers("f", 4)
	b := f.running("failures", 0)
	f.claim(b, ids, at(2))
	f.must(f.s.RecordOutcomes(f.ctx, b.ID, []store.Outcome{{ContactID: ids[0], Status: store.SendFailed, Error: "550 5.1.1 no such user"}}, at(3)), "RecordOutcomes")
	f.must(f.s.RecordOutcomes(f.ctx, b.ID, []store.Outcome{
		{ContactID: ids[2], Status: store.SendFailed, Error: "550 5.1.10 recipient not found"},
		{ContactID: ids[1], Status: store.SendSent},
	}, at(4)), "RecordOutcomes")
	got, err := f.s.Failures(f.ctx, b.ID, 10)
	f.must(err, "Failures")
	if len(got) != 2 || got[0].ContactID != ids[2] || got[0].Error != "550 5.1.10 recipient not found" || got[1].ContactID != ids[0] {
		f.t.Errorf("Failures = %+v; want ids[2] then ids[0] with their replies", got)
	}
	one, err := f.s.Failures(f.ctx, b.ID, 1)
	f.must(err, "Failures(1)")
	if len(one) != 1 || one[0].ContactID != ids[2] {
		f.t.Errorf("Failures(limit 1) = %+v; want the latest", one)
	}
}

// InDoubt lists only claims still without an outcome made before the cut,
// in contact order, up to the limit.
func testInDoubtOlderThanLease(f *fixture) {
	ids := f.subscribers("d", 6)
	b := f.running("in doubt", 0)
	f.claim(b, ids[:4], at(2))
	f.claim(b, ids[4:], at(10))
	f.must(f.s.RecordOutcomes(f.ctx, b.ID, []store.Outcome{{ContactID: ids[1], Status: store.SendSent}}, at(3)), "RecordOutcomes")

	got, err := f.s.InDoubt(f.ctx, b.ID, at(5), 100)
	f.must(err, "InDoubt")
	var gotIDs []ulid.ULID
	for _, s := range got {
		gotIDs = append(gotIDs, s.ContactID)
		if s.Status != store.SendClaimed || s.MessageID != messageID(b.ID, s.ContactID) || !s.ClaimedAt.Equal(at(2)) {
			f.t.Errorf("in-doubt row %+v: want claimed at %v with its Message-ID", s, at(2))
		}
	}
	f.sameSet("claims older than the lease", gotIDs, []ulid.ULID{ids[0], ids[2], ids[3]})
	for i := 1; i < len(gotIDs); i++ {
		if gotIDs[i-1].Compare(gotIDs[i]) >= 0 {
			f.t.Errorf("InDoubt not in contact order: %v", gotIDs)
		}
	}
	limited, err := f.s.InDoubt(f.ctx, b.ID, at(5), 2)
	f.must(err, "InDoubt with a limit")
	if len(limited) != 2 || limited[0].ContactID != ids[0] {
		f.t.Errorf("InDoubt(limit 2) = %d rows starting %v; want the first 2", len(limited), limited)
	}
	later, err := f.s.InDoubt(f.ctx, b.ID, at(11), 100)
	f.must(err, "InDoubt later")
	if len(later) != 5 {
		f.t.Errorf("InDoubt after every claim's lease = %d rows, want 5", len(later))
	}
}

// An unresolved in-doubt claim marked unknown is counted apart and is no
// longer pending, so the broadcast can complete while showing it.
func testUnknownCounted(f *fixture) {
	ids := f.subscribers("u", 3)
	b := f.running("unknown", 0)
	f.claim(b, ids, at(2))
	f.must(f.s.RecordOutcomes(f.ctx, b.ID, []store.Outcome{
		{ContactID: ids[0], Status: store.SendUnknown},
		{ContactID: ids[1], Status: store.SendSent},
	}, at(3)), "RecordOutcomes")
	if c := f.counts(b); c != (store.Counts{Claimed: 1, Sent: 1, Unknown: 1}) {
		f.t.Errorf("Counts = %+v, want 1 claimed, 1 sent, 1 unknown", c)
	}
	if n := f.pending(b); n != 1 {
		f.t.Errorf("Pending = %d, want 1 (unknown is resolved)", n)
	}
}
