package postgres_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/oklog/ulid/v2"

	"github.com/rangecast/rangecast/internal/ranges"
	"github.com/rangecast/rangecast/internal/store"
	"github.com/rangecast/rangecast/internal/store/postgres"
	"github.com/rangecast/rangecast/internal/testenv"
)

// TestAudienceFromIndex: once the visibility map covers contacts, accepting
// a broadcast reads the eligible audience from contacts_eligible alone
// (an index-only scan with no heap fetch), and the snapshot is still the
// gate's exact count: a contact whose address was erased while it was
// imported (not suppressed, its hash in erased_addresses) is not counted.
// The ranges are cut at the audience's quantiles, whole audience and
// segment alike.
func TestAudienceFromIndex(t *testing.T) {
	t.Parallel()
	s := testenv.Postgres(t)
	ctx := t.Context()
	pool := s.Pool()
	t0 := time.Date(2031, time.March, 14, 9, 0, 0, 0, time.UTC)
	const n = 20_000
	seedContacts(t, pool, n, "index.example", t0)
	// Erased while its import ran: the gate excludes it by its hash.
	if _, err := pool.Exec(ctx, `INSERT INTO erased_addresses (hash, erased_at)
SELECT erasure_hash, $1 FROM contacts WHERE email = 'c7@index.example'`, t0); err != nil {
		t.Fatal(err)
	}
	seg, err := s.EnsureSegment(ctx, "odd", t0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO segment_members (segment_id, contact_id)
SELECT $1, id FROM contacts WHERE email ~ '^c[0-9]*[13579]@'`, seg); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE contacts, segment_members, erased_addresses`); err != nil {
		t.Fatal(err)
	}
	// VACUUM marks a page all-visible only when no transaction still
	// running (another test's, in any schema) may not see its rows; until
	// it has, an index-only scan visits the rows anyway and the planner
	// rightly prefers the primary key. Vacuum again while other tests'
	// transactions end.
	visible := func() bool {
		var v bool
		if err := pool.QueryRow(ctx, `SELECT relallvisible = relpages FROM pg_class WHERE oid = 'contacts'::regclass`).Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	for deadline := time.Now().Add(30 * time.Second); !visible() && time.Now().Before(deadline); {
		time.Sleep(200 * time.Millisecond)
		if _, err := pool.Exec(ctx, `VACUUM contacts`); err != nil {
			t.Fatal(err)
		}
	}
	allVisible := visible()

	for _, tc := range []struct {
		name    string
		segment int64
		want    int64
	}{
		{"whole audience", 0, n - n/20 - 1},
		{"segment", seg, n/2 - 1}, // the unsubscribed (every 20th) are even
	} {
		t.Run(tc.name, func(t *testing.T) {
			tx, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx) //nolint:errcheck
			if _, err := tx.Exec(ctx, postgres.IndexOnlySQL); err != nil {
				t.Fatal(err)
			}
			var args []any
			if tc.segment != 0 {
				args = append(args, tc.segment)
			}
			rows, err := tx.Query(ctx, "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) "+postgres.ExactSQL(tc.segment), args...)
			if err != nil {
				t.Fatal(err)
			}
			var plan []string
			for rows.Next() {
				var l string
				if err := rows.Scan(&l); err != nil {
					t.Fatal(err)
				}
				plan = append(plan, l)
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			p := strings.Join(plan, "\n")
			if !allVisible {
				t.Logf("VACUUM left contacts' pages not all-visible for 30 s (concurrent transactions); the plan is not checked:\n%s", p)
			} else if !strings.Contains(p, "Index Only Scan using contacts_eligible") || strings.Contains(p, "Seq Scan on contacts") ||
				strings.Contains(p, "Index Scan using contacts_pkey") {
				t.Errorf("the audience is not read from contacts_eligible alone:\n%s", p)
			}
			// The heap fetches are pinned when VACUUM covered contacts.
			visible := allVisible
			for i, l := range plan {
				if !strings.Contains(l, "Index Only Scan using contacts_eligible") || i+1 == len(plan) {
					continue
				}
				if f := plan[i+1]; strings.Contains(f, "Heap Fetches:") && !strings.HasSuffix(f, "Heap Fetches: 0") {
					if visible {
						t.Errorf("heap fetches after VACUUM: %s\n%s", strings.TrimSpace(f), p)
					} else {
						t.Logf("VACUUM left contacts' pages not all-visible (a concurrent transaction): %s", strings.TrimSpace(f))
					}
				}
			}
			tx.Rollback(ctx) //nolint:errcheck

			b, _, err := s.CreateBroadcast(ctx, store.Broadcast{
				ID: ulid.MustNew(ulid.Timestamp(t0.Add(time.Duration(tc.segment)*time.Second)), nil), Name: tc.name, SegmentID: tc.segment,
				CreatedAt: t0, Content: store.Content{FromAddress: "news@index.example", Subject: "s", HTML: "h"},
			})
			if err != nil {
				t.Fatal(err)
			}
			if b, err = s.AcceptBroadcast(ctx, b.ID, t0); err != nil {
				t.Fatal(err)
			}
			if b.SnapshotTotal != tc.want {
				t.Errorf("SnapshotTotal = %d, want %d", b.SnapshotTotal, tc.want)
			}
			var walked []ulid.ULID
			for from := (ulid.ULID{}); ; {
				page, err := s.EligiblePage(ctx, b, from, b.MaxID, 5000)
				if err != nil {
					t.Fatal(err)
				}
				if len(page) == 0 {
					break
				}
				for _, c := range page {
					walked = append(walked, c.ID)
				}
				next, ok := ranges.Next(page[len(page)-1].ID)
				if !ok {
					break
				}
				from = next
			}
			if int64(len(walked)) != tc.want || walked[0] != b.MinID || walked[len(walked)-1] != b.MaxID {
				t.Fatalf("pages hold %d contacts from %s to %s; snapshot %d from %s to %s",
					len(walked), walked[0], walked[len(walked)-1], b.SnapshotTotal, b.MinID, b.MaxID)
			}
			rs, err := ranges.SplitAt(b.MinID, b.MaxID, b.RangeStarts)
			if err != nil {
				t.Fatal(err)
			}
			if len(rs) != ranges.Count {
				t.Fatalf("%d ranges, want %d", len(rs), ranges.Count)
			}
			largest, i := 0, 0
			for _, r := range rs {
				k := 0
				for i < len(walked) && walked[i].Compare(r.End) <= 0 {
					k, i = k+1, i+1
				}
				largest = max(largest, k)
			}
			mean := len(walked) / ranges.Count
			t.Logf("largest range %d, mean %d (%.2f×)", largest, mean, float64(largest)/float64(mean))
			// Cut from every id, in whole pages: within a page of even.
			if want := ranges.AudienceCuts(walked); !slices.Equal(b.RangeStarts, want) {
				t.Errorf("RangeStarts = %v, want ranges.AudienceCuts of the audience %v", b.RangeStarts, want)
			}
			if largest > mean+ranges.PageSize {
				t.Errorf("largest range holds %d contacts, want within a page (%d) of the mean %d", largest, ranges.PageSize, mean)
			}
		})
	}
}

// TestSnapshotCountsErasures: on a table too large to read whole (past
// SamplePages), the accept-time count leaves out the gate's erasure test
// while no address was ever erased, and keeps it once one was: a contact
// imported while its address was erased (not suppressed, its hash in
// erased_addresses) is counted before the erasure and not after.
func TestSnapshotCountsErasures(t *testing.T) {
	t.Parallel()
	s := testenv.Postgres(t)
	ctx := t.Context()
	pool := s.Pool()
	t0 := time.Date(2031, time.March, 14, 9, 0, 0, 0, time.UTC)
	const n = 60_000
	seedContacts(t, pool, n, "count.example", t0)
	mustSample(t, pool)
	accept := func(i int) store.Broadcast {
		t.Helper()
		b, _, err := s.CreateBroadcast(ctx, store.Broadcast{
			ID: ulid.MustNew(ulid.Timestamp(t0.Add(time.Duration(i)*time.Second)), nil), Name: "count", CreatedAt: t0,
			Content: store.Content{FromAddress: "news@count.example", Subject: "s", HTML: "h"},
		})
		if err == nil {
			b, err = s.AcceptBroadcast(ctx, b.ID, t0)
		}
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	// The count's two forms: with the erasure test, and without it.
	for _, seg := range []int64{0, 1} {
		if !strings.Contains(postgres.SnapshotSQL(seg, true), "erased_addresses") || strings.Contains(postgres.SnapshotSQL(seg, false), "erased_addresses") {
			t.Fatalf("segment %d: the count tests erased_addresses only with erasures: with %q, without %q", seg, postgres.SnapshotSQL(seg, true), postgres.SnapshotSQL(seg, false))
		}
	}
	eligible := int64(n - n/20)
	if b := accept(1); b.SnapshotTotal != eligible {
		t.Errorf("before any erasure: SnapshotTotal = %d, want %d", b.SnapshotTotal, eligible)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO erased_addresses (hash, erased_at)
SELECT erasure_hash, $1 FROM contacts WHERE email = 'c7@count.example'`, t0); err != nil {
		t.Fatal(err)
	}
	if b := accept(2); b.SnapshotTotal != eligible-1 {
		t.Errorf("after an erasure: SnapshotTotal = %d, want %d (the erased contact left out)", b.SnapshotTotal, eligible-1)
	}
}

// TestCutsWithin: the sample is read beside the count, in a snapshot of its
// own, so it may hold ids outside the bounds the count saw (contacts
// imported or erased in between); the cuts are those of the ids within
// (min, max] alone, so every range start lies inside the bounds.
func TestCutsWithin(t *testing.T) {
	t0 := time.Date(2031, time.March, 14, 9, 0, 0, 0, time.UTC)
	var ids []ulid.ULID
	for i := range 200 {
		ids = append(ids, ulid.MustNew(ulid.Timestamp(t0.Add(time.Duration(i)*time.Second)), nil))
	}
	min, max := ids[50], ids[149]
	inside := append([]ulid.ULID(nil), ids[51:150]...)
	var want [][16]byte
	for _, c := range ranges.Cuts(append([]ulid.ULID(nil), inside...)) {
		want = append(want, [16]byte(c))
	}
	if len(want) != ranges.Count-1 {
		t.Fatalf("%d cuts of the ids inside, want %d", len(want), ranges.Count-1)
	}
	got := postgres.CutsWithin(append([]ulid.ULID(nil), ids...), min, max)
	if len(got) != len(want) {
		t.Fatalf("%d cuts, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("cut %d = %x, want %x", i, got[i], want[i])
		}
		if c := ulid.ULID(got[i]); c.Compare(min) <= 0 || c.Compare(max) > 0 {
			t.Fatalf("cut %s outside (%s, %s]", c, min, max)
		}
	}
}

// TestAcceptWithFewConnections: accepting a broadcast on a table too large
// to read whole samples it beside the count on a second connection when
// one comes, and never waits for one while it holds its first: with one
// connection in the pool, and with four accepts at once on two, every
// accept finishes and cuts its ranges (it used to wait for good there).
func TestAcceptWithFewConnections(t *testing.T) {
	t.Parallel()
	url := testenv.DatabaseURL(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	seed, err := postgres.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer seed.Close()
	t0 := time.Date(2031, time.March, 14, 9, 0, 0, 0, time.UTC)
	const n = 60_000
	seedContacts(t, seed.Pool(), n, "few.example", t0)
	mustSample(t, seed.Pool())
	next := 0
	for _, tc := range []struct{ conns, accepts int }{{1, 1}, {2, 4}} {
		s, err := postgres.Open(ctx, fmt.Sprintf("%s&pool_max_conns=%d", url, tc.conns))
		if err != nil {
			t.Fatal(err)
		}
		ids := make([]ulid.ULID, tc.accepts)
		for i := range ids {
			next++
			b, _, err := s.CreateBroadcast(ctx, store.Broadcast{
				ID: ulid.MustNew(ulid.Timestamp(t0.Add(time.Duration(next)*time.Second)), nil), Name: "few", CreatedAt: t0,
				Content: store.Content{FromAddress: "news@few.example", Subject: "s", HTML: "h"},
			})
			if err != nil {
				t.Fatal(err)
			}
			ids[i] = b.ID
		}
		errs := make(chan error, tc.accepts)
		for _, id := range ids {
			go func() {
				b, err := s.AcceptBroadcast(ctx, id, t0)
				if err == nil && (b.SnapshotTotal != n-n/20 || len(b.RangeStarts) != ranges.Count-1) {
					err = fmt.Errorf("snapshot %d with %d range starts, want %d and %d", b.SnapshotTotal, len(b.RangeStarts), n-n/20, ranges.Count-1)
				}
				errs <- err
			}()
		}
		for range tc.accepts {
			if err := <-errs; err != nil {
				t.Errorf("%d accepts at once on %d connection(s): %v", tc.accepts, tc.conns, err)
			}
		}
		s.Close()
	}
}

// seedContacts loads n contacts in the bench's shape: one millisecond per
// contact from t0, every 20th unsubscribed, the erasure hash set as an
// import sets it.
func seedContacts(t *testing.T, pool *pgxpool.Pool, n int, domain string, t0 time.Time) {
	t.Helper()
	if _, err := pool.Exec(t.Context(), `
INSERT INTO contacts (id, email, email_key, name, attributes, subscribed, erasure_hash, created_at, updated_at)
SELECT (lpad(to_hex($1::bigint + i), 12, '0') || substr(md5(i::text), 1, 20))::uuid,
       'c' || i || '@' || $4, 'c' || i || '@' || $4, 'Contact ' || i, '{}', i % 20 <> 0, md5('c' || i) || md5(i::text), $2, $2
FROM generate_series(1, $3::bigint) AS i`, t0.UnixMilli(), t0, n, domain); err != nil {
		t.Fatal(err)
	}
}

// mustSample fails the test unless contacts is past SamplePages, where an
// audience is counted and sampled rather than read whole.
func mustSample(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	var pages int64
	if err := pool.QueryRow(t.Context(), `SELECT pg_relation_size('contacts') / current_setting('block_size')::int`).Scan(&pages); err != nil {
		t.Fatal(err)
	}
	if pages <= postgres.SamplePages {
		t.Fatalf("contacts has %d pages, want more than %d: the audience would be read whole", pages, postgres.SamplePages)
	}
}

// TestIndexOnlyCountsInOneBackend: the accept's count runs without parallel
// workers (a parallel scan of contacts_eligible cost more than it shared
// out, see indexOnly), and planDefault gives the rest of the transaction
// back the server's own settings.
func TestIndexOnlyCountsInOneBackend(t *testing.T) {
	t.Parallel()
	s := testenv.Postgres(t)
	ctx := t.Context()
	tx, err := s.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	settings := func() (workers, seqscan, pageCost string) {
		t.Helper()
		if err := tx.QueryRow(ctx, `SELECT current_setting('max_parallel_workers_per_gather'), current_setting('enable_seqscan'),
       current_setting('random_page_cost')`).Scan(&workers, &seqscan, &pageCost); err != nil {
			t.Fatal(err)
		}
		return workers, seqscan, pageCost
	}
	w0, seq0, cost0 := settings()
	if _, err := tx.Exec(ctx, postgres.IndexOnlySQL); err != nil {
		t.Fatal(err)
	}
	if w, seq, _ := settings(); w != "0" || seq != "off" {
		t.Errorf("under indexOnly: max_parallel_workers_per_gather %s, enable_seqscan %s; want 0 and off", w, seq)
	}
	if _, err := tx.Exec(ctx, postgres.PlanDefaultSQL); err != nil {
		t.Fatal(err)
	}
	if w, seq, cost := settings(); w != w0 || seq != seq0 || cost != cost0 {
		t.Errorf("after planDefault: %s, %s, %s; want the server's %s, %s, %s", w, seq, cost, w0, seq0, cost0)
	}
}
