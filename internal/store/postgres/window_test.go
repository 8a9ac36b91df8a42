package postgres_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

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
       current_setting('enable_mergejoin'), current_setting('enable_bitmapscan'), current_setting('enable_memoize'))`},
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
	if want := "off,off,off,off,off"; probed[0] != want {
		t.Errorf("enable_seqscan, _hashjoin, _mergejoin, _bitmapscan, _memoize inside the batch = %s, want %s", probed[0], want)
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
	if err := conn.QueryRow(ctx, `SELECT current_setting('enable_seqscan') || ',' || current_setting('enable_hashjoin')`).Scan(&after); err != nil {
		t.Fatal(err)
	}
	if after != "on,on" {
		t.Errorf("enable_seqscan, enable_hashjoin after the batch = %s, want on,on (set_config(…, true) is local to the batch)", after)
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
