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
