package storetest

import (
	"slices"

	"github.com/oklog/ulid/v2"

	"github.com/rangecast/rangecast/internal/store"
)

var inDoubtCases = []testCase{
	{"ByOwner", testInDoubtByOwner},
	{"OwnerFence", testOwnerFence},
	{"ClaimRetrySameOwner", testClaimRetrySameOwner},
	{"UnknownIsCountedNotPending", testUnknownCounted},
	{"FailuresLatestFirst", testFailuresLatestFirst},
}

// Failures lists failed rows with their replies, the latest first.
func testFailuresLatestFirst(f *fixture) {
	ids := f.subscribers("f", 4)
	b := f.running("failures", 0)
	f.claim(b, ids, at(2))
	f.must(f.s.RecordOutcomes(f.ctx, b.ID, "w1/1", []store.Outcome{{ContactID: ids[0], Status: store.SendFailed, Error: "550 5.1.1 no such user"}}, at(3)), "RecordOutcomes")
	f.must(f.s.RecordOutcomes(f.ctx, b.ID, "w1/1", []store.Outcome{
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

// InDoubt lists one owner's claims still without an outcome, in contact
// order, up to the limit; ClaimOwners names every owner holding one.
func testInDoubtByOwner(f *fixture) {
	ids := f.subscribers("d", 6)
	b := f.running("in doubt", 0)
	f.claim(b, ids[:4], at(2)) // owner w1/1
	_, err := f.s.Claim(f.ctx, b.ID, "w2/7", f.claims(b, ids[4:]), at(10))
	f.must(err, "Claim by w2/7")
	f.must(f.s.RecordOutcomes(f.ctx, b.ID, "w1/1", []store.Outcome{{ContactID: ids[1], Status: store.SendSent}}, at(3)), "RecordOutcomes")

	owners, err := f.s.ClaimOwners(f.ctx, b.ID)
	f.must(err, "ClaimOwners")
	if slices.Sort(owners); !slices.Equal(owners, []string{"w1/1", "w2/7"}) {
		f.t.Errorf("ClaimOwners = %v, want [w1/1 w2/7]", owners)
	}
	got, err := f.s.InDoubt(f.ctx, b.ID, "w1/1", 100)
	f.must(err, "InDoubt")
	var gotIDs []ulid.ULID
	for _, s := range got {
		gotIDs = append(gotIDs, s.ContactID)
		if s.Status != store.SendClaimed || s.MessageID != messageID(b.ID, s.ContactID) || !s.ClaimedAt.Equal(at(2)) || s.Owner != "w1/1" {
			f.t.Errorf("in-doubt row %+v: want claimed at %v by w1/1 with its Message-ID", s, at(2))
		}
	}
	f.sameSet("w1/1's claims without an outcome", gotIDs, []ulid.ULID{ids[0], ids[2], ids[3]})
	for i := 1; i < len(gotIDs); i++ {
		if gotIDs[i-1].Compare(gotIDs[i]) >= 0 {
			f.t.Errorf("InDoubt not in contact order: %v", gotIDs)
		}
	}
	limited, err := f.s.InDoubt(f.ctx, b.ID, "w1/1", 2)
	f.must(err, "InDoubt with a limit")
	if len(limited) != 2 || limited[0].ContactID != ids[0] {
		f.t.Errorf("InDoubt(limit 2) = %d rows starting %v; want the first 2", len(limited), limited)
	}
	other, err := f.s.InDoubt(f.ctx, b.ID, "w2/7", 100)
	f.must(err, "InDoubt of w2/7")
	if len(other) != 2 {
		f.t.Errorf("InDoubt(w2/7) = %d rows, want 2", len(other))
	}
}

// Outcome and release writes are fenced on the claim's owner: a slow run's
// late write cannot act on a row another run holds, and a row handed to the
// reconciler (outcome "claimed") keeps its claim under no owner.
func testOwnerFence(f *fixture) {
	ids := f.subscribers("o", 3)
	b := f.running("fence", 0)
	f.claim(b, ids, at(2)) // w1/1
	f.must(f.s.RecordOutcomes(f.ctx, b.ID, "w9/9", []store.Outcome{{ContactID: ids[0], Status: store.SendFailed, Error: "late"}}, at(3)), "RecordOutcomes by another owner")
	f.must(f.s.Release(f.ctx, b.ID, "w9/9", ids[1:2]), "Release by another owner")
	for _, id := range ids[:2] {
		if s := f.send(b, id); s.Status != store.SendClaimed || s.Owner != "w1/1" {
			f.t.Errorf("row after another owner's writes = %+v; want still claimed by w1/1", s)
		}
	}
	f.must(f.s.RecordOutcomes(f.ctx, b.ID, "w1/1", []store.Outcome{{ContactID: ids[2], Status: store.SendClaimed, Error: "in doubt: reset after the data"}}, at(4)), "hand off")
	if s := f.send(b, ids[2]); s.Status != store.SendClaimed || s.Owner != store.OwnerNone {
		f.t.Errorf("handed-off row = %+v; want claimed with no owner", s)
	}
	if c := f.counts(b); c.Claimed != 3 {
		f.t.Errorf("Counts = %+v, want 3 claimed", c)
	}
}

// A claim repeated by the same owner (a retry after an ambiguous commit)
// returns that owner's rows again, and only those: the retry can send what
// the first try claimed, and never another owner's rows.
func testClaimRetrySameOwner(f *fixture) {
	ids := f.subscribers("r", 4)
	b := f.running("retry", 0)
	first := f.claim(b, ids[:2], at(2)) // w1/1
	again, err := f.s.Claim(f.ctx, b.ID, "w1/1", f.claims(b, ids), at(3))
	f.must(err, "Claim again")
	f.sameSet("first claim", first, ids[:2])
	f.sameSet("the same owner's retry", again, ids)
	theirs, err := f.s.Claim(f.ctx, b.ID, "w2/1", f.claims(b, ids), at(4))
	f.must(err, "Claim by another owner")
	if len(theirs) != 0 {
		f.t.Errorf("another owner's claim returned %v, want nothing", theirs)
	}
	f.must(f.s.RecordOutcomes(f.ctx, b.ID, "w1/1", []store.Outcome{{ContactID: ids[0], Status: store.SendSent}}, at(5)), "RecordOutcomes")
	after, err := f.s.RecordAndClaim(f.ctx, b.ID, "w1/1", nil, f.claims(b, ids), at(6))
	f.must(err, "RecordAndClaim")
	f.sameSet("a retry after an outcome", after, ids[1:])
}

// An unresolved in-doubt claim marked unknown is counted apart and is no
// longer pending, so the broadcast can complete while showing it.
func testUnknownCounted(f *fixture) {
	ids := f.subscribers("u", 3)
	b := f.running("unknown", 0)
	f.claim(b, ids, at(2))
	f.must(f.s.RecordOutcomes(f.ctx, b.ID, "w1/1", []store.Outcome{
		{ContactID: ids[0], Status: store.SendUnknown},
		{ContactID: ids[1], Status: store.SendSent},
	}, at(3)), "RecordOutcomes")
	if c := f.counts(b); c != (store.Counts{Claimed: 1, Sent: 1, Unknown: 1}) {
		f.t.Errorf("Counts = %+v, want 1 claimed, 1 sent, 1 unknown", c)
	}
	if n := f.pending(b); n != 1 {
		f.t.Errorf("claimed = %d, want 1 (unknown is resolved)", n)
	}
}

func (f *fixture) send(b store.Broadcast, contact ulid.ULID) store.Send {
	f.t.Helper()
	s, err := f.s.GetSend(f.ctx, b.ID, contact)
	f.must(err, "GetSend")
	return s
}
