// Package governor paces sending: token buckets for instantaneous rate, and
// per sending domain (Domain) a learned daily ceiling, holds and circuit
// breakers per receiving provider, and an SMTP server's hourly limit. Pure
// logic on times passed in by the caller: nothing here reads a clock.
package governor

import (
	"math"
	"time"
)

// Bucket is a token bucket that refills at a steady rate up to a burst. Unlike
// x/time/rate it hands out partial grants (a page may shrink to what is
// available) and takes unused tokens back.
type Bucket struct {
	perSecond float64
	burst     float64
	tokens    float64
	last      time.Time
}

// NewBucket returns a full bucket refilling perHour tokens an hour.
func NewBucket(perHour int64, burst int, now time.Time) *Bucket {
	return NewBucketHolding(perHour, burst, burst, now)
}

// NewBucketHolding returns a bucket refilling perHour tokens an hour up to
// burst, holding tokens (at most burst) now.
func NewBucketHolding(perHour int64, burst, tokens int, now time.Time) *Bucket {
	return &Bucket{perSecond: float64(perHour) / 3600, burst: float64(burst), tokens: float64(min(tokens, burst)), last: now}
}

func (b *Bucket) refill(now time.Time) {
	if now.After(b.last) {
		b.tokens = math.Min(b.burst, b.tokens+now.Sub(b.last).Seconds()*b.perSecond)
		b.last = now
	}
}

// Take grants up to n whole tokens (possibly 0).
func (b *Bucket) Take(now time.Time, n int) int {
	b.refill(now)
	grant := int(math.Min(float64(n), math.Floor(b.tokens)))
	if grant < 0 {
		grant = 0
	}
	b.tokens -= float64(grant)
	return grant
}

// Return gives back n unused tokens.
func (b *Bucket) Return(n int) {
	if n > 0 {
		b.tokens = math.Min(b.burst, b.tokens+float64(n))
	}
}

// Burst is how many tokens the bucket holds at most.
func (b *Bucket) Burst() float64 { return b.burst }

// Available is how many tokens the bucket holds at now, fractions included.
func (b *Bucket) Available(now time.Time) float64 {
	b.refill(now)
	return b.tokens
}

// Wait is how long until at least one token is available.
func (b *Bucket) Wait(now time.Time) time.Duration { return b.WaitFor(now, 1) }

// WaitFor is how long until at least n tokens are available (0 if they are,
// or if the bucket never refills).
func (b *Bucket) WaitFor(now time.Time, n int) time.Duration {
	b.refill(now)
	need := math.Min(float64(n), b.burst) - b.tokens
	if need <= 0 || b.perSecond <= 0 {
		return 0
	}
	return time.Duration(need / b.perSecond * float64(time.Second))
}
