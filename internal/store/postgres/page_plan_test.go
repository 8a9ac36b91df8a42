package postgres_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/rangecast/rangecast/internal/store/postgres"
	"github.com/rangecast/rangecast/internal/testenv"
)

// TestPageReadsOnlyItsPage: on contacts never analyzed (a bulk import
// autovacuum has not reached), a page of 200 in a range of 20k contacts
// walks an index in id order and stops after its page, instead of reading
// the whole range by bitmap and sorting it; the preflight's last contact
// walks it backwards and stops at the first eligible one.
func TestPageReadsOnlyItsPage(t *testing.T) {
	t.Parallel()
	s := testenv.Postgres(t)
	ctx := t.Context()
	pool := s.Pool()
	if _, err := pool.Exec(ctx, `ALTER TABLE contacts SET (autovacuum_enabled = false)`); err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2031, time.March, 14, 9, 0, 0, 0, time.UTC)
	if _, err := pool.Exec(ctx, `
INSERT INTO contacts (id, email, email_key, name, attributes, subscribed, created_at, updated_at)
SELECT (lpad(to_hex($1::bigint + i), 12, '0') || substr(md5(i::text), 1, 20))::uuid,
       'c' || i || '@page.example', 'c' || i || '@page.example', 'Contact ' || i, '{}', i % 20 <> 0, $2, $2
FROM generate_series(1, 20000) AS i`, t0.UnixMilli(), t0); err != nil {
		t.Fatal(err)
	}
	var lo, hi [16]byte
	if err := pool.QueryRow(ctx, `SELECT min(id::text)::uuid, max(id::text)::uuid FROM contacts`).Scan(&lo, &hi); err != nil {
		t.Fatal(err)
	}
	checkIndexWalk(t, "the page", "Index Scan using contacts_", []string{"rows=200 ", "rows=211 "},
		analyzedInIDOrder(t, pool, postgres.PageSQL(0), lo, hi, 200))
	// The plan the page query runs on after its first use: the generic one
	// (pageInIDOrder sets plan_cache_mode), of the same shape.
	generic := explain(t, s, "force_generic_plan", postgres.PageInIDOrderSQL, "uuid, uuid, integer", postgres.PageSQL(0),
		fmt.Sprintf(`'%x', '%x', 200`, lo[:], hi[:]))
	checkLookupsOnly(t, "page, generic plan", generic)
	if !strings.Contains(generic.String(), "Index Scan using contacts_") && !strings.Contains(generic.String(), "Index Only Scan using contacts_") {
		t.Errorf("page, generic plan: no index walk of contacts: %s", generic)
	}

	// The preflight's last contact (LastEligible) walks the same index
	// backwards from its bound and stops at the first eligible contact
	// (the last one, 20000, is unsubscribed: one row of contacts_eligible,
	// two of the primary key).
	checkIndexWalk(t, "the last contact", "Index Scan Backward using contacts_", []string{"rows=1 ", "rows=2 "},
		analyzedInIDOrder(t, pool, postgres.LastSQL(0), hi))
}

// checkIndexWalk fails unless plan walks contacts by an index (scan, the
// node's name) with neither a bitmap, a sort nor a sequential scan, each
// walk returning one of rows: it stopped where the query had enough.
func checkIndexWalk(t *testing.T, what, scan string, rows []string, plan []string) {
	t.Helper()
	p := strings.Join(plan, "\n")
	if strings.Contains(p, "Bitmap") || strings.Contains(p, "Sort") || strings.Contains(p, "Seq Scan on contacts") || !strings.Contains(p, scan) {
		t.Errorf("%s is not read by %s:\n%s", what, scan, p)
	}
	for _, l := range plan {
		if strings.Contains(l, scan) && !slices.ContainsFunc(rows, func(r string) bool { return strings.Contains(l, r) }) {
			t.Errorf("%s read more rows than it needs (want %v): %s\n%s", what, rows, strings.TrimSpace(l), p)
		}
	}
}

// analyzedInIDOrder is EXPLAIN ANALYZE of query under pageInIDOrder's
// settings, line by line.
func analyzedInIDOrder(t *testing.T, pool *pgxpool.Pool, query string, args ...any) []string {
	t.Helper()
	ctx := t.Context()
	batch := &pgx.Batch{}
	batch.Queue(postgres.PageInIDOrderSQL)
	batch.Queue("EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) "+query, args...)
	res := pool.SendBatch(ctx, batch)
	defer res.Close()
	if _, err := res.Exec(); err != nil {
		t.Fatal(err)
	}
	rows, err := res.Query()
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
	return plan
}
