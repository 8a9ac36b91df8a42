package storetest

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/oklog/ulid/v2"

	"github.com/rangecast/rangecast/internal/store"
)

var audienceCases = []testCase{
	{"ImportIsUpsert", testImportIsUpsert},
	{"ConcurrentImports", testConcurrentImports},
	{"GetContact", testGetContact},
	{"ContactIDs", testContactIDs},
	{"History", testContactHistory},
	{"Suppress", testSuppress},
	{"CreateSegment", testCreateSegment},
	{"Members", testMembers},
	{"ImportJoinsSegments", testImportJoinsSegments},
	{"Preview", testPreview},
}

// importBatch is large enough for an implementation's bulk path (Postgres
// switches to COPY at 500 rows).
const importBatch = 1200

// ImportContacts has the small batch's semantics on a batch large enough to
// take the bulk path: ids in input order, an existing contact (any case)
// keeps its id, the name is replaced (by a non-empty one), attributes merged, and flags only
// ever turn on.
func testImportIsUpsert(f *fixture) {
	pre := []store.Contact{f.contact("Keep@Example.org"), f.contact("unsub@example.org"), f.contact("dnc@example.org"), f.contact("supp@example.org")}
	pre[0].Attributes = map[string]any{"city": "Lyon", "plan": "free"}
	pre[1].Subscribed = false
	pre[2].DoNotContact = true
	pre[3].Suppressed = true
	old := f.upsert(pre, at(0))

	batch := make([]store.Contact, importBatch)
	for i := range batch {
		batch[i] = f.contact(fmt.Sprintf("bulk%05d@example.org", i))
		batch[i].Attributes = map[string]any{"n": fmt.Sprint(i)}
	}
	// The existing contacts, in other cases, spread through the batch.
	for j, p := range pre {
		c := f.contact(strings.ToUpper(p.Email))
		c.Name = "Updated"
		c.Attributes = map[string]any{"plan": "pro", "lang": "fr"}
		batch[j*300+7] = c
	}
	batch[1000].DoNotContact = true
	batch[1001].Subscribed = false
	ids, err := f.s.ImportContacts(f.ctx, batch, at(1))
	f.must(err, "ImportContacts(%d)", len(batch))
	if len(ids) != len(batch) {
		f.t.Fatalf("ImportContacts returned %d ids for %d contacts", len(ids), len(batch))
	}
	for i, c := range batch {
		want := c.ID
		if i%300 == 7 && i/300 < len(pre) {
			want = old[i/300]
		}
		if ids[i] != want {
			f.t.Fatalf("ImportContacts id %d (%s) = %s, want %s", i, c.Email, ids[i], want)
		}
	}
	keep, err := f.s.GetContact(f.ctx, old[0])
	f.must(err, "GetContact(keep)")
	want := map[string]any{"city": "Lyon", "plan": "pro", "lang": "fr"}
	if keep.Name != "Updated" || !maps.EqualFunc(keep.Attributes, want, func(a, b any) bool { return a == b }) || !keep.Eligible {
		f.t.Errorf("re-imported contact: name %q attributes %v eligible %v; want name replaced, attributes %v, eligible", keep.Name, keep.Attributes, keep.Eligible, want)
	}
	if !strings.EqualFold(keep.Email, "keep@example.org") {
		f.t.Errorf("re-imported contact's email %q", keep.Email)
	}
	for i, flag := range []string{"unsubscribed", "do-not-contact", "suppressed"} {
		d, err := f.s.GetContact(f.ctx, old[i+1])
		f.must(err, "GetContact(%s)", pre[i+1].Email)
		p := pre[i+1]
		if d.Eligible || d.Subscribed != p.Subscribed || d.DoNotContact != p.DoNotContact || d.Suppressed != p.Suppressed {
			f.t.Errorf("%s contact after a re-import with no flags: %+v, want still %s", flag, d, flag)
		}
	}
	eligible := f.eligible()
	// 1200 imported, 4 of them were existing (1 eligible), 2 flagged now.
	if n := len(eligible); n != importBatch-4+1-2 {
		f.t.Errorf("%d eligible contacts after the import, want %d", n, importBatch-4+1-2)
	}
	if _, ok := eligible[ids[1000]]; ok {
		f.t.Error("a contact imported do-not-contact is eligible")
	}
	if c := eligible[ids[5]]; c.Attributes["n"] != "5" || c.Email != "bulk00005@example.org" {
		f.t.Errorf("imported contact 5: %+v", c)
	}

	// An empty import and a small one (below any bulk threshold) work too.
	none, err := f.s.ImportContacts(f.ctx, nil, at(2))
	f.must(err, "ImportContacts(nil)")
	if len(none) != 0 {
		f.t.Errorf("ImportContacts(nil) = %v", none)
	}
	small := f.contact("KEEP@example.org")
	got, err := f.s.ImportContacts(f.ctx, []store.Contact{small}, at(2))
	f.must(err, "ImportContacts(1)")
	if len(got) != 1 || got[0] != old[0] {
		f.t.Errorf("small import of an existing contact: ids %v, want [%s]", got, old[0])
	}
}

// Imports of the same new addresses at once (on Postgres: racing plain
// inserts, so all but one fall back to the upsert) all succeed, agree on
// each contact's id, and leave one contact per address.
func testConcurrentImports(f *fixture) {
	const workers, n = 4, 800
	batches := make([][]store.Contact, workers)
	for w := range batches {
		batches[w] = make([]store.Contact, n)
		for i := range n {
			email := fmt.Sprintf("race%04d@example.org", i)
			if w%2 == 1 {
				email = strings.ToUpper(email)
			}
			batches[w][i] = store.Contact{ID: f.ids.next(), Email: email, Subscribed: true, Attributes: map[string]any{fmt.Sprint("w", w): "x"}}
		}
	}
	ids := make([][]ulid.ULID, workers)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() { ids[w], errs[w] = f.s.ImportContacts(f.ctx, batches[w], at(w)) })
	}
	wg.Wait()
	for w, err := range errs {
		f.must(err, "concurrent ImportContacts %d", w)
	}
	for w := 1; w < workers; w++ {
		if !slices.Equal(ids[w], ids[0]) {
			f.t.Fatalf("concurrent imports of the same addresses disagree on ids (import %d vs 0)", w)
		}
	}
	all := f.eligible()
	if len(all) != n {
		f.t.Fatalf("%d contacts after %d imports of the same %d addresses, want %d", len(all), workers, n, n)
	}
	// Every import's attribute was merged in, whichever came first.
	for _, id := range ids[0][:3] {
		if got := len(all[id].Attributes); got != workers {
			f.t.Errorf("contact %s has attributes %v, want one from each of the %d imports", id, all[id].Attributes, workers)
		}
	}
}

// GetContact and ContactByEmail return the same contact with its flags,
// times, eligibility and segments; unknown ones are ErrNotFound.
func testGetContact(f *fixture) {
	c := f.contact("Ann@Example.org")
	c.Name = "Ann"
	c.Attributes = map[string]any{"plan": "pro"}
	id := f.upsert([]store.Contact{c}, at(0))[0]
	f.upsert([]store.Contact{{ID: f.ids.next(), Email: "ann@example.ORG", Name: "Ann B", Subscribed: true}}, at(3))
	for _, name := range []string{"zeta", "alpha", "other"} {
		seg, err := f.s.EnsureSegment(f.ctx, name, at(0))
		f.must(err, "EnsureSegment(%s)", name)
		if name != "other" {
			f.must(f.addMembers(seg, []ulid.ULID{id}), "AddMembers(%s)", name)
		}
	}
	byID, err := f.s.GetContact(f.ctx, id)
	f.must(err, "GetContact")
	if byID.ID != id || byID.Email != "Ann@Example.org" || byID.Name != "Ann B" || byID.Attributes["plan"] != "pro" ||
		!byID.Subscribed || byID.DoNotContact || byID.Suppressed || !byID.Eligible || byID.SuppressedReason != "" || !byID.SuppressedAt.IsZero() {
		f.t.Errorf("GetContact = %+v", byID)
	}
	if !byID.CreatedAt.Equal(at(0)) || !byID.UpdatedAt.Equal(at(3)) {
		f.t.Errorf("GetContact times: created %v updated %v, want %v and %v", byID.CreatedAt, byID.UpdatedAt, at(0), at(3))
	}
	if !slices.Equal(byID.Segments, []string{"alpha", "zeta"}) {
		f.t.Errorf("GetContact segments = %v, want [alpha zeta]", byID.Segments)
	}
	for _, email := range []string{"ann@example.org", "ANN@EXAMPLE.ORG", "Ann@Example.org"} {
		byEmail, err := f.s.ContactByEmail(f.ctx, email)
		f.must(err, "ContactByEmail(%s)", email)
		if byEmail.ID != id || !slices.Equal(byEmail.Segments, byID.Segments) {
			f.t.Errorf("ContactByEmail(%s) = %+v, want the contact %s", email, byEmail, id)
		}
	}
	_, err = f.s.GetContact(f.ctx, f.ids.next())
	f.wantErr(err, store.ErrNotFound, "GetContact(unknown)")
	_, err = f.s.ContactByEmail(f.ctx, "nobody@example.org")
	f.wantErr(err, store.ErrNotFound, "ContactByEmail(unknown)")

	// Eligibility is the gate's: a contact without segments, unsubscribed.
	u := f.contact("unsub@example.org")
	u.Subscribed = false
	uid := f.upsert([]store.Contact{u}, at(0))[0]
	d, err := f.s.GetContact(f.ctx, uid)
	f.must(err, "GetContact(unsub)")
	if d.Eligible || d.Subscribed || len(d.Segments) != 0 {
		f.t.Errorf("unsubscribed contact: %+v, want not eligible, not subscribed, no segments", d)
	}
}

func testContactIDs(f *fixture) {
	ids := f.subscribers("ids", 3)
	got, err := f.s.ContactIDs(f.ctx, []string{"IDS0002@example.org", "nobody@example.org", "ids0000@EXAMPLE.org", "ids0002@example.org"})
	f.must(err, "ContactIDs")
	want := []ulid.ULID{ids[2], {}, ids[0], ids[2]}
	if !slices.Equal(got, want) {
		f.t.Errorf("ContactIDs = %v, want %v", got, want)
	}
	got, err = f.s.ContactIDs(f.ctx, nil)
	f.must(err, "ContactIDs(nil)")
	if len(got) != 0 {
		f.t.Errorf("ContactIDs(nil) = %v", got)
	}
}

// History has one row per broadcast that claimed the contact, latest claim
// first, with status, reply and the broadcast's name and state.
func testContactHistory(f *fixture) {
	ids := f.subscribers("h", 2)
	c := ids[0]
	b1 := f.running("first", 0)
	b2 := f.running("second", 0)
	b3 := f.running("third", 0)
	f.claim(b1, ids, at(2))
	f.claim(b2, []ulid.ULID{c}, at(3))
	f.claim(b3, []ulid.ULID{c}, at(4))
	f.must(f.s.RecordOutcomes(f.ctx, b1.ID, "w1/1", []store.Outcome{{ContactID: c, Status: store.SendSent}, {ContactID: ids[1], Status: store.SendSent}}, at(5)), "RecordOutcomes(b1)")
	f.must(f.s.RecordOutcomes(f.ctx, b2.ID, "w1/1", []store.Outcome{{ContactID: c, Status: store.SendFailed, Error: "550 5.1.1 mailbox unavailable"}}, at(6)), "RecordOutcomes(b2)")
	_, err := f.s.SetState(f.ctx, b1.ID, []store.State{store.StateRunning}, store.StateCompleted, "", at(7))
	f.must(err, "SetState(b1)")

	h, err := f.s.ContactHistory(f.ctx, c, 10)
	f.must(err, "ContactHistory")
	type row struct {
		b      ulid.ULID
		name   string
		state  store.State
		status store.SendStatus
		reply  string
	}
	want := []row{
		{b3.ID, "third", store.StateRunning, store.SendClaimed, ""},
		{b2.ID, "second", store.StateRunning, store.SendFailed, "550 5.1.1 mailbox unavailable"},
		{b1.ID, "first", store.StateCompleted, store.SendSent, ""},
	}
	if len(h) != len(want) {
		f.t.Fatalf("ContactHistory: %d rows %+v, want %d", len(h), h, len(want))
	}
	for i, w := range want {
		g := h[i]
		if g.BroadcastID != w.b || g.BroadcastName != w.name || g.BroadcastState != w.state || g.Status != w.status ||
			g.Error != w.reply || g.ContactID != c || g.MessageID != messageID(w.b, c) || g.Attempt != 1 {
			f.t.Errorf("history[%d] = %+v, want %+v", i, g, w)
		}
	}
	if !h[0].ClaimedAt.Equal(at(4)) || !h[1].UpdatedAt.Equal(at(6)) {
		f.t.Errorf("history times: %v claimed, %v updated; want %v and %v", h[0].ClaimedAt, h[1].UpdatedAt, at(4), at(6))
	}
	short, err := f.s.ContactHistory(f.ctx, c, 2)
	f.must(err, "ContactHistory(limit 2)")
	if len(short) != 2 || short[0].BroadcastID != b3.ID || short[1].BroadcastID != b2.ID {
		f.t.Errorf("ContactHistory(limit 2) = %+v, want the two latest", short)
	}
	other, err := f.s.ContactHistory(f.ctx, ids[1], 10)
	f.must(err, "ContactHistory(other)")
	if len(other) != 1 || other[0].BroadcastID != b1.ID {
		f.t.Errorf("other contact's history = %+v, want only the first broadcast", other)
	}
	none, err := f.s.ContactHistory(f.ctx, f.ids.next(), 10)
	f.must(err, "ContactHistory(unknown)")
	if len(none) != 0 {
		f.t.Errorf("history of a contact never sent to: %+v", none)
	}
}

// Suppress records the reason and time, takes the contact out of every
// page, and no import undoes it.
func testSuppress(f *fixture) {
	ids := f.subscribers("s", 3)
	b := f.running("before", 0)
	d, err := f.s.Suppress(f.ctx, ids[1], "asked by phone", at(2))
	f.must(err, "Suppress")
	if !d.Suppressed || d.Eligible || d.SuppressedReason != "asked by phone" || !d.SuppressedAt.Equal(at(2)) || !d.UpdatedAt.Equal(at(2)) {
		f.t.Errorf("after Suppress: %+v", d)
	}
	// A running broadcast's next page leaves the contact out.
	f.sameSet("page after suppress", f.walk(b, 10), []ulid.ULID{ids[0], ids[2]})

	d, err = f.s.Suppress(f.ctx, ids[1], "legal hold", at(3))
	f.must(err, "Suppress again")
	if d.SuppressedReason != "legal hold" || !d.SuppressedAt.Equal(at(3)) {
		f.t.Errorf("suppressed twice: reason %q at %v, want the latest", d.SuppressedReason, d.SuppressedAt)
	}
	f.upsert([]store.Contact{f.contact("S0001@example.org")}, at(4))
	d, err = f.s.GetContact(f.ctx, ids[1])
	f.must(err, "GetContact")
	if !d.Suppressed || d.Eligible || d.SuppressedReason != "legal hold" {
		f.t.Errorf("a re-import undid a suppression: %+v", d)
	}
	_, err = f.s.Suppress(f.ctx, f.ids.next(), "x", at(5))
	f.wantErr(err, store.ErrNotFound, "Suppress(unknown)")

	// Unsuppress lifts only the suppression the caller read.
	_, err = f.s.Unsuppress(f.ctx, ids[1], "asked by phone", at(6))
	f.wantErr(err, store.ErrConflict, "Unsuppress with an earlier reason")
	d, err = f.s.GetContact(f.ctx, ids[1])
	f.must(err, "GetContact")
	if !d.Suppressed || d.SuppressedReason != "legal hold" {
		f.t.Errorf("Unsuppress with an earlier reason lifted it: %+v", d)
	}
	d, err = f.s.Unsuppress(f.ctx, ids[1], "legal hold", at(7))
	f.must(err, "Unsuppress")
	if d.Suppressed || !d.Eligible || d.SuppressedReason != "" || !d.SuppressedAt.IsZero() || !d.UpdatedAt.Equal(at(7)) {
		f.t.Errorf("after Unsuppress: %+v", d)
	}
	f.sameSet("page after unsuppress", f.walk(f.running("after", 0), 10), ids)
	_, err = f.s.Unsuppress(f.ctx, ids[1], "", at(8))
	f.wantErr(err, store.ErrConflict, "Unsuppress of a contact not suppressed")
	_, err = f.s.Unsuppress(f.ctx, f.ids.next(), "x", at(8))
	f.wantErr(err, store.ErrNotFound, "Unsuppress(unknown)")
	// An erased address's suppression is for good, whatever its reason
	// says; a reason that only reads like an erasure is lifted.
	_, err = f.s.Suppress(f.ctx, ids[2], store.ErasedReason, at(9))
	f.must(err, "Suppress with the erased reason's words")
	_, err = f.s.Unsuppress(f.ctx, ids[2], store.ErasedReason, at(10))
	f.must(err, "Unsuppress of a reason that only reads like an erasure")
	d, err = f.s.GetContact(f.ctx, ids[2])
	f.must(err, "GetContact")
	_, err = f.s.Erase(f.ctx, []string{d.Email}, at(11))
	f.must(err, "Erase")
	again := f.contact(d.Email)
	gone := f.upsert([]store.Contact{again}, at(12))[0]
	_, err = f.s.Suppress(f.ctx, gone, "operator", at(13))
	f.must(err, "Suppress an erased address again, replacing its reason")
	_, err = f.s.Unsuppress(f.ctx, gone, "operator", at(14))
	f.wantErr(err, store.ErrConflict, "Unsuppress of an erased address")
	if d, err := f.s.GetContact(f.ctx, gone); err != nil || !d.Suppressed {
		f.t.Errorf("an erased address after Unsuppress: %+v, %v; want suppressed still", d, err)
	}
}

func testCreateSegment(f *fixture) {
	seg, err := f.s.CreateSegment(f.ctx, "vip", at(1))
	f.must(err, "CreateSegment(vip)")
	if seg.ID == 0 || seg.Name != "vip" || !seg.CreatedAt.Equal(at(1)) {
		f.t.Errorf("CreateSegment = %+v", seg)
	}
	_, err = f.s.CreateSegment(f.ctx, "vip", at(2))
	f.wantErr(err, store.ErrConflict, "CreateSegment(vip) again")
	if id, err := f.s.SegmentID(f.ctx, "vip"); err != nil || id != seg.ID {
		f.t.Errorf("SegmentID(vip) = %d, %v; want %d", id, err, seg.ID)
	}
	if id, err := f.s.EnsureSegment(f.ctx, "vip", at(3)); err != nil || id != seg.ID {
		f.t.Errorf("EnsureSegment(vip) = %d, %v; want %d", id, err, seg.ID)
	}
	other, err := f.s.CreateSegment(f.ctx, "VIP", at(1))
	f.must(err, "CreateSegment(VIP)")
	if other.ID == seg.ID {
		f.t.Error("segment names are case-sensitive, but VIP got vip's id")
	}
}

// AddMembers and RemoveMembers count what changed and what was already so,
// report unknown ids, and what a segment broadcast walks is the membership.
func testMembers(f *fixture) {
	ids := f.subscribers("m", 5)
	seg, err := f.s.CreateSegment(f.ctx, "m", at(0))
	f.must(err, "CreateSegment")
	ghost := f.ids.next()

	ch, err := f.s.AddMembers(f.ctx, seg.ID, []ulid.ULID{ids[0], ids[1], ghost, ids[0]})
	f.must(err, "AddMembers")
	if ch.Changed != 2 || ch.Unchanged != 0 || !slices.Equal(ch.Missing, []ulid.ULID{ghost}) {
		f.t.Errorf("AddMembers = %+v, want 2 changed, 0 unchanged, missing %s", ch, ghost)
	}
	ch, err = f.s.AddMembers(f.ctx, seg.ID, []ulid.ULID{ids[1], ids[2], ids[3]})
	f.must(err, "AddMembers again")
	if ch.Changed != 2 || ch.Unchanged != 1 || len(ch.Missing) != 0 {
		f.t.Errorf("AddMembers of one member and two new = %+v, want 2 changed, 1 unchanged", ch)
	}
	b := f.draft("segment", seg.ID)
	f.sameSet("members after adds", f.walk(b, 2), ids[:4])

	ch, err = f.s.RemoveMembers(f.ctx, seg.ID, []ulid.ULID{ids[1], ids[4], ghost})
	f.must(err, "RemoveMembers")
	if ch.Changed != 1 || ch.Unchanged != 1 || !slices.Equal(ch.Missing, []ulid.ULID{ghost}) {
		f.t.Errorf("RemoveMembers(member, non-member, unknown) = %+v, want 1 changed, 1 unchanged, missing %s", ch, ghost)
	}
	f.sameSet("members after remove", f.walk(b, 2), []ulid.ULID{ids[0], ids[2], ids[3]})
	d, err := f.s.GetContact(f.ctx, ids[1])
	f.must(err, "GetContact")
	if len(d.Segments) != 0 {
		f.t.Errorf("removed contact still lists segments %v", d.Segments)
	}
	if ch, err := f.s.AddMembers(f.ctx, seg.ID, nil); err != nil || ch.Changed != 0 || ch.Unchanged != 0 || len(ch.Missing) != 0 {
		f.t.Errorf("AddMembers(nil) = %+v, %v", ch, err)
	}
}

// ImportContacts writes each contact's segment memberships with it, on both
// paths (small and bulk), and a segment that is gone (deleted while an
// import ran) fails the batch whole: no contact is written without the
// memberships its row asked for. Committed in two steps, an import stopped
// between them left contacts out of their segment, so a broadcast to it
// skipped them silently (tester, 5,000 of 60,000 rows).
func testImportJoinsSegments(f *fixture) {
	a, err := f.s.CreateSegment(f.ctx, "join-a", at(0))
	f.must(err, "CreateSegment")
	b, err := f.s.CreateSegment(f.ctx, "join-b", at(0))
	f.must(err, "CreateSegment")
	for _, n := range []int{3, importBatch} {
		batch := make([]store.Contact, n)
		for i := range batch {
			batch[i] = f.contact(fmt.Sprintf("join%d-%05d@example.org", n, i))
			batch[i].Segments = []int64{a.ID}
		}
		batch[0].Segments = []int64{a.ID, b.ID, a.ID}
		batch[n-1].Segments = nil
		ids := f.upsert(batch, at(1))
		d, err := f.s.GetContact(f.ctx, ids[0])
		f.must(err, "GetContact")
		if !slices.Equal(d.Segments, []string{"join-a", "join-b"}) {
			f.t.Errorf("batch of %d: first contact's segments %v, want [join-a join-b]", n, d.Segments)
		}
		if d, err = f.s.GetContact(f.ctx, ids[n-1]); err != nil || len(d.Segments) != 0 {
			f.t.Errorf("batch of %d: a contact whose row names no segment has segments %v (%v)", n, d.Segments, err)
		}
		// A second import of the same rows (new ids, as every import
		// gives) changes no membership.
		again := slices.Clone(batch)
		for i := range again {
			again[i].ID = f.ids.next()
		}
		f.upsert(again, at(2))
	}
	p, err := f.s.PreviewAudience(f.ctx, a.ID)
	f.must(err, "PreviewAudience")
	if p.Matched != 3-1+importBatch-1 {
		f.t.Errorf("join-a has %d members, want %d", p.Matched, 3-1+importBatch-1)
	}

	gone, err := f.s.CreateSegment(f.ctx, "join-gone", at(0))
	f.must(err, "CreateSegment")
	_, err = f.s.DeleteSegment(f.ctx, "join-gone")
	f.must(err, "DeleteSegment")
	for _, n := range []int{3, importBatch} {
		batch := make([]store.Contact, n)
		for i := range batch {
			batch[i] = f.contact(fmt.Sprintf("gone%d-%05d@example.org", n, i))
		}
		batch[n/2].Segments = []int64{gone.ID}
		if _, err := f.s.ImportContacts(f.ctx, batch, at(3)); !errors.Is(err, store.ErrConflict) {
			f.t.Errorf("batch of %d joining a deleted segment: err %v, want ErrConflict", n, err)
		}
		for _, c := range []store.Contact{batch[0], batch[n/2], batch[n-1]} {
			if _, err := f.s.ContactByEmail(f.ctx, c.Email); !errors.Is(err, store.ErrNotFound) {
				f.t.Errorf("batch of %d failed on a deleted segment, yet %s was written (%v)", n, c.Email, err)
			}
		}
	}
}

// PreviewAudience's eligible count is what AcceptBroadcast snapshots and
// what the pages then walk, for everyone and for a segment, with every
// kind of ineligible contact in the audience; matched counts them all.
func testPreview(f *fixture) {
	a := f.audience() // 10 contacts, 6 eligible; 7 members, 3 of them eligible
	check := func(what string, segment int64, matched, eligible int) {
		f.t.Helper()
		p, err := f.s.PreviewAudience(f.ctx, segment)
		f.must(err, "PreviewAudience(%s)", what)
		if p.Matched != int64(matched) || p.Eligible != int64(eligible) {
			f.t.Errorf("PreviewAudience(%s) = %+v, want matched %d, eligible %d", what, p, matched, eligible)
		}
		b := f.running("preview "+what, segment)
		if b.SnapshotTotal != p.Eligible {
			f.t.Errorf("%s: preview says %d eligible, the broadcast's snapshot %d", what, p.Eligible, b.SnapshotTotal)
		}
		if got := f.walk(b, 3); len(got) != eligible {
			f.t.Errorf("%s: preview says %d eligible, the pages walk %d", what, eligible, len(got))
		}
	}
	check("everyone", 0, 10, 6)
	check("segment", a.segment, 7, 3)

	// Suppressing and unsubscribing members changes eligible, not matched.
	_, err := f.s.Suppress(f.ctx, a.members[0], "test", at(2))
	f.must(err, "Suppress")
	d, err := f.s.GetContact(f.ctx, a.members[1])
	f.must(err, "GetContact")
	f.must(f.unsubscribe(d.Email, at(2)), "Unsubscribe")
	check("segment after suppress and unsubscribe", a.segment, 7, 1)
	check("everyone after suppress and unsubscribe", 0, 10, 4)

	empty, err := f.s.CreateSegment(f.ctx, "empty", at(0))
	f.must(err, "CreateSegment")
	check("empty segment", empty.ID, 0, 0)
}
