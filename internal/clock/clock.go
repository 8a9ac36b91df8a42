// Package clock lets code that makes decisions about time take the time as a
// dependency, so tests can move it forward instead of sleeping.
package clock

import (
	"sync"
	"sync/atomic"
	"time"
)

// Clock is the time source of everything in internal/ that decides by time.
type Clock interface {
	Now() time.Time
	// After fires once d has passed on this clock.
	After(d time.Duration) <-chan time.Time
}

// Real is the wall clock.
type Real struct{}

func (Real) Now() time.Time                         { return time.Now() }
func (Real) After(d time.Duration) <-chan time.Time { return time.After(d) }

// Fake is a clock that only moves when Advance is called.
type Fake struct {
	mu      sync.Mutex
	now     time.Time
	waiters []waiter
}

type waiter struct {
	at time.Time
	ch chan time.Time
}

// NewFake returns a fake clock set to now.
func NewFake(now time.Time) *Fake { return &Fake{now: now} }

func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *Fake) After(d time.Duration) <-chan time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	ch := make(chan time.Time, 1)
	if d <= 0 {
		ch <- f.now
		return ch
	}
	f.waiters = append(f.waiters, waiter{at: f.now.Add(d), ch: ch})
	return ch
}

// Advance moves the clock forward by d and fires every After that is due.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
	kept := f.waiters[:0]
	for _, w := range f.waiters {
		if !w.at.After(f.now) {
			w.ch <- f.now
			continue
		}
		kept = append(kept, w)
	}
	f.waiters = kept
}

// Waiters reports how many After calls are pending, so a test can wait until
// the code under test is blocked on the clock before advancing it.
func (f *Fake) Waiters() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.waiters)
}

// Offset is the wall clock shifted by a fixed amount: time passes at the real
// rate, so timers and network timeouts behave, but the date and time of day
// are Offset away. Tests use it to run a whole system up to a UTC midnight.
type Offset struct{ By time.Duration }

func (o Offset) Now() time.Time                         { return time.Now().Add(o.By) }
func (o Offset) After(d time.Duration) <-chan time.Time { return time.After(d) }

// OffsetTo returns an Offset clock that reads at now.
func OffsetTo(at time.Time) Offset { return Offset{By: time.Until(at)} }

// Jumping is the wall clock that a test can move forward at once: time
// passes at the real rate, so timers and network timeouts behave, and Jump
// skips ahead (ten minutes of a provider's hold in no time). Safe for
// concurrent use.
type Jumping struct{ by atomic.Int64 }

func (j *Jumping) Now() time.Time                         { return time.Now().Add(time.Duration(j.by.Load())) }
func (j *Jumping) After(d time.Duration) <-chan time.Time { return time.After(d) }

// Jump moves the clock forward by d.
func (j *Jumping) Jump(d time.Duration) { j.by.Add(int64(d)) }
