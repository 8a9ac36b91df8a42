package postgres_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/oklog/ulid/v2"

	"github.com/rangecast/rangecast/internal/store"
	"github.com/rangecast/rangecast/internal/store/postgres"
	"github.com/rangecast/rangecast/internal/testenv"
)

// windowSetup returns a store with n contacts (inserted by SQL, ids in
// ascending order) and a broadcast to claim them in.
func windowSetup(t *testing.T, n int) (*postgres.Store, store.Broadcast, []ulid.ULID) {
	t.Helper()
	s := testenv.Postgres(t)
	ctx := t.Context()
	b, _, err := s.CreateBroadcast(ctx, store.Broadcast{
		ID: ulid.MustNew(ulid.Timestamp(t0), nil), Name: "window", CreatedAt: t0,
		Content: store.Content{FromAddress: "news@example.org", Subject: "s", HTML: "h"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.MarkRunning(ctx, b.ID); err != nil {
		t.Fatal(err)
	}
	ids := make([]ulid.ULID, n)
	raw := make([][16]byte, n)
	emails := make([]string, n)
	for i := range ids {
		ids[i] = ulid.MustNew(ulid.Timestamp(t0.Add(time.Duration(i)*time.Millisecond)), nil)
		raw[i], emails[i] = [16]byte(ids[i]), fmt.Sprintf("w%d@example.org", i)
	}
	if _, err := s.Pool().Exec(ctx, `
INSERT INTO contacts (id, email, email_key, created_at, updated_at)
SELECT u.id, u.email, u.email, $3, $3 FROM unnest($1::uuid[], $2::text[]) AS u(id, email)`, raw, emails, t0); err != nil {
		t.Fatal(err)
	}
	return s, b, ids
}

func claimsOf(ids []ulid.ULID) []store.Claim {
	out := make([]store.Claim, len(ids))
	for i, id := range ids {
		out[i] = store.Claim{ContactID: id, Email: fmt.Sprintf("c-%s@example.org", id), MessageID: "<" + id.String() + "@example.org>"}
	}
	return out
}

func sentOutcomes(ids []ulid.ULID) []store.Outcome {
	out := make([]store.Outcome, len(ids))
	for i, id := range ids {
		out[i] = store.Outcome{ContactID: id, Status: store.SendSent}
	}
	return out
}

// TestWindowWriteIsOneTransaction: RecordAndClaim's batch is sent without
// BEGIN or COMMIT, in one round trip. Probes queued after it in the same
// batch show that it is one transaction, and that forceKeyLookups is in
// force for the outcome write and is local to that transaction: the
// enable_* settings read off inside it and on again afterwards on the same
// connection (set_config(…, true) in an implicit transaction block would
// otherwise be the "SET LOCAL outside a transaction" that Postgres ignores
// with a warning); every row the batch wrote carries the one transaction id;
// and the outcome statement, explained there, is planned as key lookups.
func TestWindowWriteIsOneTransaction(t *testing.T) {
	t.Parallel()
	s, b, ids := windowSetup(t, 8)
	ctx := t.Context()
	if got, err := s.Claim(ctx, b.ID, "w1/1", claimsOf(ids[:4]), t0); err != nil || len(got) != 4 {
		t.Fatalf("Claim = %v, %v", got, err)
	}
	conn, err := s.Pool().Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()

	at := t0.Add(time.Minute)
	outcomes := sentOutcomes(ids[:4])
	outcomes[3].Status, outcomes[3].Error = store.SendFailed, "550 no such user"
	claimed, probed, err := postgres.RecordAndClaimProbed(ctx, conn, b.ID, "w1/1", outcomes, claimsOf(ids[4:]), at,
		postgres.Probe{SQL: `SELECT concat_ws(',', current_setting('enable_seqscan'), current_setting('enable_hashjoin'),
       current_setting('enable_mergejoin'), current_setting('enable_bitmapscan'), current_setting('enable_memoize'),
       current_setting('plan_cache_mode'))`},
		// The rows this transaction wrote: an updated row's new version
		// and an inserted row carry its xid as xmin. A statement outside
		// the batch's transaction would have no xid assigned (it writes
		// nothing) and count none.
		postgres.Probe{SQL: `
SELECT (SELECT count(*) FROM broadcast_sends WHERE xmin::text = x) || ' ' || (SELECT count(*) FROM broadcast_reputation_deltas WHERE xmin::text = x)
FROM (SELECT (pg_current_xact_id_if_assigned()::text::bigint % 4294967296)::text AS x) AS t`},
		postgres.Probe{SQL: `EXPLAIN (FORMAT JSON) ` + postgres.RecordOutcomesAndReputationSQL, Args: postgres.OutcomeWriteArgs(b.ID, "w1/1", outcomes, at)},
	)
	if err != nil {
		t.Fatal(err)
	}
	if len(claimed) != 4 {
		t.Errorf("claimed %v, want the 4 new claims", claimed)
	}
	if want := "off,off,off,off,off,force_generic_plan"; probed[0] != want {
		t.Errorf("enable_seqscan, _hashjoin, _mergejoin, _bitmapscan, _memoize, plan_cache_mode inside the batch = %s, want %s", probed[0], want)
	}
	// 4 outcomes and 4 claims; one delta row (3 accepted).
	if want := "8 1"; probed[1] != want {
		t.Errorf("ledger and delta rows written by the batch's transaction = %q, want %q", probed[1], want)
	}
	var plan []struct {
		Plan planNode `json:"Plan"`
	}
	if err := json.Unmarshal([]byte(probed[2]), &plan); err != nil || len(plan) != 1 {
		t.Fatalf("EXPLAIN output %s: %v", probed[2], err)
	}
	t.Logf("outcome write inside the batch: %s", plan[0].Plan)
	checkPrimaryKeyPlan(t, "outcome write inside the batch", plan[0].Plan)

	// Afterwards, on the same connection: idle, not in a transaction, and
	// the settings back to the server's.
	if st := conn.Conn().PgConn().TxStatus(); st != 'I' {
		t.Errorf("connection transaction status after the batch = %c, want I (idle)", st)
	}
	var after string
	if err := conn.QueryRow(ctx, `SELECT current_setting('enable_seqscan') || ',' || current_setting('enable_hashjoin') || ',' || current_setting('plan_cache_mode')`).Scan(&after); err != nil {
		t.Fatal(err)
	}
	if after != "on,on,force_custom_plan" {
		t.Errorf("enable_seqscan, enable_hashjoin, plan_cache_mode after the batch = %s, want on,on,force_custom_plan (set_config(…, true) is local to the batch)", after)
	}

	c, err := s.Counts(ctx, b.ID)
	if err != nil {
		t.Fatal(err)
	}
	if c.Sent != 3 || c.Failed != 1 || c.Claimed != 4 {
		t.Errorf("Counts = %+v, want 3 sent, 1 failed, 4 claimed", c)
	}
	if r, err := s.Reputation(ctx, b.ID); err != nil || r != (store.Reputation{Accepted: 3}) {
		t.Errorf("Reputation = %+v, %v; want 3 accepted", r, err)
	}
}

// TestWindowWriteAtomic: when any statement of RecordAndClaim's batch fails,
// none of it commits (outcomes, reputation delta, claims), the error is
// mapped as before, and the connection goes back to the pool idle, not
// destroyed for being left in a transaction. Repeated after a commit whose
// answer was lost, the call gets its own claims back and counts nothing
// twice.
func TestWindowWriteAtomic(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// breakOutcome / breakClaim: a value Postgres refuses (invalid
		// UTF-8, a NUL) in the outcome write or in the claim, the one
		// after it in the batch.
		breakOutcome, breakClaim bool
	}{
		{"the claim fails", false, true},
		{"the outcome write fails", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, b, ids := windowSetup(t, 4)
			ctx := t.Context()
			if got, err := s.Claim(ctx, b.ID, "w1/1", claimsOf(ids[:2]), t0); err != nil || len(got) != 2 {
				t.Fatalf("Claim = %v, %v", got, err)
			}
			outcomes, next := sentOutcomes(ids[:2]), claimsOf(ids[2:])
			if tc.breakOutcome {
				outcomes[1].Status, outcomes[1].Error = store.SendFailed, "550 \xff"
			}
			if tc.breakClaim {
				next[1].Email = "nul\x00@example.org"
			}
			conns := s.Pool().Stat().TotalConns()
			claimed, err := s.RecordAndClaim(ctx, b.ID, "w1/1", outcomes, next, t0.Add(time.Minute))
			if !errors.Is(err, store.ErrInvalid) || claimed != nil {
				t.Fatalf("RecordAndClaim = %v, %v; want nothing and ErrInvalid", claimed, err)
			}

			// Nothing of the batch committed.
			for _, id := range ids[:2] {
				if snd, err := s.GetSend(ctx, b.ID, id); err != nil || snd.Status != store.SendClaimed {
					t.Errorf("row %s after the failed batch: %+v, %v; want still claimed", id, snd, err)
				}
			}
			for _, id := range ids[2:] {
				if _, err := s.GetSend(ctx, b.ID, id); !errors.Is(err, store.ErrNotFound) {
					t.Errorf("claim of %s after the failed batch: %v; want none", id, err)
				}
			}
			var deltas int
			if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM broadcast_reputation_deltas`).Scan(&deltas); err != nil || deltas != 0 {
				t.Errorf("reputation deltas after the failed batch: %d, %v; want none", deltas, err)
			}

			// The connection went back idle: the pool kept it, and every
			// idle connection is outside a transaction.
			if n := s.Pool().Stat().TotalConns(); n != conns {
				t.Errorf("pool holds %d connections after the failed batch, %d before: one was destroyed", n, conns)
			}
			for _, c := range s.Pool().AcquireAllIdle(ctx) {
				if st := c.Conn().PgConn().TxStatus(); st != 'I' {
					t.Errorf("idle pool connection in transaction status %c, want I", st)
				}
				c.Release()
			}

			// The same window without the bad value commits, and repeated
			// (its answer lost) gets its own claims back, counting nothing
			// twice.
			outcomes, next = sentOutcomes(ids[:2]), claimsOf(ids[2:])
			for try := range 2 {
				claimed, err := s.RecordAndClaim(ctx, b.ID, "w1/1", outcomes, next, t0.Add(2*time.Minute))
				if err != nil || len(claimed) != 2 {
					t.Fatalf("RecordAndClaim, try %d = %v, %v; want the 2 claims", try, claimed, err)
				}
			}
			if c, err := s.Counts(ctx, b.ID); err != nil || c != (store.Counts{Sent: 2, Claimed: 2}) {
				t.Errorf("Counts = %+v, %v; want 2 sent, 2 claimed", c, err)
			}
			if r, err := s.Reputation(ctx, b.ID); err != nil || r != (store.Reputation{Accepted: 2}) {
				t.Errorf("Reputation = %+v, %v; want 2 accepted", r, err)
			}
		})
	}
}

// TestOutcomeReputationIsReputationOf: the reputation delta the outcome
// write computes in SQL is store.ReputationOf of each row's new status, the
// accepted flag being status = sent, and a window worth nothing inserts no
// delta row.
func TestOutcomeReputationIsReputationOf(t *testing.T) {
	t.Parallel()
	statuses := []store.SendStatus{
		store.SendClaimed, store.SendSent, store.SendFailed, store.SendDeferred, store.SendUnknown,
		store.SendDelivered, store.SendOpened, store.SendClicked, store.SendBounced, store.SendComplained,
		store.SendUnsubscribed,
	}
	s, b, ids := windowSetup(t, len(statuses))
	ctx := t.Context()
	for i, st := range statuses {
		owner := fmt.Sprintf("w%d/1", i)
		if got, err := s.Claim(ctx, b.ID, owner, claimsOf(ids[i:i+1]), t0); err != nil || len(got) != 1 {
			t.Fatalf("Claim = %v, %v", got, err)
		}
		o := store.Outcome{ContactID: ids[i], Status: st}
		if st == store.SendDeferred {
			o.RetryAt = t0.Add(time.Hour)
		}
		if err := s.RecordOutcomes(ctx, b.ID, owner, []store.Outcome{o}, t0.Add(time.Minute)); err != nil {
			t.Fatalf("RecordOutcomes(%s): %v", st, err)
		}
		want := store.ReputationOf(st, st == store.SendSent)
		var deltas int
		if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM broadcast_reputation_deltas`).Scan(&deltas); err != nil {
			t.Fatal(err)
		}
		if wantRows := map[bool]int{true: 0, false: 1}[want == (store.Reputation{})]; deltas != wantRows {
			t.Errorf("%s: %d delta rows, want %d", st, deltas, wantRows)
		}
		// Reputation folds the deltas away: each read is this outcome's.
		if r, err := s.Reputation(ctx, b.ID); err != nil || r != want {
			t.Errorf("%s: delta %+v, %v; want store.ReputationOf = %+v", st, r, err, want)
		}
		if _, err := s.Pool().Exec(ctx, `DELETE FROM broadcast_reputation`); err != nil {
			t.Fatal(err)
		}
	}
}

// TestWindowStatementsPlannedOnce: the claim and the outcome write run on
// their cached generic plan (genericPlan), not planned again for every
// window, while the connection's other statements stay custom-planned.
func TestWindowStatementsPlannedOnce(t *testing.T) {
	t.Parallel()
	const windows = 6
	s, b, ids := windowSetup(t, 4*windows)
	ctx := t.Context()
	conn, err := s.Pool().Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	var prev []store.Outcome
	for w := range windows {
		next := ids[4*w : 4*w+4]
		claimed, _, err := postgres.RecordAndClaimProbed(ctx, conn, b.ID, "w1/1", prev, claimsOf(next), t0.Add(time.Duration(w)*time.Second))
		if err != nil || len(claimed) != len(next) {
			t.Fatalf("window %d: claimed %v, %v", w, claimed, err)
		}
		prev = sentOutcomes(next)
	}
	rows, err := conn.Query(ctx, `SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements
WHERE statement LIKE '%INSERT INTO broadcast_sends%' OR statement LIKE '%UPDATE broadcast_sends%'`)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for rows.Next() {
		var stmt string
		var generic, custom int64
		if err := rows.Scan(&stmt, &generic, &custom); err != nil {
			t.Fatal(err)
		}
		what := "claim"
		if strings.Contains(stmt, "UPDATE broadcast_sends") {
			what = "outcome write"
		}
		seen[what] = true
		t.Logf("%s: %d generic, %d custom plans", what, generic, custom)
		if custom != 0 || generic == 0 {
			t.Errorf("%s ran %d times on a custom plan and %d on its generic plan; want only the generic plan", what, custom, generic)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if !seen["claim"] || !seen["outcome write"] {
		t.Errorf("prepared statements seen: %v, want the claim and the outcome write", seen)
	}
}

// TestCachedPlansSurviveGrowth: the window statements run on plans made
// once per connection (genericPlan), so a plan made while the ledger and
// the audience were tiny must still look rows up by key after both have
// grown a thousandfold with no ANALYZE since (a new install whose first
// list is imported while it sends). A plan that walks the table and probes
// the window's keys would read every row of the grown table per window.
func TestCachedPlansSurviveGrowth(t *testing.T) {
	t.Parallel()
	const grown = 100_000
	s, b, ids := windowSetup(t, 32)
	ctx := t.Context()
	pool := s.Pool()
	seed := func(from, to int) {
		t.Helper()
		// Ledger rows of this broadcast held by another worker, and
		// contacts, ids above the test's own: a lookup that walks on past
		// its key passes all of them.
		if _, err := pool.Exec(ctx, `
INSERT INTO broadcast_sends (broadcast_id, contact_id, email, status, message_id, claimed_at, updated_at, owner)
SELECT $1, ('ffff' || lpad(to_hex(g), 28, '0'))::uuid, 'g' || g || '@example.org', 'claimed', '<g' || g || '@example.org>', $2, $2, 'w0/1'
FROM generate_series($3::int, $4::int) AS g`, b.ID[:], t0, from, to); err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, `
INSERT INTO contacts (id, email, email_key, created_at, updated_at)
SELECT ('ffff' || lpad(to_hex(g), 28, '0'))::uuid, 'g' || g || '@example.org', 'g' || g || '@example.org', $1, $1
FROM generate_series($2::int, $3::int) AS g`, t0, from, to); err != nil {
			t.Fatal(err)
		}
	}
	for _, table := range []string{"broadcast_sends", "contacts"} {
		if _, err := pool.Exec(ctx, `ALTER TABLE `+table+` SET (autovacuum_enabled = false)`); err != nil {
			t.Fatal(err)
		}
	}
	// Tiny and analyzed: the statistics under which a planner left to
	// itself scans the table and probes the window instead.
	seed(1, 50)
	if _, err := pool.Exec(ctx, `ANALYZE broadcast_sends, contacts`); err != nil {
		t.Fatal(err)
	}

	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	const reads = `SELECT coalesce(sum(seq_tup_read + idx_tup_fetch), 0)::text FROM pg_stat_xact_user_tables WHERE relid = $1::regclass`
	window := func(outcomes, claims []ulid.ULID) (ledger, contacts int) {
		t.Helper()
		claimed, probed, err := postgres.RecordAndClaimProbed(ctx, conn, b.ID, "w1/1", sentOutcomes(outcomes), claimsOf(claims), t0.Add(time.Minute),
			postgres.Probe{SQL: reads, Args: []any{"broadcast_sends"}}, postgres.Probe{SQL: reads, Args: []any{"contacts"}})
		if err != nil || len(claimed) != len(claims) {
			t.Fatalf("window: claimed %d of %d, %v", len(claimed), len(claims), err)
		}
		fmt.Sscan(probed[0], &ledger)
		fmt.Sscan(probed[1], &contacts)
		return ledger, contacts
	}
	// The plans are made here, on the tiny tables.
	window(nil, ids[0:8])
	window(ids[0:8], ids[8:16])
	window(ids[8:16], ids[16:24])

	// Index pages touched, which the row counts above do not show: a
	// lookup that walks the index past its key reads no more rows (and
	// returns no more entries) but scans every page it passes.
	indexPages := func() int64 {
		t.Helper()
		if _, err := conn.Exec(ctx, `SELECT pg_stat_force_next_flush()`); err != nil {
			t.Fatal(err)
		}
		var n int64
		if err := conn.QueryRow(ctx, `SELECT coalesce(sum(idx_blks_hit + idx_blks_read), 0)::bigint FROM pg_statio_user_indexes WHERE relid = 'broadcast_sends'::regclass`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	seed(51, grown)
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stats WHERE schemaname = current_schema() AND tablename = 'broadcast_sends' AND attname = 'contact_id' AND null_frac IS NOT NULL`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("broadcast_sends statistics: %d, %v (want the tiny table's)", n, err)
	}
	before := indexPages()
	ledger, contacts := window(ids[16:24], ids[24:32])
	pages := indexPages() - before
	t.Logf("after growth to %d rows: one window of 8 outcomes and 8 claims read %d ledger rows (%d index pages) and %d contacts", grown, ledger, pages, contacts)
	if pages > 300 {
		t.Errorf("one window of 8 outcomes and 8 claims touched %d index pages of broadcast_sends after it grew to %d rows; want at most 300 (a few per key and index)", pages, grown)
	}
	if ledger > 32 || contacts > 32 {
		t.Errorf("one window of 8 outcomes and 8 claims read %d ledger rows and %d contacts after the tables grew to %d rows; want at most 32 each (a lookup per key)", ledger, contacts, grown)
	}

	// Release, on the same connection after the growth.
	batch := &pgx.Batch{}
	batch.Queue(postgres.ForceKeyLookupsSQL)
	bids := make([][16]byte, 8)
	raw := make([][16]byte, 8)
	for i := range bids {
		bids[i], raw[i] = [16]byte(b.ID), [16]byte(ids[24+i])
	}
	batch.Queue(postgres.ReleaseSQL, "w1/1", bids, raw)
	batch.Queue(reads, "broadcast_sends")
	res := conn.SendBatch(ctx, batch)
	if _, err := res.Exec(); err != nil {
		t.Fatal(err)
	}
	if tag, err := res.Exec(); err != nil || tag.RowsAffected() != 8 {
		t.Fatalf("release: %v, %v", tag, err)
	}
	var got string
	if err := res.QueryRow().Scan(&got); err != nil {
		t.Fatal(err)
	}
	if err := res.Close(); err != nil {
		t.Fatal(err)
	}
	fmt.Sscan(got, &n)
	if n > 16 {
		t.Errorf("releasing 8 claims read %d ledger rows after the table grew to %d rows; want at most 16", n, grown)
	}
}

// TestOutcomeFollowsConcurrentUpdate: a window's outcome reaches a row that
// another transaction updated (still claimed, still this run's: a retried
// claim's no-op update) after the outcome statement took its snapshot. The
// write waits for that transaction, then moves the row's newest version;
// it must not skip the row because its version moved.
func TestOutcomeFollowsConcurrentUpdate(t *testing.T) {
	t.Parallel()
	s, b, ids := windowSetup(t, 4)
	ctx := t.Context()
	if got, err := s.Claim(ctx, b.ID, "w1/1", claimsOf(ids), t0); err != nil || len(got) != 4 {
		t.Fatalf("Claim = %v, %v", got, err)
	}
	for _, what := range []string{"outcome", "release"} {
		other, err := s.Pool().Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		target := ids[1]
		if what == "release" {
			target = ids[3]
		}
		if _, err := other.Exec(ctx, `UPDATE broadcast_sends SET owner = owner WHERE broadcast_id = $1 AND contact_id = $2`, b.ID[:], target[:]); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			if what == "outcome" {
				done <- s.RecordOutcomes(ctx, b.ID, "w1/1", sentOutcomes(ids[:3]), t0.Add(time.Minute))
			} else {
				done <- s.Release(ctx, b.ID, "w1/1", ids[3:])
			}
		}()
		// Let the write reach the locked row and wait on it.
		time.Sleep(300 * time.Millisecond)
		if err := other.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	c, err := s.Counts(ctx, b.ID)
	if err != nil {
		t.Fatal(err)
	}
	if c.Sent != 3 || c.Claimed != 0 {
		t.Errorf("Counts = %+v, want 3 sent and the fourth released (not claimed): a row updated meanwhile was skipped", c)
	}
}
