package bus_test

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/rangecast/rangecast/internal/bus"
	"github.com/rangecast/rangecast/internal/testenv"
)

// TestIsConflict: a create over an existing key and an update at a stale
// revision both lost a compare-and-set; other failures did not.
func TestIsConflict(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, js := testenv.NATS(t)
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "conflicts", Storage: jetstream.MemoryStorage})
	if err != nil {
		t.Fatal(err)
	}
	rev, err := bus.PutAt(ctx, kv, "k", []byte("1"), 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bus.PutAt(ctx, kv, "k", []byte("2"), 0); !bus.IsConflict(err) {
		t.Fatalf("create over an existing key: %v; want a conflict", err)
	}
	if _, err := bus.PutAt(ctx, kv, "k", []byte("2"), rev); err != nil {
		t.Fatal(err)
	}
	if _, err := bus.PutAt(ctx, kv, "k", []byte("3"), rev); !bus.IsConflict(err) {
		t.Fatalf("update at a stale revision: %v; want a conflict", err)
	}
	if _, err := bus.PutAt(ctx, kv, "bad key!", []byte("x"), 0); err == nil || bus.IsConflict(err) {
		t.Fatalf("invalid key: %v; want an error that is no conflict", err)
	}
	if bus.IsConflict(nil) {
		t.Fatal("nil is a conflict")
	}
}

// A report published again with its run's id (a retry after a lost
// acknowledgement) is stored once; another run's report is stored.
func TestReportRetryStoredOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, js := testenv.NATS(t)
	if _, err := bus.Setup(ctx, js, bus.Options{Memory: true}); err != nil {
		t.Fatal(err)
	}
	rep := bus.Encode(bus.Report{Broadcast: "b", Sent: 10})
	for _, run := range []string{"w1/1", "w1/1", "w1/1", "w1/2"} {
		if _, err := js.Publish(ctx, bus.ReportSubject("b"), rep, jetstream.WithMsgID(bus.ReportMsgID(run))); err != nil {
			t.Fatal(err)
		}
	}
	s, err := js.Stream(ctx, bus.ReportStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 2 {
		t.Errorf("%d reports stored; want 2 (three tries of one run's, one of another's)", info.State.Msgs)
	}
}
