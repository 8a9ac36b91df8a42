package storetest

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/rangecast/rangecast/internal/store"
)

var deferredCases = []testCase{
	{"DueInOrderOnce", testClaimDueInOrderOnce},
	{"ConcurrentSweepsSendOnce", testClaimDueConcurrent},
	{"IneligibleDropped", testClaimDueDropsIneligible},
	{"IneligibleAttemptedKept", testClaimDueKeepsAttemptedIneligible},
	{"RetrySameOwner", testClaimDueRetrySameOwner},
	{"RetrySameOwnerNewDueFirst", testClaimDueRetryKeepsOwnersRows},
	{"OwnersSendingLeftAlone", testClaimDueLeavesSending},
	{"LeftDomainsStayDue", testClaimDueLeavesDomains},
	{"HeldHastenedWhenLifted", testHastenHeld},
	{"HeldIsNoAttempt", testHeldIsNoAttempt},
	{"OnlyWhileRunning", testClaimDueOnlyWhileRunning},
	{"SentAgainInDoubtCounted", testSentAgainInDoubtCounted},
	{"LateReportSettlesDoubt", testLateReportSettlesDoubt},
	{"FailHalted", testFailHalted},
}

// Counts says how many of the sent were sent again after an attempt that
// may have arrived (released in doubt under the resend policy,
// store.InDoubtResent): people who may have two copies, which status and
// the completed broadcast's reason report. A row deferred by a plain 451
// and sent is sent once.
func testSentAgainInDoubtCounted(f *fixture) {
	ids := f.subscribers("again", 4)
	b := f.running("again", 0)
	f.claim(b, ids, at(1))
	f.must(f.s.RecordOutcomes(f.ctx, b.ID, "w1/1", []store.Outcome{
		{ContactID: ids[0], Status: store.SendDeferred, RetryAt: at(2), Error: store.InDoubtResent},
		{ContactID: ids[1], Status: store.SendDeferred, RetryAt: at(2), Error: store.InDoubtResent},
		{ContactID: ids[2], Status: store.SendDeferred, RetryAt: at(2), Error: "451 4.3.0 try again later"},
		{ContactID: ids[3], Status: store.SendSent},
	}, at(1)), "release")
	due, err := f.s.ClaimDue(f.ctx, b, "w2/1", at(3), 10, nil, nil)
	f.must(err, "ClaimDue")
	outcomes := make([]store.Outcome, len(due))
	for i, d := range due {
		outcomes[i] = store.Outcome{ContactID: d.ID, Status: store.SendSent}
	}
	f.must(f.s.RecordOutcomes(f.ctx, b.ID, "w2/1", outcomes, at(3)), "resend")
	if c := f.counts(b); c != (store.Counts{Sent: 4, SentAgainInDoubt: 2}) {
		f.t.Errorf("Counts = %+v; want 4 sent, 2 of them sent again in doubt", c)
	}
	// The export says which they are (they could be counted, not listed:
	// tester).
	rows, err := f.s.ExportPage(f.ctx, b.ID, ulid.ULID{}, 10)
	f.must(err, "ExportPage")
	for _, r := range rows {
		if want := r.ContactID == ids[0] || r.ContactID == ids[1]; r.InDoubt != want {
			f.t.Errorf("exported row of %s: in doubt %v; want %v", r.Email, r.InDoubt, want)
		}
	}
	if r, err := f.s.GetSend(f.ctx, b.ID, ids[1]); err != nil || !r.InDoubt {
		f.t.Errorf("GetSend of a row sent again in doubt: %+v (%v); want InDoubt", r, err)
	}
}

// A row released in doubt to be sent again (store.InDoubtResent) whose
// first attempt is then reported delivered by the provider, before the
// second went out, was sent once: the report settles the doubt, the row
// leaves deferred so nothing is sent again, and it is not counted sent
// again in doubt. Reported while the second attempt is in flight
// (claimed), it may be two copies, and stays counted.
func testLateReportSettlesDoubt(f *fixture) {
	ids := f.subscribers("late report", 2)
	b := f.running("late report", 0)
	f.claim(b, ids, at(1))
	f.must(f.s.RecordOutcomes(f.ctx, b.ID, "w1/1", []store.Outcome{
		{ContactID: ids[0], Status: store.SendDeferred, RetryAt: at(2), Error: store.InDoubtResent},
		{ContactID: ids[1], Status: store.SendDeferred, RetryAt: at(2), Error: store.InDoubtResent},
	}, at(1)), "release")
	f.event(b, ids[0], store.EventDelivered, "")
	due, err := f.s.ClaimDue(f.ctx, b, "w2/1", at(3), 10, nil, nil)
	f.must(err, "ClaimDue")
	if len(due) != 1 || due[0].ID != ids[1] {
		f.t.Fatalf("ClaimDue = %v; want only the row not reported delivered", dueIDs(due))
	}
	f.event(b, ids[1], store.EventDelivered, "") // the first attempt's report, the second in flight
	f.must(f.s.RecordOutcomes(f.ctx, b.ID, "w2/1", []store.Outcome{{ContactID: ids[1], Status: store.SendSent}}, at(3)), "resend")
	if c := f.counts(b); c != (store.Counts{Sent: 2, SentAgainInDoubt: 1}) {
		f.t.Errorf("Counts = %+v; want 2 sent, 1 of them sent again in doubt (the one reported while its second attempt was in flight)", c)
	}

	// A second attempt itself in doubt (released again, or recorded
	// unknown): a report cannot say which attempt arrived, so both may
	// have, and the rows stay counted (found by review).
	more := f.subscribers("late report twice", 2)
	f.claim(b, more, at(4))
	f.must(f.s.RecordOutcomes(f.ctx, b.ID, "w1/1", []store.Outcome{
		{ContactID: more[0], Status: store.SendDeferred, RetryAt: at(5), Error: store.InDoubtResent},
		{ContactID: more[1], Status: store.SendDeferred, RetryAt: at(5), Error: store.InDoubtResent},
	}, at(4)), "release")
	due, err = f.s.ClaimDue(f.ctx, b, "w3/1", at(6), 10, nil, nil)
	f.must(err, "ClaimDue")
	if len(due) != 2 {
		f.t.Fatalf("ClaimDue = %v; want both rows released again", dueIDs(due))
	}
	f.must(f.s.RecordOutcomes(f.ctx, b.ID, "w3/1", []store.Outcome{
		{ContactID: more[0], Status: store.SendDeferred, RetryAt: at(7), Error: store.InDoubtResent},
		{ContactID: more[1], Status: store.SendUnknown, Error: "in doubt: smtp data: connection lost after the final dot"},
	}, at(6)), "second attempts in doubt")
	f.event(b, more[0], store.EventDelivered, "")
	f.event(b, more[1], store.EventDelivered, "")
	if c := f.counts(b); c != (store.Counts{Sent: 4, SentAgainInDoubt: 3}) {
		f.t.Errorf("Counts = %+v; want 4 sent, 3 of them sent again in doubt (both attempts of two rows may have arrived)", c)
	}
}

// Deferred rows come due only while the broadcast runs: a sweep that
// started before a pause or a cancel (its worker's view of the state
// stale) moves none of them to claimed, so sends nothing; a repeated call
// still gets the owner's own rows back.
func testClaimDueOnlyWhileRunning(f *fixture) {
	ids := f.subscribers("paused due", 4)
	b := f.running("paused deferred", 0)
	f.deferAll(b, ids, at(1), at(2))
	first, err := f.s.ClaimDue(f.ctx, b, "w5/1", at(3), 2, nil, nil)
	f.must(err, "ClaimDue")
	_, err = f.s.SetState(f.ctx, b.ID, []store.State{store.StateRunning}, store.StatePaused, "", at(4))
	f.must(err, "pause")
	if due, err := f.s.ClaimDue(f.ctx, b, "w6/1", at(5), 10, nil, nil); err != nil || len(due) != 0 {
		f.t.Fatalf("ClaimDue while paused = %v, %v; want nothing", dueIDs(due), err)
	}
	again, err := f.s.ClaimDue(f.ctx, b, "w5/1", at(5), 10, nil, nil)
	f.must(err, "ClaimDue repeated while paused")
	if len(again) != 2 || again[0].ID != first[0].ID || again[1].ID != first[1].ID {
		f.t.Fatalf("ClaimDue repeated while paused = %v, want the owner's rows %v only", dueIDs(again), dueIDs(first))
	}
	_, err = f.s.SetState(f.ctx, b.ID, []store.State{store.StatePaused}, store.StateCancelled, "", at(6))
	f.must(err, "cancel")
	if due, err := f.s.ClaimDue(f.ctx, b, "w7/1", at(7), 10, nil, nil); err != nil || len(due) != 0 {
		f.t.Fatalf("ClaimDue after cancel = %v, %v; want nothing", dueIDs(due), err)
	}
}

// A row deferred because the governor held its provider was not attempted:
// its attempt count goes back, so holds never wear a recipient's attempts
// down (only real SMTP attempts count).
func testHeldIsNoAttempt(f *fixture) {
	ids := f.subscribers("held", 1)
	b := f.running("held", 0)
	f.claim(b, ids, at(1))
	held := []store.Outcome{{ContactID: ids[0], Status: store.SendDeferred, RetryAt: at(2), Error: "held", NotAttempted: true}}
	f.must(f.s.RecordOutcomes(f.ctx, b.ID, "w1/1", held, at(1)), "RecordOutcomes held")
	for round := range 3 {
		due, err := f.s.ClaimDue(f.ctx, b, fmt.Sprintf("w%d/1", round+2), at(3+round), 10, nil, nil)
		f.must(err, "ClaimDue")
		if len(due) != 1 || due[0].Attempt != 1 {
			f.t.Fatalf("round %d: ClaimDue = %+v; want the held row at attempt 1 (no attempt made yet)", round, due)
		}
		again := []store.Outcome{{ContactID: ids[0], Status: store.SendDeferred, RetryAt: at(3 + round), Error: "held", NotAttempted: true}}
		f.must(f.s.RecordOutcomes(f.ctx, b.ID, fmt.Sprintf("w%d/1", round+2), again, at(3+round)), "RecordOutcomes held again")
	}
}

// A ClaimDue repeated by the same owner (its answer lost with an ambiguous
// commit) gets the rows it moved back, besides any newly due; another
// owner's repeat gets none of them.
func testClaimDueRetrySameOwner(f *fixture) {
	ids := f.subscribers("again", 4)
	b := f.running("deferred retry", 0)
	f.deferAll(b, ids, at(1), at(2))
	first, err := f.s.ClaimDue(f.ctx, b, "w5/1", at(3), 2, nil, nil)
	f.must(err, "ClaimDue")
	other, err := f.s.ClaimDue(f.ctx, b, "w6/1", at(3), 2, nil, nil)
	f.must(err, "ClaimDue by another owner")
	again, err := f.s.ClaimDue(f.ctx, b, "w5/1", at(3), 2, nil, nil)
	f.must(err, "ClaimDue again")
	if len(first) != 2 || len(other) != 2 || len(again) != 2 || again[0].ID != first[0].ID || again[1].ID != first[1].ID || again[0].Attempt != first[0].Attempt {
		f.t.Fatalf("first %v, other owner %v, the first owner again %v; want the first owner's two rows back", dueIDs(first), dueIDs(other), dueIDs(again))
	}
}

// A ClaimDue repeated by its owner (its commit's answer was lost) returns
// that owner's rows even when rows of lower ids came due meanwhile (a
// reconciler's re-send is deferred and due at once): the LIMIT must not cut
// them off, or they stay claimed, unsent, and end as unknown.
func testClaimDueRetryKeepsOwnersRows(f *fixture) {
	ids := f.subscribers("again first", 4)
	b := f.running("deferred retry, new due rows", 0)
	f.deferAll(b, ids[1:], at(1), at(2))
	first, err := f.s.ClaimDue(f.ctx, b, "w5/1", at(3), 2, nil, nil)
	f.must(err, "ClaimDue")
	f.deferAll(b, ids[:1], at(1), at(2)) // due, and before the owner's rows in id order
	again, err := f.s.ClaimDue(f.ctx, b, "w5/1", at(3), 2, nil, nil)
	f.must(err, "ClaimDue again")
	if len(first) != 2 || len(again) != 2 || again[0].ID != first[0].ID || again[1].ID != first[1].ID {
		f.t.Fatalf("first %v, again %v; want the owner's two rows back, not the row that came due meanwhile", dueIDs(first), dueIDs(again))
	}
}

// A sweep claims its next window while rows of an earlier one are still
// being sent (stragglers): ClaimDue neither returns those rows, which would
// send their contacts a second copy, nor touches them when their contact
// left the audience meanwhile, which would drop a row whose message is on
// its way. The straggler's outcome is then recorded as any other.
func testClaimDueLeavesSending(f *fixture) {
	ids := f.subscribers("straggling", 4)
	b := f.running("deferred, a straggler", 0)
	f.deferAll(b, ids[:3], at(1), at(2))
	first, err := f.s.ClaimDue(f.ctx, b, "w5/1", at(3), 3, nil, nil)
	f.must(err, "ClaimDue")
	if len(first) != 3 {
		f.t.Fatalf("first ClaimDue = %v; want 3 rows", dueIDs(first))
	}
	f.must(f.s.RecordOutcomes(f.ctx, b.ID, "w5/1", []store.Outcome{
		{ContactID: ids[0], Status: store.SendSent}, {ContactID: ids[2], Status: store.SendSent},
	}, at(4)), "RecordOutcomes")
	f.must(f.unsubscribe("straggling0001@example.org", at(4)), "Unsubscribe")
	f.deferAll(b, ids[3:], at(4), at(5))
	// Repeated, as after an ambiguous commit: still never the straggler.
	for range 2 {
		got, err := f.s.ClaimDue(f.ctx, b, "w5/1", at(6), 10, []ulid.ULID{ids[1]}, nil)
		f.must(err, "ClaimDue with a row still being sent")
		if len(got) != 1 || got[0].ID != ids[3] {
			f.t.Fatalf("ClaimDue = %v; want only %s, the row that came due (not %s, still being sent)", dueIDs(got), ids[3], ids[1])
		}
	}
	row, err := f.s.GetSend(f.ctx, b.ID, ids[1])
	f.must(err, "GetSend of the straggler")
	if row.Status != store.SendClaimed || row.Attempt != first[1].Attempt {
		f.t.Fatalf("straggler's row is %s, attempt %d; want claimed, attempt %d, left alone", row.Status, row.Attempt, first[1].Attempt)
	}
	f.must(f.s.RecordOutcomes(f.ctx, b.ID, "w5/1", []store.Outcome{{ContactID: ids[1], Status: store.SendSent}}, at(7)), "RecordOutcomes of the straggler")
	if row, err := f.s.GetSend(f.ctx, b.ID, ids[1]); err != nil || row.Status != store.SendSent {
		f.t.Fatalf("straggler's row = %+v, %v; want sent", row, err)
	}
}

// A sweep whose ramping provider has no connection free asks ClaimDue to
// leave that provider's domains: their due rows stay deferred and due,
// untouched, and the window takes other providers' retries. Only an
// address at the domain itself is left (not a subdomain, not a domain
// ending the same way), whatever its case, by the address the row was
// claimed for; the owner's own claims come back to a repeated call
// whatever leave says.
func testClaimDueLeavesDomains(f *fixture) {
	emails := []string{"ann@gmail.com", "bob@example.org", "cat@GMail.COM", "dan@mail.gmail.com", "eve@notgmail.com", "fay@googlemail.com"}
	cs := make([]store.Contact, len(emails))
	for i, e := range emails {
		cs[i] = f.contact(e)
	}
	ids := f.upsert(cs, t0)
	for i := range cs {
		cs[i].ID = ids[i]
	}
	b := f.running("deferred, a provider ramping", 0)
	f.claimPage("w1/1", b, cs, at(1)) // the ledger keeps each row's address
	outs := make([]store.Outcome, len(ids))
	for i, id := range ids {
		outs[i] = store.Outcome{ContactID: id, Status: store.SendDeferred, Error: "451 4.3.0 try again later", RetryAt: at(2)}
	}
	f.must(f.s.RecordOutcomes(f.ctx, b.ID, "w1/1", outs, at(1)), "RecordOutcomes deferred")
	leave := []string{"gmail.com", "googlemail.com"}
	got, err := f.s.ClaimDue(f.ctx, b, "w5/1", at(3), 10, nil, leave)
	f.must(err, "ClaimDue leaving gmail.com and googlemail.com")
	f.sameSet("rows claimed", dueIDs(got), []ulid.ULID{ids[1], ids[3], ids[4]})
	for _, i := range []int{0, 2, 5} {
		row, err := f.s.GetSend(f.ctx, b.ID, ids[i])
		f.must(err, "GetSend of a row left")
		if row.Status != store.SendDeferred || row.Attempt != 1 || !row.UpdatedAt.Equal(at(1)) {
			f.t.Fatalf("%s's row is %s, attempt %d, updated %v; want left deferred as it was (attempt 1, updated %v)", emails[i], row.Status, row.Attempt, row.UpdatedAt, at(1))
		}
	}
	again, err := f.s.ClaimDue(f.ctx, b, "w5/1", at(4), 10, nil, []string{"example.org", "mail.gmail.com", "notgmail.com"})
	f.must(err, "ClaimDue repeated")
	f.sameSet("a repeated call's rows (its own claims, then the due rows not left)", dueIDs(again), ids)
}

// An operator lifts a provider's hold: the rows the governor deferred for
// that provider (held, or its ramp step ended; no attempt made) in the
// broadcasts sending from the domain come due at once. Other providers'
// rows, the provider's own refusals (attempts, with their backoff) and
// rows due already are left as they are.
func testHastenHeld(f *fixture) {
	ids := f.subscribers("lifted", 5)
	b := f.running("held by google", 0) // from news@example.org
	f.claim(b, ids, at(1))
	outs := []store.Outcome{
		{ContactID: ids[0], Status: store.SendDeferred, RetryAt: at(100), Error: store.HeldReason("google"), NotAttempted: true},
		{ContactID: ids[1], Status: store.SendDeferred, RetryAt: at(100), Error: store.StepEndedReason("google"), NotAttempted: true},
		{ContactID: ids[2], Status: store.SendDeferred, RetryAt: at(100), Error: store.HeldReason("yahoo"), NotAttempted: true},
		{ContactID: ids[3], Status: store.SendDeferred, RetryAt: at(100), Error: "451 4.7.28 try again later"},
		{ContactID: ids[4], Status: store.SendDeferred, RetryAt: at(5), Error: store.HeldReason("google"), NotAttempted: true},
	}
	f.must(f.s.RecordOutcomes(f.ctx, b.ID, "w1/1", outs, at(1)), "RecordOutcomes")
	if n, err := f.s.HastenHeld(f.ctx, "other.example", "google", at(10)); err != nil || n != 0 {
		f.t.Fatalf("HastenHeld for another sending domain = %d, %v; want 0", n, err)
	}
	n, err := f.s.HastenHeld(f.ctx, "Example.ORG", "google", at(10))
	f.must(err, "HastenHeld")
	if n != 2 {
		f.t.Fatalf("HastenHeld = %d; want the 2 rows held for google and not yet due", n)
	}
	due, err := f.s.ClaimDue(f.ctx, b, "w2/1", at(10), 10, nil, nil)
	f.must(err, "ClaimDue")
	f.sameSet("rows due after the lift", dueIDs(due), []ulid.ULID{ids[0], ids[1], ids[4]})
}

func dueIDs(ds []store.Due) []ulid.ULID {
	out := make([]ulid.ULID, len(ds))
	for i, d := range ds {
		out[i] = d.ID
	}
	return out
}

// deferAll claims ids and records them deferred, each due at due.
func (f *fixture) deferAll(b store.Broadcast, ids []ulid.ULID, now, due time.Time) {
	f.t.Helper()
	f.claim(b, ids, now)
	outs := make([]store.Outcome, len(ids))
	for i, id := range ids {
		outs[i] = store.Outcome{ContactID: id, Status: store.SendDeferred, Error: "452 4.5.3 rate limit", RetryAt: due}
	}
	f.must(f.s.RecordOutcomes(f.ctx, b.ID, "w1/1", outs, now), "RecordOutcomes deferred")
}

// A deferred row is not due before its retry time; at it, the sweep moves
// due rows back to claimed in id order, once: a second sweep finds nothing.
func testClaimDueInOrderOnce(f *fixture) {
	ids := f.subscribers("due", 5)
	b := f.running("deferred", 0)
	f.deferAll(b, ids[:3], at(1), at(10))
	f.deferAll(b, ids[3:], at(1), at(20))

	for _, c := range []struct {
		now  time.Time
		want int64
	}{{at(10).Add(-time.Microsecond), 0}, {at(10), 3}, {at(19), 3}, {at(20), 5}} {
		n, next, err := f.s.NextDue(f.ctx, b.ID, c.now)
		f.must(err, "NextDue")
		if n != c.want || !next.Equal(at(10)) {
			f.t.Fatalf("NextDue at %v = %d, %v; want %d due, the first at %v", c.now, n, next, c.want, at(10))
		}
	}
	early, err := f.s.ClaimDue(f.ctx, b, "w1/1", at(10).Add(-time.Microsecond), 100, nil, nil)
	f.must(err, "ClaimDue early")
	if len(early) != 0 {
		f.t.Fatalf("ClaimDue before the retry time returned %d rows", len(early))
	}
	got, err := f.s.ClaimDue(f.ctx, b, "w1/1", at(10), 2, nil, nil)
	f.must(err, "ClaimDue")
	if len(got) != 2 || got[0].ID != ids[0] || got[1].ID != ids[1] || got[0].Email == "" || got[0].Attempt != 2 || got[1].Attempt != 2 {
		f.t.Fatalf("ClaimDue(limit 2) = %+v; want the first two due contacts with their addresses", got)
	}
	row, err := f.s.GetSend(f.ctx, b.ID, ids[0])
	f.must(err, "GetSend")
	if row.Status != store.SendClaimed || row.Attempt != 2 || !row.ClaimedAt.Equal(at(10)) {
		f.t.Errorf("swept row %+v; want claimed again at %v, attempt 2", row, at(10))
	}
	rest, err := f.s.ClaimDue(f.ctx, b, "w2/1", at(15), 100, nil, nil)
	f.must(err, "ClaimDue rest")
	if len(rest) != 1 || rest[0].ID != ids[2] {
		f.t.Fatalf("second sweep = %+v; want only the third due row", rest)
	}
	n, next, err := f.s.NextDue(f.ctx, b.ID, at(15))
	f.must(err, "NextDue after sweeps")
	if n != 0 || !next.Equal(at(20)) {
		f.t.Errorf("NextDue at %v = %d, %v; want none due, the next at %v", at(15), n, next, at(20))
	}
	if n, _, err = f.s.NextDue(f.ctx, b.ID, at(20)); err != nil || n != 2 {
		f.t.Errorf("NextDue at %v = %d, %v; want 2 due", at(20), n, err)
	}
	c, err := f.s.Counts(f.ctx, b.ID)
	f.must(err, "Counts")
	if c.Deferred != 2 || c.Claimed != 3 {
		f.t.Errorf("Counts = %+v; want 2 deferred, 3 claimed", c)
	}
}

// Concurrent sweeps share the due rows: each row goes to exactly one.
func testClaimDueConcurrent(f *fixture) {
	ids := f.subscribers("race", 60)
	b := f.running("deferred race", 0)
	f.deferAll(b, ids, at(1), at(2))
	var mu sync.Mutex
	seen := map[ulid.ULID]int{}
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for k := range 4 {
		wg.Go(func() {
			for {
				owner := fmt.Sprintf("w%d/1", k)
				got, err := f.s.ClaimDue(f.ctx, b, owner, at(3), 7, nil, nil)
				if err != nil {
					errs <- err
					return
				}
				if len(got) == 0 {
					return
				}
				// As a sweep does between windows: the outcomes of what it
				// claimed (else ClaimDue hands its own rows back).
				outs := make([]store.Outcome, len(got))
				for i, d := range got {
					outs[i] = store.Outcome{ContactID: d.ID, Status: store.SendSent}
				}
				if err := f.s.RecordOutcomes(f.ctx, b.ID, owner, outs, at(3)); err != nil {
					errs <- err
					return
				}
				mu.Lock()
				for _, c := range got {
					seen[c.ID]++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errs)
	f.must(errors.Join(func() (all []error) {
		for err := range errs {
			all = append(all, err)
		}
		return all
	}()...), "concurrent ClaimDue")
	for _, id := range ids {
		if seen[id] != 1 {
			f.t.Errorf("contact %s swept %d times, want exactly once", id, seen[id])
		}
	}
}

// A contact that left the audience while deferred is not sent: its row is
// dropped, like a page skipping an ineligible contact.
func testClaimDueDropsIneligible(f *fixture) {
	ids := f.subscribers("gone", 3)
	b := f.running("deferred gate", 0)
	f.deferAll(b, ids, at(1), at(2))
	f.must(f.unsubscribe("gone0001@example.org", at(2)), "Unsubscribe")
	got, err := f.s.ClaimDue(f.ctx, b, "w1/1", at(3), 100, nil, nil)
	f.must(err, "ClaimDue")
	if len(got) != 2 || got[0].ID != ids[0] || got[1].ID != ids[2] {
		f.t.Fatalf("ClaimDue = %+v; want the two contacts still eligible", got)
	}
	if _, err := f.s.GetSend(f.ctx, b.ID, ids[1]); err == nil {
		// The ledger helper may keep the row as 'unsubscribed' instead;
		// either way it must not be deferred or claimed any more.
		row, _ := f.s.GetSend(f.ctx, b.ID, ids[1])
		if row.Status == store.SendDeferred || row.Status == store.SendClaimed {
			f.t.Errorf("unsubscribed contact's row is still %s", row.Status)
		}
	}
	n, next, err := f.s.NextDue(f.ctx, b.ID, at(1000))
	f.must(err, "NextDue")
	if n != 0 || !next.IsZero() {
		f.t.Errorf("%d deferred rows left (the first due %v), want none", n, next)
	}
}

// A contact suppressed while deferred after a real attempt is not sent
// again, and its row stays, failed with its attempts and the last reply
// (deleted, the attempts vanished and status read "left out before their
// page": tester); one whose deferral was no attempt (a hold) is dropped,
// left out as a page would leave it.
func testClaimDueKeepsAttemptedIneligible(f *fixture) {
	ids := f.subscribers("supp", 3)
	b := f.running("deferred suppressed", 0)
	f.claim(b, ids, at(1))
	outs := []store.Outcome{
		{ContactID: ids[0], Status: store.SendDeferred, Error: "552 5.3.4 too large", RetryAt: at(2)},
		{ContactID: ids[1], Status: store.SendDeferred, Error: "held", RetryAt: at(2), NotAttempted: true},
		{ContactID: ids[2], Status: store.SendDeferred, Error: "451 4.3.0 try later", RetryAt: at(2)},
	}
	f.must(f.s.RecordOutcomes(f.ctx, b.ID, "w1/1", outs, at(1)), "RecordOutcomes")
	for _, id := range ids[:2] {
		_, err := f.s.Suppress(f.ctx, id, "operator", at(2))
		f.must(err, "Suppress")
	}
	got, err := f.s.ClaimDue(f.ctx, b, "w2/1", at(3), 100, nil, nil)
	f.must(err, "ClaimDue")
	if len(got) != 1 || got[0].ID != ids[2] {
		f.t.Fatalf("ClaimDue = %v; want the one still eligible", dueIDs(got))
	}
	row, err := f.s.GetSend(f.ctx, b.ID, ids[0])
	if err != nil || row.Status != store.SendFailed || row.Attempt != 1 || !strings.HasPrefix(row.Error, store.IneligibleBeforeRetry) || !strings.Contains(row.Error, "552 5.3.4") {
		f.t.Errorf("attempted, then suppressed: %+v (%v); want failed at attempt 1, saying why, with the last reply", row, err)
	}
	if _, err := f.s.GetSend(f.ctx, b.ID, ids[1]); !errors.Is(err, store.ErrNotFound) {
		f.t.Errorf("held (never attempted), then suppressed: row %v; want it dropped (left out)", err)
	}
}

// FailHalted fails, only while the broadcast is paused, the deferred rows
// whose refusal halted it (store.HaltedPrefix, also after a sweep's
// "deferred again: "), keeping the reply; a row deferred for a passing
// reason, and a sent one, are left as they are.
func testFailHalted(f *fixture) {
	ids := f.subscribers("halted", 6)
	b := f.running("halted", 0)
	f.claim(b, ids, at(1))
	lone := store.HaltedPrefix + "smtp data: 550 5.7.1 message rejected by the recipient's filter"
	f.must(f.s.RecordOutcomes(f.ctx, b.ID, "w1/1", []store.Outcome{
		{ContactID: ids[0], Status: store.SendDeferred, RetryAt: at(2), Error: lone},
		{ContactID: ids[1], Status: store.SendDeferred, RetryAt: at(2), Error: store.DeferredAgainPrefix + lone},
		{ContactID: ids[2], Status: store.SendDeferred, RetryAt: at(2), Error: "smtp rcpt: 451 4.3.0 try again later"},
		{ContactID: ids[3], Status: store.SendSent},
		// The marker's words in a server's reply are not the marker.
		{ContactID: ids[4], Status: store.SendDeferred, RetryAt: at(2), Error: "smtp rcpt: 451 4.3.0 " + store.HaltedPrefix + "try later"},
		// Released in doubt (its first attempt may have arrived), then
		// refused in a halting window: it must never end "failed".
		{ContactID: ids[5], Status: store.SendDeferred, RetryAt: at(1), Error: store.InDoubtResent},
	}, at(1)), "record")
	due, err := f.s.ClaimDue(f.ctx, b, "w2/1", at(1), 10, nil, nil)
	f.must(err, "ClaimDue")
	if len(due) != 1 || due[0].ID != ids[5] || !due[0].InDoubt {
		f.t.Fatalf("ClaimDue = %+v; want the row released in doubt", due)
	}
	f.must(f.s.RecordOutcomes(f.ctx, b.ID, "w2/1", []store.Outcome{
		{ContactID: ids[5], Status: store.SendDeferred, RetryAt: at(2), Error: lone},
	}, at(1)), "record the in-doubt row's halting refusal")
	_, _, err = f.s.FailHalted(f.ctx, b.ID, at(2))
	f.wantErr(err, store.ErrConflict, "FailHalted while running")
	if c := f.counts(b); c.Deferred != 5 || c.Failed != 0 {
		f.t.Errorf("after FailHalted while running: %+v; want nothing changed", c)
	}
	_, err = f.s.SetState(f.ctx, b.ID, []store.State{store.StateRunning}, store.StatePaused, "halted", at(3))
	f.must(err, "pause")
	failed, unknown, err := f.s.FailHalted(f.ctx, b.ID, at(4))
	f.must(err, "FailHalted")
	if failed != 2 || unknown != 1 {
		f.t.Errorf("FailHalted failed %d rows and ended %d unknown; want 2 failed and the in-doubt one unknown", failed, unknown)
	}
	for i, want := range []store.SendStatus{store.SendFailed, store.SendFailed, store.SendDeferred, store.SendSent, store.SendDeferred, store.SendUnknown} {
		row, err := f.s.GetSend(f.ctx, b.ID, ids[i])
		f.must(err, "GetSend")
		if row.Status != want {
			f.t.Errorf("row %d: %s (%q); want %s", i, row.Status, row.Error, want)
		}
		if want == store.SendFailed && (!strings.HasPrefix(row.Error, store.FailedHaltedPrefix) || !strings.HasSuffix(row.Error, lone)) {
			f.t.Errorf("row %d failed with %q; want %q and the reply", i, row.Error, store.FailedHaltedPrefix)
		}
		if want == store.SendUnknown && (!strings.HasPrefix(row.Error, store.InDoubtEndedPrefix) || !strings.HasSuffix(row.Error, lone)) {
			f.t.Errorf("row %d ended unknown with %q; want %q and the reply", i, row.Error, store.InDoubtEndedPrefix)
		}
	}
	if failed, unknown, err := f.s.FailHalted(f.ctx, b.ID, at(5)); err != nil || failed+unknown != 0 {
		f.t.Errorf("FailHalted again: %d, %d, %v; want none left", failed, unknown, err)
	}
}
