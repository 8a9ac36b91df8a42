package governor

import "time"

// Breaker rules, per receiving provider.
const (
	// BreakerFailures transient failures within BreakerWindow open the
	// breaker: a provider answering 4xx to several pages in a row is telling
	// us to back off, and more attempts only hurt the sender's reputation.
	BreakerFailures = 5
	BreakerWindow   = 5 * time.Minute
	// BreakerShare is the share of the attempts in BreakerWindow that must
	// have failed, as well as BreakerFailures of them, for the breaker to
	// open. The count alone was made for ~14 messages a second, where five
	// failures are 0.12 % of the window; at hundreds a second it held the
	// breaker open nearly all the time on a provider's ordinary 1-5 %
	// deferrals. Five failures stay the floor for small volumes.
	BreakerShare = 0.2
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
	// Failures are the latest transient failures in the last
	// BreakerWindow, oldest first, at most BreakerFailures of them.
	Failures []time.Time `json:"failures,omitempty"`
	// Minutes count accepted sends and failures per minute of the last
	// BreakerWindow, oldest first: the share rule's window, a few entries
	// whatever the volume. Stored, so a new leader judges the share on the
	// whole window; a provider's sends are counted in memory until its
	// first failure (sendWindow), so a healthy provider keeps no state.
	Minutes   []BreakerMinute `json:"minutes,omitempty"`
	OpenUntil time.Time       `json:"open_until,omitzero"`
	ProbeAt   time.Time       `json:"probe_at,omitzero"`
}

// BreakerMinute is one minute of a breaker's window.
type BreakerMinute struct {
	At     time.Time `json:"at"` // the minute's start
	Sent   int       `json:"sent,omitempty"`
	Failed int       `json:"failed,omitempty"`
}

// minute returns the window's entry for now's minute, adding it.
func (b *BreakerState) minute(now time.Time) *BreakerMinute {
	at := now.Truncate(time.Minute)
	if n := len(b.Minutes); n > 0 && b.Minutes[n-1].At.Equal(at) {
		return &b.Minutes[n-1]
	}
	b.Minutes = append(b.Minutes, BreakerMinute{At: at})
	return &b.Minutes[len(b.Minutes)-1]
}

// share is the failed share of the window's attempts.
func (b *BreakerState) share() float64 {
	sent, failed := 0, 0
	for _, m := range b.Minutes {
		sent, failed = sent+m.Sent, failed+m.Failed
	}
	if sent+failed == 0 {
		return 0
	}
	return float64(failed) / float64(sent+failed)
}

// sendWindow counts a provider's accepted sends per minute over
// BreakerWindow, in memory (Sent only).
type sendWindow []BreakerMinute

func (w sendWindow) add(now time.Time, n int) sendWindow {
	w = w.prune(now)
	at := now.Truncate(time.Minute)
	if k := len(w); k > 0 && w[k-1].At.Equal(at) {
		w[k-1].Sent += n
		return w
	}
	return append(w, BreakerMinute{At: at, Sent: n})
}

func (w sendWindow) prune(now time.Time) sendWindow {
	cut := now.Add(-BreakerWindow)
	i := 0
	for i < len(w) && w[i].At.Before(cut) {
		i++
	}
	return w[i:]
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
// open. It trips when the window holds at least floor failures and they
// are at least share of its attempts.
func (b *BreakerState) failure(now time.Time, open time.Duration, floor int, share float64, sent sendWindow) {
	switch b.phase(now) {
	case PhaseOpen:
		// A send that started before the breaker opened: already counted
		// in spirit; extending the open period for it would punish twice.
	case PhaseHalfOpen:
		b.trip(now, open) // the probe (or a straggler) failed: the provider is still unwell
	default:
		b.forget(now)
		if len(b.Minutes) == 0 {
			// The first failure in the window: the sends counted in memory
			// so far become the window's.
			b.Minutes = append([]BreakerMinute(nil), sent.prune(now)...)
		}
		b.minute(now).Failed++
		b.Failures = append(b.Failures, now)
		if len(b.Failures) > floor {
			b.Failures = b.Failures[len(b.Failures)-floor:]
		}
		if len(b.Failures) >= floor && b.share() >= share {
			b.trip(now, open)
		}
	}
}

// success records n accepted sends and closes a half-open breaker.
// Successes do not clear failures of a closed one: the rule is a share in a
// window, not a run of failures in a row. In the open period a success is a
// straggler from before it opened.
func (b *BreakerState) success(now time.Time, n int) {
	switch b.phase(now) {
	case PhaseHalfOpen:
		*b = BreakerState{}
	case PhaseClosed:
		b.forget(now)
		if len(b.Minutes) > 0 {
			b.minute(now).Sent += n
		}
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
	// A minute that began before the window is dropped whole: the share
	// then leans a little towards staying closed, and the state stays
	// within the window.
	j := 0
	for j < len(b.Minutes) && b.Minutes[j].At.Before(cut) {
		j++
	}
	b.Minutes = b.Minutes[j:]
	if len(b.Minutes) == 0 {
		b.Minutes = nil
	}
}

// idle reports whether the breaker is closed with nothing recent to
// remember, so it can be dropped from the state.
func (b BreakerState) idle(now time.Time) bool {
	b.Failures = append([]time.Time(nil), b.Failures...)
	b.Minutes = append([]BreakerMinute(nil), b.Minutes...)
	b.forget(now)
	return b.OpenUntil.IsZero() && len(b.Failures) == 0 && len(b.Minutes) == 0
}

func (b BreakerState) clone() BreakerState {
	b.Failures = append([]time.Time(nil), b.Failures...)
	if len(b.Failures) == 0 {
		b.Failures = nil
	}
	b.Minutes = append([]BreakerMinute(nil), b.Minutes...)
	if len(b.Minutes) == 0 {
		b.Minutes = nil
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
