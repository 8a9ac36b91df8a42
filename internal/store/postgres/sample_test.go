package postgres_test

import (
	"flag"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/rangecast/rangecast/internal/ranges"
	"github.com/rangecast/rangecast/internal/store"
	"github.com/rangecast/rangecast/internal/testenv"
)

// sampledContacts is the audience TestRangesFromSample seeds; a million with
//
//	go test ./internal/store/postgres/ -run TestRangesFromSample -sample.contacts=1000000 -v
var sampledContacts = flag.Int("sample.contacts", 100_000, "contacts TestRangesFromSample seeds")

// TestRangesFromSample: after a bulk import (95 % of the contacts in 3 ms of
// ids, the rest over a year), accepting a broadcast cuts ranges from a
// sample of pages (the table is well past samplePages, so this is the
// sampling path, not the whole table) and no range holds more than twice
// the mean. It logs how long the accept took against the bare
// count/first/last query, on a contacts table never analyzed.
//
// "vacuumed" runs it again once VACUUM has set the visibility map (what
// autovacuum does a while after an import): the count is then an
// index-only scan of contacts_eligible, and the sample the same.
func TestRangesFromSample(t *testing.T) {
	for _, vacuumed := range []bool{false, true} {
		name := "never vacuumed"
		if vacuumed {
			name = "vacuumed"
		}
		t.Run(name, func(t *testing.T) { rangesFromSample(t, vacuumed) })
	}
}

func rangesFromSample(t *testing.T, vacuumed bool) {
	n := *sampledContacts
	s := testenv.Postgres(t)
	ctx := t.Context()
	pool := s.Pool()
	t0 := time.Date(2031, time.March, 14, 9, 0, 0, 0, time.UTC)
	year := int64(365 * 24 * time.Hour / time.Millisecond)
	start := time.Now()
	// Ids as ULIDs in uuid form: a millisecond timestamp, md5 of the row
	// number for the entropy.
	if _, err := pool.Exec(ctx, `
INSERT INTO contacts (id, email, email_key, name, attributes, subscribed, created_at, updated_at)
SELECT (lpad(to_hex(CASE WHEN i % 20 = 0 THEN $1::bigint - (hashint8(i) % $2::bigint + $2::bigint) % $2::bigint ELSE $1::bigint + i % 3 END), 12, '0')
        || substr(md5(i::text), 1, 20))::uuid,
       'c' || i || '@sample.example', 'c' || i || '@sample.example', 'Contact ' || i, '{"city":"Oslo"}', true, $3, $3
FROM generate_series(1, $4::bigint) AS i`, t0.UnixMilli(), year, t0, n); err != nil {
		t.Fatal(err)
	}
	var pages int64
	if err := pool.QueryRow(ctx, `SELECT pg_relation_size('contacts') / current_setting('block_size')::int`).Scan(&pages); err != nil {
		t.Fatal(err)
	}
	t.Logf("seeded %d contacts (%d pages) in %v", n, pages, time.Since(start).Round(time.Millisecond))
	if pages <= 512 { // postgres.samplePages
		t.Fatalf("contacts is %d pages: too small to exercise the sample", pages)
	}
	if vacuumed {
		if _, err := pool.Exec(ctx, `VACUUM ANALYZE contacts`); err != nil {
			t.Fatal(err)
		}
	}

	// The bare query, as cmd/bench times it: median of 3 after a warm-up.
	bare := func() time.Duration {
		var ds []time.Duration
		for range 4 {
			st := time.Now()
			var count int64
			var lo, hi [16]byte
			if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM contacts c WHERE c.subscribed AND NOT c.do_not_contact AND NOT c.suppressed AND c.email <> ''),
 (SELECT c.id FROM contacts c WHERE c.subscribed AND NOT c.do_not_contact AND NOT c.suppressed AND c.email <> '' ORDER BY c.id LIMIT 1),
 (SELECT c.id FROM contacts c WHERE c.subscribed AND NOT c.do_not_contact AND NOT c.suppressed AND c.email <> '' ORDER BY c.id DESC LIMIT 1)`).Scan(&count, &lo, &hi); err != nil {
				t.Fatal(err)
			}
			ds = append(ds, time.Since(st))
		}
		ds = ds[1:]
		for i := range ds {
			for j := i + 1; j < len(ds); j++ {
				if ds[j] < ds[i] {
					ds[i], ds[j] = ds[j], ds[i]
				}
			}
		}
		return ds[1]
	}()

	b, _, err := s.CreateBroadcast(ctx, store.Broadcast{
		ID: ulid.MustNew(ulid.Timestamp(t0), nil), Name: "sampled", CreatedAt: t0,
		Content: store.Content{FromAddress: "news@sample.example", Subject: "s", HTML: "h"},
	})
	if err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	if b, err = s.AcceptBroadcast(ctx, b.ID, t0); err != nil {
		t.Fatal(err)
	}
	accept := time.Since(start)
	t.Logf("AcceptBroadcast %v, bare count/first/last %v (%.2f×)", accept.Round(time.Microsecond), bare.Round(time.Microsecond), float64(accept)/float64(bare))

	rs, err := ranges.SplitAt(b.MinID, b.MaxID, b.RangeStarts)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != ranges.Count {
		t.Fatalf("%d ranges, want %d (starts %d)", len(rs), ranges.Count, len(b.RangeStarts))
	}
	byspace, err := ranges.Split(b.MinID, b.MaxID)
	if err != nil {
		t.Fatal(err)
	}
	largest := func(rs []ranges.Range) int64 {
		var out int64
		for _, r := range rs {
			var c int64
			if err := pool.QueryRow(ctx, `SELECT count(*) FROM contacts WHERE id BETWEEN $1 AND $2`, [16]byte(r.Start), [16]byte(r.End)).Scan(&c); err != nil {
				t.Fatal(err)
			}
			out = max(out, c)
		}
		return out
	}
	mean := int64(n / ranges.Count)
	t.Logf("largest range: %d cut by id space, mean %d", largest(byspace), mean)
	got := largest(rs)
	t.Logf("largest range: %d cut from the sample (%.2f× the mean)", got, float64(got)/float64(mean))
	if got > 2*mean {
		t.Errorf("largest range holds %d contacts, want ≤ 2 × the mean %d", got, mean)
	}
}
