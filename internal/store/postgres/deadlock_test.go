package postgres_test

import (
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/rangecast/rangecast/internal/store"
	"github.com/rangecast/rangecast/internal/store/postgres"
)

// TestUnsubscribeSurvivesDeadlock: an unsubscribe locks the contact and then
// its ledger row; a transaction that holds the row and then wants the
// contact (an outcome write suppressing a contact refused at send locks in
// that order) closes a cycle. Postgres aborts the side that waited first,
// here the unsubscribe; it runs again and succeeds once the other side
// commits, instead of answering the person's click with an error.
func TestUnsubscribeSurvivesDeadlock(t *testing.T) {
	t.Parallel()
	s, b, c, _ := sentRow(t)
	ctx := t.Context()
	done := make(chan error, 1)
	// The other side holds the row, then wants the contact.
	closeCycle(t, s, done, []any{lockRow, b.ID, c}, []any{lockContact, c}, func() {
		done <- s.UnsubscribeContact(ctx, c, b.ID, t0.Add(time.Minute))
	})
	if err := <-done; err != nil {
		t.Fatalf("UnsubscribeContact = %v; want it retried after the deadlock", err)
	}
	if row, err := s.GetSend(ctx, b.ID, c); err != nil || row.Status != store.SendUnsubscribed {
		t.Errorf("ledger row = %+v, %v; want unsubscribed", row, err)
	}
	if d, err := s.GetContact(ctx, c); err != nil || d.Subscribed {
		t.Errorf("contact = %+v, %v; want unsubscribed", d, err)
	}
}

// TestEventSurvivesDeadlock: a provider's unsubscribe event locks its
// ledger row, then the contact; a transaction that holds the contact and
// then wants the row closes a cycle. Postgres aborts the event's
// transaction (it waited first), which runs again once the other side
// commits: the event is stored once and applied, instead of answered 500.
func TestEventSurvivesDeadlock(t *testing.T) {
	t.Parallel()
	s, b, c, mid := sentRow(t)
	ctx := t.Context()
	done := make(chan error, 1)
	// The other side holds the contact, then wants the row.
	closeCycle(t, s, done, []any{lockContact, c}, []any{lockRow, b.ID, c}, func() {
		_, err := s.RecordEvent(ctx, store.DeliveryEvent{Provider: "test", EventID: "unsub-1", Type: store.EventUnsubscribed,
			MessageID: mid, OccurredAt: t0}, t0.Add(time.Minute))
		done <- err
	})
	if err := <-done; err != nil {
		t.Fatalf("RecordEvent = %v; want it retried after the deadlock", err)
	}
	if row, err := s.GetSend(ctx, b.ID, c); err != nil || row.Status != store.SendUnsubscribed {
		t.Errorf("ledger row = %+v, %v; want unsubscribed", row, err)
	}
}

// sentRow returns a store with one contact, c, sent by broadcast b under
// Message-ID mid (without angle brackets; what store.ParseMessageID reads).
func sentRow(t *testing.T) (s *postgres.Store, b store.Broadcast, c ulid.ULID, mid string) {
	t.Helper()
	s, b, ids := windowSetup(t, 1)
	c = ids[0]
	mid = b.ID.String() + "." + c.String() + "@example.org"
	claims := []store.Claim{{ContactID: c, Email: "w0@example.org", MessageID: "<" + mid + ">"}}
	if got, err := s.Claim(t.Context(), b.ID, "w1/1", claims, t0); err != nil || len(got) != 1 {
		t.Fatalf("Claim = %v, %v", got, err)
	}
	if err := s.RecordOutcomes(t.Context(), b.ID, "w1/1", sentOutcomes(ids), t0); err != nil {
		t.Fatal(err)
	}
	return s, b, c, mid
}

// The two locks of a deadlock: the ledger row, and the contact.
const (
	lockRow     = `SELECT 1 FROM broadcast_sends WHERE broadcast_id = $1 AND contact_id = $2 FOR UPDATE`
	lockContact = `UPDATE contacts SET updated_at = updated_at WHERE id = $1`
)

// closeCycle makes a deadlock with run, which sends its result to done: a
// transaction takes first (SQL and arguments), then, once run waits for
// it, asks for second, which run holds, and commits when it gets it. Its
// own deadlock check comes late (deadlock_timeout 30 s), so run's comes
// first and run is the transaction Postgres aborts.
func closeCycle(t *testing.T, s *postgres.Store, done chan error, first, second []any, run func()) {
	t.Helper()
	ctx := t.Context()
	other, err := s.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Rollback(ctx) //nolint:errcheck
	var pid int32
	if err := other.QueryRow(ctx, `SELECT pg_backend_pid(), set_config('deadlock_timeout', '30s', true)`).Scan(&pid, new(string)); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Exec(ctx, first[0].(string), first[1:]...); err != nil {
		t.Fatal(err)
	}
	go run()
	deadline := time.Now().Add(10 * time.Second)
	for !blocking(t, s, pid) {
		select {
		case err := <-done:
			t.Fatalf("returned %v without waiting for the other side", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("did not wait for the other side in 10 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := other.Exec(ctx, second[0].(string), second[1:]...); err != nil {
		t.Fatalf("the other side of the deadlock: %v", err)
	}
	if err := other.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

// blocking reports whether any session waits for a lock the backend pid
// holds.
func blocking(t *testing.T, s *postgres.Store, pid int32) bool {
	t.Helper()
	var waiting int
	if err := s.Pool().QueryRow(t.Context(), `SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))`, pid).Scan(&waiting); err != nil {
		t.Fatal(err)
	}
	return waiting > 0
}
