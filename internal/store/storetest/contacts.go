package storetest

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/oklog/ulid/v2"

	"github.com/rangecast/rangecast/internal/store"
)

var contactCases = []testCase{
	{"CaseInsensitiveEmailKeepsID", testUpsertCaseInsensitive},
	{"IDsInInputOrder", testUpsertInputOrder},
	{"Flags", testUpsertFlags},
	{"Empty", testUpsertEmpty},
	{"Segments", testSegments},
	{"AttributeMergeLimit", testAttributeMergeLimit},
}

// An existing contact is found by case-insensitive email and keeps its id;
// the name is replaced (unless the import gives none) and the attributes
// merged key by key.
func testUpsertCaseInsensitive(f *fixture) {
	first := f.contact("Alice@X.org")
	first.Name = "Alice"
	first.Attributes = map[string]any{"city": "Lyon", "plan": "free"}
	id := f.upsert([]store.Contact{first}, at(0))[0]
	if id != first.ID {
		f.t.Fatalf("new contact: got id %s, want the given id %s", id, first.ID)
	}

	again := f.contact("alice@x.org")
	again.Name = "Alice Liddell"
	again.Attributes = map[string]any{"plan": "pro", "lang": "fr"}
	got := f.upsert([]store.Contact{again}, at(1))[0]
	if got != first.ID {
		f.t.Fatalf("alice@x.org after Alice@X.org: got id %s, want the existing id %s", got, first.ID)
	}

	all := f.eligible()
	if len(all) != 1 {
		f.t.Fatalf("after two upserts of one address: %d contacts, want 1: %v", len(all), all)
	}
	c, ok := all[first.ID]
	if !ok {
		f.t.Fatalf("contact %s missing; have %v", first.ID, all)
	}
	if !strings.EqualFold(c.Email, "alice@x.org") {
		f.t.Errorf("email = %q, want alice@x.org in some case", c.Email)
	}
	if c.Name != "Alice Liddell" {
		f.t.Errorf("name = %q, want the imported %q (replaced)", c.Name, "Alice Liddell")
	}
	want := map[string]any{"city": "Lyon", "plan": "pro", "lang": "fr"}
	if !maps.EqualFunc(c.Attributes, want, func(a, b any) bool { return a == b }) {
		f.t.Errorf("attributes = %v, want merged %v", c.Attributes, want)
	}

	// A list of addresses without names (an email-only CSV, to add them to
	// a segment) leaves the name, as it leaves attributes it does not give.
	nameless := f.contact("ALICE@x.org")
	nameless.Name = ""
	f.upsert([]store.Contact{nameless}, at(2))
	if c := f.eligible()[first.ID]; c.Name != "Alice Liddell" || !maps.EqualFunc(c.Attributes, want, func(a, b any) bool { return a == b }) {
		f.t.Errorf("after an import without a name: name %q, attributes %v; want both kept", c.Name, c.Attributes)
	}
}

// Ids come back in input order, existing and new mixed.
func testUpsertInputOrder(f *fixture) {
	a, b, c := f.contact("a@example.org"), f.contact("b@example.org"), f.contact("c@example.org")
	if got := f.upsert([]store.Contact{a, b, c}, at(0)); !slices.Equal(got, []ulid.ULID{a.ID, b.ID, c.ID}) {
		f.t.Fatalf("first import: ids %v, want %v", got, []ulid.ULID{a.ID, b.ID, c.ID})
	}
	d, e := f.contact("d@example.org"), f.contact("e@example.org")
	batch := []store.Contact{f.contact("C@EXAMPLE.ORG"), d, f.contact("A@example.org"), e, f.contact("b@Example.org")}
	want := []ulid.ULID{c.ID, d.ID, a.ID, e.ID, b.ID}
	if got := f.upsert(batch, at(1)); !slices.Equal(got, want) {
		f.t.Fatalf("mixed import: ids %v, want %v", got, want)
	}
	if n := len(f.eligible()); n != 5 {
		f.t.Fatalf("%d contacts after importing 5 addresses, want 5", n)
	}
}

// An import may unsubscribe or flag a contact, never undo an unsubscribe, a
// do-not-contact flag or a suppression.
func testUpsertFlags(f *fixture) {
	type flags struct{ sub, dnc, supp bool }
	cases := []struct {
		name          string
		first, second flags
		unsubscribe   bool // Unsubscribe between the imports
		want          flags
	}{
		{"subscribed stays subscribed", flags{sub: true}, flags{sub: true}, false, flags{sub: true}},
		{"import unsubscribes", flags{sub: true}, flags{}, false, flags{}},
		{"import cannot resubscribe", flags{}, flags{sub: true}, false, flags{}},
		{"import cannot undo Unsubscribe", flags{sub: true}, flags{sub: true}, true, flags{}},
		{"do-not-contact turns on", flags{sub: true}, flags{sub: true, dnc: true}, false, flags{sub: true, dnc: true}},
		{"do-not-contact never turns off", flags{sub: true, dnc: true}, flags{sub: true}, false, flags{sub: true, dnc: true}},
		{"suppression turns on", flags{sub: true}, flags{sub: true, supp: true}, false, flags{sub: true, supp: true}},
		{"suppression never turns off", flags{sub: true, supp: true}, flags{sub: true}, false, flags{sub: true, supp: true}},
	}
	first := make([]store.Contact, len(cases))
	second := make([]store.Contact, len(cases))
	for i, tc := range cases {
		email := fmt.Sprintf("flags%d@example.org", i)
		first[i] = store.Contact{ID: f.ids.next(), Email: email, Subscribed: tc.first.sub, DoNotContact: tc.first.dnc, Suppressed: tc.first.supp}
		second[i] = store.Contact{ID: f.ids.next(), Email: strings.ToUpper(email), Subscribed: tc.second.sub, DoNotContact: tc.second.dnc, Suppressed: tc.second.supp}
	}
	ids := f.upsert(first, at(0))
	for i, tc := range cases {
		if tc.unsubscribe {
			f.must(f.unsubscribe(first[i].Email, at(1)), "Unsubscribe(%s)", first[i].Email)
		}
	}
	again := f.upsert(second, at(2))
	if !slices.Equal(again, ids) {
		f.t.Fatalf("reimport: ids %v, want the existing %v", again, ids)
	}
	// The flags are observable only through the gate: a contact is eligible
	// iff subscribed and neither flagged nor suppressed.
	eligible := f.eligible()
	for i, tc := range cases {
		want := tc.want.sub && !tc.want.dnc && !tc.want.supp
		if _, got := eligible[ids[i]]; got != want {
			f.t.Errorf("%s: eligible = %v, want %v (flags %+v)", tc.name, got, want, tc.want)
		}
	}
}

func testUpsertEmpty(f *fixture) {
	ids, err := f.s.ImportContacts(f.ctx, nil, at(0))
	f.must(err, "ImportContacts(nil)")
	if len(ids) != 0 {
		f.t.Fatalf("ImportContacts(nil) = %v, want no ids", ids)
	}
}

// EnsureSegment is idempotent by name; SegmentID finds it; membership is
// idempotent.
func testSegments(f *fixture) {
	id, err := f.s.EnsureSegment(f.ctx, "vip", at(0))
	f.must(err, "EnsureSegment(vip)")
	again, err := f.s.EnsureSegment(f.ctx, "vip", at(1))
	f.must(err, "EnsureSegment(vip) again")
	if again != id {
		f.t.Fatalf("EnsureSegment(vip) twice: ids %d then %d", id, again)
	}
	other, err := f.s.EnsureSegment(f.ctx, "other", at(0))
	f.must(err, "EnsureSegment(other)")
	if other == id {
		f.t.Fatalf("two segments share id %d", id)
	}
	got, err := f.s.SegmentID(f.ctx, "vip")
	f.must(err, "SegmentID(vip)")
	if got != id {
		f.t.Fatalf("SegmentID(vip) = %d, want %d", got, id)
	}
	_, err = f.s.SegmentID(f.ctx, "nope")
	f.wantErr(err, store.ErrNotFound, "SegmentID(nope)")

	ids := f.subscribers("seg", 3)
	f.must(f.addMembers(id, ids[:2]), "AddMembers")
	f.must(f.addMembers(id, ids[:2]), "AddMembers again")
	b := f.draft("vip only", id)
	got2 := f.walk(b, 10)
	f.sameSet("segment members", got2, ids[:2])
}

// A re-import whose attributes, merged with the stored ones, would be more
// than store.MaxAttributes changes nothing and returns the zero id for that
// row, in a small batch and in a bulk one (Postgres loads 500 or more with
// COPY); the other rows of the batch are written. A merge up to the limit,
// or one that only replaces values, is written.
func testAttributeMergeLimit(f *fixture) {
	attrs := func(prefix string, n int) map[string]any {
		m := make(map[string]any, n)
		for i := range n {
			m[fmt.Sprintf("%s%02d", prefix, i)] = "v"
		}
		return m
	}
	for _, size := range []int{3, 600} {
		full := f.contact(fmt.Sprintf("full%d@example.org", size))
		full.Attributes = attrs("a", 60)
		f.upsert([]store.Contact{full}, at(0))

		batch := make([]store.Contact, size)
		for i := range batch {
			batch[i] = f.contact(fmt.Sprintf("n%d-%d@example.org", size, i))
		}
		over := f.contact(strings.ToUpper(full.Email))
		over.Attributes = attrs("b", 5) // 65 once merged
		batch[1] = over
		got := f.upsert(batch, at(1))
		if got[1] != (ulid.ULID{}) {
			f.t.Errorf("batch of %d: a merge to 65 attributes returned id %s, want the zero id", size, got[1])
		}
		if got[0] != batch[0].ID || got[2] != batch[2].ID {
			f.t.Errorf("batch of %d: the other rows' ids %s, %s; want %s, %s", size, got[0], got[2], batch[0].ID, batch[2].ID)
		}
		d, err := f.s.GetContact(f.ctx, full.ID)
		f.must(err, "GetContact")
		if len(d.Attributes) != 60 || !d.UpdatedAt.Equal(at(0)) {
			f.t.Errorf("batch of %d: after a refused merge %d attributes, updated %v; want 60, unchanged", size, len(d.Attributes), d.UpdatedAt)
		}

		upTo := f.contact(full.Email)
		upTo.Attributes = attrs("b", 4)
		upTo.Attributes["a00"] = "new" // replaces a value: still 64
		if got := f.upsert([]store.Contact{upTo}, at(2)); got[0] != full.ID {
			f.t.Errorf("batch of %d: a merge to 64 attributes returned id %s, want %s", size, got[0], full.ID)
		}
		d, err = f.s.GetContact(f.ctx, full.ID)
		f.must(err, "GetContact")
		if len(d.Attributes) != store.MaxAttributes || d.Attributes["a00"] != "new" {
			f.t.Errorf("batch of %d: after a merge to the limit %d attributes, a00 %v; want %d, new", size, len(d.Attributes), d.Attributes["a00"], store.MaxAttributes)
		}

		// A contact that has more already (grown before the limit was
		// kept) is still unsubscribed by a row adding no key; a row adding
		// one is refused.
		legacy := f.contact(fmt.Sprintf("legacy%d@example.org", size))
		legacy.Attributes = attrs("l", 70)
		f.upsert([]store.Contact{legacy}, at(3))
		optOut := f.contact(legacy.Email)
		optOut.Subscribed = false
		optOut.Attributes = map[string]any{"l00": "changed"}
		if got := f.upsert([]store.Contact{optOut}, at(4)); got[0] != legacy.ID {
			f.t.Errorf("batch of %d: an opt-out of a contact with 70 attributes returned id %s, want %s", size, got[0], legacy.ID)
		}
		d, err = f.s.GetContact(f.ctx, legacy.ID)
		f.must(err, "GetContact")
		if d.Subscribed || len(d.Attributes) != 70 {
			f.t.Errorf("batch of %d: after the opt-out: subscribed %v, %d attributes; want unsubscribed, 70", size, d.Subscribed, len(d.Attributes))
		}
		grow := f.contact(legacy.Email)
		grow.Attributes = map[string]any{"new": "v"}
		if got := f.upsert([]store.Contact{grow}, at(5)); got[0] != (ulid.ULID{}) {
			f.t.Errorf("batch of %d: a row growing a contact of 70 attributes returned id %s, want the zero id", size, got[0])
		}
	}
}
