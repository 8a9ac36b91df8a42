package storetest

import (
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/oklog/ulid/v2"

	"github.com/rangecast/rangecast/internal/store"
)

var claimCases = []testCase{
	{"OnlyInsertedRows", testClaimOnlyInserted},
	{"Concurrent", testClaimConcurrent},
	{"PerBroadcast", testClaimPerBroadcast},
	{"OnlyWhileRunning", testClaimOnlyWhileRunning},
	{"CompleteOnlyWhenSettled", testCompleteOnlyWhenSettled},
}

var outcomeCases = []testCase{
	{"OnlyClaimedRows", testOutcomesOnlyClaimed},
	{"ReleaseOnlyClaimed", testReleaseOnlyClaimed},
	{"RecordAndClaim", testRecordAndClaim},
}

// Claim returns only the rows this call inserted (of other runs' claims,
// none); the ledger row keeps the address and Message-ID.
func testClaimOnlyInserted(f *fixture) {
	ids := f.subscribers("c", 4)
	b := f.running("claims", 0)

	f.sameSet("first claim", f.claim(b, ids[:2], at(2)), ids[:2])
	f.sameSet("overlapping claim", f.claimAs("w2/1", b, ids[1:3], at(3)), ids[2:3])
	f.sameSet("claim of claimed rows", f.claimAs("w3/1", b, ids[:3], at(4)), nil)
	f.sameSet("claim of the rest", f.claimAs("w4/1", b, ids, at(5)), ids[3:])
	f.sameSet("empty claim", f.claimAs("w5/1", b, nil, at(6)), nil)

	for i, id := range ids {
		s, err := f.s.GetSend(f.ctx, b.ID, id)
		f.must(err, "GetSend(%s)", id)
		claimedAt := []int{2, 2, 3, 5}[i]
		want := store.Send{
			BroadcastID: b.ID, ContactID: id, Email: "c-" + id.String() + "@example.org",
			Status: store.SendClaimed, Attempt: 1, MessageID: messageID(b.ID, id),
			Owner: []string{"w1/1", "w1/1", "w2/1", "w4/1"}[i],
		}
		got := s
		got.ClaimedAt, got.UpdatedAt = want.ClaimedAt, want.UpdatedAt
		if got != want || !s.ClaimedAt.Equal(at(claimedAt)) || !s.UpdatedAt.Equal(at(claimedAt)) {
			f.t.Errorf("GetSend(%d) = %+v, want %+v claimed and updated at %v", i, s, want, at(claimedAt))
		}
	}
	_, err := f.s.GetSend(f.ctx, b.ID, f.ids.next())
	f.wantErr(err, store.ErrNotFound, "GetSend of an unclaimed contact")
	if c := f.counts(b); c != (store.Counts{Claimed: 4}) {
		f.t.Errorf("Counts = %+v, want 4 claimed", c)
	}
	if n := f.pending(b); n != 4 {
		f.t.Errorf("claimed = %d, want 4", n)
	}
}

// Eight workers claiming the same 500 contacts at once, each in windows of
// 16 taken from its own shuffle of them (so windows overlap in every order):
// every contact is claimed by exactly one worker, and no claim fails.
func testClaimConcurrent(f *fixture) {
	const workers, contacts, window = 8, 500, 16
	ids := f.subscribers("race", contacts)
	b := f.running("race", 0)
	claims := f.claims(b, ids)

	got := make([][]ulid.ULID, workers)
	errs := make([]error, workers)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for w := range workers {
		order := slices.Clone(claims)
		rnd := &splitmix{state: uint64(w)}
		for i := len(order) - 1; i > 0; i-- {
			j := int(rnd.Uint64() % uint64(i+1))
			order[i], order[j] = order[j], order[i]
		}
		wg.Go(func() {
			<-start
			for lo := 0; lo < contacts; lo += window {
				mine, err := f.s.Claim(f.ctx, b.ID, fmt.Sprintf("w%d/1", w), order[lo:min(lo+window, contacts)], at(2))
				if err != nil {
					errs[w] = fmt.Errorf("worker %d window %d: %w", w, lo/window, err)
					return
				}
				got[w] = append(got[w], mine...)
			}
		})
	}
	close(start)
	wg.Wait()
	for _, err := range errs {
		f.must(err, "concurrent Claim")
	}

	owner := map[ulid.ULID]int{}
	for w, mine := range got {
		for _, id := range mine {
			if prev, dup := owner[id]; dup {
				f.t.Fatalf("contact %s claimed by workers %d and %d", id, prev, w)
			}
			owner[id] = w
		}
	}
	for _, id := range ids {
		if _, ok := owner[id]; !ok {
			f.t.Errorf("contact %s claimed by no worker", id)
		}
	}
	if len(owner) != contacts {
		f.t.Errorf("%d contacts claimed, want %d", len(owner), contacts)
	}
	f.t.Logf("claims per worker: %v", func() []int {
		n := make([]int, workers)
		for w := range got {
			n[w] = len(got[w])
		}
		return n
	}())
	if c := f.counts(b); c != (store.Counts{Claimed: contacts}) {
		f.t.Errorf("Counts = %+v, want %d claimed", c, contacts)
	}
	// Spot-check that the winner's row carries its Message-ID and address.
	for _, id := range []ulid.ULID{ids[0], ids[contacts/2], ids[contacts-1]} {
		s, err := f.s.GetSend(f.ctx, b.ID, id)
		f.must(err, "GetSend")
		if s.MessageID != messageID(b.ID, id) || s.Email != "c-"+id.String()+"@example.org" || s.Status != store.SendClaimed {
			f.t.Errorf("GetSend(%s) = %+v", id, s)
		}
	}
}

// The ledger is per broadcast: a contact claimed (and sent) in one broadcast
// is claimed afresh in another, and outcomes stay in their broadcast.
func testClaimPerBroadcast(f *fixture) {
	ids := f.subscribers("pb", 3)
	a := f.running("a", 0)
	b := f.running("b", 0)
	f.sameSet("claim in a", f.claim(a, ids, at(2)), ids)
	f.must(f.s.RecordOutcomes(f.ctx, a.ID, "w1/1", []store.Outcome{{ContactID: ids[0], Status: store.SendSent}}, at(3)), "RecordOutcomes(a)")
	f.sameSet("claim in b", f.claim(b, ids, at(4)), ids)
	f.must(f.s.Release(f.ctx, b.ID, "w1/1", ids[1:2]), "Release(b)")
	if c := f.counts(a); c != (store.Counts{Claimed: 2, Sent: 1}) {
		f.t.Errorf("Counts(a) = %+v, want 2 claimed 1 sent", c)
	}
	if c := f.counts(b); c != (store.Counts{Claimed: 2}) {
		f.t.Errorf("Counts(b) = %+v, want 2 claimed", c)
	}
	if s, err := f.s.GetSend(f.ctx, a.ID, ids[1]); err != nil || s.Status != store.SendClaimed {
		f.t.Errorf("a's row for a contact released in b: %+v, %v", s, err)
	}
}

// RecordOutcomes writes only rows still claimed: an outcome never overwrites
// another, and an outcome for an unclaimed contact creates nothing.
func testOutcomesOnlyClaimed(f *fixture) {
	ids := f.subscribers("o", 5)
	b := f.running("outcomes", 0)
	f.claim(b, ids, at(2))

	f.must(f.s.RecordOutcomes(f.ctx, b.ID, "w1/1", []store.Outcome{
		{ContactID: ids[0], Status: store.SendSent},
		{ContactID: ids[1], Status: store.SendFailed, Error: "550 5.1.1 no such user"},
		{ContactID: ids[2], Status: store.SendDeferred},
	}, at(3)), "RecordOutcomes")
	f.must(f.s.RecordOutcomes(f.ctx, b.ID, "w1/1", nil, at(3)), "RecordOutcomes(nil)")
	if c := f.counts(b); c != (store.Counts{Claimed: 2, Sent: 1, Failed: 1, Deferred: 1}) {
		f.t.Errorf("Counts = %+v, want 2 claimed, 1 sent, 1 failed, 1 deferred", c)
	}
	if n := f.pending(b); n != 2 {
		f.t.Errorf("claimed = %d, want 2", n)
	}

	// A second outcome for rows that already have one changes nothing; the
	// claimed rows in the same batch are written; an unclaimed contact
	// gets no row.
	stranger := f.ids.next()
	f.must(f.s.RecordOutcomes(f.ctx, b.ID, "w1/1", []store.Outcome{
		{ContactID: ids[0], Status: store.SendFailed, Error: "late failure"},
		{ContactID: ids[1], Status: store.SendSent},
		{ContactID: ids[2], Status: store.SendSent},
		{ContactID: ids[3], Status: store.SendSent},
		{ContactID: stranger, Status: store.SendSent},
	}, at(4)), "second RecordOutcomes")

	want := []struct {
		status  store.SendStatus
		err     string
		updated int
	}{
		{store.SendSent, "", 3},
		{store.SendFailed, "550 5.1.1 no such user", 3},
		{store.SendDeferred, "", 3},
		{store.SendSent, "", 4},
		{store.SendClaimed, "", 2},
	}
	for i, w := range want {
		s, err := f.s.GetSend(f.ctx, b.ID, ids[i])
		f.must(err, "GetSend(%d)", i)
		if s.Status != w.status || s.Error != w.err || !s.UpdatedAt.Equal(at(w.updated)) || !s.ClaimedAt.Equal(at(2)) ||
			s.MessageID != messageID(b.ID, ids[i]) {
			f.t.Errorf("row %d = %+v, want status %s, error %q, updated %v, claimed %v", i, s, w.status, w.err, at(w.updated), at(2))
		}
	}
	_, err := f.s.GetSend(f.ctx, b.ID, stranger)
	f.wantErr(err, store.ErrNotFound, "GetSend of a contact that only got an outcome")
	if c := f.counts(b); c != (store.Counts{Claimed: 1, Sent: 2, Failed: 1, Deferred: 1}) {
		f.t.Errorf("Counts = %+v, want 1 claimed, 2 sent, 1 failed, 1 deferred", c)
	}
	if n := f.pending(b); n != 1 {
		f.t.Errorf("claimed = %d, want 1", n)
	}
}

// Release deletes only rows still claimed; a released contact can be claimed
// again, a sent one never.
func testReleaseOnlyClaimed(f *fixture) {
	ids := f.subscribers("r", 4)
	b := f.running("release", 0)
	f.claim(b, ids, at(2))
	f.must(f.s.RecordOutcomes(f.ctx, b.ID, "w1/1", []store.Outcome{
		{ContactID: ids[0], Status: store.SendSent},
		{ContactID: ids[1], Status: store.SendFailed, Error: "550 rejected"},
	}, at(3)), "RecordOutcomes")

	f.must(f.s.Release(f.ctx, b.ID, "w1/1", ids[:3]), "Release")
	f.must(f.s.Release(f.ctx, b.ID, "w1/1", nil), "Release(nil)")
	for i, want := range []store.SendStatus{store.SendSent, store.SendFailed} {
		s, err := f.s.GetSend(f.ctx, b.ID, ids[i])
		f.must(err, "GetSend(%d) after Release", i)
		if s.Status != want {
			f.t.Errorf("row %d after Release: %s, want %s", i, s.Status, want)
		}
	}
	_, err := f.s.GetSend(f.ctx, b.ID, ids[2])
	f.wantErr(err, store.ErrNotFound, "GetSend of a released claim")
	if c := f.counts(b); c != (store.Counts{Claimed: 1, Sent: 1, Failed: 1}) {
		f.t.Errorf("Counts after Release = %+v, want 1 claimed (not released), 1 sent, 1 failed", c)
	}
	if n := f.pending(b); n != 1 {
		f.t.Errorf("claimed after Release = %d, want 1", n)
	}

	// A later page claims the released contact again, and only it.
	f.sameSet("claim after Release", f.claim(b, ids[:3], at(5)), ids[2:3])
	s, err := f.s.GetSend(f.ctx, b.ID, ids[2])
	f.must(err, "GetSend after reclaim")
	if s.Status != store.SendClaimed || !s.ClaimedAt.Equal(at(5)) {
		f.t.Errorf("reclaimed row = %+v, want claimed at %v", s, at(5))
	}
	if c := f.counts(b); c != (store.Counts{Claimed: 2, Sent: 1, Failed: 1}) {
		f.t.Errorf("Counts after reclaim = %+v, want 2 claimed, 1 sent, 1 failed", c)
	}
	if n := f.pending(b); n != 2 {
		f.t.Errorf("claimed after reclaim = %d, want 2", n)
	}
}

// RecordAndClaim records one window's outcomes and claims the next in one
// call, each part with the rules it has alone: outcomes only for rows still
// claimed, and back only the claims this call inserted.
func testRecordAndClaim(f *fixture) {
	ids := f.subscribers("rc", 8)
	b := f.running("record-and-claim", 0)
	f.sameSet("first window", f.claim(b, ids[:3], at(2)), ids[:3])

	// The next window overlaps a row this run holds still (returned again,
	// as to a retry) and another run's claim (ids[5], not returned).
	f.sameSet("other attempt", f.claimAs("w2/1", b, ids[5:6], at(2)), ids[5:6])
	got, err := f.s.RecordAndClaim(f.ctx, b.ID, "w1/1", []store.Outcome{
		{ContactID: ids[0], Status: store.SendSent},
		{ContactID: ids[1], Status: store.SendFailed, Error: "550 5.1.1 no such user"},
		{ContactID: ids[6], Status: store.SendSent}, // not claimed: no row
	}, f.claims(b, ids[2:6]), at(3))
	f.must(err, "RecordAndClaim")
	f.sameSet("claimed with the outcomes", got, ids[2:5])
	for i, want := range []store.SendStatus{store.SendSent, store.SendFailed, store.SendClaimed, store.SendClaimed, store.SendClaimed, store.SendClaimed} {
		s, err := f.s.GetSend(f.ctx, b.ID, ids[i])
		f.must(err, "GetSend(%d)", i)
		if s.Status != want {
			f.t.Errorf("row %d = %s, want %s", i, s.Status, want)
		}
		if i >= 3 && i < 5 && !s.ClaimedAt.Equal(at(3)) {
			f.t.Errorf("row %d claimed at %v, want %v", i, s.ClaimedAt, at(3))
		}
	}
	_, err = f.s.GetSend(f.ctx, b.ID, ids[6])
	f.wantErr(err, store.ErrNotFound, "GetSend of a contact that only got an outcome")

	// The last window: outcomes and nothing to claim; then a claim with no
	// outcomes (a page's first window).
	got, err = f.s.RecordAndClaim(f.ctx, b.ID, "w1/1", []store.Outcome{
		{ContactID: ids[2], Status: store.SendSent},
		{ContactID: ids[3], Status: store.SendSent},
		{ContactID: ids[4], Status: store.SendDeferred},
	}, nil, at(4))
	f.must(err, "RecordAndClaim without a next window")
	f.sameSet("nothing to claim", got, nil)
	got, err = f.s.RecordAndClaim(f.ctx, b.ID, "w1/1", nil, f.claims(b, ids[6:]), at(5))
	f.must(err, "RecordAndClaim without outcomes")
	f.sameSet("claim alone", got, ids[6:])
	if c := f.counts(b); c != (store.Counts{Claimed: 3, Sent: 3, Failed: 1, Deferred: 1}) {
		f.t.Errorf("Counts = %+v, want 3 claimed, 3 sent, 1 failed, 1 deferred", c)
	}
	if r, err := f.s.Reputation(f.ctx, b.ID); err != nil || r != (store.Reputation{Accepted: 3}) {
		f.t.Errorf("Reputation = %+v, %v; want 3 accepted", r, err)
	}
}

// A page read while its broadcast ran can reach its claim long after (a
// store outage, a stalled worker). Only a running broadcast takes new
// claims: otherwise Claim says ErrNotRunning with the state, so the page
// stops instead of taking the missing claims for another run's. A retry
// still gets the run's own claims back, and RecordAndClaim records its
// outcomes even when its claim is refused.
func testClaimOnlyWhileRunning(f *fixture) {
	ids := f.subscribers("r", 6)
	b := f.running("running", 0)
	f.sameSet("claim while running", f.claim(b, ids[:2], at(2)), ids[:2])

	setState := func(from, to store.State, n int) {
		f.t.Helper()
		_, err := f.s.SetState(f.ctx, b.ID, []store.State{from}, to, "", at(n))
		f.must(err, "SetState(%s → %s)", from, to)
	}
	refused := func(what string, got []ulid.ULID, err error, state store.State) {
		f.t.Helper()
		var nr *store.NotRunningError
		if !errors.As(err, &nr) || !errors.Is(err, store.ErrNotRunning) || nr.State != state || len(got) != 0 {
			f.t.Fatalf("%s: %v, %v; want no claims and ErrNotRunning with state %q", what, got, err, state)
		}
	}
	setState(store.StateRunning, store.StatePaused, 3)
	got, err := f.s.Claim(f.ctx, b.ID, "w1/1", f.claims(b, ids[2:4]), at(4))
	refused("claim while paused", got, err, store.StatePaused)
	if _, err := f.s.GetSend(f.ctx, b.ID, ids[2]); !errors.Is(err, store.ErrNotFound) {
		f.t.Errorf("a refused claim left a row: GetSend = %v, want ErrNotFound", err)
	}
	// A retry of the first claim (its answer lost) gets its rows back; of
	// a wider window, only those.
	got, err = f.s.Claim(f.ctx, b.ID, "w1/1", f.claims(b, ids[:3]), at(4))
	f.must(err, "retried claim while paused")
	f.sameSet("retried claim while paused", got, ids[:2])
	got, err = f.s.Claim(f.ctx, b.ID, "w2/1", f.claims(b, ids[:2]), at(4))
	refused("another run's claim of held rows while paused", got, err, store.StatePaused)

	got, err = f.s.RecordAndClaim(f.ctx, b.ID, "w1/1", []store.Outcome{{ContactID: ids[0], Status: store.SendSent}}, f.claims(b, ids[2:4]), at(5))
	refused("RecordAndClaim while paused", got, err, store.StatePaused)
	if s, err := f.s.GetSend(f.ctx, b.ID, ids[0]); err != nil || s.Status != store.SendSent {
		f.t.Errorf("outcome of a RecordAndClaim whose claim was refused: %+v, %v; want sent", s, err)
	}

	setState(store.StatePaused, store.StateRunning, 6)
	f.sameSet("claim after resume", f.claim(b, ids[2:4], at(7)), ids[2:4])

	setState(store.StateRunning, store.StateCancelled, 8)
	got, err = f.s.Claim(f.ctx, b.ID, "w1/1", f.claims(b, ids[4:]), at(9))
	refused("claim after cancel", got, err, store.StateCancelled)
	got, err = f.s.Claim(f.ctx, f.ids.next(), "w1/1", f.claims(b, ids[4:]), at(9))
	refused("claim for no broadcast", got, err, "")
	if c := f.counts(b); c.Claimed != 3 || c.Sent != 1 {
		f.t.Errorf("Counts = %+v, want 3 claimed and 1 sent", c)
	}
}

// A broadcast completes only with nothing claimed or deferred, checked as
// it moves: a claim that went in after the caller's own check (Pending)
// keeps it running, and after completion no claim goes in.
func testCompleteOnlyWhenSettled(f *fixture) {
	ids := f.subscribers("s", 3)
	b := f.running("settled", 0)
	complete := func(n int) (store.Broadcast, error) {
		return f.s.SetState(f.ctx, b.ID, []store.State{store.StateRunning}, store.StateCompleted, "", at(n))
	}
	f.sameSet("claim", f.claim(b, ids[:2], at(2)), ids[:2])
	got, err := complete(3)
	f.wantErr(err, store.ErrConflict, "completing with claims left")
	if got.State != store.StateRunning {
		f.t.Fatalf("after a refused completion the broadcast is %s, want running", got.State)
	}
	f.must(f.s.RecordOutcomes(f.ctx, b.ID, "w1/1", []store.Outcome{
		{ContactID: ids[0], Status: store.SendSent},
		{ContactID: ids[1], Status: store.SendDeferred, RetryAt: at(30)},
	}, at(4)), "RecordOutcomes")
	_, err = complete(5)
	f.wantErr(err, store.ErrConflict, "completing with a deferred message left")
	f.must(f.s.UnsubscribeContact(f.ctx, ids[1], ulid.ULID{}, at(6)), "UnsubscribeContact") // its deferred row is settled so
	got, err = complete(7)
	f.must(err, "completing a settled broadcast")
	if got.State != store.StateCompleted {
		f.t.Fatalf("state %s, want completed", got.State)
	}
	claimed, err := f.s.Claim(f.ctx, b.ID, "w1/1", f.claims(b, ids[2:]), at(8))
	if !errors.Is(err, store.ErrNotRunning) || len(claimed) != 0 {
		f.t.Fatalf("claim after completion: %v, %v; want ErrNotRunning", claimed, err)
	}
}
