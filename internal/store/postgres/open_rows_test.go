package postgres_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/oklog/ulid/v2"

	"github.com/rangecast/rangecast/internal/store/postgres"
)

// TestOpenRowReadsSkipDeadEntries: after thousands of claims have moved on
// to an outcome, broadcast_sends_pending still holds an entry for each
// until vacuum. The reconciler's ClaimOwners (every 10 s per broadcast) and
// the end of a broadcast's Pending (every tick) walk the partial indexes by
// index scan, on a ledger never analyzed and on an analyzed one, so the
// dead entries are marked on the first read and skipped after: the reads
// shrink to the claims still open. Under a bitmap scan they would visit
// every dead entry's heap page on every call.
func TestOpenRowReadsSkipDeadEntries(t *testing.T) {
	t.Parallel()
	const n, window = 12800, 64
	s, b, ids := windowSetup(t, n)
	ctx := t.Context()
	pool := s.Pool()
	if _, err := pool.Exec(ctx, `ALTER TABLE broadcast_sends SET (autovacuum_enabled = false)`); err != nil {
		t.Fatal(err)
	}
	// The ledger of earlier broadcasts: at this size the planner, left to
	// itself, reads a few expected rows of the partial index by bitmap.
	if _, err := pool.Exec(ctx, `
INSERT INTO broadcast_sends (broadcast_id, contact_id, email, status, message_id, claimed_at, updated_at, accepted)
SELECT gen_random_uuid(), gen_random_uuid(), 'old' || i || '@example.org', 'sent', '<old' || i || '@example.org>', $1, $1, true
FROM generate_series(1, 100000) AS i`, t0); err != nil {
		t.Fatal(err)
	}
	now := t0.Add(time.Hour)
	// Four rounds of a quarter of the contacts each, one per read below:
	// claimed by windows, all but
	// the last window's moved on to an outcome.
	fill := func(part []ulid.ULID) {
		for i := 0; i < len(part); i += window {
			w := part[i : i+window]
			if _, err := s.Claim(ctx, b.ID, "w1/1", claimsOf(w), now); err != nil {
				t.Fatal(err)
			}
			if i+window < len(part) {
				if err := s.RecordOutcomes(ctx, b.ID, "w1/1", sentOutcomes(w), now); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	arg := [16]byte(b.ID)
	round := 0
	for _, analyzed := range []bool{false, true} {
		for _, q := range []struct{ what, sql string }{
			{"ClaimOwners", postgres.ClaimOwnersSQL},
			{"Pending", postgres.PendingSQL},
		} {
			fill(ids[round*n/4 : (round+1)*n/4])
			round++
			if analyzed {
				if _, err := pool.Exec(ctx, `ANALYZE broadcast_sends`); err != nil {
					t.Fatal(err)
				}
			}
			first, plan := analyzedOpenRows(t, pool, q.sql, arg)
			if strings.Contains(plan, "Bitmap") || !strings.Contains(plan, `"Index Name": "broadcast_sends_pending"`) {
				t.Fatalf("%s (analyzed %t) does not walk broadcast_sends_pending by index scan:\n%s", q.what, analyzed, plan)
			}
			// An entry is marked dead once its row is dead to every
			// snapshot; another test's open transaction may delay that.
			deadline := time.Now().Add(10 * time.Second)
			for {
				again, _ := analyzedOpenRows(t, pool, q.sql, arg)
				t.Logf("%s (analyzed %t): %d pages read, then %d", q.what, analyzed, first, again)
				if again*2 < first {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%s (analyzed %t) read %d pages, then %d again: it revisits the claims that moved on", q.what, analyzed, first, again)
				}
				time.Sleep(200 * time.Millisecond)
			}
		}
	}
	open := round * window
	owners, err := s.ClaimOwners(ctx, b.ID)
	if err != nil || !slices.Equal(owners, []string{"w1/1"}) {
		t.Fatalf("ClaimOwners = %v, %v; want [w1/1]", owners, err)
	}
	p, err := s.Pending(ctx, b.ID)
	if err != nil || p.Claimed != int64(open) || p.Deferred != 0 || p.Failed != 0 {
		t.Fatalf("Pending = %+v, %v; want %d claimed", p, err, open)
	}
}

// analyzedOpenRows runs sql under openRowScans with EXPLAIN (ANALYZE,
// BUFFERS) and returns the pages it read (shared hits and reads) and the
// plan.
func analyzedOpenRows(t *testing.T, pool *pgxpool.Pool, sql string, arg any) (int, string) {
	t.Helper()
	batch := &pgx.Batch{}
	batch.Queue(postgres.OpenRowScansSQL)
	batch.Queue("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+sql, arg)
	res := pool.SendBatch(t.Context(), batch)
	defer res.Close()
	if _, err := res.Exec(); err != nil {
		t.Fatal(err)
	}
	var raw string
	if err := res.QueryRow().Scan(&raw); err != nil {
		t.Fatal(err)
	}
	var out []struct {
		Plan struct {
			Hit  int `json:"Shared Hit Blocks"`
			Read int `json:"Shared Read Blocks"`
		} `json:"Plan"`
	}
	if err := json.Unmarshal([]byte(raw), &out); err != nil || len(out) != 1 {
		t.Fatalf("EXPLAIN output %s: %v", raw, err)
	}
	return out[0].Plan.Hit + out[0].Plan.Read, raw
}
