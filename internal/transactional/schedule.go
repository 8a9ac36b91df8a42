// Package transactional sends one message to one recipient (a password
// reset, a receipt) until it lands, exactly once: the gRPC service that
// accepts it under an idempotency key, and the consumer in the page worker
// process that claims it in outbound_receipts before each attempt, sends,
// and retries transient failures on a JetStream stream of its own.
package transactional

import (
	"cmp"
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
	// Unreached is how long a message is retried while the relay takes
	// nothing: attempts that failed before the recipient was named
	// (transport.BeforeRecipient: connect, TLS, AUTH, MAIL FROM) say
	// nothing of the recipient and do not count toward the attempts, so a
	// relay outage longer than the backoff does not fail every message
	// queued at its start. 0 is DefaultUnreached.
	Unreached time.Duration
}

// DefaultUnreached: a day, as long as a person may still want the message
// an outage held (a receipt, a notice; a reset link will have expired, and
// its sender asks again), and long enough for an operator to notice and
// fix the relay. Past it the message fails, saying so.
const DefaultUnreached = 24 * time.Hour

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

// RetryUnreached says whether a message whose attempt `done` failed with
// class c before the recipient was named, first queued age ago, is tried
// again, and after how long: the backoff's step for that attempt (its
// longest step once the steps run out, and for a channel error, as Retry
// waits), while age is under Unreached.
func (s Schedule) RetryUnreached(done int, c transport.Class, age time.Duration, rnd float64) (time.Duration, bool) {
	if age >= cmp.Or(s.Unreached, DefaultUnreached) || len(s.Backoff) == 0 {
		return 0, false
	}
	d := s.longest()
	if done >= 1 && done <= len(s.Backoff) && c != transport.Channel {
		d = s.Backoff[done-1]
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
