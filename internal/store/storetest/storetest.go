// Package storetest is the conformance suite every store.Store implementation
// must pass (postgres and sqlite both run it): the same cases, run against a fresh
// store each. An implementation's test calls
//
//	storetest.Run(t, func(t *testing.T) store.Store { return open(t) })
//
// Every case pins one behaviour the rest of rangecast relies on: the
// suppression gate, claim-before-send, outcomes that never overwrite, and
// the accept-time snapshot agreeing with the pages.
package storetest

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/rangecast/rangecast/internal/store"
)

// Run runs every case as a parallel subtest. open must return an empty store
// for that subtest's exclusive use and arrange for it to be closed when the
// subtest ends (t.Cleanup); it may skip the test.
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	t.Helper()
	groups := []struct {
		name  string
		cases []testCase
	}{
		{"Contacts", contactCases},
		{"Identity", identityCases},
		{"Text", textCases},
		{"Errors", errorCases},
		{"Gate", gateCases},
		{"Claims", claimCases},
		{"Pending", pendingCases},
		{"Outcomes", outcomeCases},
		{"State", stateCases},
		{"Broadcasts", broadcastCases},
		{"Unsubscribe", unsubscribeCases},
		{"InDoubt", inDoubtCases},
		{"Ledger", ledgerCases},
		{"Audience", audienceCases},
		{"Receipts", receiptCases},
		{"Deferred", deferredCases},
		{"BroadcastOps", broadcastOpsCases},
		{"Erase", eraseCases},
		{"Catalog", catalogCases},
	}
	for _, g := range groups {
		t.Run(g.name, func(t *testing.T) {
			t.Parallel()
			for _, c := range g.cases {
				t.Run(c.name, func(t *testing.T) {
					t.Parallel()
					c.run(newFixture(t, open(t)))
				})
			}
		})
	}
}

type testCase struct {
	name string
	run  func(f *fixture)
}

// t0 is the suite's clock: every time the store is given derives from it.
var t0 = time.Date(2031, time.March, 14, 9, 26, 53, 0, time.UTC)

// at returns t0 plus n minutes, a distinct and recognisable "now".
func at(n int) time.Time { return t0.Add(time.Duration(n) * time.Minute) }

// fixture is one case's store, context and id source.
type fixture struct {
	t   *testing.T
	s   store.Store
	ctx context.Context
	ids idGen
	// probe is a draft whole-audience broadcast used to read contacts back
	// through EligiblePage (the Store has no contact getter).
	probe *store.Broadcast
}

func newFixture(t *testing.T, s store.Store) *fixture {
	return &fixture{t: t, s: s, ctx: t.Context(), ids: idGen{entropy: &splitmix{state: 0x5eed}}}
}

// idGen makes ULIDs one second apart from t0, so the order of the ids is the
// order in which they were made.
type idGen struct {
	n       int
	entropy *splitmix
}

func (g *idGen) next() ulid.ULID {
	g.n++
	return ulid.MustNew(ulid.Timestamp(t0.Add(time.Duration(g.n)*time.Second)), g.entropy)
}

// splitmix is a deterministic entropy source (splitmix64).
type splitmix struct{ state uint64 }

func (s *splitmix) Uint64() uint64 {
	s.state += 0x9e3779b97f4a7c15
	z := s.state
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

func (s *splitmix) Read(p []byte) (int, error) {
	var buf [8]byte
	for i := 0; i < len(p); i += 8 {
		binary.LittleEndian.PutUint64(buf[:], s.Uint64())
		copy(p[i:], buf[:])
	}
	return len(p), nil
}

var (
	minULID = ulid.ULID{}
	maxULID = ulid.ULID{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
)

// succ returns the id right after id (id must not be the largest).
func succ(id ulid.ULID) ulid.ULID {
	for i := len(id) - 1; i >= 0; i-- {
		id[i]++
		if id[i] != 0 {
			break
		}
	}
	return id
}

func (f *fixture) must(err error, what string, args ...any) {
	f.t.Helper()
	if err != nil {
		f.t.Fatalf("%s: %v", fmt.Sprintf(what, args...), err)
	}
}

// wantErr fails unless err wraps target.
func (f *fixture) wantErr(err, target error, what string, args ...any) {
	f.t.Helper()
	if !errors.Is(err, target) {
		f.t.Fatalf("%s: error %v, want one wrapping %q", fmt.Sprintf(what, args...), err, target)
	}
}

// contact is a subscribed contact with a fresh id.
func (f *fixture) contact(email string) store.Contact {
	return store.Contact{ID: f.ids.next(), Email: email, Name: email, Subscribed: true}
}

func (f *fixture) upsert(cs []store.Contact, now time.Time) []ulid.ULID {
	f.t.Helper()
	ids, err := f.s.ImportContacts(f.ctx, cs, now)
	f.must(err, "ImportContacts(%d contacts)", len(cs))
	if len(ids) != len(cs) {
		f.t.Fatalf("ImportContacts returned %d ids for %d contacts", len(ids), len(cs))
	}
	return ids
}

// subscribers upserts n subscribed contacts and returns their ids (ascending).
func (f *fixture) subscribers(prefix string, n int) []ulid.ULID {
	f.t.Helper()
	cs := make([]store.Contact, n)
	for i := range cs {
		cs[i] = f.contact(fmt.Sprintf("%s%04d@example.org", prefix, i))
	}
	return f.upsert(cs, t0)
}

var content = store.Content{
	FromName:    "Rangecast",
	FromAddress: "news@example.org",
	Subject:     "Spring issue",
	HTML:        "<p>Hello</p>",
	Text:        "Hello",
}

// draft creates a draft broadcast (segment 0: whole audience).
func (f *fixture) draft(name string, segment int64) store.Broadcast {
	f.t.Helper()
	b, created, err := f.s.CreateBroadcast(f.ctx, store.Broadcast{
		ID: f.ids.next(), Name: name, Content: content, SegmentID: segment, CreatedAt: t0,
	})
	f.must(err, "CreateBroadcast(%s)", name)
	if !created {
		f.t.Fatalf("CreateBroadcast(%s) without request id: created=false", name)
	}
	return b
}

// running creates and accepts a broadcast.
func (f *fixture) running(name string, segment int64) store.Broadcast {
	f.t.Helper()
	b, err := f.s.AcceptBroadcast(f.ctx, f.draft(name, segment).ID, at(1))
	f.must(err, "AcceptBroadcast(%s)", name)
	return b
}

// page is EligiblePage with checks that hold for every page: at most limit
// contacts, strictly ascending ids, all within [from, until].
func (f *fixture) page(b store.Broadcast, from, until ulid.ULID, limit int) []store.Contact {
	f.t.Helper()
	cs, err := f.s.EligiblePage(f.ctx, b, from, until, limit)
	f.must(err, "EligiblePage(%s, %s, %d)", from, until, limit)
	if len(cs) > limit {
		f.t.Fatalf("EligiblePage(limit %d) returned %d contacts", limit, len(cs))
	}
	for i, c := range cs {
		if c.ID.Compare(from) < 0 || c.ID.Compare(until) > 0 {
			f.t.Fatalf("EligiblePage(%s, %s) returned %s, outside the bounds", from, until, c.ID)
		}
		if i > 0 && cs[i-1].ID.Compare(c.ID) >= 0 {
			f.t.Fatalf("EligiblePage not in id order: %s then %s", cs[i-1].ID, c.ID)
		}
	}
	return cs
}

// walk reads the whole id space page by page, as the page workers do.
func (f *fixture) walk(b store.Broadcast, limit int) []ulid.ULID {
	f.t.Helper()
	var out []ulid.ULID
	from := minULID
	for {
		cs := f.page(b, from, maxULID, limit)
		for _, c := range cs {
			out = append(out, c.ID)
		}
		if len(cs) < limit {
			return out
		}
		from = succ(cs[len(cs)-1].ID)
	}
}

// eligible returns every contact that passes the whole-audience gate, by id.
func (f *fixture) eligible() map[ulid.ULID]store.Contact {
	f.t.Helper()
	if f.probe == nil {
		b := f.draft("probe", 0)
		f.probe = &b
	}
	out := map[ulid.ULID]store.Contact{}
	for _, c := range f.page(*f.probe, minULID, maxULID, 1_000_000) {
		out[c.ID] = c
	}
	return out
}

func (f *fixture) claims(b store.Broadcast, ids []ulid.ULID) []store.Claim {
	out := make([]store.Claim, len(ids))
	for i, id := range ids {
		out[i] = store.Claim{ContactID: id, Email: "c-" + id.String() + "@example.org", MessageID: messageID(b.ID, id)}
	}
	return out
}

func messageID(b, c ulid.ULID) string { return fmt.Sprintf("<%s.%s@mail.example.org>", b, c) }

// claim claims ids for b as the run "w1/1".
func (f *fixture) claim(b store.Broadcast, ids []ulid.ULID, now time.Time) []ulid.ULID {
	f.t.Helper()
	return f.claimAs("w1/1", b, ids, now)
}

func (f *fixture) claimAs(owner string, b store.Broadcast, ids []ulid.ULID, now time.Time) []ulid.ULID {
	f.t.Helper()
	got, err := f.s.Claim(f.ctx, b.ID, owner, f.claims(b, ids), now)
	f.must(err, "Claim(%d)", len(ids))
	return got
}

// claimPage claims a page's contacts, with their own addresses, as owner
// and fails the test unless every one was claimed.
func (f *fixture) claimPage(owner string, b store.Broadcast, page []store.Contact, now time.Time) {
	f.t.Helper()
	claims := make([]store.Claim, len(page))
	for i, c := range page {
		claims[i] = store.Claim{ContactID: c.ID, Email: c.Email, MessageID: messageID(b.ID, c.ID)}
	}
	got, err := f.s.Claim(f.ctx, b.ID, owner, claims, now)
	f.must(err, "Claim")
	if len(got) != len(page) {
		f.t.Fatalf("Claim: %d of %d", len(got), len(page))
	}
}

func (f *fixture) counts(b store.Broadcast) store.Counts {
	f.t.Helper()
	c, err := f.s.Counts(f.ctx, b.ID)
	f.must(err, "Counts")
	// Doubts reads the same two counts from only such rows (what a
	// completed broadcast's reason shows): checked wherever counts are.
	unknown, again, err := f.s.Doubts(f.ctx, b.ID)
	f.must(err, "Doubts")
	if unknown != c.Unknown || again != c.SentAgainInDoubt {
		f.t.Errorf("Doubts = %d unknown, %d sent again in doubt; Counts = %+v", unknown, again, c)
	}
	return c
}

// pending counts claims with no outcome (in flight or in doubt).
func (f *fixture) pending(b store.Broadcast) int64 {
	f.t.Helper()
	return f.counts(b).Claimed
}

// unsubscribe is what the unsubscribe link and the API do for an address:
// find the contact (case-insensitively), then UnsubscribeContact.
func (f *fixture) unsubscribe(email string, now time.Time) error {
	d, err := f.s.ContactByEmail(f.ctx, email)
	if err != nil {
		return err
	}
	return f.s.UnsubscribeContact(f.ctx, d.ID, ulid.ULID{}, now)
}

// addMembers adds contacts to a segment, as an import does.
func (f *fixture) addMembers(segment int64, contacts []ulid.ULID) error {
	_, err := f.s.AddMembers(f.ctx, segment, contacts)
	return err
}

// sameSet fails unless got and want hold the same ids (order ignored).
func (f *fixture) sameSet(what string, got, want []ulid.ULID) {
	f.t.Helper()
	g, w := sorted(got), sorted(want)
	if !slices.Equal(g, w) {
		f.t.Fatalf("%s: got %d ids %v, want %d ids %v", what, len(g), g, len(w), w)
	}
}

func sorted(ids []ulid.ULID) []ulid.ULID {
	out := slices.Clone(ids)
	slices.SortFunc(out, func(a, b ulid.ULID) int { return a.Compare(b) })
	return out
}

// purged checks what one purge batch returned:
// f.purged("first batch", 2)(f.s.PurgeReceipts(…)).
func (f *fixture) purged(what string, want int64) func(int64, error) {
	return func(n int64, err error) {
		f.t.Helper()
		f.must(err, "purge: %s", what)
		if n != want {
			f.t.Errorf("purge: %s deleted %d rows, want %d", what, n, want)
		}
	}
}
