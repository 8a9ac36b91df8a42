package coordinator_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/rangecast/rangecast/internal/maintenance"
	"github.com/rangecast/rangecast/internal/store"
)

// TestLeaderPurgesPastRetention: a leader purges delivery events and
// finished transactional messages older than their retention when its term
// starts, and leaves newer ones and unfinished messages alone.
func TestLeaderPurgesPastRetention(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{})
	s.stopCoord()
	ctx := context.Background()
	now := time.Now()
	old, recent := now.Add(-10*24*time.Hour), now.Add(-time.Hour)

	event := func(id string, received time.Time) store.DeliveryEvent {
		ev := store.DeliveryEvent{Provider: "test", EventID: id, Type: store.EventDelivered, MessageID: id + "@elsewhere.example", OccurredAt: received}
		if _, err := s.store.RecordEvent(ctx, ev, received); err != nil {
			t.Fatal(err)
		}
		return ev
	}
	oldEvent, recentEvent := event("old", old), event("recent", recent)

	receipt := func(key string, at time.Time, status store.ReceiptStatus) ulid.ULID {
		id := ulid.Make()
		_, _, err := s.store.CreateReceipt(ctx, store.Receipt{ID: id, Kind: "transactional", Key: key, Email: "p@example.org",
			PayloadHash: key, Payload: []byte("{}"), MessageID: "tx." + id.String() + "@rangecast.test", NextAttemptAt: at, CreatedAt: at})
		if err != nil {
			t.Fatal(err)
		}
		if status == store.ReceiptQueued {
			return id
		}
		if _, err := s.store.ClaimReceipt(ctx, id, at); err != nil {
			t.Fatal(err)
		}
		if _, err := s.store.FinishAttempt(ctx, id, 1, store.AttemptOutcome{Status: status, Result: string(status)}, at); err != nil {
			t.Fatal(err)
		}
		return id
	}
	oldSent, oldQueued, recentSent := receipt("old-sent", old, store.ReceiptSent), receipt("old-queued", old, store.ReceiptQueued), receipt("recent-sent", recent, store.ReceiptSent)

	s.coordCfg.Retention = maintenance.RetentionConfig{Events: 8 * 24 * time.Hour, Receipts: 8 * 24 * time.Hour}
	s.startCoordinator()

	deadline := time.Now().Add(20 * time.Second)
	for {
		_, err := s.store.GetReceipt(ctx, oldSent)
		if errors.Is(err, store.ErrNotFound) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the old finished message was not purged: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, id := range []ulid.ULID{oldQueued, recentSent} {
		if _, err := s.store.GetReceipt(ctx, id); err != nil {
			t.Errorf("receipt %s purged too: %v", id, err)
		}
	}
	// Events are purged first: a stored event is recognised as a repeat,
	// a purged one is stored anew.
	if res, err := s.store.RecordEvent(ctx, recentEvent, now); err != nil || !res.Duplicate {
		t.Errorf("the recent event is gone: %+v, %v", res, err)
	}
	if res, err := s.store.RecordEvent(ctx, oldEvent, now); err != nil || res.Duplicate {
		t.Errorf("the old event is still there: %+v, %v", res, err)
	}
}
