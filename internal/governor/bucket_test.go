package governor

import (
	"testing"
	"time"
)

func TestBucket(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	b := NewBucket(3600, 200, t0) // one token a second, burst 200
	if got := b.Take(t0, 150); got != 150 {
		t.Fatalf("first take = %d, want 150", got)
	}
	if got := b.Take(t0, 200); got != 50 {
		t.Fatalf("partial grant = %d, want 50 (what is left)", got)
	}
	if got := b.Take(t0, 1); got != 0 {
		t.Fatalf("empty bucket granted %d", got)
	}
	if w := b.Wait(t0); w != time.Second {
		t.Fatalf("wait = %v, want 1s", w)
	}
	if got := b.Take(t0.Add(10*time.Second), 200); got != 10 {
		t.Fatalf("after 10s granted %d, want 10", got)
	}
	b.Return(30)
	if got := b.Take(t0.Add(10*time.Second), 200); got != 30 {
		t.Fatalf("returned tokens: granted %d, want 30", got)
	}
	if got := b.Take(t0.Add(24*time.Hour), 1000); got != 200 {
		t.Fatalf("refill capped at burst: granted %d, want 200", got)
	}
}

func TestBucketWaitFor(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	b := NewBucket(3600, 100, t0) // one token a second
	b.Take(t0, 100)
	for _, tc := range []struct {
		n    int
		want time.Duration
	}{{1, time.Second}, {50, 50 * time.Second}, {500, 100 * time.Second}} {
		if got := b.WaitFor(t0, tc.n); got != tc.want {
			t.Errorf("WaitFor(%d) = %v, want %v (capped at the burst)", tc.n, got, tc.want)
		}
	}
	if got := b.WaitFor(t0.Add(time.Minute), 50); got != 0 {
		t.Errorf("WaitFor once refilled = %v, want 0", got)
	}
}
