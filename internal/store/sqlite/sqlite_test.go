package sqlite

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/rangecast/rangecast/internal/store"
	"github.com/rangecast/rangecast/internal/store/storetest"
)

func open(t testing.TB, path string) *Store {
	t.Helper()
	s, err := Open(context.Background(), path)
	if err != nil {
		t.Fatalf("Open(%s): %v", path, err)
	}
	t.Cleanup(s.Close)
	return s
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		return open(t, filepath.Join(t.TempDir(), "rangecast.db"))
	})
}

func TestConformanceInMemory(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return open(t, ":memory:") })
}

var t0 = time.Date(2031, time.March, 14, 9, 26, 53, 0, time.UTC)

// ids makes n ascending ULIDs one second apart from t0.
func ids(n int) []ulid.ULID {
	entropy := ulid.Monotonic(zeroReader{}, 0)
	out := make([]ulid.ULID, n)
	for i := range out {
		out[i] = ulid.MustNew(ulid.Timestamp(t0.Add(time.Duration(i)*time.Second)), entropy)
	}
	return out
}

func must(t testing.TB, err error, what string) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// rangecast dev restarts on the same folder: a store reopened on the file
// has the contacts, segments, broadcasts and ledger it had, keeps contact
// ids by email, and does not apply its migrations again.
func TestReopenKeepsData(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "sub dir?#", "rangecast.db") // a path that needs escaping in a URI
	ids := ids(5)
	must(t, os.MkdirAll(filepath.Dir(path), 0o755), "mkdir")

	s, err := Open(ctx, path)
	must(t, err, "Open")
	cs := make([]store.Contact, 4)
	for i := range cs {
		cs[i] = store.Contact{ID: ids[i], Email: fmt.Sprintf("c%d@example.org", i), Name: fmt.Sprintf("C%d", i),
			Attributes: map[string]any{"n": float64(i)}, Subscribed: true}
	}
	_, err = s.ImportContacts(ctx, cs, t0)
	must(t, err, "ImportContacts")
	seg, err := s.EnsureSegment(ctx, "vip", t0)
	must(t, err, "EnsureSegment")
	_, err = s.AddMembers(ctx, seg, ids[:3])
	must(t, err, "AddMembers")
	b, _, err := s.CreateBroadcast(ctx, store.Broadcast{ID: ids[4], Name: "spring", RequestID: "req-1", SegmentID: seg,
		Content: store.Content{FromAddress: "news@example.org", Subject: "s", HTML: "h"}, CreatedAt: t0})
	must(t, err, "CreateBroadcast")
	b, err = s.AcceptBroadcast(ctx, b.ID, t0.Add(time.Minute))
	must(t, err, "AcceptBroadcast")
	claims := []store.Claim{
		{ContactID: ids[0], Email: "c0@example.org", MessageID: "<m0>"},
		{ContactID: ids[1], Email: "c1@example.org", MessageID: "<m1>"},
	}
	_, err = s.Claim(ctx, b.ID, "w1/1", claims, t0.Add(2*time.Minute))
	must(t, err, "Claim")
	must(t, s.RecordOutcomes(ctx, b.ID, "w1/1", []store.Outcome{{ContactID: ids[0], Status: store.SendSent}}, t0.Add(3*time.Minute)), "RecordOutcomes")
	s.Close()
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("database file: %v", err)
	}

	for round := range 2 {
		s := open(t, path)
		got, err := s.GetBroadcast(ctx, b.ID)
		must(t, err, "GetBroadcast after reopen")
		if !reflect.DeepEqual(got, b) {
			t.Fatalf("round %d: broadcast after reopen = %+v, want %+v", round, got, b)
		}
		if got.SnapshotTotal != 3 || got.MinID != ids[0] || got.MaxID != ids[2] {
			t.Fatalf("round %d: snapshot %d %s..%s", round, got.SnapshotTotal, got.MinID, got.MaxID)
		}
		page, err := s.EligiblePage(ctx, got, ulid.ULID{}, got.MaxID, 10)
		must(t, err, "EligiblePage")
		if len(page) != 3 || page[2].ID != ids[2] || page[2].Name != "C2" || page[2].Attributes["n"] != float64(2) {
			t.Fatalf("round %d: page after reopen = %+v", round, page)
		}
		c, err := s.Counts(ctx, b.ID)
		must(t, err, "Counts")
		if c != (store.Counts{Claimed: 1, Sent: 1}) {
			t.Fatalf("round %d: counts after reopen = %+v", round, c)
		}
		send, err := s.GetSend(ctx, b.ID, ids[0])
		must(t, err, "GetSend")
		if send.Status != store.SendSent || send.MessageID != "<m0>" || !send.ClaimedAt.Equal(t0.Add(2*time.Minute)) || !send.UpdatedAt.Equal(t0.Add(3*time.Minute)) {
			t.Fatalf("round %d: ledger row after reopen = %+v", round, send)
		}
		if again, err := s.Claim(ctx, b.ID, "w2/1", claims, t0.Add(4*time.Minute)); err != nil || len(again) != 0 {
			t.Fatalf("round %d: claim after reopen = %v, %v; want nothing", round, again, err)
		}
		if got, err := s.SegmentID(ctx, "vip"); err != nil || got != seg {
			t.Fatalf("round %d: SegmentID = %d, %v; want %d", round, got, err, seg)
		}
		if got, created, err := s.CreateBroadcast(ctx, store.Broadcast{ID: ulid.Make(), Name: "retry", RequestID: "req-1",
			Content: store.Content{FromAddress: "x@example.org", Subject: "s", HTML: "h"}, CreatedAt: t0}); err != nil || created || got.ID != b.ID {
			t.Fatalf("round %d: create with the same request id after reopen: %s created=%v %v", round, got.ID, created, err)
		}
		// The email index survived: the same address keeps its id.
		again, err := s.ImportContacts(ctx, []store.Contact{{ID: ulid.Make(), Email: "C3@EXAMPLE.ORG", Subscribed: true}}, t0)
		must(t, err, "ImportContacts after reopen")
		if again[0] != ids[3] {
			t.Fatalf("round %d: C3@EXAMPLE.ORG got id %s, want the existing %s", round, again[0], ids[3])
		}
		var versions int
		must(t, s.r.QueryRowContext(ctx, `SELECT count(*) FROM schema_migrations`).Scan(&versions), "schema_migrations")
		embedded, err := fs.Glob(migrations, "migrations/*.sql")
		must(t, err, "embedded migrations")
		if versions != len(embedded) {
			t.Fatalf("round %d: %d migrations recorded, want each of the %d applied once", round, versions, len(embedded))
		}
		s.Close()
	}
}

// The email key folds case beyond ASCII (SQLite's lower() would not).
func TestEmailFoldsUnicodeCase(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "rangecast.db"))
	ctx := t.Context()
	ids := ids(2)
	first, err := s.ImportContacts(ctx, []store.Contact{{ID: ids[0], Email: "ÖLAF@Ümlaut.example", Subscribed: true}}, t0)
	must(t, err, "ImportContacts")
	second, err := s.ImportContacts(ctx, []store.Contact{{ID: ids[1], Email: "ölaf@ümlaut.example", Subscribed: true}}, t0)
	must(t, err, "ImportContacts")
	if first[0] != ids[0] || second[0] != ids[0] {
		t.Fatalf("ids %s then %s, want %s twice", first[0], second[0], ids[0])
	}
	d, err := s.ContactByEmail(ctx, "Ölaf@ÜMLAUT.example")
	must(t, err, "ContactByEmail")
	must(t, s.UnsubscribeContact(ctx, d.ID, ulid.ULID{}, t0), "UnsubscribeContact")
	b, _, err := s.CreateBroadcast(ctx, store.Broadcast{ID: ulid.Make(), Name: "b", Content: store.Content{FromAddress: "a@b", Subject: "s", HTML: "h"}, CreatedAt: t0})
	must(t, err, "CreateBroadcast")
	if page, err := s.EligiblePage(ctx, b, ulid.ULID{}, maxID, 10); err != nil || len(page) != 0 {
		t.Fatalf("after Unsubscribe: page %v, %v", page, err)
	}
}

// One call may not name an address twice (Postgres refuses it too).
func TestUpsertDuplicateEmailInOneCall(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "rangecast.db"))
	ids := ids(2)
	_, err := s.ImportContacts(t.Context(), []store.Contact{{ID: ids[0], Email: "a@x.org"}, {ID: ids[1], Email: "A@X.org"}}, t0)
	if err == nil || !strings.Contains(err.Error(), "unique within one call") {
		t.Fatalf("duplicate address in one call: error %v", err)
	}
}

// Attributes merge like Postgres's jsonb ||: one level deep, a nested object
// is replaced (not merged), a null is kept, numbers come back as stored.
func TestAttributesMergeLikeJSONB(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "rangecast.db"))
	ctx := t.Context()
	ids := ids(2)
	_, err := s.ImportContacts(ctx, []store.Contact{{ID: ids[0], Email: "a@x.org", Subscribed: true,
		Attributes: map[string]any{"addr": map[string]any{"city": "Lyon", "zip": "69001"}, "keep": "me", "gone": "x"}}}, t0)
	must(t, err, "ImportContacts")
	_, err = s.ImportContacts(ctx, []store.Contact{{ID: ids[1], Email: "a@x.org", Subscribed: true,
		Attributes: map[string]any{"addr": map[string]any{"city": "Paris"}, "gone": nil, "big": 12345678901234567}}}, t0)
	must(t, err, "ImportContacts")
	var attrs string
	must(t, s.r.QueryRowContext(ctx, `SELECT attributes FROM contacts`).Scan(&attrs), "read attributes")
	want := `{"addr":{"city":"Paris"},"big":12345678901234567,"gone":null,"keep":"me"}`
	if attrs != want {
		t.Fatalf("attributes = %s, want %s", attrs, want)
	}
}

// A row that contradicts an existing key is ErrConflict, as with Postgres's
// unique violations: a second broadcast with the same id, a new address
// under an existing contact id.
func TestConflicts(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "rangecast.db"))
	ctx := t.Context()
	ids := ids(2)
	b := store.Broadcast{ID: ids[0], Name: "b", Content: store.Content{FromAddress: "a@b", Subject: "s", HTML: "h"}, CreatedAt: t0}
	_, _, err := s.CreateBroadcast(ctx, b)
	must(t, err, "CreateBroadcast")
	if _, _, err := s.CreateBroadcast(ctx, b); !errors.Is(err, store.ErrConflict) {
		t.Errorf("CreateBroadcast with a taken id: %v, want ErrConflict", err)
	}
	_, err = s.ImportContacts(ctx, []store.Contact{{ID: ids[1], Email: "a@x.org"}}, t0)
	must(t, err, "ImportContacts")
	if _, err := s.ImportContacts(ctx, []store.Contact{{ID: ids[1], Email: "b@x.org"}}, t0); !errors.Is(err, store.ErrConflict) {
		t.Errorf("ImportContacts of a new address with a taken id: %v, want ErrConflict", err)
	}
	if _, err := s.GetBroadcast(ctx, ids[1]); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetBroadcast(unknown): %v, want ErrNotFound", err)
	}
}

// Outcome writes and releases find their row by the primary key, with
// planner statistics and without.
func TestOutcomeWritesUsePrimaryKey(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "rangecast.db"))
	ctx := t.Context()
	b := seed(t, s, 2000)
	ids := ids(2000)
	claims := make([]store.Claim, len(ids))
	for i, c := range ids {
		claims[i] = store.Claim{ContactID: c, Email: "x", MessageID: "m"}
	}
	_, err := s.Claim(ctx, b.ID, "w1/1", claims, t0)
	must(t, err, "Claim")
	must(t, s.RecordOutcomes(ctx, b.ID, "w1/1", []store.Outcome{{ContactID: ids[0], Status: store.SendSent}}, t0), "RecordOutcomes")
	for _, analyzed := range []bool{false, true} {
		if analyzed {
			_, err := s.w.ExecContext(ctx, `ANALYZE`)
			must(t, err, "ANALYZE")
		}
		for name, q := range map[string]string{"record outcome": recordOutcome, "release": releaseClaim} {
			plan := explain(t, s, q, id(b.ID), id(ids[7]), "sent", "", int64(0), nil, "w1/1", 0)
			if !strings.Contains(plan, "USING PRIMARY KEY (broadcast_id=? AND contact_id=?)") || strings.Contains(plan, "broadcast_sends_pending") {
				t.Errorf("%s (analyzed %v): plan %q, want a primary-key lookup", name, analyzed, plan)
			}
		}
	}
}

func explain(t *testing.T, s *Store, q string, args ...any) string {
	t.Helper()
	// Bind as many of args as q has parameters (?1, ?2, ...; a number may
	// appear more than once).
	n := 0
	for _, m := range regexp.MustCompile(`\?(\d+)`).FindAllStringSubmatch(q, -1) {
		k, _ := strconv.Atoi(m[1])
		n = max(n, k)
	}
	rows, err := s.w.QueryContext(t.Context(), `EXPLAIN QUERY PLAN `+q, args[:n]...)
	must(t, err, "EXPLAIN")
	defer rows.Close()
	var lines []string
	for rows.Next() {
		var id, parent, notused int
		var detail string
		must(t, rows.Scan(&id, &parent, &notused, &detail), "scan plan")
		lines = append(lines, detail)
	}
	must(t, rows.Err(), "plan rows")
	return strings.Join(lines, "; ")
}

// seed upserts n contacts (ids(n)) and returns an accepted whole-audience
// broadcast.
func seed(t testing.TB, s *Store, n int) store.Broadcast {
	t.Helper()
	ctx := context.Background()
	batch := make([]store.Contact, 0, 5000)
	for i, c := range ids(n) {
		batch = append(batch, store.Contact{ID: c, Email: fmt.Sprintf("c%06d@example.org", i), Subscribed: true})
		if len(batch) == cap(batch) || i == n-1 {
			_, err := s.ImportContacts(ctx, batch, t0)
			must(t, err, "ImportContacts")
			batch = batch[:0]
		}
	}
	b, _, err := s.CreateBroadcast(ctx, store.Broadcast{
		ID: ulid.MustNew(ulid.Timestamp(t0.Add(-time.Hour)), ulid.Monotonic(zeroReader{}, 0)), Name: "seed", CreatedAt: t0,
		Content: store.Content{FromAddress: "news@example.org", Subject: "s", HTML: "h"},
	})
	must(t, err, "CreateBroadcast")
	b, err = s.AcceptBroadcast(ctx, b.ID, t0)
	must(t, err, "AcceptBroadcast")
	if b.SnapshotTotal != int64(n) {
		t.Fatalf("snapshot total %d, want %d", b.SnapshotTotal, n)
	}
	return b
}

// Two stores on one file (as two processes: `rangecast dev` and a CLI) claim
// the same contacts and import the same addresses at once: their writes wait
// for each other (BEGIN IMMEDIATE, busy_timeout) instead of failing, and
// every contact is claimed exactly once.
func TestTwoStoresOnOneFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rangecast.db")
	a := open(t, path)
	b := open(t, path)
	bc := seed(t, a, 300)
	all := ids(300)
	claims := make([]store.Claim, len(all))
	for i, c := range all {
		claims[i] = store.Claim{ContactID: c, Email: "x", MessageID: "m"}
	}
	const workers = 6
	got := make([][]ulid.ULID, workers)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		s := []*Store{a, b}[w%2]
		order := slices.Clone(claims)
		if w%3 == 1 {
			slices.Reverse(order)
		}
		wg.Go(func() {
			for lo := 0; lo < len(order); lo += 10 {
				mine, err := s.Claim(t.Context(), bc.ID, fmt.Sprintf("w%d/1", w), order[lo:min(lo+10, len(order))], t0)
				if err != nil {
					errs[w] = err
					return
				}
				outcomes := make([]store.Outcome, len(mine))
				for i, c := range mine {
					outcomes[i] = store.Outcome{ContactID: c, Status: store.SendSent}
				}
				if err := s.RecordOutcomes(t.Context(), bc.ID, fmt.Sprintf("w%d/1", w), outcomes, t0); err != nil {
					errs[w] = err
					return
				}
				got[w] = append(got[w], mine...)
			}
		})
	}
	// Imports at the same time from both stores: ImportContacts reads
	// before it writes, the transaction that a deferred BEGIN would have to
	// upgrade (and could not, with SQLITE_BUSY, once the other store wrote).
	importErrs := make([]error, 4)
	for w := range importErrs {
		s := []*Store{a, b}[w%2]
		wg.Go(func() {
			for round := range 20 {
				cs := make([]store.Contact, 20)
				for i := range cs {
					cs[i] = store.Contact{ID: ulid.Make(), Email: fmt.Sprintf("import%02d@example.org", i), Subscribed: true,
						Attributes: map[string]any{fmt.Sprintf("w%d", w): round}}
				}
				if _, err := s.ImportContacts(t.Context(), cs, t0); err != nil {
					importErrs[w] = err
					return
				}
			}
		})
	}
	wg.Wait()
	must(t, errors.Join(errs...), "concurrent claims")
	must(t, errors.Join(importErrs...), "concurrent imports")
	union := slices.Concat(got...)
	slices.SortFunc(union, func(x, y ulid.ULID) int { return x.Compare(y) })
	if !slices.Equal(union, all) {
		t.Fatalf("claimed %d contacts (with repeats), want each of %d once", len(union), len(all))
	}
	for _, s := range []*Store{a, b} {
		c, err := s.Counts(t.Context(), bc.ID)
		must(t, err, "Counts")
		if c != (store.Counts{Sent: 300}) {
			t.Fatalf("counts %+v, want 300 sent", c)
		}
	}
}

var maxID = ulid.ULID{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// Upgrading to migration 008 mid-broadcast backfills its sums.
func TestReputationBackfill(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "rangecast.db"))
	storetest.ReputationBackfill(t, s, func(t *testing.T) {
		ctx := t.Context()
		for _, q := range []string{`DROP TABLE broadcast_reputation`, `DELETE FROM schema_migrations WHERE version IN (8, 20)`} {
			if _, err := s.w.ExecContext(ctx, q); err != nil {
				t.Fatal(err)
			}
		}
		if err := migrate(ctx, s.w); err != nil {
			t.Fatal(err)
		}
	})
}
