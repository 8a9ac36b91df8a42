package postgres_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

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
	var r struct {
		claimed int
		err     error
	}
	changeStateUnderLock(t, s, b.ID, store.StateCompleted, func() string {
		got, err := s.Claim(ctx, b.ID, "w1/1", claimsOf(ids), t0)
		r.claimed, r.err = len(got), err
		return fmt.Sprintf("claim (%d claimed, %v)", r.claimed, r.err)
	})
	var nr *store.NotRunningError
	if !errors.As(r.err, &nr) || nr.State != store.StateCompleted || r.claimed != 0 {
		t.Fatalf("claim after the completion it waited for: %d claimed, %v; want ErrNotRunning (completed)", r.claimed, r.err)
	}
	var rows int
	if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM broadcast_sends`).Scan(&rows); err != nil || rows != 0 {
		t.Fatalf("ledger rows: %d (%v), want 0", rows, err)
	}
}

// TestCompletionWaitsForClaim: SetState(completed) started while a claim
// that read "running" has not committed waits for it, then sees its row
// and refuses; without its lock it completed over the claimed row. The
// test plays the claim in a transaction of its own that holds the claim's
// lock. (Found by review: no test held SetState's own lock to account.)
func TestCompletionWaitsForClaim(t *testing.T) {
	t.Parallel()
	s, b, ids := windowSetup(t, 2)
	ctx := t.Context()
	tx, err := s.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	if _, err := tx.Exec(ctx, postgres.ClaimGateSQL, postgres.StateLockKeys(b.ID)...); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO broadcast_sends (broadcast_id, contact_id, email, status, message_id, claimed_at, updated_at, owner)
VALUES ($1, $2, 'w0@example.org', 'claimed', '<m@example.org>', $3, $3, 'w1/1')`, b.ID.Bytes(), ids[0].Bytes(), t0); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := s.SetState(ctx, b.ID, []store.State{store.StateRunning}, store.StateCompleted, "", t0)
		done <- err
	}()
	for waiting := false; !waiting; {
		select {
		case err := <-done:
			t.Fatalf("SetState(completed) returned (%v) while a claim held its lock uncommitted", err)
		case <-time.After(10 * time.Millisecond):
		}
		waiting = stateLockWaited(t, s, b.ID)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	err = <-done
	got, gerr := s.GetBroadcast(ctx, b.ID)
	if !errors.Is(err, store.ErrConflict) || gerr != nil || got.State != store.StateRunning {
		t.Fatalf("completion over a claim committed while it waited: %v, state %s (%v); want ErrConflict and running", err, got.State, gerr)
	}
}

// TestRefusedClaimDoesNotHideAFailedCommit: a window write whose claim is
// refused (the broadcast paused) but whose commit fails must return the
// commit's error, not ErrNotRunning, which tells the page its outcomes are
// recorded: believing it, the page moved its cursor past rows still
// claimed, which ended unknown. A deferred trigger that raises at commit
// stands in for the commit lost to a failover. (Found by review.)
func TestRefusedClaimDoesNotHideAFailedCommit(t *testing.T) {
	t.Parallel()
	s, b, ids := windowSetup(t, 8)
	ctx := t.Context()
	if got, err := s.Claim(ctx, b.ID, "w1/1", claimsOf(ids[:4]), t0); err != nil || len(got) != 4 {
		t.Fatalf("Claim = %v, %v", got, err)
	}
	if _, err := s.SetState(ctx, b.ID, []store.State{store.StateRunning}, store.StatePaused, "", t0); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Pool().Exec(ctx, `
CREATE FUNCTION fail_at_commit() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'the commit fails'; END $$;
CREATE CONSTRAINT TRIGGER fail_at_commit AFTER UPDATE ON broadcast_sends DEFERRABLE INITIALLY DEFERRED
FOR EACH ROW EXECUTE FUNCTION fail_at_commit()`); err != nil {
		t.Fatal(err)
	}
	_, err := s.RecordAndClaim(ctx, b.ID, "w1/1", sentOutcomes(ids[:4]), claimsOf(ids[4:]), t0)
	if err == nil || errors.Is(err, store.ErrNotRunning) || !strings.Contains(err.Error(), "the commit fails") {
		t.Fatalf("RecordAndClaim = %v; want the commit's error", err)
	}
	row, err := s.GetSend(ctx, b.ID, ids[0])
	if err != nil || row.Status != store.SendClaimed {
		t.Fatalf("row after the failed commit: %s (%v); want still claimed", row.Status, err)
	}
}

// TestClaimDueWaitsForStateChange: a sweep's ClaimDue that starts while
// SetState is moving its broadcast waits for it and then reads the new
// state, as a claim does (TestClaimWaitsForStateChange): a pause committed
// meanwhile leaves the deferred row deferred.
func TestClaimDueWaitsForStateChange(t *testing.T) {
	t.Parallel()
	s, b, ids := windowSetup(t, 1)
	ctx := t.Context()
	if _, err := s.Claim(ctx, b.ID, "w1/1", claimsOf(ids), t0); err != nil {
		t.Fatal(err)
	}
	deferred := []store.Outcome{{ContactID: ids[0], Status: store.SendDeferred, RetryAt: t0, Error: "451 4.3.0 try later"}}
	if err := s.RecordOutcomes(ctx, b.ID, "w1/1", deferred, t0); err != nil {
		t.Fatal(err)
	}
	var due []store.Due
	var err error
	changeStateUnderLock(t, s, b.ID, store.StatePaused, func() string {
		due, err = s.ClaimDue(ctx, b, "w2/1", t0.Add(time.Minute), 10, nil, nil)
		return fmt.Sprintf("ClaimDue (%d due, %v)", len(due), err)
	})
	if err != nil || len(due) != 0 {
		t.Fatalf("ClaimDue after the pause it waited for: %d due, %v; want nothing", len(due), err)
	}
	if row, err := s.GetSend(ctx, b.ID, ids[0]); err != nil || row.Status != store.SendDeferred {
		t.Fatalf("row after a sweep refused by the pause: %s (%v); want deferred", row.Status, err)
	}
}

// changeStateUnderLock plays SetState: it holds the broadcast's state lock
// in a transaction of its own, runs call beside it, waits until call is
// queued on the lock (failing the test if call finishes first, saying what
// it returned), then moves the broadcast to state and commits, and returns
// once call has.
func changeStateUnderLock(t *testing.T, s *postgres.Store, broadcast ulid.ULID, state store.State, call func() (result string)) {
	t.Helper()
	ctx := t.Context()
	tx, err := s.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	if _, err := tx.Exec(ctx, postgres.StateLockSQL, postgres.StateLockKeys(broadcast)...); err != nil {
		t.Fatal(err)
	}
	done := make(chan string, 1)
	go func() { done <- call() }()
	for waiting := false; !waiting; {
		select {
		case r := <-done:
			t.Fatalf("%s finished while SetState's lock was held", r)
		case <-time.After(10 * time.Millisecond):
		}
		waiting = stateLockWaited(t, s, broadcast)
	}
	if _, err := tx.Exec(ctx, `UPDATE broadcasts SET state = $2 WHERE id = $1`, broadcast.Bytes(), string(state)); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	<-done
}

// stateLockWaited says whether Postgres shows the broadcast's state lock
// requested and not granted: a claim or state change is queued on it.
func stateLockWaited(t *testing.T, s *postgres.Store, broadcast ulid.ULID) bool {
	t.Helper()
	keys := postgres.StateLockKeys(broadcast)
	class, key := int64(uint32(keys[0].(int32))), int64(uint32(keys[1].(int32)))
	var waiting bool
	if err := s.Pool().QueryRow(t.Context(), `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND classid = $1::oid AND objid = $2::oid)`, class, key).Scan(&waiting); err != nil {
		t.Fatal(err)
	}
	return waiting
}
