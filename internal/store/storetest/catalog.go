package storetest

import (
	"errors"
	"slices"

	"github.com/oklog/ulid/v2"

	"github.com/rangecast/rangecast/internal/store"
)

var catalogCases = []testCase{
	{"ContactPages", testContactPages},
	{"Segments", testSegmentCatalog},
	{"Templates", testTemplateCatalog},
}

// Keyset pages walk every contact (or every member) once, in id order,
// with the gate's verdict.
func testContactPages(f *fixture) {
	ids := f.subscribers("list", 7)
	seg, err := f.s.CreateSegment(f.ctx, "odd", at(0))
	f.must(err, "CreateSegment")
	_, err = f.s.AddMembers(f.ctx, seg.ID, []ulid.ULID{ids[1], ids[3], ids[5]})
	f.must(err, "AddMembers")
	_, err = f.s.Suppress(f.ctx, ids[3], "asked", at(1))
	f.must(err, "Suppress")
	walk := func(segment int64, limit int) []store.ContactDetail {
		var out []store.ContactDetail
		var after ulid.ULID
		for {
			page, err := f.s.ContactPage(f.ctx, segment, after, limit)
			f.must(err, "ContactPage")
			out = append(out, page...)
			if len(page) < limit {
				return out
			}
			after = page[len(page)-1].ID
		}
	}
	all := walk(0, 3)
	if len(all) != 7 {
		f.t.Fatalf("all contacts: %d, want 7", len(all))
	}
	for i, c := range all {
		if c.ID != ids[i] || c.Email == "" {
			f.t.Fatalf("contact %d: %+v, want %s", i, c, ids[i])
		}
		if c.Eligible != (i != 3) || c.Suppressed != (i == 3) {
			f.t.Errorf("contact %d: eligible %v suppressed %v", i, c.Eligible, c.Suppressed)
		}
		// Each with its segments, as GetContact has them (tester: a list
		// in JSON showed none).
		d, err := f.s.GetContact(f.ctx, c.ID)
		f.must(err, "GetContact")
		if !slices.Equal(c.Segments, d.Segments) || slices.Contains(c.Segments, "odd") != (i%2 == 1) {
			f.t.Errorf("contact %d listed in segments %q; GetContact says %q", i, c.Segments, d.Segments)
		}
	}
	members := walk(seg.ID, 2)
	if len(members) != 3 || members[0].ID != ids[1] || members[1].ID != ids[3] || members[2].ID != ids[5] {
		f.t.Fatalf("members: %v", members)
	}
}

// Segments list with member and broadcast counts; one that is a
// broadcast's audience cannot be deleted, another can (with its
// memberships, not its contacts).
func testSegmentCatalog(f *fixture) {
	ids := f.subscribers("seg", 3)
	var segs []store.Segment
	for _, name := range []string{"a", "b", "c"} {
		s, err := f.s.CreateSegment(f.ctx, name, at(0))
		f.must(err, "CreateSegment")
		segs = append(segs, s)
	}
	_, err := f.s.AddMembers(f.ctx, segs[0].ID, ids)
	f.must(err, "AddMembers")
	_, err = f.s.AddMembers(f.ctx, segs[1].ID, ids[:1])
	f.must(err, "AddMembers")
	f.draft("to b", segs[1].ID)
	page, err := f.s.SegmentPage(f.ctx, 0, 2)
	f.must(err, "SegmentPage")
	next, err := f.s.SegmentPage(f.ctx, page[len(page)-1].ID, 2)
	f.must(err, "SegmentPage")
	page = append(page, next...)
	if len(page) != 3 || page[0].Name != "a" || page[0].Members != 3 || page[1].Members != 1 || page[1].Broadcasts != 1 || page[2].Members != 0 {
		f.t.Fatalf("segments: %+v", page)
	}
	_, err = f.s.DeleteSegment(f.ctx, "b")
	f.wantErr(err, store.ErrConflict, "DeleteSegment(audience of a draft)")
	_, err = f.s.DeleteSegment(f.ctx, "nope")
	f.wantErr(err, store.ErrNotFound, "DeleteSegment(unknown)")
	g, err := f.s.DeleteSegment(f.ctx, "a")
	f.must(err, "DeleteSegment")
	if g.Members != 3 {
		f.t.Errorf("deleted segment: %+v", g)
	}
	if _, err := f.s.SegmentID(f.ctx, "a"); !errors.Is(err, store.ErrNotFound) {
		f.t.Errorf("deleted segment still found: %v", err)
	}
	if got := f.eligible(); len(got) != 3 {
		f.t.Errorf("contacts after deleting a segment: %d, want 3", len(got))
	}
}

func testTemplateCatalog(f *fixture) {
	for _, name := range []string{"welcome", "reset", "invoice"} {
		_, err := f.s.PutTemplate(f.ctx, store.Template{Name: name, Subject: "S " + name, Text: "hi"}, at(0))
		f.must(err, "PutTemplate")
	}
	page, err := f.s.TemplatePage(f.ctx, "", 2)
	f.must(err, "TemplatePage")
	if len(page) != 2 || page[0].Name != "invoice" || page[1].Name != "reset" {
		f.t.Fatalf("first page: %+v", page)
	}
	page, err = f.s.TemplatePage(f.ctx, "reset", 2)
	f.must(err, "TemplatePage")
	if len(page) != 1 || page[0].Name != "welcome" {
		f.t.Fatalf("second page: %+v", page)
	}
	t, err := f.s.DeleteTemplate(f.ctx, "reset")
	f.must(err, "DeleteTemplate")
	if t.Subject != "S reset" {
		f.t.Errorf("deleted template: %+v", t)
	}
	_, err = f.s.DeleteTemplate(f.ctx, "reset")
	f.wantErr(err, store.ErrNotFound, "DeleteTemplate twice")
	_, err = f.s.GetTemplate(f.ctx, "reset")
	f.wantErr(err, store.ErrNotFound, "GetTemplate after delete")
}
