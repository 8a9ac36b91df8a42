package storetest

import (
	"context"
	"strings"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/rangecast/rangecast/internal/store"
)

// TextSearcher is what the erasure cases need of a store besides
// store.Store: every table and every column of its schema (text, JSON and
// binary ones as text), searched case-insensitively for needle, found by
// walking the schema's catalog, not from a list kept by hand. It returns
// "table.column" for each column with a hit. Implementations provide it in
// their test files.
type TextSearcher interface {
	SearchText(ctx context.Context, needle string) ([]string, error)
}

var eraseCases = []testCase{
	{"NoTraceLeft", testEraseNoTrace},
	{"ImportedAgainIsSuppressed", testEraseReimport},
	{"ClaimAfterErasure", testEraseBeforeClaim},
	{"UnknownAddress", testEraseUnknown},
	{"RacesClaims", testEraseRacesClaims},
	{"InDoubtIsNotFailed", testEraseInDoubt},
	{"InDoubtOutlivesAResend", testEraseInDoubtAfterResend},
	{"UnmatchedEvents", testEraseUnmatchedEvents},
}

// The erased person, spelled with capitals in both parts so that the
// lowercase and canonical forms differ from what was given.
const (
	erasedEmail  = "Zed.Quixote+Erasure@Erasure-Trace.example"
	erasedName   = "Zedediah Quixote"
	erasedLocal  = "Zed.Quixote+Erasure"
	erasedDomain = "erasure-trace.example"
)

// needles are every form of the erased person the store must not keep.
var needles = []string{erasedEmail, strings.ToLower(erasedEmail), "Zed.Quixote+Erasure@erasure-trace.example", erasedLocal, erasedDomain, erasedName}

func (f *fixture) searchAll() map[string][]string {
	f.t.Helper()
	ts, ok := f.s.(TextSearcher)
	if !ok {
		f.t.Fatalf("%T does not implement storetest.TextSearcher (SearchText in its tests)", f.s)
	}
	hits := map[string][]string{}
	for _, n := range needles {
		cols, err := ts.SearchText(f.ctx, n)
		f.must(err, "SearchText(%q)", n)
		if len(cols) > 0 {
			hits[n] = cols
		}
	}
	return hits
}

// Every place the person's data can be (contact, attributes, segment, the
// ledger of four broadcasts in four states, delivery events matched and
// not, transactional receipts with payload and replies) holds it before;
// after Erase no table and no column holds any form of it, the counts by
// status are those of before (a deferred row, which can never be retried,
// becomes failed), a send in flight still records its outcome, and the
// other contacts are untouched.
func testEraseNoTrace(f *fixture) {
	ctx := f.ctx
	seg, err := f.s.CreateSegment(ctx, "vip", at(0))
	f.must(err, "CreateSegment")
	zed := store.Contact{ID: f.ids.next(), Email: erasedEmail, Name: erasedName, Subscribed: true,
		Attributes: map[string]any{"nick": "zq", "address": erasedName + ", 1 Windmill Lane"}}
	ann := f.contact("ann@example.org")
	ids := f.upsert([]store.Contact{zed, ann}, at(0))
	_, err = f.s.AddMembers(ctx, seg.ID, ids)
	f.must(err, "AddMembers")

	// Four broadcasts: sent (and delivered), failed with a reply quoting
	// the address, deferred, and claimed with the send in flight.
	var bs [4]store.Broadcast
	for i := range bs {
		bs[i] = f.running("b"+string(rune('1'+i)), 0)
		claims := []store.Claim{{ContactID: ids[0], Email: erasedEmail, MessageID: messageID(bs[i].ID, ids[0])},
			{ContactID: ids[1], Email: ann.Email, MessageID: messageID(bs[i].ID, ids[1])}}
		got, err := f.s.Claim(ctx, bs[i].ID, "w1/1", claims, at(2))
		f.must(err, "Claim")
		if len(got) != 2 {
			f.t.Fatalf("Claim: %d of 2", len(got))
		}
	}
	reply := "550 5.1.1 <" + strings.ToLower(erasedEmail) + ">: Recipient address rejected"
	outcomes := [][]store.Outcome{
		{{ContactID: ids[0], Status: store.SendSent}, {ContactID: ids[1], Status: store.SendSent}},
		{{ContactID: ids[0], Status: store.SendFailed, Error: reply}, {ContactID: ids[1], Status: store.SendSent}},
		{{ContactID: ids[0], Status: store.SendDeferred, Error: "421 try later, " + erasedEmail, RetryAt: at(60)}, {ContactID: ids[1], Status: store.SendSent}},
		{{ContactID: ids[1], Status: store.SendSent}},
	}
	for i, o := range outcomes {
		f.must(f.s.RecordOutcomes(ctx, bs[i].ID, "w1/1", o, at(3)), "RecordOutcomes")
	}
	for i, ev := range []store.DeliveryEvent{
		{Provider: "test", EventID: "d-1", Type: store.EventDelivered, MessageID: strings.Trim(messageID(bs[0].ID, ids[0]), "<>"),
			Detail: "delivered to " + erasedEmail},
		{Provider: "test", EventID: "o-1", Type: store.EventOpened, MessageID: strings.Trim(messageID(bs[0].ID, ids[0]), "<>"),
			Detail: "opened by " + strings.ToLower(erasedEmail)},
		{Provider: "test", EventID: "x-1", Type: store.EventDelivered, MessageID: "elsewhere-1@mail.example.org",
			Detail: "delivered to " + strings.ToUpper(erasedEmail)},
	} {
		ev.OccurredAt = at(4 + i)
		_, err := f.s.RecordEvent(ctx, ev, at(4+i))
		f.must(err, "RecordEvent(%s)", ev.EventID)
	}
	// A reason written before reasons named contacts by id quoted the
	// recipient of the reply that halted the broadcast.
	_, err = f.s.SetState(ctx, bs[1].ID, []store.State{store.StateRunning}, store.StatePaused,
		"halted: 550 5.7.1 message to "+erasedEmail+" ("+erasedName+") rejected", at(3))
	f.must(err, "SetState")
	sent := f.receiptFor("welcome-1", strings.ToLower(erasedEmail), `{"to":"`+erasedEmail+`","name":"`+erasedName+`"}`, at(1))
	queued := f.receiptFor("reminder-1", erasedEmail, `{"to":"`+erasedEmail+`"}`, at(1))
	annReceipt := f.receiptFor("welcome-1", ann.Email, `{"to":"ann@example.org"}`, at(1))
	inFlight := f.receiptFor("code-1", erasedEmail, `{"to":"`+erasedEmail+`"}`, at(1))
	// An application may key a message by its recipient's address.
	keyedByAddress := f.receiptFor("signup:"+strings.ToUpper(erasedEmail), erasedEmail, `{}`, at(1))
	_, err = f.s.ClaimReceipt(ctx, sent.ID, at(2))
	f.must(err, "ClaimReceipt")
	_, err = f.s.ClaimReceipt(ctx, inFlight.ID, at(2))
	f.must(err, "ClaimReceipt")
	_, err = f.s.FinishAttempt(ctx, sent.ID, 1, store.AttemptOutcome{Status: store.ReceiptSent, Result: "sent", Reply: "250 ok queued for " + erasedEmail}, at(3))
	f.must(err, "FinishAttempt")

	if hits := f.searchAll(); len(hits[erasedEmail]) == 0 || len(hits[erasedDomain]) == 0 || len(hits[erasedName]) == 0 {
		f.t.Fatalf("before erasure, the search finds too little (is SearchText walking the schema?): %v", hits)
	}
	var before [4]store.Counts
	for i, b := range bs {
		before[i] = f.counts(b)
	}

	res, err := f.s.Erase(ctx, []string{strings.ToUpper(erasedEmail[:3]) + erasedEmail[3:]}, at(10))
	f.must(err, "Erase")
	if len(res) != 1 || res[0].Contact != ids[0] || res[0].Sends != 4 || res[0].Receipts != 4 || res[0].Events != 3 {
		f.t.Fatalf("Erase = %+v; want contact %s, 4 ledger rows, 3 events, 4 receipts", res, ids[0])
	}
	if hits := f.searchAll(); len(hits) > 0 {
		f.t.Fatalf("after erasure the person is still in the store: %v", hits)
	}

	// Counts by status are those of before, except the deferred row.
	for i, b := range bs {
		want := before[i]
		if i == 2 {
			want.Deferred, want.Failed = want.Deferred-1, want.Failed+1
		}
		if got := f.counts(b); got != want {
			f.t.Errorf("broadcast %d counts after erasure %+v, want %+v", i+1, got, want)
		}
	}
	row, err := f.s.GetSend(ctx, bs[2].ID, ids[0])
	f.must(err, "GetSend")
	if row.Status != store.SendFailed || !strings.HasPrefix(row.Email, store.ErasedToken) {
		f.t.Errorf("deferred row after erasure: %+v; want failed, email a token", row)
	}
	// The send in flight at the erasure records its outcome, not lost, and
	// the reply it brings (quoting the address) is withheld; so are a late
	// delivery report's words, and a transactional attempt's.
	f.must(f.s.RecordOutcomes(ctx, bs[3].ID, "w1/1", []store.Outcome{{ContactID: ids[0], Status: store.SendFailed, Error: reply}}, at(11)), "RecordOutcomes after erasure")
	if got := f.counts(bs[3]); got.Sent != 1 || got.Failed != 1 || got.Claimed != 0 {
		f.t.Errorf("in-flight send after erasure: counts %+v, want 1 sent, 1 failed", got)
	}
	if row, err := f.s.GetSend(ctx, bs[3].ID, ids[0]); err != nil || row.Error != store.WithheldReply {
		f.t.Errorf("in-flight send's reply after erasure: %+v, %v", row, err)
	}
	_, err = f.s.RecordEvent(ctx, store.DeliveryEvent{Provider: "test", EventID: "b-late", Type: store.EventBounced,
		MessageID: strings.Trim(messageID(bs[0].ID, ids[0]), "<>"), Detail: "550 no such user " + erasedEmail, OccurredAt: at(12)}, at(12))
	f.must(err, "RecordEvent after erasure")
	if row, err := f.s.GetSend(ctx, bs[0].ID, ids[0]); err != nil || row.Status != store.SendBounced {
		f.t.Errorf("a bounce reported after erasure: %+v, %v; want bounced (its words are searched for below)", row, err)
	}
	// So is a late report on one of the person's transactional messages
	// (review: the broadcast's path withheld it, the receipt's did not).
	_, err = f.s.RecordEvent(ctx, store.DeliveryEvent{Provider: "test", EventID: "tx-late", Type: store.EventBounced,
		MessageID: sent.MessageID, Detail: "550 no such user " + erasedEmail, OccurredAt: at(12)}, at(12))
	f.must(err, "RecordEvent of a receipt after erasure")
	r, err := f.s.FinishAttempt(ctx, inFlight.ID, 1, store.AttemptOutcome{Status: store.ReceiptQueued, Result: "deferred",
		Reply: "451 try again, " + erasedEmail, NextAttemptAt: at(20)}, at(12))
	f.must(err, "FinishAttempt after erasure")
	if r.Status != store.ReceiptFailed {
		f.t.Errorf("a transactional retry after erasure: %s, want failed (its payload is gone)", r.Status)
	}
	if hits := f.searchAll(); len(hits) > 0 {
		f.t.Fatalf("after writes that followed the erasure, the person is in the store again: %v", hits)
	}
	// The queued receipt will never go; the sent one keeps its status.
	if r, err := f.s.GetReceipt(ctx, queued.ID); err != nil || r.Status != store.ReceiptFailed {
		f.t.Errorf("queued receipt after erasure: %+v, %v; want failed", r, err)
	}
	if r, err := f.s.GetReceipt(ctx, sent.ID); err != nil || r.Status != store.ReceiptSent {
		f.t.Errorf("sent receipt after erasure: %+v, %v; want sent", r, err)
	}
	// A request repeated under the key of a message sent before the
	// erasure, in any spelling of the address, is that message again, not
	// a second copy; a new key is a new message.
	for _, to := range []string{erasedEmail, strings.ToUpper(erasedEmail)} {
		again, created, err := f.s.CreateReceipt(ctx, store.Receipt{ID: f.ids.next(), Kind: "transactional", Key: "welcome-1", Email: to,
			PayloadHash: "h-welcome-1", Payload: []byte(`{"to":"` + to + `"}`), MessageID: "tx.again@mail.example.org", NextAttemptAt: at(13), CreatedAt: at(13)})
		f.must(err, "CreateReceipt repeated after erasure")
		if created || again.ID != sent.ID || again.Status != store.ReceiptSent || !strings.HasPrefix(again.Email, store.ErasedToken) {
			f.t.Errorf("the key of a message sent before the erasure, repeated to %s: created %v, %+v; want the erased receipt %s, sent", to, created, again, sent.ID)
		}
	}
	// With other content under the key it is still the erased message,
	// whose payload hash differs, so the caller refuses it as before.
	other, created, err := f.s.CreateReceipt(ctx, store.Receipt{ID: f.ids.next(), Kind: "transactional", Key: "welcome-1", Email: erasedEmail,
		PayloadHash: "h-other", Payload: []byte(`{}`), MessageID: "tx.other@mail.example.org", NextAttemptAt: at(13), CreatedAt: at(13)})
	f.must(err, "CreateReceipt repeated after erasure with other content")
	if created || other.ID != sent.ID || other.PayloadHash == "h-other" {
		f.t.Errorf("the key repeated after the erasure with other content: created %v, %+v; want the erased receipt %s with another payload hash", created, other, sent.ID)
	}
	// So is one whose key holds the address: the key is kept only as a
	// keyed hash, by which the repeat still finds it.
	again, created, err := f.s.CreateReceipt(ctx, store.Receipt{ID: f.ids.next(), Kind: "transactional", Key: "signup:" + strings.ToUpper(erasedEmail), Email: erasedEmail,
		PayloadHash: "h-signup", Payload: []byte(`{}`), MessageID: "tx.again2@mail.example.org", NextAttemptAt: at(13), CreatedAt: at(13)})
	f.must(err, "CreateReceipt repeated after erasure, keyed by the address")
	if created || again.ID != keyedByAddress.ID || strings.Contains(strings.ToLower(again.Key), strings.ToLower(erasedEmail)) {
		f.t.Errorf("a key holding the address, repeated after the erasure: created %v, %+v; want the erased receipt %s, its key hashed", created, again, keyedByAddress.ID)
	}
	fresh, created, err := f.s.CreateReceipt(ctx, store.Receipt{ID: f.ids.next(), Kind: "transactional", Key: "welcome-2", Email: erasedEmail,
		PayloadHash: "h-welcome-2", Payload: []byte(`{}`), MessageID: "tx.fresh@mail.example.org", NextAttemptAt: at(13), CreatedAt: at(13)})
	f.must(err, "CreateReceipt under a new key after erasure")
	if !created || fresh.Status != store.ReceiptQueued {
		f.t.Errorf("a new key after the erasure: created %v, %+v; want a new queued receipt", created, fresh)
	}
	// Everyone else is as they were.
	if _, err := f.s.GetContact(ctx, ids[0]); err == nil {
		f.t.Error("the erased contact is still found by id")
	}
	if d, err := f.s.GetContact(ctx, ids[1]); err != nil || d.Email != ann.Email || len(d.Segments) != 1 {
		f.t.Errorf("the other contact after erasure: %+v, %v", d, err)
	}
	if r, err := f.s.GetReceipt(ctx, annReceipt.ID); err != nil || r.Email != ann.Email || len(r.Payload) == 0 {
		f.t.Errorf("the other contact's receipt after erasure: %+v, %v", r, err)
	}
	if ok, err := f.s.Erased(ctx, erasedEmail); err != nil || !ok {
		f.t.Errorf("Erased(%s) = %v, %v; want true", erasedEmail, ok, err)
	}
	if ok, err := f.s.Erased(ctx, ann.Email); err != nil || ok {
		f.t.Errorf("Erased(%s) = %v, %v; want false", ann.Email, ok, err)
	}
}

func (f *fixture) receiptFor(key, email, payload string, now time.Time) store.Receipt {
	f.t.Helper()
	id := f.ids.next()
	r, _, err := f.s.CreateReceipt(f.ctx, store.Receipt{
		ID: id, Kind: "transactional", Key: key, Email: email, PayloadHash: "h-" + key,
		Payload: []byte(payload), MessageID: "tx." + id.String() + "@mail.example.org",
		NextAttemptAt: now, CreatedAt: now,
	})
	f.must(err, "CreateReceipt(%s)", key)
	return r
}

// An erased address imported again, in any spelling, is suppressed with
// the reason and never passes the gate; other addresses are not.
func testEraseReimport(f *fixture) {
	ctx := f.ctx
	f.upsert([]store.Contact{f.contact("gone@example.org"), f.contact("stay@example.org")}, at(0))
	_, err := f.s.Erase(ctx, []string{"gone@example.org"}, at(1))
	f.must(err, "Erase")
	if n, err := f.s.ErasedAmong(ctx, []string{"GONE@Example.org", "stay@example.org", "nobody@example.org"}); err != nil || n != 1 {
		f.t.Errorf("ErasedAmong = %d, %v; want 1", n, err)
	}
	for i, spelling := range []string{"GONE@Example.org", "gone@EXAMPLE.ORG"} {
		ids := f.upsert([]store.Contact{f.contact(spelling), f.contact("new" + string(rune('a'+i)) + "@example.org")}, at(2+i))
		d, err := f.s.GetContact(ctx, ids[0])
		f.must(err, "GetContact")
		if !d.Suppressed || d.Eligible || d.SuppressedReason != store.ErasedReason {
			f.t.Errorf("%s imported again: suppressed=%v eligible=%v reason %q; want suppressed, not eligible, %q",
				spelling, d.Suppressed, d.Eligible, d.SuppressedReason, store.ErasedReason)
		}
		if _, ok := f.eligible()[ids[0]]; ok {
			f.t.Errorf("%s imported again passes the gate", spelling)
		}
		if _, ok := f.eligible()[ids[1]]; !ok {
			f.t.Errorf("a new address imported with it does not pass the gate")
		}
	}
	// A bulk import (the COPY path of Postgres) consults the hashes too.
	cs := make([]store.Contact, 600)
	for i := range cs {
		cs[i] = f.contact("bulk" + ulid.Make().String() + "@example.org")
	}
	cs[599] = f.contact("Gone@example.org")
	ids := f.upsert(cs, at(5))
	if d, err := f.s.GetContact(ctx, ids[599]); err != nil || !d.Suppressed || d.Eligible {
		f.t.Errorf("erased address in a bulk import: %+v, %v; want suppressed", d, err)
	}
	b := f.running("after", 0)
	if b.SnapshotTotal != 1+2+599 {
		f.t.Errorf("snapshot total %d, want %d (the erased address not counted)", b.SnapshotTotal, 1+2+599)
	}
}

// A page read before an erasure and claimed after it claims nothing for
// the erased contact: nothing is sent, and no row holds the address.
func testEraseBeforeClaim(f *fixture) {
	ids := f.subscribers("late", 3)
	b := f.running("late", 0)
	page := f.page(b, minULID, maxULID, 10)
	if len(page) != 3 {
		f.t.Fatalf("page of %d, want 3", len(page))
	}
	_, err := f.s.Erase(f.ctx, []string{page[1].Email}, at(2))
	f.must(err, "Erase")
	claims := make([]store.Claim, len(page))
	for i, c := range page {
		claims[i] = store.Claim{ContactID: c.ID, Email: c.Email, MessageID: messageID(b.ID, c.ID)}
	}
	got, err := f.s.Claim(f.ctx, b.ID, "w1/1", claims, at(3))
	f.must(err, "Claim")
	if len(got) != 2 || got[0] == ids[1] || got[1] == ids[1] {
		f.t.Fatalf("Claim after erasing %s claimed %v; want the other two", ids[1], got)
	}
	if _, err := f.s.GetSend(f.ctx, b.ID, ids[1]); err == nil {
		f.t.Error("a ledger row exists for the contact erased before its claim")
	}
	// RecordAndClaim's claim is the same.
	got, err = f.s.RecordAndClaim(f.ctx, b.ID, "w1/2", nil, claims[1:2], at(4))
	f.must(err, "RecordAndClaim")
	if len(got) != 0 {
		f.t.Errorf("RecordAndClaim claimed the erased contact: %v", got)
	}
}

// A row the reconciler released to be sent again after an attempt that may
// have been delivered (store.InDoubtResent) is recorded unknown, not
// failed "not sent", when its contact is erased before the resend: by the
// erasure itself (the row deferred), by the sweep (the row claimed at the
// erasure, released after it). A plain deferral still fails.
func testEraseInDoubt(f *fixture) {
	ctx := f.ctx
	ids := f.subscribers("doubt", 3)
	b := f.running("doubt", 0)
	page := f.page(b, minULID, maxULID, 10)
	f.claimPage("w1/1", b, page, at(2))
	// The third contact is erased while its claim is open.
	_, err := f.s.Erase(ctx, []string{page[2].Email}, at(3))
	f.must(err, "Erase")
	// The owner is gone: the reconciler releases all three, two in doubt.
	f.must(f.s.RecordOutcomes(ctx, b.ID, "w1/1", []store.Outcome{
		{ContactID: page[0].ID, Status: store.SendDeferred, RetryAt: at(4), Error: store.InDoubtResent},
		{ContactID: page[1].ID, Status: store.SendDeferred, RetryAt: at(4), Error: "451 4.3.0 try again later"},
		{ContactID: page[2].ID, Status: store.SendDeferred, RetryAt: at(4), Error: store.InDoubtResent},
	}, at(4)), "RecordOutcomes")
	_, err = f.s.Erase(ctx, []string{page[0].Email, page[1].Email}, at(5))
	f.must(err, "Erase")
	due, err := f.s.ClaimDue(ctx, b, "w2/1", at(6), 10, nil, nil)
	f.must(err, "ClaimDue")
	if len(due) != 0 {
		f.t.Fatalf("ClaimDue handed out %d rows of erased contacts", len(due))
	}
	for i, want := range []store.SendStatus{store.SendUnknown, store.SendFailed, store.SendUnknown} {
		row, err := f.s.GetSend(ctx, b.ID, ids[i])
		f.must(err, "GetSend")
		if row.Status != want || (want == store.SendUnknown) != (row.Error == store.ErasedInDoubt) {
			f.t.Errorf("contact %d: %s %q after erasure; want %s", i, row.Status, row.Error, want)
		}
	}
}

// A row released in doubt stays in doubt through its resend's own
// outcome: ClaimDue says so (Due.InDoubt) on every later claim, and an
// erasure after the resend was deferred again (its error no longer
// InDoubtResent) records it unknown, by the erasure itself or by the
// sweep, while a row only ever deferred by a 451 still fails.
func testEraseInDoubtAfterResend(f *fixture) {
	ctx := f.ctx
	ids := f.subscribers("resent", 4)
	b := f.running("resent", 0)
	page := f.page(b, minULID, maxULID, 10)
	f.claimPage("w1/1", b, page, at(2))
	first := []store.Outcome{
		{ContactID: ids[0], Status: store.SendDeferred, RetryAt: at(4), Error: store.InDoubtResent},
		{ContactID: ids[1], Status: store.SendDeferred, RetryAt: at(4), Error: store.InDoubtResent},
		{ContactID: ids[2], Status: store.SendDeferred, RetryAt: at(4), Error: "451 4.3.0 try again later"},
		{ContactID: ids[3], Status: store.SendDeferred, RetryAt: at(4), Error: store.InDoubtResent},
	}
	f.must(f.s.RecordOutcomes(ctx, b.ID, "w1/1", first, at(3)), "RecordOutcomes")
	due, err := f.s.ClaimDue(ctx, b, "w2/1", at(5), 10, nil, nil)
	f.must(err, "ClaimDue")
	if len(due) != 4 {
		f.t.Fatalf("ClaimDue: %d rows, want 4", len(due))
	}
	for i, d := range due {
		if want := i != 2; d.InDoubt != want {
			f.t.Errorf("ClaimDue: contact %d in doubt %v, want %v", i, d.InDoubt, want)
		}
	}
	// The resends of the first three are deferred again; the fourth's is
	// under way.
	again := func(i, retry int) store.Outcome {
		return store.Outcome{ContactID: ids[i], Status: store.SendDeferred, RetryAt: at(retry), Error: "deferred again: 451 4.3.0 try again later"}
	}
	f.must(f.s.RecordOutcomes(ctx, b.ID, "w2/1", []store.Outcome{again(0, 20), again(1, 8), again(2, 20)}, at(6)), "RecordOutcomes")
	_, err = f.s.Erase(ctx, []string{page[0].Email, page[2].Email, page[3].Email}, at(7))
	f.must(err, "Erase")
	f.must(f.s.RecordOutcomes(ctx, b.ID, "w2/1", []store.Outcome{again(3, 8)}, at(7)), "RecordOutcomes")
	due, err = f.s.ClaimDue(ctx, b, "w3/1", at(9), 10, nil, nil)
	f.must(err, "ClaimDue")
	if len(due) != 1 || due[0].ID != ids[1] || !due[0].InDoubt {
		f.t.Errorf("ClaimDue after the erasure = %+v; want contact 1 alone, in doubt", due)
	}
	for i, want := range []store.SendStatus{store.SendUnknown, store.SendClaimed, store.SendFailed, store.SendUnknown} {
		row, err := f.s.GetSend(ctx, b.ID, ids[i])
		f.must(err, "GetSend")
		if row.Status != want || (want == store.SendUnknown) != (row.Error == store.ErasedInDoubt) {
			f.t.Errorf("contact %d: %s %q; want %s", i, row.Status, row.Error, want)
		}
	}
}

// An address that names no contact is erased all the same (its hash
// kept), and erasing twice is no error.
func testEraseUnknown(f *fixture) {
	for range 2 {
		res, err := f.s.Erase(f.ctx, []string{"never@example.org"}, at(1))
		f.must(err, "Erase")
		if len(res) != 1 || res[0].Contact != (ulid.ULID{}) || res[0].Sends != 0 {
			f.t.Fatalf("Erase(unknown) = %+v", res)
		}
	}
	if ok, err := f.s.Erased(f.ctx, "Never@Example.org"); err != nil || !ok {
		f.t.Errorf("Erased after erasing an unknown address: %v, %v", ok, err)
	}
	ids := f.upsert([]store.Contact{f.contact("never@example.org")}, at(2))
	if _, ok := f.eligible()[ids[0]]; ok {
		f.t.Error("an address erased before it was ever imported passes the gate")
	}
}

// Erasures while pages claim the same contacts: whatever the interleaving,
// no ledger row of an erased contact keeps its address (a claim either
// committed before the erasure, which anonymised it, or came after and
// claimed nothing), and no claim is lost for the others.
func testEraseRacesClaims(f *fixture) {
	const contacts, window = 240, 4
	ids := f.subscribers("race-erase", contacts)
	b := f.running("race-erase", 0)
	page := f.page(b, minULID, maxULID, contacts)
	emails := make(map[ulid.ULID]string, len(page))
	for _, c := range page {
		emails[c.ID] = c.Email
	}
	erased := map[ulid.ULID]bool{}
	for i := 0; i < contacts; i += 3 {
		erased[ids[i]] = true
	}
	done := make(chan error, 1)
	start := make(chan struct{})
	go func() {
		<-start
		// From the top down, so erasures meet the claims walking up.
		for i := contacts - contacts%3; i >= 0; i -= 3 {
			if i >= contacts {
				continue
			}
			if _, err := f.s.Erase(f.ctx, []string{emails[ids[i]]}, at(2)); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	claimed := map[ulid.ULID]bool{}
	close(start)
	for lo := 0; lo < contacts; lo += window {
		var cs []store.Claim
		for _, c := range page[lo:min(lo+window, contacts)] {
			cs = append(cs, store.Claim{ContactID: c.ID, Email: c.Email, MessageID: messageID(b.ID, c.ID)})
		}
		got, err := f.s.Claim(f.ctx, b.ID, "w1/1", cs, at(3))
		f.must(err, "Claim")
		for _, id := range got {
			claimed[id] = true
		}
	}
	f.must(<-done, "Erase")
	for _, id := range ids {
		row, err := f.s.GetSend(f.ctx, b.ID, id)
		switch {
		case erased[id] && err == nil && !strings.HasPrefix(row.Email, store.ErasedToken):
			f.t.Errorf("erased contact %s has a ledger row with its address %q", id, row.Email)
		case !erased[id] && (err != nil || !claimed[id]):
			f.t.Errorf("contact %s (not erased) was not claimed: %v", id, err)
		}
	}
}

// Events that matched no ledger row lose their detail when it quotes one
// of the addresses erased together, counted for that address; an
// underscore in an address is not a wildcard.
func testEraseUnmatchedEvents(f *fixture) {
	for i, d := range []string{"bounce for under_score@example.org", "bounce for UNDERXSCORE@example.org", "about Other@Example.org and under_score@example.org"} {
		_, err := f.s.RecordEvent(f.ctx, store.DeliveryEvent{Provider: "test", EventID: "u" + string(rune('0'+i)), Type: store.EventBounced,
			MessageID: "elsewhere@mail.example.org", Detail: d, OccurredAt: at(1)}, at(1))
		f.must(err, "RecordEvent")
	}
	res, err := f.s.Erase(f.ctx, []string{"under_score@example.org", "other@example.org"}, at(2))
	f.must(err, "Erase")
	if len(res) != 2 || res[0].Events != 2 || res[1].Events != 1 {
		f.t.Fatalf("Erase = %+v; want 2 events for under_score, 1 for other", res)
	}
	ts := f.s.(TextSearcher)
	for needle, want := range map[string]int{"under_score@": 0, "other@": 0, "UNDERXSCORE@example.org": 1} {
		cols, err := ts.SearchText(f.ctx, needle)
		f.must(err, "SearchText")
		if len(cols) != want {
			f.t.Errorf("%q found in %v after erasure; want %d columns", needle, cols, want)
		}
	}
}
