package postgres_test

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/rangecast/rangecast/internal/store"
	"github.com/rangecast/rangecast/internal/store/postgres"
	"github.com/rangecast/rangecast/internal/testenv"
)

var t0 = time.Date(2031, time.March, 14, 9, 26, 53, 0, time.UTC)

// grownRows is the ledger the planner tests grow; make it a million with
//
//	go test ./internal/store/postgres/ -run TestOutcomeWriteUsesPrimaryKey -planner.rows=1000000 -v
//
// (seeding takes ~10 s there, so the default stays at 100k for make test).
var grownRowsFlag = flag.Int("planner.rows", 100_000, "ledger rows TestOutcomeWriteUsesPrimaryKey grows before planning")

// TestOutcomeWriteUsesPrimaryKey pins the planner fact in DESIGN.md: on a
// broadcast_sends table that has grown to 100k rows of one broadcast with no
// ANALYZE since, the outcome write (and Release) must still be a primary-key
// lookup, not a scan of the broadcast (through the partial index
// broadcast_sends_pending, which matches the "still claimed" guard). Both the custom plan (the first executions of a
// prepared statement) and the generic plan (what a cached statement may
// switch to) are checked, for the UPDATE alone and for the statement
// RecordAndClaim sends, which adds the reputation delta of the rows it moved.
func TestOutcomeWriteUsesPrimaryKey(t *testing.T) {
	grownRows := *grownRowsFlag
	for _, tc := range []struct {
		name   string
		accept bool // AcceptBroadcast analyzes the still empty table
		// history: an earlier broadcast's rows, analyzed before this one
		// grew, so the statistics say it has none (what make bench's
		// ledgers look like; there the planner scanned the broadcast by
		// broadcast_id for every window).
		history bool
	}{
		{"analyzed while empty", true, false},
		{"never analyzed", false, false},
		{"analyzed before the broadcast grew", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := testenv.Postgres(t)
			ctx := t.Context()
			pool := s.Pool()
			// Autovacuum must not analyze the table behind the test's back.
			if _, err := pool.Exec(ctx, `ALTER TABLE broadcast_sends SET (autovacuum_enabled = false)`); err != nil {
				t.Fatal(err)
			}
			b, _, err := s.CreateBroadcast(ctx, store.Broadcast{
				ID: ulid.MustNew(ulid.Timestamp(t0), nil), Name: "grown", CreatedAt: t0,
				Content: store.Content{FromAddress: "news@example.org", Subject: "s", HTML: "h"},
			})
			if err != nil {
				t.Fatal(err)
			}
			if tc.accept {
				if b, err = s.AcceptBroadcast(ctx, b.ID, t0); err != nil {
					t.Fatal(err)
				}
			} else if err := s.MarkRunning(ctx, b.ID); err != nil {
				t.Fatal(err)
			}

			if tc.history {
				_, err = pool.Exec(ctx, `
INSERT INTO broadcast_sends (broadcast_id, contact_id, email, status, message_id, claimed_at, updated_at, owner, accepted)
SELECT $1, lpad(to_hex(g), 32, '0')::uuid, 'c' || g || '@example.org', 'sent', '<' || g || '@example.org>', $2, $2, 'w0/1', true
FROM generate_series(1, $3::int) AS g`, ulid.MustNew(ulid.Timestamp(t0.Add(-time.Hour)), nil).Bytes(), t0, grownRows)
				if err == nil {
					_, err = pool.Exec(ctx, `ANALYZE broadcast_sends`)
				}
				if err != nil {
					t.Fatal(err)
				}
			}

			// Grow the ledger in one statement: 100k claims of one broadcast,
			// contact ids ascending like ULIDs.
			start := time.Now()
			_, err = pool.Exec(ctx, `
INSERT INTO broadcast_sends (broadcast_id, contact_id, email, status, message_id, claimed_at, updated_at, owner)
SELECT $1, lpad(to_hex(g), 32, '0')::uuid, 'c' || g || '@example.org', 'claimed', '<' || g || '@example.org>', $2, $2, 'w1/1'
FROM generate_series(1, $3::int) AS g`, b.ID[:], t0, grownRows)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("seeded %d ledger rows in %v", grownRows, time.Since(start).Round(time.Millisecond))

			// The precondition: the planner has no statistics for the grown table.
			var stats int
			var reltuples float64
			err = pool.QueryRow(ctx, `
SELECT (SELECT count(*) FROM pg_stats WHERE schemaname = current_schema() AND tablename = 'broadcast_sends'),
       (SELECT reltuples FROM pg_class WHERE oid = 'broadcast_sends'::regclass)`).Scan(&stats, &reltuples)
			if err != nil {
				t.Fatal(err)
			}
			if !tc.history && (stats != 0 || reltuples >= float64(grownRows)) {
				t.Fatalf("broadcast_sends has statistics (%d column stats, reltuples %v): the test needs a table without", stats, reltuples)
			}
			t.Logf("no column statistics, pg_class.reltuples = %v", reltuples)

			// Contact ids 0x…2a and 0x…2b are among the seeded rows.
			bid := uuidText(b.ID)
			statements := []struct {
				name, pre, params, sql, args string
			}{
				{"outcomes UPDATE", postgres.ForceKeyLookupsSQL, "text, timestamptz, uuid[], uuid[], text[], text[], timestamptz[], integer[], boolean[]",
					postgres.RecordOutcomesSQL,
					fmt.Sprintf(`'w1/1', '%s', ARRAY['%s', '%[2]s']::uuid[], ARRAY['%032x', '%032x']::uuid[], ARRAY['sent', 'failed'], ARRAY['', '550 5.1.1'], ARRAY[NULL, NULL]::timestamptz[], ARRAY[0, 0], ARRAY[false, true]`,
						t0.Format(time.RFC3339), bid, 0x2a, 0x2b)},
				{"outcomes UPDATE with reputation", postgres.ForceKeyLookupsSQL, "text, timestamptz, uuid[], uuid[], text[], text[], timestamptz[], integer[], boolean[], uuid",
					postgres.RecordOutcomesAndReputationSQL,
					fmt.Sprintf(`'w1/1', '%s', ARRAY['%s', '%[2]s']::uuid[], ARRAY['%032x', '%032x']::uuid[], ARRAY['sent', 'failed'], ARRAY['', '550 5.1.1'], ARRAY[NULL, NULL]::timestamptz[], ARRAY[0, 0], ARRAY[false, true], '%[2]s'`,
						t0.Format(time.RFC3339), bid, 0x2a, 0x2b)},
				{"release DELETE", postgres.ForceKeyLookupsSQL, "text, uuid[], uuid[]", postgres.ReleaseSQL,
					fmt.Sprintf(`'w1/1', ARRAY['%s', '%[1]s']::uuid[], ARRAY['%032x', '%032x']::uuid[]`, bid, 0x2a, 0x2b)},
			}
			// The claim: the contacts looked up by key, the broadcast once.
			for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
				plan := explain(t, s, mode, postgres.ForceKeyLookupsSQL, "uuid, uuid[], text[], text[], timestamptz, text", postgres.ClaimSQL,
					fmt.Sprintf(`'%s', ARRAY['%032x', '%032x']::uuid[], ARRAY['a@example.org', 'b@example.org'], ARRAY['<a@example.org>', '<b@example.org>'], '%s', 'w1/1'`,
						bid, 0x5000a, 0x5000b, t0.Format(time.RFC3339)))
				checkLookupsOnly(t, "claim, "+mode, plan)
			}
			for _, st := range statements {
				for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
					plan := explain(t, s, mode, st.pre, st.params, st.sql, st.args)
					checkPrimaryKeyPlan(t, st.name+", "+mode, plan)
				}
				if st.pre != "" {
					// For the log: what the planner picks when left to itself.
					explain(t, s, "force_custom_plan", "", st.params, st.sql, st.args)
				}
			}

			// And the write itself, for the log: one window of 16 outcomes.
			var outcomes []store.Outcome
			for i := range 16 {
				id := ulid.ULID{}
				id[14], id[15] = byte((5000+i)>>8), byte(5000+i)
				outcomes = append(outcomes, store.Outcome{ContactID: id, Status: store.SendSent})
			}
			start = time.Now()
			if err := s.RecordOutcomes(ctx, b.ID, "w1/1", outcomes, t0.Add(time.Minute)); err != nil {
				t.Fatal(err)
			}
			t.Logf("RecordOutcomes of 16 on %d rows: %v", grownRows, time.Since(start).Round(time.Microsecond))
			c, err := s.Counts(ctx, b.ID)
			if err != nil {
				t.Fatal(err)
			}
			if c.Sent != 16 || c.Claimed != int64(grownRows-16) || (tc.history && c.Sent != 16) {
				t.Fatalf("Counts after one window = %+v, want 16 sent", c)
			}
		})
	}
}

// explain returns the JSON plan of sql (a statement with parameters of the
// given types) for the literal arguments args, planned under
// plan_cache_mode = mode after the statement pre (if any) in the same
// transaction, without running it.
func explain(t *testing.T, s *postgres.Store, mode, pre, params, sql, args string) planNode {
	t.Helper()
	raw := explainJSON(t, s, []string{`SET LOCAL plan_cache_mode = ` + mode}, pre, params, sql, args)
	var out []struct {
		Plan planNode `json:"Plan"`
	}
	if err := json.Unmarshal([]byte(raw), &out); err != nil || len(out) != 1 {
		t.Fatalf("EXPLAIN output %s: %v", raw, err)
	}
	t.Logf("%s (pre %t): %s", mode, pre != "", out[0].Plan)
	return out[0].Plan
}

// explainJSON is EXPLAIN (FORMAT JSON) of sql prepared in a transaction
// that first runs sets, then pre (if any).
func explainJSON(t *testing.T, s *postgres.Store, sets []string, pre, params, sql, args string) string {
	t.Helper()
	ctx := t.Context()
	conn, err := s.Pool().Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	// A prepared statement inside a transaction that is rolled back, so the
	// generic plan can be forced (PG 15 has no EXPLAIN (GENERIC_PLAN)) and
	// the transaction-local settings of pre apply; the statement is
	// discarded by name (pgx keeps its own prepared statements on this
	// connection), as the connection goes back to the store's pool.
	defer conn.Exec(ctx, `DEALLOCATE explained`) //nolint:errcheck
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	for _, set := range append(sets, pre) {
		if set == "" {
			continue
		}
		if _, err := tx.Exec(ctx, set); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := tx.Exec(ctx, `PREPARE explained (`+params+`) AS `+sql); err != nil {
		t.Fatal(err)
	}
	var raw string
	if err := tx.QueryRow(ctx, `EXPLAIN (FORMAT JSON) EXECUTE explained(`+args+`)`).Scan(&raw); err != nil {
		t.Fatal(err)
	}
	return raw
}

func uuidText(id ulid.ULID) string { return fmt.Sprintf("%x", id[:]) }

// planNode is the part of EXPLAIN (FORMAT JSON) the test reads.
type planNode struct {
	NodeType  string     `json:"Node Type"`
	Relation  string     `json:"Relation Name"`
	IndexName string     `json:"Index Name"`
	IndexCond string     `json:"Index Cond"`
	Filter    string     `json:"Filter"`
	Plans     []planNode `json:"Plans"`
}

func (p planNode) String() string {
	var b strings.Builder
	var walk func(p planNode, depth int)
	walk = func(p planNode, depth int) {
		fmt.Fprintf(&b, "%s%s", strings.Repeat("  ", depth), p.NodeType)
		if p.IndexName != "" {
			fmt.Fprintf(&b, " using %s", p.IndexName)
		}
		if p.Relation != "" {
			fmt.Fprintf(&b, " on %s", p.Relation)
		}
		if p.IndexCond != "" {
			fmt.Fprintf(&b, " [%s]", p.IndexCond)
		}
		if p.Filter != "" {
			fmt.Fprintf(&b, " filter [%s]", p.Filter)
		}
		for _, c := range p.Plans {
			b.WriteString("; ")
			walk(c, depth+1)
		}
	}
	walk(p, 0)
	return b.String()
}

// checkPrimaryKeyPlan fails unless broadcast_sends is found only by its
// whole key (an Index Scan, or a Bitmap Index Scan under a Bitmap Heap Scan;
// for a batch, inside a nested loop over its keys) through an index that
// holds both key columns (the primary key, or broadcast_sends_contact since
// migration 013), both in the index condition: no Seq Scan, no other index,
// and no scan on broadcast_id alone, which would walk the whole broadcast,
// or on contact_id alone, which reads the contact's row in every broadcast.
func checkPrimaryKeyPlan(t *testing.T, what string, root planNode) {
	t.Helper()
	var pkey int
	var walk func(p planNode)
	walk = func(p planNode) {
		switch p.NodeType {
		case "ModifyTable", "Bitmap Heap Scan", "Nested Loop", "Function Scan", "Materialize", "Memoize":
			// The write itself, the heap fetch of a bitmap scan, and the
			// batched write's loop over its unnest() of keys.
		case "CTE Scan", "Aggregate", "Subquery Scan":
			// The reputation delta: a sum over the rows the write
			// returned (RecordOutcomesAndReputationSQL), reading no table.
		case "Index Scan", "Bitmap Index Scan":
			if p.IndexName == "contacts_pkey" && strings.Contains(p.IndexCond, "contact_id") {
				// The suppression of a hard-bounced contact: a lookup by
				// its key, from the rows the write returned.
				return
			}
			if p.IndexName != "broadcast_sends_pkey" && p.IndexName != "broadcast_sends_contact" {
				t.Errorf("%s: %s using %s, want an index on the whole key; plan %s", what, p.NodeType, p.IndexName, root)
			} else if !strings.Contains(p.IndexCond, "broadcast_id") || !strings.Contains(p.IndexCond, "contact_id") {
				t.Errorf("%s: primary-key scan with index condition %q, want both broadcast_id and contact_id; plan %s",
					what, p.IndexCond, root)
			} else {
				pkey++
			}
		default:
			t.Errorf("%s: unexpected %s in plan %s", what, p.NodeType, root)
		}
		for _, c := range p.Plans {
			walk(c)
		}
	}
	walk(root)
	if pkey != 1 {
		t.Errorf("%s: %d primary-key scans, want 1; plan %s", what, pkey, root)
	}
}

// checkLookupsOnly fails if the plan reads any table other than by an
// index lookup: no Seq Scan, bitmap, hash or merge join, or sort, whose
// cost rests on the statistics of a table that may have none.
func checkLookupsOnly(t *testing.T, what string, root planNode) {
	t.Helper()
	var walk func(p planNode)
	walk = func(p planNode) {
		switch p.NodeType {
		case "Seq Scan", "Bitmap Heap Scan", "Bitmap Index Scan", "Hash", "Hash Join", "Merge Join", "Sort":
			t.Errorf("%s: %s in plan %s", what, p.NodeType, root)
		}
		for _, c := range p.Plans {
			walk(c)
		}
	}
	walk(root)
}

// TestClaimChecksBroadcastOnce: the ledger has no foreign key to broadcasts
// (migration 013: it cost a lookup per claimed row), so the claim statement
// checks the broadcast exists itself, once: a claim for a broadcast that
// does not exist inserts nothing.
func TestClaimChecksBroadcastOnce(t *testing.T) {
	t.Parallel()
	s := testenv.Postgres(t)
	ctx := t.Context()
	var fks int
	if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM pg_constraint WHERE conrelid = 'broadcast_sends'::regclass AND contype = 'f'`).Scan(&fks); err != nil {
		t.Fatal(err)
	}
	if fks != 0 {
		t.Fatalf("broadcast_sends has %d foreign keys, want none (migration 013)", fks)
	}
	ghost := ulid.MustNew(ulid.Timestamp(t0), nil)
	got, err := s.Claim(ctx, ghost, "w1/1", []store.Claim{{ContactID: ulid.MustNew(ulid.Timestamp(t0), nil), Email: "a@example.org", MessageID: "<m@example.org>"}}, t0)
	if !errors.Is(err, store.ErrNotRunning) {
		t.Fatalf("Claim for a broadcast that does not exist: %v, want ErrNotRunning", err)
	}
	if len(got) != 0 {
		t.Fatalf("Claim for a broadcast that does not exist claimed %v", got)
	}
	var n int
	if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM broadcast_sends`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("ledger rows after a claim for no broadcast: %d (%v), want 0", n, err)
	}
}
