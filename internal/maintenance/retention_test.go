package maintenance_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/rangecast/rangecast/internal/maintenance"
	"github.com/rangecast/rangecast/internal/store"
	"github.com/rangecast/rangecast/internal/testenv"
)

func TestRetentionCheck(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		r    maintenance.RetentionConfig
		want string
	}{
		{maintenance.RetentionConfig{}, ""},
		{maintenance.RetentionConfig{Events: 30 * 24 * time.Hour, Receipts: 48 * time.Hour}, ""},
		{maintenance.RetentionConfig{Receipts: 12 * time.Hour}, "--transactional-retention 12h0m0s is too short"},
		{maintenance.RetentionConfig{Events: 48 * time.Hour}, "--event-retention 48h0m0s is too short"},
		{maintenance.RetentionConfig{Receipts: -time.Hour}, "--transactional-retention -1h0m0s is too short"},
		{maintenance.RetentionConfig{Interval: -time.Minute}, "cannot be negative"},
	} {
		err := c.r.Validate()
		if (c.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.want)) {
			t.Errorf("Validate(%+v) = %v, want %q", c.r, err, c.want)
		}
	}
}

// TestRetentionPurges: against a store alone, one Purge deletes delivery
// events and finished transactional messages older than their retention
// and leaves newer ones and unfinished messages alone.
func TestRetentionPurges(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := testenv.Store(t)
	now := time.Now()
	old, recent := now.Add(-10*24*time.Hour), now.Add(-time.Hour)

	event := func(id string, received time.Time) store.DeliveryEvent {
		ev := store.DeliveryEvent{Provider: "test", EventID: id, Type: store.EventDelivered, MessageID: id + "@elsewhere.example", OccurredAt: received}
		if _, err := st.RecordEvent(ctx, ev, received); err != nil {
			t.Fatal(err)
		}
		return ev
	}
	oldEvent, recentEvent := event("old", old), event("recent", recent)
	receipt := func(key string, at time.Time, status store.ReceiptStatus) ulid.ULID {
		id := ulid.Make()
		_, _, err := st.CreateReceipt(ctx, store.Receipt{ID: id, Kind: "transactional", Key: key, Email: "p@example.org",
			PayloadHash: key, Payload: []byte("{}"), MessageID: "tx." + id.String() + "@rangecast.test", NextAttemptAt: at, CreatedAt: at})
		if err != nil {
			t.Fatal(err)
		}
		if status == store.ReceiptQueued {
			return id
		}
		if _, err := st.ClaimReceipt(ctx, id, at); err != nil {
			t.Fatal(err)
		}
		if _, err := st.FinishAttempt(ctx, id, 1, store.AttemptOutcome{Status: status, Result: string(status)}, at); err != nil {
			t.Fatal(err)
		}
		return id
	}
	oldSent, oldQueued, recentSent := receipt("old-sent", old, store.ReceiptSent), receipt("old-queued", old, store.ReceiptQueued), receipt("recent-sent", recent, store.ReceiptSent)

	r := maintenance.NewRetention(maintenance.RetentionConfig{Events: 8 * 24 * time.Hour, Receipts: 8 * 24 * time.Hour}, st, nil, slog.New(slog.DiscardHandler))
	r.Purge(ctx)

	if _, err := st.GetReceipt(ctx, oldSent); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the old finished message was not purged: %v", err)
	}
	for _, id := range []ulid.ULID{oldQueued, recentSent} {
		if _, err := st.GetReceipt(ctx, id); err != nil {
			t.Errorf("receipt %s purged too: %v", id, err)
		}
	}
	// A stored event is recognised as a repeat, a purged one is stored anew.
	if res, err := st.RecordEvent(ctx, recentEvent, now); err != nil || !res.Duplicate {
		t.Errorf("the recent event is gone: %+v, %v", res, err)
	}
	if res, err := st.RecordEvent(ctx, oldEvent, now); err != nil || res.Duplicate {
		t.Errorf("the old event is still there: %+v, %v", res, err)
	}
}
