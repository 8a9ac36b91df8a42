package storetest

import (
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/oklog/ulid/v2"

	"github.com/rangecast/rangecast/internal/store"
)

var ledgerCases = []testCase{
	{"OutOfOrderEvents", testEventsOutOfOrder},
	{"DuplicateEventCountsOnce", testEventDuplicate},
	{"UnmatchedEventStored", testEventUnmatched},
	{"EventOnClaimedRow", testEventOnClaimedRow},
	{"BounceAndComplaintSuppress", testEventSuppresses},
	{"TransactionalEventsReachTheContact", testReceiptEvents},
	{"HardBounceAtSendSuppresses", testHardBounceAtSendSuppresses},
	{"ConcurrentEvents", testEventsConcurrent},
	{"UnsubscribeContact", testUnsubscribeContact},
	{"UnsubscribeByEmailMarksUnsent", testUnsubscribeEmailMarksUnsent},
	{"ProviderUnsubscribe", testProviderUnsubscribe},
	{"Reputation", testReputation},
	{"ReputationMatchesLedger", testReputationMatchesLedger},
	{"ReputationUnderConcurrentWrites", testReputationConcurrent},
	{"PurgeEvents", testPurgeEvents},
	{"FoldReputation", testFoldReputation},
}

// sentRows runs a broadcast to n fresh contacts and records each as sent.
func (f *fixture) sentRows(name string, n int) (store.Broadcast, []ulid.ULID) {
	f.t.Helper()
	ids := f.subscribers(name, n)
	b := f.running(name, 0)
	f.claim(b, ids, at(2))
	outcomes := make([]store.Outcome, len(ids))
	for i, id := range ids {
		outcomes[i] = store.Outcome{ContactID: id, Status: store.SendSent}
	}
	f.must(f.s.RecordOutcomes(f.ctx, b.ID, "w1/1", outcomes, at(3)), "RecordOutcomes(sent)")
	return b, ids
}

// eventSeq numbers events so every event of a case has its own id.
var eventSeq struct {
	sync.Mutex
	n int
}

// event records one event for contact c of broadcast b; the Message-ID is
// given without angle brackets, as providers echo it.
func (f *fixture) event(b store.Broadcast, c ulid.ULID, typ store.EventType, id string) store.EventResult {
	f.t.Helper()
	if id == "" {
		eventSeq.Lock()
		eventSeq.n++
		id = fmt.Sprintf("ev-%d", eventSeq.n)
		eventSeq.Unlock()
	}
	mid := strings.Trim(messageID(b.ID, c), "<>")
	res, err := f.s.RecordEvent(f.ctx, store.DeliveryEvent{
		Provider: "test", EventID: id, Type: typ, MessageID: mid, OccurredAt: at(4), Detail: "detail of " + string(typ),
	}, at(5))
	f.must(err, "RecordEvent(%s %s)", typ, id)
	return res
}

func (f *fixture) status(b store.Broadcast, c ulid.ULID) store.SendStatus {
	f.t.Helper()
	s, err := f.s.GetSend(f.ctx, b.ID, c)
	f.must(err, "GetSend")
	return s.Status
}

// Events arriving in any order end in the highest status reached, and an
// off-ramp ends the climb: opened before delivered stays opened, delivered
// after clicked stays clicked, a bounce after an open is a bounce and
// nothing moves a bounced row again.
func testEventsOutOfOrder(f *fixture) {
	b, ids := f.sentRows("order", 4)
	steps := []struct {
		contact int
		typ     store.EventType
		changed bool
		want    store.SendStatus
	}{
		{0, store.EventOpened, true, store.SendOpened},
		{0, store.EventDelivered, false, store.SendOpened},
		{1, store.EventClicked, true, store.SendClicked},
		{1, store.EventDelivered, false, store.SendClicked},
		{1, store.EventOpened, false, store.SendClicked},
		{2, store.EventOpened, true, store.SendOpened},
		{2, store.EventBounced, true, store.SendBounced},
		{2, store.EventDelivered, false, store.SendBounced},
		{2, store.EventClicked, false, store.SendBounced},
		{2, store.EventComplained, false, store.SendBounced},
		{3, store.EventDelivered, true, store.SendDelivered},
		{3, store.EventSoftBounced, false, store.SendDelivered},
		{3, store.EventUnsubscribed, true, store.SendUnsubscribed},
		{3, store.EventClicked, false, store.SendUnsubscribed},
	}
	for i, st := range steps {
		res := f.event(b, ids[st.contact], st.typ, "")
		if !res.Matched || res.Duplicate || res.Changed != st.changed || res.BroadcastID != b.ID || res.ContactID != ids[st.contact] {
			f.t.Errorf("step %d (%s on contact %d): result %+v, want matched, changed=%v", i, st.typ, st.contact, res, st.changed)
		}
		if got := f.status(b, ids[st.contact]); got != st.want {
			f.t.Fatalf("step %d (%s on contact %d): status %s, want %s", i, st.typ, st.contact, got, st.want)
		}
	}
	s, err := f.s.GetSend(f.ctx, b.ID, ids[2])
	f.must(err, "GetSend")
	if s.Error != "detail of bounced" {
		f.t.Errorf("bounced row's error = %q, want the bounce reply", s.Error)
	}
	// Every row went out: Counts.Sent keeps counting them whatever was
	// reported since.
	if c := f.counts(b); c.Sent != 4 {
		f.t.Errorf("Counts = %+v, want Sent 4 (opened, clicked, bounced, and the unsubscribed one, which went out too)", c)
	}
}

// The same event delivered twice (a provider's retry) is stored once and
// applied once; the same event id from another provider is another event.
func testEventDuplicate(f *fixture) {
	b, ids := f.sentRows("dup", 2)
	first := f.event(b, ids[0], store.EventBounced, "bounce-1")
	if first.Duplicate || !first.Changed || !first.Suppressed {
		f.t.Fatalf("first bounce: %+v", first)
	}
	again := f.event(b, ids[0], store.EventBounced, "bounce-1")
	if again != (store.EventResult{Duplicate: true}) {
		f.t.Errorf("second delivery of the same event: %+v, want only Duplicate", again)
	}
	// A duplicate id carrying another type (a forged or garbled retry) is
	// still the stored event: it changes nothing.
	if res := f.event(b, ids[1], store.EventComplained, "bounce-1"); !res.Duplicate {
		f.t.Errorf("another event under a stored id: %+v, want Duplicate", res)
	}
	if got := f.status(b, ids[1]); got != store.SendSent {
		f.t.Errorf("contact 1 status %s after a duplicate id, want sent", got)
	}
	other, err := f.s.RecordEvent(f.ctx, store.DeliveryEvent{
		Provider: "other", EventID: "bounce-1", Type: store.EventDelivered,
		MessageID: strings.Trim(messageID(b.ID, ids[1]), "<>"), OccurredAt: at(4),
	}, at(5))
	f.must(err, "RecordEvent(other provider)")
	if other.Duplicate || !other.Changed || other.Status != store.SendDelivered {
		f.t.Errorf("same id from another provider: %+v, want a new event", other)
	}
	r, err := f.s.Reputation(f.ctx, b.ID)
	f.must(err, "Reputation")
	if r.Bounced != 1 {
		f.t.Errorf("Reputation = %+v, want 1 bounce", r)
	}
}

// An event whose Message-ID is not one of ours, or names no ledger row, is
// stored (so its retry is recognised) and changes nothing.
func testEventUnmatched(f *fixture) {
	b, ids := f.sentRows("unmatched", 1)
	for i, mid := range []string{
		"20260203192638.000be97f99f8cea1@sample.mailgun.com",
		b.ID.String() + "." + f.ids.next().String() + "@mail.example.org", // our form, no such row
		b.ID.String() + "." + ids[0].String() + "@elsewhere.example.net",  // right ids, wrong domain
		"",
	} {
		ev := store.DeliveryEvent{Provider: "test", EventID: fmt.Sprintf("u-%d", i), Type: store.EventBounced, MessageID: mid, OccurredAt: at(4)}
		res, err := f.s.RecordEvent(f.ctx, ev, at(5))
		f.must(err, "RecordEvent(%q)", mid)
		if res != (store.EventResult{}) {
			f.t.Errorf("unmatched %q: %+v, want nothing matched or changed", mid, res)
		}
		res, err = f.s.RecordEvent(f.ctx, ev, at(6))
		f.must(err, "RecordEvent(%q) again", mid)
		if !res.Duplicate {
			f.t.Errorf("unmatched %q again: %+v, want Duplicate", mid, res)
		}
	}
	if got := f.status(b, ids[0]); got != store.SendSent {
		f.t.Errorf("status %s, want sent", got)
	}
	if n := len(f.eligible()); n != 1 {
		f.t.Errorf("%d eligible, want the contact still eligible", n)
	}
	// The Message-ID matches whatever the case and brackets.
	upper := "<" + strings.ToUpper(strings.Trim(messageID(b.ID, ids[0]), "<>")) + ">"
	res, err := f.s.RecordEvent(f.ctx, store.DeliveryEvent{Provider: "test", EventID: "upper", Type: store.EventDelivered, MessageID: upper, OccurredAt: at(4)}, at(5))
	f.must(err, "RecordEvent(upper case)")
	if !res.Changed || res.Status != store.SendDelivered {
		f.t.Errorf("Message-ID %s: %+v, want delivered", upper, res)
	}
	_, err = f.s.RecordEvent(f.ctx, store.DeliveryEvent{Provider: "test", EventID: "x", Type: "exploded", MessageID: upper}, at(5))
	if err == nil {
		f.t.Error("RecordEvent accepted an unknown event type")
	}
}

// A delivery report can arrive before the worker records its outcome: it
// proves the message went out, and the late outcome and release change
// nothing.
func testEventOnClaimedRow(f *fixture) {
	ids := f.subscribers("early", 2)
	b := f.running("early", 0)
	f.claim(b, ids, at(2))
	if res := f.event(b, ids[0], store.EventDelivered, ""); !res.Changed || res.Status != store.SendDelivered {
		f.t.Fatalf("delivered on a claimed row: %+v", res)
	}
	f.must(f.s.RecordOutcomes(f.ctx, b.ID, "w1/1", []store.Outcome{{ContactID: ids[0], Status: store.SendSent}}, at(6)), "RecordOutcomes")
	f.must(f.s.Release(f.ctx, b.ID, "w1/1", ids[:1]), "Release")
	if got := f.status(b, ids[0]); got != store.SendDelivered {
		f.t.Errorf("status %s after a late outcome and release, want delivered", got)
	}
	if n := f.pending(b); n != 1 {
		f.t.Errorf("claimed = %d, want 1 (only the other claim)", n)
	}
	// A failed row is terminal: no report moves it.
	f.must(f.s.RecordOutcomes(f.ctx, b.ID, "w1/1", []store.Outcome{{ContactID: ids[1], Status: store.SendFailed, Error: "550 no such user"}}, at(6)), "RecordOutcomes(failed)")
	if res := f.event(b, ids[1], store.EventDelivered, ""); res.Changed {
		f.t.Errorf("delivered moved a failed row: %+v", res)
	}
}

// A hard bounce or a complaint suppresses the contact for every later
// broadcast; a soft bounce neither moves the row nor suppresses.
func testEventSuppresses(f *fixture) {
	b, ids := f.sentRows("supp", 3)
	if res := f.event(b, ids[0], store.EventSoftBounced, ""); res.Changed || res.Suppressed {
		f.t.Errorf("soft bounce: %+v, want nothing changed", res)
	}
	if res := f.event(b, ids[1], store.EventBounced, ""); !res.Suppressed {
		f.t.Errorf("hard bounce: %+v, want suppressed", res)
	}
	if d, err := f.s.GetContact(f.ctx, ids[1]); err != nil || !strings.HasPrefix(d.SuppressedReason, "hard bounce reported by ") || d.SuppressedAt.IsZero() {
		f.t.Errorf("hard-bounced contact shows reason %q at %v (err %v); want the bounce and its time", d.SuppressedReason, d.SuppressedAt, err)
	}
	f.event(b, ids[2], store.EventDelivered, "")
	if res := f.event(b, ids[2], store.EventComplained, ""); !res.Suppressed || res.Status != store.SendComplained {
		f.t.Errorf("complaint: %+v, want complained and suppressed", res)
	}
	eligible := f.eligible()
	if _, ok := eligible[ids[0]]; !ok {
		f.t.Error("soft-bounced contact no longer eligible")
	}
	for _, id := range ids[1:] {
		if _, ok := eligible[id]; ok {
			f.t.Errorf("contact %s still eligible after a hard bounce or complaint", id)
		}
	}
	// An import cannot undo it.
	f.upsert([]store.Contact{{ID: f.ids.next(), Email: "supp0001@example.org", Name: "x", Subscribed: true}}, at(9))
	if _, ok := f.eligible()[ids[1]]; ok {
		f.t.Error("re-import lifted a bounce suppression")
	}
}

// Many events for one row applied at once, in every order: the row ends at
// the highest status any of them reaches.
func testEventsConcurrent(f *fixture) {
	b, ids := f.sentRows("conc", 3)
	types := []store.EventType{store.EventDelivered, store.EventOpened, store.EventClicked, store.EventOpened, store.EventDelivered, store.EventClicked}
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for k, id := range ids {
		for i, typ := range types {
			wg.Go(func() {
				_, err := f.s.RecordEvent(f.ctx, store.DeliveryEvent{
					Provider: "test", EventID: fmt.Sprintf("c-%d-%d", k, i), Type: typ,
					MessageID: strings.Trim(messageID(b.ID, id), "<>"), OccurredAt: at(4),
				}, at(5))
				if err != nil {
					errs <- err
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		f.must(err, "concurrent RecordEvent")
	}
	for _, id := range ids {
		if got := f.status(b, id); got != store.SendClicked {
			f.t.Errorf("status %s after concurrent events, want clicked", got)
		}
	}
}

// UnsubscribeContact: the contact leaves the audience; its deferred rows
// become unsubscribed (never sent); a claimed row keeps its claim, since the
// message may be on the wire and its outcome is the worker's to record; the
// broadcast it unsubscribed from records it; rows already sent elsewhere or
// failed keep their status.
func testUnsubscribeContact(f *fixture) {
	ids := f.subscribers("u", 2)
	who, other := ids[0], ids[1]
	from := f.running("from", 0)   // sent, unsubscribed from here
	earlier := f.running("old", 0) // sent, another broadcast
	claimed := f.running("inflight", 0)
	deferred := f.running("deferred", 0)
	failed := f.running("failed", 0)
	for _, b := range []store.Broadcast{from, earlier, claimed, deferred, failed} {
		f.claim(b, ids, at(2))
	}
	record := func(b store.Broadcast, o store.Outcome) {
		f.must(f.s.RecordOutcomes(f.ctx, b.ID, "w1/1", []store.Outcome{o}, at(3)), "RecordOutcomes")
	}
	for _, id := range ids {
		record(from, store.Outcome{ContactID: id, Status: store.SendSent})
		record(earlier, store.Outcome{ContactID: id, Status: store.SendSent})
		record(deferred, store.Outcome{ContactID: id, Status: store.SendDeferred, RetryAt: at(60)})
		record(failed, store.Outcome{ContactID: id, Status: store.SendFailed, Error: "550"})
	}

	f.must(f.s.UnsubscribeContact(f.ctx, who, from.ID, at(10)), "UnsubscribeContact")
	want := map[ulid.ULID]store.SendStatus{
		from.ID: store.SendUnsubscribed, earlier.ID: store.SendSent, claimed.ID: store.SendClaimed,
		deferred.ID: store.SendUnsubscribed, failed.ID: store.SendFailed,
	}
	check := func(when string) {
		f.t.Helper()
		for _, b := range []store.Broadcast{from, earlier, claimed, deferred, failed} {
			if got := f.status(b, who); got != want[b.ID] {
				f.t.Errorf("%s: %s row %s, want %s", when, b.Name, got, want[b.ID])
			}
		}
		// The other contact is untouched.
		if got := f.status(claimed, who); got == store.SendUnsubscribed {
			f.t.Errorf("%s: a claim in flight was marked unsubscribed", when)
		}
		if got := f.status(claimed, other); got != store.SendClaimed {
			f.t.Errorf("%s: other contact's claim is %s", when, got)
		}
		if got := f.status(deferred, other); got != store.SendDeferred {
			f.t.Errorf("%s: other contact's deferred row is %s", when, got)
		}
	}
	check("after unsubscribe")
	if _, ok := f.eligible()[who]; ok {
		f.t.Error("unsubscribed contact still eligible")
	}
	if _, ok := f.eligible()[other]; !ok {
		f.t.Error("the other contact is no longer eligible")
	}
	// The worker that held the claim records that the message went out:
	// the ledger says so.
	record(claimed, store.Outcome{ContactID: who, Status: store.SendSent})
	f.must(f.s.Release(f.ctx, claimed.ID, "w1/1", []ulid.ULID{who}), "Release")
	if n := f.pending(claimed); n != 1 {
		f.t.Errorf("claimed = %d, want 1 (the other contact's claim)", n)
	}
	want[claimed.ID] = store.SendSent
	// Replayed: nothing further changes, no error.
	f.must(f.s.UnsubscribeContact(f.ctx, who, from.ID, at(11)), "UnsubscribeContact again")
	check("after a replay")
	// An engagement report after the unsubscribe cannot climb back.
	if res := f.event(from, who, store.EventClicked, ""); res.Changed {
		f.t.Errorf("clicked moved an unsubscribed row: %+v", res)
	}
	f.wantErr(f.s.UnsubscribeContact(f.ctx, f.ids.next(), from.ID, at(12)), store.ErrNotFound, "UnsubscribeContact(unknown)")
	// Without a source broadcast, only unsent rows change.
	f.must(f.s.UnsubscribeContact(f.ctx, other, ulid.ULID{}, at(13)), "UnsubscribeContact(no source)")
	if got := f.status(from, other); got != store.SendSent {
		f.t.Errorf("sent row of a contact unsubscribed without a source: %s, want sent", got)
	}
	if got := f.status(deferred, other); got != store.SendUnsubscribed {
		f.t.Errorf("deferred row: %s, want unsubscribed", got)
	}
}

// Unsubscribe by address has the same ledger effect on unsent rows.
func testUnsubscribeEmailMarksUnsent(f *fixture) {
	ids := f.subscribers("byemail", 2)
	b := f.running("byemail", 0)
	f.claim(b, ids, at(2))
	f.must(f.s.RecordOutcomes(f.ctx, b.ID, "w1/1", []store.Outcome{
		{ContactID: ids[0], Status: store.SendDeferred, RetryAt: at(60)},
		{ContactID: ids[1], Status: store.SendDeferred, RetryAt: at(60)},
	}, at(2)), "RecordOutcomes")
	f.must(f.unsubscribe("BYEMAIL0000@example.org", at(3)), "Unsubscribe")
	if got := f.status(b, ids[0]); got != store.SendUnsubscribed {
		f.t.Errorf("deferred row of an unsubscribed address: %s, want unsubscribed", got)
	}
	if got := f.status(b, ids[1]); got != store.SendDeferred {
		f.t.Errorf("other deferred row: %s, want deferred", got)
	}
	if _, ok := f.eligible()[ids[0]]; ok {
		f.t.Error("unsubscribed address still eligible")
	}
}

// An unsubscribe reported by the provider (its own link, a mailbox's
// button) unsubscribes the contact, as ours does.
func testProviderUnsubscribe(f *fixture) {
	b, ids := f.sentRows("provunsub", 2)
	if res := f.event(b, ids[0], store.EventUnsubscribed, ""); res.Status != store.SendUnsubscribed {
		f.t.Errorf("unsubscribed event: %+v, want the row unsubscribed", res)
	}
	eligible := f.eligible()
	if _, ok := eligible[ids[0]]; ok {
		f.t.Error("contact unsubscribed at the provider is still eligible for the next broadcast")
	}
	if _, ok := eligible[ids[1]]; !ok {
		f.t.Error("the other contact is no longer eligible")
	}
}

func testReputation(f *fixture) {
	b, ids := f.sentRows("rep", 10)
	f.event(b, ids[0], store.EventBounced, "")
	f.event(b, ids[1], store.EventBounced, "")
	f.event(b, ids[2], store.EventSoftBounced, "")
	f.event(b, ids[3], store.EventDelivered, "")
	f.event(b, ids[4], store.EventOpened, "")
	f.event(b, ids[5], store.EventClicked, "")
	f.event(b, ids[6], store.EventComplained, "")
	f.event(b, ids[7], store.EventUnsubscribed, "")
	r, err := f.s.Reputation(f.ctx, b.ID)
	f.must(err, "Reputation")
	// Accepted: all 10 (the one unsubscribed via the provider went out
	// too); delivered: delivered, opened, clicked, complained.
	want := store.Reputation{Accepted: 10, Delivered: 4, Bounced: 2, Complained: 1}
	if r != want {
		f.t.Errorf("Reputation = %+v, want %+v", r, want)
	}
	other := f.running("empty", 0)
	r, err = f.s.Reputation(f.ctx, other.ID)
	f.must(err, "Reputation(empty)")
	if r != (store.Reputation{}) {
		f.t.Errorf("Reputation of a broadcast with no rows = %+v", r)
	}
}

// ledgerReputation counts Reputation the slow way, row by row: Accepted is
// Counts.Sent (the accepted flag), the rest is each row's status as
// store.Reputation documents it.
func (f *fixture) ledgerReputation(b store.Broadcast, ids []ulid.ULID) store.Reputation {
	f.t.Helper()
	r := store.Reputation{Accepted: f.counts(b).Sent}
	for _, id := range ids {
		s, err := f.s.GetSend(f.ctx, b.ID, id)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		f.must(err, "GetSend")
		switch s.Status {
		case store.SendDelivered, store.SendOpened, store.SendClicked:
			r.Delivered++
		case store.SendComplained:
			r.Delivered++
			r.Complained++
		case store.SendBounced:
			r.Bounced++
		}
	}
	return r
}

// sameReputation fails unless Reputation agrees with the ledger counted
// row by row.
func (f *fixture) sameReputation(when string, b store.Broadcast, ids []ulid.ULID) {
	f.t.Helper()
	got, err := f.s.Reputation(f.ctx, b.ID)
	f.must(err, "Reputation")
	if want := f.ledgerReputation(b, ids); got != want {
		f.t.Fatalf("%s: Reputation = %+v, the ledger counts %+v", when, got, want)
	}
}

// Reputation is kept as running sums (it must not count the ledger on
// every alarm check): after every kind of change to a row, in every order,
// repeated, it still agrees with the ledger counted row by row.
func testReputationMatchesLedger(f *fixture) {
	ids := f.subscribers("repsum", 16)
	b := f.running("repsum", 0)
	other := f.running("repsum-other", 0)
	check := func(when string) {
		f.t.Helper()
		f.sameReputation(when, b, ids)
		f.sameReputation(when+" (other broadcast)", other, ids)
	}
	check("before any claim")
	f.claim(b, ids, at(2))
	f.claim(other, ids[:4], at(2))
	check("claimed")
	// A delivery report before the worker's outcome, a late outcome for
	// that row, and a release that finds it no longer claimed.
	f.event(b, ids[0], store.EventDelivered, "")
	check("delivered while claimed")
	outcomes := []store.Outcome{
		{ContactID: ids[8], Status: store.SendFailed, Error: "550 no such user"},
		{ContactID: ids[9], Status: store.SendDeferred, RetryAt: at(30)},
		{ContactID: ids[10], Status: store.SendUnknown},
		{ContactID: ids[14], Status: store.SendDeferred, RetryAt: at(30)},
		{ContactID: ids[15], Status: store.SendDeferred, RetryAt: at(30)},
	}
	for _, id := range ids[:8] {
		outcomes = append(outcomes, store.Outcome{ContactID: id, Status: store.SendSent})
	}
	f.must(f.s.RecordOutcomes(f.ctx, b.ID, "w1/1", outcomes, at(3)), "RecordOutcomes")
	f.must(f.s.RecordOutcomes(f.ctx, b.ID, "w1/1", outcomes, at(3)), "RecordOutcomes again")
	f.must(f.s.Release(f.ctx, b.ID, "w1/1", ids[:1]), "Release")
	check("outcomes")
	f.must(f.s.RecordOutcomes(f.ctx, other.ID, "w1/1", []store.Outcome{
		{ContactID: ids[0], Status: store.SendSent}, {ContactID: ids[1], Status: store.SendSent},
	}, at(3)), "RecordOutcomes(other)")
	f.must(f.s.Release(f.ctx, other.ID, "w1/1", ids[2:4]), "Release(other)")
	check("other broadcast's outcomes")

	steps := []struct {
		what    string
		contact int
		typ     store.EventType
		id      string
	}{
		{"open before delivered", 1, store.EventOpened, ""},
		{"delivered after open", 1, store.EventDelivered, ""},
		{"complaint after open", 1, store.EventComplained, ""},
		{"open after complaint", 1, store.EventOpened, ""},
		{"delivered", 2, store.EventDelivered, ""},
		{"bounce after delivered", 2, store.EventBounced, "bounce-2"},
		{"the same bounce again", 2, store.EventBounced, "bounce-2"},
		{"another bounce of a bounced row", 2, store.EventBounced, ""},
		{"bounce of a sent row", 3, store.EventBounced, "bounce-3"},
		{"a duplicate id on another row", 4, store.EventComplained, "bounce-3"},
		{"click", 4, store.EventClicked, ""},
		{"provider unsubscribe after click", 4, store.EventUnsubscribed, ""},
		{"complaint after unsubscribe", 4, store.EventComplained, ""},
		{"soft bounce", 6, store.EventSoftBounced, ""},
		{"complaint without a delivery report", 6, store.EventComplained, ""},
		{"delivered on a failed row", 8, store.EventDelivered, ""},
		{"delivered on a deferred row", 9, store.EventDelivered, ""},
		{"bounce on an unknown row", 10, store.EventBounced, ""},
		{"complaint on a claimed row", 11, store.EventComplained, ""},
		{"delivered on a claimed row", 12, store.EventDelivered, ""},
	}
	for _, st := range steps {
		f.event(b, ids[st.contact], st.typ, st.id)
		check(st.what)
	}
	f.must(f.s.RecordOutcomes(f.ctx, b.ID, "w1/1", []store.Outcome{{ContactID: ids[11], Status: store.SendSent}}, at(6)), "late outcome")
	check("late outcome of a complained row")

	// Our own unsubscribe link: from a delivered row, from a sent row,
	// repeated, and without a source broadcast (only deferred rows move).
	f.event(b, ids[5], store.EventDelivered, "")
	f.must(f.s.UnsubscribeContact(f.ctx, ids[5], b.ID, at(7)), "UnsubscribeContact(delivered)")
	check("unsubscribe from a delivered row")
	f.must(f.s.UnsubscribeContact(f.ctx, ids[7], b.ID, at(7)), "UnsubscribeContact(sent)")
	f.must(f.s.UnsubscribeContact(f.ctx, ids[7], b.ID, at(8)), "UnsubscribeContact(sent) again")
	check("unsubscribe from a sent row")
	f.must(f.s.UnsubscribeContact(f.ctx, ids[3], other.ID, at(8)), "UnsubscribeContact(released row)")
	f.must(f.unsubscribe("repsum0014@example.org", at(8)), "Unsubscribe(deferred)")
	check("unsubscribe of a deferred row")

	// Deferred rows swept: the one whose contact bounced elsewhere is
	// dropped, the other claimed again and sent on the second attempt.
	f.claim(other, ids[15:], at(8))
	f.event(other, ids[15], store.EventBounced, "")
	due, err := f.s.ClaimDue(f.ctx, b, "w1/1", at(30), 10, nil, nil)
	f.must(err, "ClaimDue")
	check("deferred rows swept")
	for _, d := range due {
		f.must(f.s.RecordOutcomes(f.ctx, b.ID, "w1/1", []store.Outcome{{ContactID: d.ID, Status: store.SendSent}}, at(31)), "RecordOutcomes(swept)")
	}
	check("swept rows sent")
	if r, err := f.s.Reputation(f.ctx, b.ID); err != nil || r.Accepted == 0 || r.Delivered == 0 || r.Bounced == 0 || r.Complained == 0 {
		f.t.Errorf("Reputation = %+v (err %v): the case should leave every sum above zero", r, err)
	}
}

// Outcomes and events written at once by many writers, as page workers and
// webhooks do, leave sums that agree with the ledger.
func testReputationConcurrent(f *fixture) {
	ids := f.subscribers("repconc", 120)
	b := f.running("repconc", 0)
	f.claim(b, ids, at(2))
	types := []store.EventType{store.EventDelivered, store.EventOpened, store.EventClicked, store.EventBounced, store.EventComplained, store.EventUnsubscribed, store.EventDelivered}
	var wg sync.WaitGroup
	errs := make(chan error, len(ids)*len(types))
	// Outcomes in windows of 10, as workers write them, while events for
	// the same rows arrive: some before their outcome, some after.
	for w := range 12 {
		wg.Go(func() {
			var outs []store.Outcome
			for _, id := range ids[w*10 : w*10+10] {
				outs = append(outs, store.Outcome{ContactID: id, Status: store.SendSent})
			}
			if err := f.s.RecordOutcomes(f.ctx, b.ID, "w1/1", outs, at(3)); err != nil {
				errs <- err
			}
		})
	}
	for k, id := range ids {
		for i := range 2 {
			typ := types[(k+i*3)%len(types)]
			wg.Go(func() {
				_, err := f.s.RecordEvent(f.ctx, store.DeliveryEvent{
					Provider: "test", EventID: fmt.Sprintf("rc-%d-%d", k, i), Type: typ,
					MessageID: strings.Trim(messageID(b.ID, id), "<>"), OccurredAt: at(4),
				}, at(5))
				if err != nil {
					errs <- err
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		f.must(err, "concurrent write")
	}
	f.sameReputation("after concurrent outcomes and events", b, ids)
}

// PurgeEvents deletes events received before the cutoff, in batches; the
// ledger rows they moved keep their status.
func testPurgeEvents(f *fixture) {
	b, ids := f.sentRows("purge", 3)
	for i, id := range ids {
		_, err := f.s.RecordEvent(f.ctx, store.DeliveryEvent{
			Provider: "test", EventID: fmt.Sprintf("p-%d", i), Type: store.EventDelivered,
			MessageID: strings.Trim(messageID(b.ID, id), "<>"), OccurredAt: at(4),
		}, at(5+10*i)) // received at 5, 15, 25
		f.must(err, "RecordEvent %d", i)
	}
	f.purged("first batch (the limit)", 1)(f.s.PurgeEvents(f.ctx, at(20), 1))
	f.purged("second batch (the other event before the cutoff)", 1)(f.s.PurgeEvents(f.ctx, at(20), 10))
	for _, id := range ids {
		if got := f.status(b, id); got != store.SendDelivered {
			f.t.Errorf("status after the purge = %s, want delivered (the ledger keeps it)", got)
		}
	}
	// The kept event is still recognised as a repeat; a purged one is
	// stored again and, going through the rank guard, changes nothing.
	kept := store.DeliveryEvent{Provider: "test", EventID: "p-2", Type: store.EventDelivered, MessageID: strings.Trim(messageID(b.ID, ids[2]), "<>"), OccurredAt: at(4)}
	if res, err := f.s.RecordEvent(f.ctx, kept, at(30)); err != nil || !res.Duplicate {
		f.t.Errorf("kept event again: %+v, %v; want Duplicate", res, err)
	}
	purged := store.DeliveryEvent{Provider: "test", EventID: "p-0", Type: store.EventDelivered, MessageID: strings.Trim(messageID(b.ID, ids[0]), "<>"), OccurredAt: at(4)}
	if res, err := f.s.RecordEvent(f.ctx, purged, at(30)); err != nil || res.Duplicate || res.Changed {
		f.t.Errorf("purged event again: %+v, %v; want stored, changing nothing", res, err)
	}
}

// FoldReputation folds every broadcast's pending changes in batches, and the
// sums read afterwards are still exactly the ledger's.
func testFoldReputation(f *fixture) {
	var bs []store.Broadcast
	var all [][]ulid.ULID
	for k := range 2 {
		b, ids := f.sentRows(fmt.Sprintf("fold-%d", k), 3)
		for i, id := range ids {
			_, err := f.s.RecordEvent(f.ctx, store.DeliveryEvent{
				Provider: "test", EventID: fmt.Sprintf("f-%d-%d", k, i), Type: []store.EventType{store.EventDelivered, store.EventBounced, store.EventComplained}[i],
				MessageID: strings.Trim(messageID(b.ID, id), "<>"), OccurredAt: at(4),
			}, at(5))
			f.must(err, "RecordEvent")
		}
		bs, all = append(bs, b), append(all, ids)
	}
	for range 20 {
		n, err := f.s.FoldReputation(f.ctx, 2)
		f.must(err, "FoldReputation")
		if n > 2 {
			f.t.Fatalf("FoldReputation(limit 2) folded %d", n)
		}
		if n == 0 {
			break
		}
	}
	if n, err := f.s.FoldReputation(f.ctx, 2); err != nil || n != 0 {
		f.t.Errorf("FoldReputation after everything was folded = %d, %v; want 0", n, err)
	}
	for k, b := range bs {
		f.sameReputation("after FoldReputation", b, all[k])
	}
}

// A recipient the SMTP server refused for good at send time (550 5.1.1,
// store.Outcome.HardBounce) is suppressed, as after a bounce a webhook
// reports, so the next broadcast skips the address. The reputation's
// sums over the ledger's statuses count nothing for it (the row is
// failed), and its Refused counts it once, also when the write is
// repeated (the bounce alarm reads it); a failure that says nothing of the
// address (a policy refusal, HardBounce false) suppresses nobody; an
// earlier suppression keeps its reason.
func testHardBounceAtSendSuppresses(f *fixture) {
	ids := f.subscribers("hard", 4)
	b := f.running("hard", 0)
	f.claim(b, ids, at(1))
	_, err := f.s.Suppress(f.ctx, ids[3], "complained by phone", at(0))
	f.must(err, "Suppress")
	outcomes := []store.Outcome{
		{ContactID: ids[0], Status: store.SendFailed, Error: "smtp rcpt: 550 5.1.1 no such user", HardBounce: true},
		{ContactID: ids[1], Status: store.SendFailed, Error: "smtp data: 554 5.7.1 message rejected as spam"},
		{ContactID: ids[2], Status: store.SendSent},
		{ContactID: ids[3], Status: store.SendFailed, Error: "smtp rcpt: 550 5.1.1 gone", HardBounce: true},
	}
	f.must(f.s.RecordOutcomes(f.ctx, b.ID, "w1/1", outcomes, at(2)), "RecordOutcomes")
	f.must(f.s.RecordOutcomes(f.ctx, b.ID, "w1/1", outcomes, at(3)), "RecordOutcomes (repeated)")
	r, err := f.s.Reputation(f.ctx, b.ID)
	f.must(err, "Reputation")
	if r != (store.Reputation{Accepted: 1, Refused: 2}) {
		f.t.Errorf("Reputation = %+v; want 1 accepted and 2 refused at send, once however often the write is repeated (the bounce alarm's refusals; the policy refusal is not one)", r)
	}
	for i, want := range []struct {
		suppressed bool
		reason     string
	}{{true, store.HardBouncePrefix + "smtp rcpt: 550 5.1.1 no such user"}, {false, ""}, {false, ""}, {true, "complained by phone"}} {
		d, err := f.s.GetContact(f.ctx, ids[i])
		f.must(err, "GetContact")
		if d.Suppressed != want.suppressed || d.SuppressedReason != want.reason {
			f.t.Errorf("contact %d: suppressed %v %q; want %v %q", i, d.Suppressed, d.SuppressedReason, want.suppressed, want.reason)
		}
	}
	if c := f.counts(b); c != (store.Counts{Sent: 1, Failed: 3}) {
		f.t.Errorf("Counts = %+v; want 1 sent, 3 failed (a hard bounce at send is a failure)", c)
	}
}

// A hard bounce or complaint about a transactional message (its Message-ID
// is the receipt's) suppresses the contact with that address for
// broadcasts, and a provider's unsubscribe unsubscribes them, as one about
// a broadcast does: it was stored unmatched and changed nothing (tester).
// A soft bounce, an engagement event, or a message to an address that is
// no contact changes nothing.
func testReceiptEvents(f *fixture) {
	ids := f.subscribers("txev", 4)
	r := func(i int, key string) string {
		return f.receiptFor(key, fmt.Sprintf(" TXEV%04d@Example.org", i)[1:], "{}", at(1)).MessageID
	}
	ev := func(mid string, typ store.EventType) store.EventResult {
		f.t.Helper()
		res, err := f.s.RecordEvent(f.ctx, store.DeliveryEvent{Provider: "test", EventID: "tx-" + mid + "-" + string(typ), Type: typ,
			MessageID: "<" + mid + ">", Detail: "550 5.1.1 no such user", OccurredAt: at(2)}, at(3))
		f.must(err, "RecordEvent(%s, %s)", mid, typ)
		return res
	}
	if res := ev(r(0, "a"), store.EventBounced); !res.Receipt || res.Matched || !res.Suppressed || res.ContactID != ids[0] {
		f.t.Errorf("hard bounce of a receipt: %+v; want the contact suppressed", res)
	}
	if d, err := f.s.GetContact(f.ctx, ids[0]); err != nil || !strings.HasPrefix(d.SuppressedReason, "hard bounce reported by ") {
		f.t.Errorf("contact after a receipt's hard bounce: %q, %v", d.SuppressedReason, err)
	}
	if res := ev(r(1, "b"), store.EventComplained); !res.Suppressed {
		f.t.Errorf("complaint about a receipt: %+v; want the contact suppressed", res)
	}
	ev(r(2, "c"), store.EventUnsubscribed)
	for _, typ := range []store.EventType{store.EventSoftBounced, store.EventDelivered, store.EventOpened} {
		if res := ev(r(3, "d-"+string(typ)), typ); res.Suppressed || res.Changed {
			f.t.Errorf("%s about a receipt: %+v; want nothing changed", typ, res)
		}
	}
	if res := ev(f.receiptFor("e", "nobody@example.org", "{}", at(1)).MessageID, store.EventBounced); res.Receipt || res.Suppressed {
		f.t.Errorf("bounce of a receipt to no contact: %+v; want it unmatched", res)
	}
	if res := ev("tx."+f.ids.next().String()+"@mail.example.org", store.EventBounced); res.Receipt || res.Matched {
		f.t.Errorf("bounce of an unknown receipt: %+v; want it unmatched", res)
	}
	eligible := f.eligible()
	for i, want := range []bool{false, false, false, true} {
		if _, ok := eligible[ids[i]]; ok != want {
			f.t.Errorf("contact %d eligible: %v; want %v", i, ok, want)
		}
	}
}
