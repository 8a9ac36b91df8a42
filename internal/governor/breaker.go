package governor

import "time"

// Breaker rules, per receiving provider.
const (
	// BreakerFailures transient failures within BreakerWindow open the
	// breaker: a provider answering 4xx to several pages in a row is telling
	// us to back off, and more attempts only hurt the sender's reputation.
	BreakerFailures = 5
	BreakerWindow   = 5 * time.Minute
	// BreakerOpen is how long an open breaker refuses before it lets one
	// probe through: short, because transient trouble is usually short.
	BreakerOpen = 30 * time.Second
	// ProbeLease is how long a half-open breaker waits for the outcome of
	// its probe before it lets another one through, so a probe lost with a
	// crashed worker cannot hold a provider shut forever. Longer than any
	// page takes (the coordinator redispatches an unreported page after 3
	// minutes).
	ProbeLease = 5 * time.Minute
)

// Breaker phases, as shown in Status.
const (
	PhaseClosed   = "closed"
	PhaseOpen     = "open"
	PhaseHalfOpen = "half-open"
	PhaseHeld     = "held"
)

// BreakerState is one provider's circuit breaker. Closed: OpenUntil is zero.
// Open: now is before OpenUntil. Half-open: OpenUntil has passed; one probe
// may go (ProbeAt records when it went) and its outcome closes or re-opens.
type BreakerState struct {
	// Failures are the transient failures in the last BreakerWindow, oldest
	// first, at most BreakerFailures of them.
	Failures  []time.Time `json:"failures,omitempty"`
	OpenUntil time.Time   `json:"open_until,omitzero"`
	ProbeAt   time.Time   `json:"probe_at,omitzero"`
}

func (b *BreakerState) phase(now time.Time) string {
	switch {
	case b.OpenUntil.IsZero():
		return PhaseClosed
	case now.Before(b.OpenUntil):
		return PhaseOpen
	}
	return PhaseHalfOpen
}

// failure counts a transient failure; a breaker it trips stays open for
// open.
func (b *BreakerState) failure(now time.Time, open time.Duration) {
	switch b.phase(now) {
	case PhaseOpen:
		// A send that started before the breaker opened: already counted
		// in spirit; extending the open period for it would punish twice.
	case PhaseHalfOpen:
		b.trip(now, open) // the probe (or a straggler) failed: the provider is still unwell
	default:
		b.forget(now)
		b.Failures = append(b.Failures, now)
		if len(b.Failures) >= BreakerFailures {
			b.trip(now, open)
		}
	}
}

// success closes a half-open breaker. Successes do not clear failures of a
// closed one: the rule is a count in a window, not a run of failures in a
// row. In the open period a success is a straggler from before it opened.
func (b *BreakerState) success(now time.Time) {
	if b.phase(now) == PhaseHalfOpen {
		*b = BreakerState{}
	}
}

// trip opens the breaker on a clean counter, so that after it closes again
// it takes BreakerFailures new failures to open it.
func (b *BreakerState) trip(now time.Time, open time.Duration) {
	*b = BreakerState{OpenUntil: now.Add(open)}
}

// allow reports whether one attempt may go now; in half-open it says yes once
// per ProbeLease until the probe's outcome is recorded.
func (b *BreakerState) allow(now time.Time, open time.Duration) (bool, time.Time) {
	switch b.phase(now) {
	case PhaseOpen:
		return false, b.OpenUntil
	case PhaseHalfOpen:
		if b.ProbeAt.IsZero() || !now.Before(b.ProbeAt.Add(ProbeLease)) {
			b.ProbeAt = now
			return true, time.Time{}
		}
		// Look again when an open period would have ended; the probe's
		// outcome usually arrives well before its lease runs out.
		return false, minTime(now.Add(open), b.ProbeAt.Add(ProbeLease))
	}
	return true, time.Time{}
}

// forget drops failures more than BreakerWindow before now (a failure exactly
// BreakerWindow ago is still within it).
func (b *BreakerState) forget(now time.Time) {
	cut := now.Add(-BreakerWindow)
	i := 0
	for i < len(b.Failures) && b.Failures[i].Before(cut) {
		i++
	}
	b.Failures = b.Failures[i:]
	if len(b.Failures) == 0 {
		b.Failures = nil
	}
}

// idle reports whether the breaker is closed with nothing recent to
// remember, so it can be dropped from the state.
func (b BreakerState) idle(now time.Time) bool {
	b.Failures = append([]time.Time(nil), b.Failures...)
	b.forget(now)
	return b.OpenUntil.IsZero() && len(b.Failures) == 0
}

func (b BreakerState) clone() BreakerState {
	b.Failures = append([]time.Time(nil), b.Failures...)
	if len(b.Failures) == 0 {
		b.Failures = nil
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
