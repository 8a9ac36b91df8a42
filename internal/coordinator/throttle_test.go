package coordinator_test

import (
	"strings"
	"testing"
	"time"
)

// TestThrottleLimitsPages: a broadcast throttled to 36 messages an hour sends
// its first burst (one page) and then waits, saying why.
func TestThrottleLimitsPages(t *testing.T) {
	t.Parallel()
	const pageLimit = 10
	s := newStack(t, stackOptions{workers: 1, concurrency: 4, pageLimit: pageLimit})
	s.seed(300)
	id := s.create("", 36)
	s.start(id)
	deadline := time.Now().Add(20 * time.Second)
	for s.sink.Count() < pageLimit && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := s.waitQuiet(1500 * time.Millisecond); got != pageLimit {
		t.Fatalf("%d messages sent; a 36/hour throttle with a burst of one page (%d) allows exactly %d now", got, pageLimit, pageLimit)
	}
	b := s.status(id)
	if w := b.GetProgress().GetWaitingFor(); !strings.Contains(w, "throttle of 36/hour") {
		t.Fatalf("waiting_for = %q; want it to name the throttle", w)
	}
}
