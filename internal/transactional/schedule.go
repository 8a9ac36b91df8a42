// Package transactional sends one message to one recipient (a password
// reset, a receipt) until it lands, exactly once: the gRPC service that
// accepts it under an idempotency key, and the consumer in the page worker
// process that claims it in outbound_receipts before each attempt, sends,
// and retries transient failures on a JetStream stream of its own.
package transactional

import (
	"time"

	"github.com/rangecast/rangecast/internal/transport"
)

// Schedule is when a message is tried again. It is pure: the caller passes
// the random number for the jitter, so tables can pin every delay.
type Schedule struct {
	// Backoff[i] is the wait before attempt i+2; a message gets
	// len(Backoff)+1 attempts in all.
	Backoff []time.Duration
	// Jitter spreads each wait by up to ±Jitter of itself, so messages that
	// failed together (a server outage) do not all retry in the same second.
	Jitter float64
}

// DefaultSchedule: 6 attempts over about 43 minutes.
var DefaultSchedule = Schedule{
	Backoff: []time.Duration{10 * time.Second, 30 * time.Second, 2 * time.Minute, 10 * time.Minute, 30 * time.Minute},
	Jitter:  0.2,
}

// MaxAttempts is how many attempts a message gets in all.
func (s Schedule) MaxAttempts() int { return len(s.Backoff) + 1 }

// Retry says whether a message whose attempt number `done` failed with class
// c is tried again, and after how long. rnd is in [0, 1). Recipient errors
// are never retried: the server said this address will not take the message.
// Channel errors (authentication, sender rejected, anything unrecognised)
// wait the longest step every time, because the fault is ours or the
// provider's and hammering it helps nobody.
func (s Schedule) Retry(done int, c transport.Class, rnd float64) (time.Duration, bool) {
	if c == transport.Recipient || done < 1 || done >= s.MaxAttempts() {
		return 0, false
	}
	d := s.Backoff[done-1]
	if c == transport.Channel {
		d = s.longest()
	}
	if s.Jitter > 0 {
		d = time.Duration(float64(d) * (1 + s.Jitter*(2*rnd-1)))
	}
	return max(d, 0), true
}

func (s Schedule) longest() time.Duration {
	var m time.Duration
	for _, d := range s.Backoff {
		m = max(m, d)
	}
	return m
}
