package postgres_test

import (
	"errors"
	"testing"
	"time"

	"github.com/rangecast/rangecast/internal/store"
	"github.com/rangecast/rangecast/internal/store/postgres"
)

// TestClaimWaitsForStateChange: a claim that starts while SetState is
// moving its broadcast waits for it and then reads the new state. Without
// that order a claim that read "running" could commit after the
// completion's check of the ledger, and a stalled page would send in a
// completed broadcast (simulation seed 102394). The test holds SetState's
// lock in a transaction of its own, sees the claim wait on it, completes
// the broadcast in that transaction, and expects the claim refused.
func TestClaimWaitsForStateChange(t *testing.T) {
	t.Parallel()
	s, b, ids := windowSetup(t, 4)
	ctx := t.Context()
	tx, err := s.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	if _, err := tx.Exec(ctx, postgres.StateLockSQL, postgres.StateLockKeys(b.ID)...); err != nil {
		t.Fatal(err)
	}
	type result struct {
		claimed int
		err     error
	}
	done := make(chan result, 1)
	go func() {
		got, err := s.Claim(ctx, b.ID, "w1/1", claimsOf(ids), t0)
		done <- result{len(got), err}
	}()
	// The claim is waiting when Postgres shows this lock not granted.
	keys := postgres.StateLockKeys(b.ID)
	class, key := int64(uint32(keys[0].(int32))), int64(uint32(keys[1].(int32)))
	for waiting := false; !waiting; {
		select {
		case r := <-done:
			t.Fatalf("claim finished (%d claimed, %v) while SetState's lock was held", r.claimed, r.err)
		case <-time.After(10 * time.Millisecond):
		}
		if err := s.Pool().QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND classid = $1::oid AND objid = $2::oid)`, class, key).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := tx.Exec(ctx, `UPDATE broadcasts SET state = 'completed' WHERE id = $1`, b.ID.Bytes()); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-done
	var nr *store.NotRunningError
	if !errors.As(r.err, &nr) || nr.State != store.StateCompleted || r.claimed != 0 {
		t.Fatalf("claim after the completion it waited for: %d claimed, %v; want ErrNotRunning (completed)", r.claimed, r.err)
	}
	var rows int
	if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM broadcast_sends`).Scan(&rows); err != nil || rows != 0 {
		t.Fatalf("ledger rows: %d (%v), want 0", rows, err)
	}
}
