package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/rangecast/rangecast/internal/store"
)

// A database that cannot be reached is store.ErrUnavailable (the API says
// Unavailable, a client retries), not an internal error; a caller's own
// deadline stays a deadline.
func TestUnreachableIsUnavailable(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := pgx.Connect(ctx, "postgres://postgres@127.0.0.1:1/test?sslmode=disable&connect_timeout=5")
	if err == nil {
		t.Fatal("connected to port 1")
	}
	if got := mapErr("claim", err); !errors.Is(got, store.ErrUnavailable) {
		t.Errorf("mapErr(%v) = %v, want store.ErrUnavailable", err, got)
	}
	if got := mapErr("claim", fmt.Errorf("read: %w", context.DeadlineExceeded)); errors.Is(got, store.ErrUnavailable) {
		t.Errorf("a deadline became %v", got)
	}
}

func TestMaxAttributesInSQL(t *testing.T) {
	if maxAttributes != strconv.Itoa(store.MaxAttributes) {
		t.Fatalf("maxAttributes %s, store.MaxAttributes %d", maxAttributes, store.MaxAttributes)
	}
}
