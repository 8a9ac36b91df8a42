package storetest

import (
	"fmt"
	"slices"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/rangecast/rangecast/internal/ranges"
	"github.com/rangecast/rangecast/internal/store"
)

var gateCases = []testCase{
	{"EligiblePage", testEligiblePage},
	{"SnapshotAgreesWithPages", testSnapshotAgreesWithPages},
	{"EmptyAudience", testEmptyAudience},
	{"RangesEvenAfterBulkImport", testRangesEvenAfterBulkImport},
	{"AcceptOnlyDraft", testAcceptOnlyDraft},
	{"AcceptUnknown", testAcceptUnknown},
}

// audience is a population in id order where every kind of ineligible
// contact sits between eligible ones, with a segment cutting across it.
type audience struct {
	segment  int64
	all      []ulid.ULID // every contact, ascending
	eligible []ulid.ULID // whole-audience gate, ascending
	members  []ulid.ULID // eligible segment members, ascending
}

func (f *fixture) audience() audience {
	f.t.Helper()
	type row struct {
		c      store.Contact
		member bool
	}
	var rows []row
	add := func(email string, sub, dnc, supp, member bool) {
		rows = append(rows, row{store.Contact{ID: f.ids.next(), Email: email, Name: email, Subscribed: sub, DoNotContact: dnc, Suppressed: supp}, member})
	}
	add("e1@example.org", true, false, false, true)
	add("unsub@example.org", false, false, false, true)
	add("e2@example.org", true, false, false, false)
	add("dnc@example.org", true, true, false, true)
	add("e3@example.org", true, false, false, true)
	add("suppressed@example.org", true, false, true, true)
	add("e4@example.org", true, false, false, false)
	add("", true, false, false, true) // no address
	add("e5@example.org", true, false, false, true)
	add("e6@example.org", true, false, false, false)

	cs := make([]store.Contact, len(rows))
	for i, r := range rows {
		cs[i] = r.c
	}
	ids := f.upsert(cs, at(0))
	seg, err := f.s.EnsureSegment(f.ctx, "members", at(0))
	f.must(err, "EnsureSegment")
	a := audience{segment: seg, all: ids}
	var members []ulid.ULID
	for i, r := range rows {
		eligible := r.c.Subscribed && !r.c.DoNotContact && !r.c.Suppressed && r.c.Email != ""
		if eligible {
			a.eligible = append(a.eligible, ids[i])
		}
		if r.member {
			members = append(members, ids[i])
			if eligible {
				a.members = append(a.members, ids[i])
			}
		}
	}
	f.must(f.addMembers(seg, members), "AddMembers")
	return a
}

func pageIDs(cs []store.Contact) []ulid.ULID {
	out := make([]ulid.ULID, len(cs))
	for i, c := range cs {
		out[i] = c.ID
	}
	return out
}

// EligiblePage applies the suppression gate (and the segment), orders by id,
// includes both bounds and honours the limit.
func testEligiblePage(f *fixture) {
	a := f.audience()
	whole := f.draft("whole", 0)
	seg := f.draft("segment", a.segment)
	e, m := a.eligible, a.members // e1..e6; e1, e3, e5
	cases := []struct {
		name        string
		b           store.Broadcast
		from, until ulid.ULID
		limit       int
		want        []ulid.ULID
	}{
		{"whole audience", whole, minULID, maxULID, 100, e},
		{"segment", seg, minULID, maxULID, 100, m},
		{"limit", whole, minULID, maxULID, 2, e[:2]},
		{"limit 1", seg, minULID, maxULID, 1, m[:1]},
		{"from and until inclusive", whole, e[1], e[3], 100, e[1:4]},
		{"single id range", whole, e[2], e[2], 100, e[2:3]},
		{"bounds on ineligible ids", whole, a.all[1], a.all[7], 100, []ulid.ULID{e[1], e[2], e[3]}},
		{"bounds and limit", whole, e[1], maxULID, 3, e[1:4]},
		{"segment bounds inclusive", seg, m[1], m[2], 100, m[1:3]},
		{"past the last id", whole, succ(e[len(e)-1]), maxULID, 100, nil},
		{"empty range", whole, e[3], e[2], 100, nil},
	}
	for _, tc := range cases {
		got := pageIDs(f.page(tc.b, tc.from, tc.until, tc.limit))
		if !slices.Equal(got, tc.want) {
			f.t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}

	// The page returns the contact's address and name.
	cs := f.page(whole, e[0], e[0], 1)
	if len(cs) != 1 || cs[0].Email != "e1@example.org" || cs[0].Name != "e1@example.org" {
		f.t.Errorf("page of e1: got %+v", cs)
	}

	// Eligibility is decided page by page: an unsubscribe after acceptance
	// is honoured by the next page.
	running, err := f.s.AcceptBroadcast(f.ctx, whole.ID, at(1))
	f.must(err, "AcceptBroadcast")
	f.must(f.unsubscribe("e2@example.org", at(2)), "Unsubscribe(e2)")
	want := slices.Concat(e[:1], e[2:])
	if got := pageIDs(f.page(running, minULID, maxULID, 100)); !slices.Equal(got, want) {
		f.t.Errorf("after unsubscribing e2: got %v, want %v", got, want)
	}
}

// The accept-time snapshot (count, first and last id) is the same gate as
// the pages: walking the id space page by page finds exactly SnapshotTotal
// contacts, from MinID to MaxID.
func testSnapshotAgreesWithPages(f *fixture) {
	// A larger population with every combination of flags, the segment
	// taking a pseudo-random third.
	seg, err := f.s.EnsureSegment(f.ctx, "third", at(0))
	f.must(err, "EnsureSegment")
	rnd := &splitmix{state: 42}
	var cs []store.Contact
	var members []ulid.ULID
	for i := range 400 {
		r := rnd.Uint64()
		c := store.Contact{
			ID:           f.ids.next(),
			Email:        fmt.Sprintf("p%03d@example.org", i),
			Subscribed:   r%5 != 0,
			DoNotContact: r%7 == 0,
			Suppressed:   r%11 == 0,
		}
		cs = append(cs, c)
		if (r>>8)%3 == 0 {
			members = append(members, c.ID)
		}
	}
	cs = append(cs, store.Contact{ID: f.ids.next(), Email: "", Subscribed: true})
	members = append(members, cs[len(cs)-1].ID)
	f.upsert(cs, at(0))
	f.must(f.addMembers(seg, members), "AddMembers")

	for _, tc := range []struct {
		name    string
		segment int64
	}{{"whole audience", 0}, {"segment", seg}} {
		b := f.running(tc.name, tc.segment)
		if b.State != store.StateRunning {
			f.t.Errorf("%s: accepted broadcast is %s, want running", tc.name, b.State)
		}
		if !b.StartedAt.Equal(at(1)) {
			f.t.Errorf("%s: StartedAt = %v, want %v", tc.name, b.StartedAt, at(1))
		}
		for _, limit := range []int{7, 1000} {
			ids := f.walk(b, limit)
			if len(ids) == 0 {
				f.t.Fatalf("%s: empty walk; the population should have eligible contacts", tc.name)
			}
			if int64(len(ids)) != b.SnapshotTotal || ids[0] != b.MinID || ids[len(ids)-1] != b.MaxID {
				f.t.Errorf("%s: snapshot (total %d, %s..%s) disagrees with a walk in pages of %d (%d, %s..%s)",
					tc.name, b.SnapshotTotal, b.MinID, b.MaxID, limit, len(ids), ids[0], ids[len(ids)-1])
			}
		}
		// A small audience is cut from every id (the sample is all of it):
		// ranges as the e2e tests compute them.
		ids := f.walk(b, 1000)
		if want := ranges.AudienceCuts(ids); !slices.Equal(b.RangeStarts, want) {
			f.t.Errorf("%s: RangeStarts = %v, want ranges.AudienceCuts of the audience %v", tc.name, b.RangeStarts, want)
		}
		// The last eligible contact at or below any contact's id (eligible
		// or not, in the segment or not) is the walk's last at or below it.
		for _, c := range cs {
			k, found := slices.BinarySearchFunc(ids, c.ID, ulid.ULID.Compare)
			if !found {
				k-- // the eligible id just below c's, if any
			}
			got, ok, err := f.s.LastEligible(f.ctx, b, c.ID)
			f.must(err, "LastEligible(%s)", c.ID)
			switch {
			case k < 0 && ok:
				f.t.Errorf("%s: LastEligible(%s) = %s; want none, no eligible contact is at or below it", tc.name, c.ID, got.ID)
			case k >= 0 && (!ok || got.ID != ids[k]):
				f.t.Errorf("%s: LastEligible(%s) = %s (found %v), want %s", tc.name, c.ID, got.ID, ok, ids[k])
			}
		}
		if got, ok, err := f.s.LastEligible(f.ctx, b, maxULID); err != nil || !ok || got.ID != ids[len(ids)-1] {
			f.t.Errorf("%s: LastEligible(max) = %s, %v, %v; want the last eligible %s", tc.name, got.ID, ok, err, ids[len(ids)-1])
		}
		// The snapshot is stored, not recomputed.
		got, err := f.s.GetBroadcast(f.ctx, b.ID)
		f.must(err, "GetBroadcast")
		if got.SnapshotTotal != b.SnapshotTotal || got.MinID != b.MinID || got.MaxID != b.MaxID || got.State != store.StateRunning ||
			!slices.Equal(got.RangeStarts, b.RangeStarts) {
			f.t.Errorf("%s: GetBroadcast after accept = %+v, want the accepted %+v", tc.name, got, b)
		}
	}
}

// A bulk import gives ids of a few milliseconds: cut by id space, the whole
// import would fall in one of the 32 ranges. Cut by the accept-time sample,
// no range holds more than twice the mean.
func testRangesEvenAfterBulkImport(f *fixture) {
	rnd := &splitmix{state: 7}
	var cs []store.Contact
	year := uint64(365 * 24 * time.Hour / time.Millisecond)
	for i := range 100 { // a year of sign-ups
		cs = append(cs, store.Contact{ID: ulid.MustNew(ulid.Timestamp(t0)+rnd.Uint64()%year, rnd), Email: fmt.Sprintf("old%03d@example.org", i), Subscribed: true})
	}
	for i := range 3000 { // one import, 3 ms of ids
		cs = append(cs, store.Contact{ID: ulid.MustNew(ulid.Timestamp(t0)+year+rnd.Uint64()%3, rnd), Email: fmt.Sprintf("bulk%04d@example.org", i), Subscribed: true})
	}
	f.upsert(cs, at(0))
	b := f.running("bulk", 0)
	rs, err := ranges.SplitAt(b.MinID, b.MaxID, b.RangeStarts)
	f.must(err, "SplitAt")
	if len(rs) != ranges.Count {
		f.t.Fatalf("%d ranges, want %d", len(rs), ranges.Count)
	}
	largest := 0
	for _, r := range rs {
		largest = max(largest, len(f.page(b, r.Start, r.End, len(cs))))
	}
	if mean := len(cs) / ranges.Count; largest > 2*mean {
		f.t.Errorf("largest range holds %d contacts, want ≤ 2 × the mean %d", largest, mean)
	}
}

// No eligible contact: the broadcast still starts, with an empty snapshot.
func testEmptyAudience(f *fixture) {
	check := func(name string, b store.Broadcast) {
		f.t.Helper()
		if b.State != store.StateRunning || b.SnapshotTotal != 0 || b.MinID != (ulid.ULID{}) || b.MaxID != (ulid.ULID{}) {
			f.t.Errorf("%s: accepted = state %s, total %d, %s..%s; want running, 0, zero ids",
				name, b.State, b.SnapshotTotal, b.MinID, b.MaxID)
		}
		if ids := f.walk(b, 10); len(ids) != 0 {
			f.t.Errorf("%s: pages found %v", name, ids)
		}
	}
	check("no contacts at all", f.running("nobody", 0))

	// Only ineligible contacts.
	f.upsert([]store.Contact{
		{ID: f.ids.next(), Email: "gone@example.org"}, // unsubscribed
		{ID: f.ids.next(), Email: "dnc@example.org", Subscribed: true, DoNotContact: true},
		{ID: f.ids.next(), Email: "supp@example.org", Subscribed: true, Suppressed: true},
		{ID: f.ids.next(), Email: "", Subscribed: true},
	}, at(0))
	check("only ineligible contacts", f.running("ineligible", 0))

	// Eligible contacts, none in the segment.
	seg, err := f.s.EnsureSegment(f.ctx, "empty", at(0))
	f.must(err, "EnsureSegment")
	f.subscribers("outside", 2)
	check("empty segment", f.running("empty segment", seg))
}

// Only a draft can be accepted; a refused accept changes nothing.
func testAcceptOnlyDraft(f *fixture) {
	f.subscribers("s", 3)
	b := f.running("once", 0)
	if b.SnapshotTotal != 3 {
		f.t.Fatalf("SnapshotTotal = %d, want 3", b.SnapshotTotal)
	}
	f.subscribers("late", 2)
	_, err := f.s.AcceptBroadcast(f.ctx, b.ID, at(5))
	f.wantErr(err, store.ErrConflict, "accepting a running broadcast")

	paused, err := f.s.SetState(f.ctx, b.ID, []store.State{store.StateRunning}, store.StatePaused, "", at(6))
	f.must(err, "pause")
	_, err = f.s.AcceptBroadcast(f.ctx, paused.ID, at(7))
	f.wantErr(err, store.ErrConflict, "accepting a paused broadcast")

	got, err := f.s.GetBroadcast(f.ctx, b.ID)
	f.must(err, "GetBroadcast")
	if got.State != store.StatePaused || got.SnapshotTotal != 3 || !got.StartedAt.Equal(at(1)) {
		f.t.Errorf("after refused accepts: state %s, total %d, started %v; want paused, 3, %v",
			got.State, got.SnapshotTotal, got.StartedAt, at(1))
	}
}

func testAcceptUnknown(f *fixture) {
	_, err := f.s.AcceptBroadcast(f.ctx, f.ids.next(), at(0))
	f.wantErr(err, store.ErrNotFound, "accepting an unknown broadcast")
}
