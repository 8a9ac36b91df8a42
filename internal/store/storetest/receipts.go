package storetest

import (
	"fmt"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/rangecast/rangecast/internal/store"
)

var receiptCases = []testCase{
	{"OnePerKindKeyAndEmail", testReceiptUniqueKey},
	{"ConcurrentCreatesOneWins", testReceiptConcurrentCreate},
	{"ClaimOnlyQueuedAndDue", testReceiptClaim},
	{"RetryThenSentKeepsEveryAttempt", testReceiptAttempts},
	{"FinishOnlyTheCurrentAttempt", testReceiptFinishGuard},
	{"StaleQueuedAndSending", testReceiptStale},
	{"Templates", testTemplates},
	{"PurgeFinishedOnly", testReceiptPurge},
}

func (f *fixture) receipt(key, email string, now time.Time) store.Receipt {
	f.t.Helper()
	id := f.ids.next()
	r, created, err := f.s.CreateReceipt(f.ctx, store.Receipt{
		ID: id, Kind: "transactional", Key: key, Email: email, PayloadHash: "h-" + key,
		Payload: []byte(`{"subject":"` + key + `"}`), MessageID: "tx." + id.String() + "@mail.example.org",
		NextAttemptAt: now, CreatedAt: now,
	})
	f.must(err, "CreateReceipt(%s)", key)
	if !created {
		f.t.Fatalf("CreateReceipt(%s, %s): created = false for a new key", key, email)
	}
	return r
}

// The key is unique per kind and case-insensitive recipient: a repeat
// returns the first receipt untouched; another recipient or kind is new.
func testReceiptUniqueKey(f *fixture) {
	first := f.receipt("reset-1", "Ann@Example.org", at(0))
	if first.Status != store.ReceiptQueued || first.Attempts != 0 || string(first.Payload) != `{"subject":"reset-1"}` || !first.NextAttemptAt.Equal(at(0)) {
		f.t.Fatalf("new receipt = %+v; want queued, no attempts, payload and due time kept", first)
	}
	again, created, err := f.s.CreateReceipt(f.ctx, store.Receipt{
		ID: f.ids.next(), Kind: "transactional", Key: "reset-1", Email: "ann@example.ORG", PayloadHash: "other",
		Payload: []byte(`{}`), MessageID: "other@x", NextAttemptAt: at(5), CreatedAt: at(5),
	})
	f.must(err, "CreateReceipt repeat")
	if created || again.ID != first.ID || again.PayloadHash != "h-reset-1" || again.Email != "Ann@Example.org" || !again.CreatedAt.Equal(at(0)) {
		f.t.Fatalf("repeat under the same key: created=%v %+v; want the first receipt, unchanged", created, again)
	}
	other := f.receipt("reset-1", "bob@example.org", at(1))
	if other.ID == first.ID {
		f.t.Fatal("another recipient under the same key got the same receipt")
	}
	_, created, err = f.s.CreateReceipt(f.ctx, store.Receipt{
		ID: f.ids.next(), Kind: "other", Key: "reset-1", Email: "ann@example.org", PayloadHash: "h",
		Payload: []byte(`{}`), MessageID: "k@x", NextAttemptAt: at(1), CreatedAt: at(1),
	})
	f.must(err, "CreateReceipt other kind")
	if !created {
		f.t.Fatal("another kind under the same key and recipient was not created")
	}
	got, err := f.s.GetReceipt(f.ctx, first.ID)
	f.must(err, "GetReceipt")
	if got.ID != first.ID || got.MessageID != first.MessageID || got.Key != "reset-1" {
		f.t.Fatalf("GetReceipt = %+v, want %+v", got, first)
	}
	_, err = f.s.GetReceipt(f.ctx, f.ids.next())
	f.wantErr(err, store.ErrNotFound, "GetReceipt of an unknown id")
	found, err := f.s.FindReceipt(f.ctx, "transactional", "reset-1", "ANN@example.org")
	f.must(err, "FindReceipt")
	if found.ID != first.ID {
		f.t.Fatalf("FindReceipt = %s, want %s (case-insensitive recipient)", found.ID, first.ID)
	}
	_, err = f.s.FindReceipt(f.ctx, "transactional", "reset-2", "ann@example.org")
	f.wantErr(err, store.ErrNotFound, "FindReceipt of an unknown key")
}

// Concurrent creates under one key: exactly one inserts, all see its id.
func testReceiptConcurrentCreate(f *fixture) {
	const n = 20
	ids := make([]ulid.ULID, n)
	for i := range ids {
		ids[i] = f.ids.next()
	}
	var wg sync.WaitGroup
	got := make([]store.Receipt, n)
	created := make([]bool, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			got[i], created[i], errs[i] = f.s.CreateReceipt(f.ctx, store.Receipt{
				ID: ids[i], Kind: "transactional", Key: "same", Email: "c@example.org", PayloadHash: "h",
				Payload: []byte(`{}`), MessageID: "tx." + ids[i].String() + "@x", NextAttemptAt: at(0), CreatedAt: at(0),
			})
		})
	}
	wg.Wait()
	winners := 0
	for i := range n {
		f.must(errs[i], "CreateReceipt #%d", i)
		if created[i] {
			winners++
		}
		if got[i].ID != got[0].ID {
			f.t.Fatalf("call %d got receipt %s, call 0 got %s", i, got[i].ID, got[0].ID)
		}
	}
	if winners != 1 {
		f.t.Fatalf("%d concurrent creates reported created; want exactly 1", winners)
	}
}

// A claim takes a queued receipt that is due, once; it counts the attempt
// and opens its row.
func testReceiptClaim(f *fixture) {
	r := f.receipt("k", "d@example.org", at(10))
	_, err := f.s.ClaimReceipt(f.ctx, r.ID, at(9))
	f.wantErr(err, store.ErrConflict, "claim before the receipt is due")
	c, err := f.s.ClaimReceipt(f.ctx, r.ID, at(10))
	f.must(err, "ClaimReceipt")
	if c.Status != store.ReceiptSending || c.Attempts != 1 || !c.ClaimedAt.Equal(at(10)) {
		f.t.Fatalf("claimed receipt = %+v; want sending, attempt 1, claimed at %v", c, at(10))
	}
	_, err = f.s.ClaimReceipt(f.ctx, r.ID, at(11))
	f.wantErr(err, store.ErrConflict, "second claim of a sending receipt")
	as, err := f.s.ReceiptAttempts(f.ctx, r.ID)
	f.must(err, "ReceiptAttempts")
	if len(as) != 1 || as[0].N != 1 || as[0].Result != store.AttemptInFlight || !as[0].StartedAt.Equal(at(10)) || !as[0].FinishedAt.IsZero() {
		f.t.Fatalf("attempts = %+v; want one in flight since %v", as, at(10))
	}
	_, err = f.s.ClaimReceipt(f.ctx, f.ids.next(), at(11))
	f.wantErr(err, store.ErrConflict, "claim of an unknown receipt")
}

// Two transient failures and a success: three attempts, each with its
// reply and times, the receipt sent.
func testReceiptAttempts(f *fixture) {
	r := f.receipt("k", "e@example.org", at(0))
	for n := 1; n <= 2; n++ {
		c, err := f.s.ClaimReceipt(f.ctx, r.ID, at(10*n))
		f.must(err, "claim attempt %d", n)
		if c.Attempts != n {
			f.t.Fatalf("attempt %d claimed as %d", n, c.Attempts)
		}
		q, err := f.s.FinishAttempt(f.ctx, r.ID, n, store.AttemptOutcome{
			Status: store.ReceiptQueued, Result: "transient", Reply: "451 4.3.0 try later", NextAttemptAt: at(10*n + 5),
		}, at(10*n+1))
		f.must(err, "finish attempt %d", n)
		if q.Status != store.ReceiptQueued || !q.NextAttemptAt.Equal(at(10*n+5)) || q.Error != "451 4.3.0 try later" || !q.ClaimedAt.IsZero() {
			f.t.Fatalf("after a transient failure: %+v; want queued until %v with the reply", q, at(10*n+5))
		}
		_, err = f.s.ClaimReceipt(f.ctx, r.ID, at(10*n+4))
		f.wantErr(err, store.ErrConflict, "claim before the retry is due")
	}
	_, err := f.s.ClaimReceipt(f.ctx, r.ID, at(30))
	f.must(err, "claim attempt 3")
	s, err := f.s.FinishAttempt(f.ctx, r.ID, 3, store.AttemptOutcome{Status: store.ReceiptSent, Result: "sent", Reply: "250 2.0.0 OK"}, at(31))
	f.must(err, "finish attempt 3")
	if s.Status != store.ReceiptSent || s.Attempts != 3 || !s.NextAttemptAt.Equal(at(25)) {
		f.t.Fatalf("sent receipt = %+v; want sent after 3 attempts", s)
	}
	as, err := f.s.ReceiptAttempts(f.ctx, r.ID)
	f.must(err, "ReceiptAttempts")
	want := []store.Attempt{
		{N: 1, StartedAt: at(10), FinishedAt: at(11), Result: "transient", Reply: "451 4.3.0 try later"},
		{N: 2, StartedAt: at(20), FinishedAt: at(21), Result: "transient", Reply: "451 4.3.0 try later"},
		{N: 3, StartedAt: at(30), FinishedAt: at(31), Result: "sent", Reply: "250 2.0.0 OK"},
	}
	if len(as) != len(want) {
		f.t.Fatalf("attempts = %+v, want %+v", as, want)
	}
	for i := range want {
		a, w := as[i], want[i]
		if a.N != w.N || !a.StartedAt.Equal(w.StartedAt) || !a.FinishedAt.Equal(w.FinishedAt) || a.Result != w.Result || a.Reply != w.Reply {
			f.t.Fatalf("attempt %d = %+v, want %+v", i+1, a, w)
		}
	}
	_, err = f.s.ClaimReceipt(f.ctx, r.ID, at(40))
	f.wantErr(err, store.ErrConflict, "claim of a sent receipt")
}

// Only the worker holding the current attempt settles it; a stale or
// second settlement is a conflict and changes nothing. Reason, when given,
// is what the receipt shows.
func testReceiptFinishGuard(f *fixture) {
	r := f.receipt("k", "g@example.org", at(0))
	_, err := f.s.FinishAttempt(f.ctx, r.ID, 1, store.AttemptOutcome{Status: store.ReceiptSent, Result: "sent"}, at(1))
	f.wantErr(err, store.ErrConflict, "finish of a receipt never claimed")
	_, err = f.s.ClaimReceipt(f.ctx, r.ID, at(1))
	f.must(err, "ClaimReceipt")
	_, err = f.s.FinishAttempt(f.ctx, r.ID, 2, store.AttemptOutcome{Status: store.ReceiptSent, Result: "sent"}, at(2))
	f.wantErr(err, store.ErrConflict, "finish of the wrong attempt")
	u, err := f.s.FinishAttempt(f.ctx, r.ID, 1, store.AttemptOutcome{
		Status: store.ReceiptUnknown, Result: "unknown", Reply: "connection lost after DATA", Reason: "in doubt: not resent",
	}, at(3))
	f.must(err, "FinishAttempt")
	if u.Status != store.ReceiptUnknown || u.Error != "in doubt: not resent" {
		f.t.Fatalf("receipt = %+v; want unknown with the reason", u)
	}
	_, err = f.s.FinishAttempt(f.ctx, r.ID, 1, store.AttemptOutcome{Status: store.ReceiptSent, Result: "sent"}, at(4))
	f.wantErr(err, store.ErrConflict, "second finish of the same attempt")
	as, err := f.s.ReceiptAttempts(f.ctx, r.ID)
	f.must(err, "ReceiptAttempts")
	if len(as) != 1 || as[0].Result != "unknown" || as[0].Reply != "connection lost after DATA" || !as[0].FinishedAt.Equal(at(3)) {
		f.t.Fatalf("attempts = %+v; want the first settlement only", as)
	}
}

// StaleReceipts finds queued receipts overdue and claims older than the
// cut, and nothing finished, fresh or not yet due.
func testReceiptStale(f *fixture) {
	overdue := f.receipt("overdue", "a@example.org", at(0))
	f.receipt("future", "b@example.org", at(50))
	stuck := f.receipt("stuck", "c@example.org", at(0))
	_, err := f.s.ClaimReceipt(f.ctx, stuck.ID, at(1))
	f.must(err, "claim stuck")
	fresh := f.receipt("fresh", "d@example.org", at(0))
	_, err = f.s.ClaimReceipt(f.ctx, fresh.ID, at(20))
	f.must(err, "claim fresh")
	done := f.receipt("done", "e@example.org", at(0))
	_, err = f.s.ClaimReceipt(f.ctx, done.ID, at(1))
	f.must(err, "claim done")
	_, err = f.s.FinishAttempt(f.ctx, done.ID, 1, store.AttemptOutcome{Status: store.ReceiptSent, Result: "sent"}, at(2))
	f.must(err, "finish done")

	got, err := f.s.StaleReceipts(f.ctx, at(10), at(10), 10)
	f.must(err, "StaleReceipts")
	ids := map[ulid.ULID]bool{}
	for _, r := range got {
		ids[r.ID] = true
	}
	if len(got) != 2 || !ids[overdue.ID] || !ids[stuck.ID] {
		f.t.Fatalf("StaleReceipts = %d receipts %v; want the overdue queued one and the stuck claim", len(got), ids)
	}
	one, err := f.s.StaleReceipts(f.ctx, at(10), at(10), 1)
	f.must(err, "StaleReceipts(limit 1)")
	if len(one) != 1 {
		f.t.Fatalf("StaleReceipts(limit 1) returned %d", len(one))
	}
}

// Templates: created at version 1, replaced with the version raised and
// the creation time kept; an unknown name is ErrNotFound.
func testTemplates(f *fixture) {
	_, err := f.s.GetTemplate(f.ctx, "reset")
	f.wantErr(err, store.ErrNotFound, "GetTemplate before any PutTemplate")
	v1, err := f.s.PutTemplate(f.ctx, store.Template{Name: "reset", FromAddress: "a@x.org", Subject: "Reset {{.name}}", Text: "Hi {{.name}}"}, at(1))
	f.must(err, "PutTemplate v1")
	if v1.Version != 1 || v1.Subject != "Reset {{.name}}" || !v1.CreatedAt.Equal(at(1)) {
		f.t.Fatalf("first put = %+v; want version 1 as given", v1)
	}
	v2, err := f.s.PutTemplate(f.ctx, store.Template{Name: "reset", FromName: "X", Subject: "New", HTML: "<p>{{.name}}</p>"}, at(2))
	f.must(err, "PutTemplate v2")
	got, err := f.s.GetTemplate(f.ctx, "reset")
	f.must(err, "GetTemplate")
	if v2.Version != 2 || got != v2 || got.Text != "" || got.FromAddress != "" || got.HTML != "<p>{{.name}}</p>" || !got.CreatedAt.Equal(at(1)) || !got.UpdatedAt.Equal(at(2)) {
		f.t.Fatalf("after replace: put %+v, get %+v; want version 2, every field replaced, created time kept", v2, got)
	}
}

// PurgeReceipts deletes finished receipts older than the cutoff, with their
// attempts, in batches; never a queued or sending one, however old.
func testReceiptPurge(f *fixture) {
	finish := func(r store.Receipt, status store.ReceiptStatus, when int) {
		f.t.Helper()
		_, err := f.s.ClaimReceipt(f.ctx, r.ID, at(when))
		f.must(err, "claim %s", r.Key)
		_, err = f.s.FinishAttempt(f.ctx, r.ID, 1, store.AttemptOutcome{Status: status, Result: string(status), Reply: "reply"}, at(when))
		f.must(err, "finish %s", r.Key)
	}
	var old []store.Receipt
	for i, st := range []store.ReceiptStatus{store.ReceiptSent, store.ReceiptFailed, store.ReceiptUnknown} {
		r := f.receipt(fmt.Sprintf("old-%d", i), "p@example.org", at(0))
		finish(r, st, 1)
		old = append(old, r)
	}
	recent := f.receipt("recent", "p@example.org", at(0))
	finish(recent, store.ReceiptSent, 50)
	queued := f.receipt("queued", "p@example.org", at(0))
	sending := f.receipt("sending", "p@example.org", at(0))
	_, err := f.s.ClaimReceipt(f.ctx, sending.ID, at(1))
	f.must(err, "claim sending")

	f.purged("first batch (the limit)", 2)(f.s.PurgeReceipts(f.ctx, at(10), 2))
	f.purged("second batch (the last old one)", 1)(f.s.PurgeReceipts(f.ctx, at(10), 2))
	f.purged("third batch", 0)(f.s.PurgeReceipts(f.ctx, at(10), 2))
	for _, r := range old {
		_, err := f.s.GetReceipt(f.ctx, r.ID)
		f.wantErr(err, store.ErrNotFound, "GetReceipt of purged %s", r.Key)
		as, err := f.s.ReceiptAttempts(f.ctx, r.ID)
		if err == nil && len(as) != 0 {
			f.t.Errorf("attempts of purged %s are still there: %+v", r.Key, as)
		}
		_, err = f.s.FindReceipt(f.ctx, "transactional", r.Key, "p@example.org")
		f.wantErr(err, store.ErrNotFound, "FindReceipt of purged %s", r.Key)
	}
	for _, r := range []store.Receipt{recent, queued, sending} {
		_, err := f.s.GetReceipt(f.ctx, r.ID)
		f.must(err, "GetReceipt(%s) after the purge", r.Key)
	}
	// A purged key is free again: the same key is a new message.
	f.receipt("old-0", "p@example.org", at(60))
}
