package governor

import (
	"fmt"
	"math"
	"strconv"
	"time"
)

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
	// RampConnections is how many connections a half-open provider is
	// ramped up to before its breaker closes. A provider coming back gets
	// one connection (the probe), then more after each clean step: doubling
	// after a breaker, one at a time after a provider's documented hold
	// (Gmail's 421 4.7.28). Closing at once after one probe hit a provider
	// that had just throttled with the full pool of every worker.
	RampConnections = 16
	// RampIdle drops a ramp that has taken no step for this long: with no
	// mail for the provider in half an hour, what it said then no longer
	// tells how it will take the next broadcast, and the state stays small.
	RampIdle = 30 * time.Minute
	// RefusalMemory bounds how long a provider's run of refusals
	// (RefusingSince) is remembered with no attempt to end it: far past
	// any give-up horizon, and the state stays small.
	RefusalMemory = 14 * 24 * time.Hour
)

// Breaker phases, as shown in Status.
const (
	PhaseClosed   = "closed"
	PhaseOpen     = "open"
	PhaseHalfOpen = "half-open"
	PhaseHeld     = "held"
)

// BreakerState is one provider's circuit breaker. Closed: OpenUntil is zero.
// Open: now is before OpenUntil (shown as held when the provider asked for
// the pause: Hold). Half-open: OpenUntil has passed and the provider is
// ramped back up: one carrier at a time (ProbeAt records when it went) may
// send its recipients on Conns connections; each clean carrier adds
// connections, a failure re-opens, and past RampConnections it closes.
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
	// Conns is the half-open ramp's connections for the next carrier; 0
	// means 1 (the probe).
	Conns int `json:"conns,omitempty"`
	// SteppedAt is when the ramp last took a clean step.
	SteppedAt time.Time `json:"stepped_at,omitzero"`
	// Hold: the open period is a provider's documented pause (Gmail's 421
	// 4.7.28), not a trip of the share rule. Linear: the ramp after it adds
	// one connection per step, as the provider asks, instead of doubling.
	Hold   bool `json:"hold,omitempty"`
	Linear bool `json:"linear,omitempty"`
	// Reason says why it opened ("421 4.7.28", or the share and the last
	// reply); LastReply is the latest transient reply in the window. Both
	// are for people: status and governor status show them.
	Reason    string `json:"reason,omitempty"`
	LastReply string `json:"last_reply,omitempty"`
	// RefusingSince is when the provider's present run of refusals began:
	// the first trip or hold since it last accepted a message. Re-opens
	// while ramping back keep it; an accepted send clears it. A provider
	// that refuses for good keeps its breaker cycling (open, one ramp
	// step, open again) and its held recipients are never attempted, so
	// without it they would wait as long as the probes take to use up
	// every recipient's attempts: months at volume. The coordinator gives
	// up on them once it is old enough (coordinator.GovernorConfig's
	// GiveUpAfter).
	RefusingSince time.Time `json:"refusing_since,omitzero"`
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
	sent, failed := b.counts()
	if sent+failed == 0 {
		return 0
	}
	return float64(failed) / float64(sent+failed)
}

// counts are the accepted and refused attempts in the window.
func (b *BreakerState) counts() (sent, failed int) {
	for _, m := range b.Minutes {
		sent, failed = sent+m.Sent, failed+m.Failed
	}
	return sent, failed
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
func (b *BreakerState) failure(now time.Time, open time.Duration, floor int, share float64, sent sendWindow, reply string) {
	switch b.phase(now) {
	case PhaseOpen:
		// A send that started before the breaker opened: already counted
		// in spirit; extending the open period for it would punish twice.
	case PhaseHalfOpen:
		// A carrier (or a straggler) failed: the provider is still unwell.
		// After a provider's own hold the way back stays one connection at
		// a time.
		linear := b.Linear
		b.trip(now, open, "refused again while ramping up"+replySuffix(reply))
		b.Linear = linear
	default:
		if reply != "" {
			b.LastReply = reply
		}
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
		if sh := b.share(); len(b.Failures) >= floor && sh >= share {
			// The counts, not only the share: "100 %" read as "nothing
			// accepted" to a tester whose earlier sends had gone through
			// before the window.
			ok, refused := b.counts()
			b.trip(now, open, fmt.Sprintf("%d of %d attempts refused in the last %s%s", refused, ok+refused, shortDuration(BreakerWindow), replySuffix(b.LastReply)))
		}
	}
}

// hold opens the breaker for a provider's documented pause: at least until
// now+d, shown as held with reason, and ramped back one connection at a
// time when linear.
func (b *BreakerState) hold(now time.Time, d time.Duration, reason string, linear bool) {
	// Unless open, OpenUntil is not after now: the hold starts now.
	*b = BreakerState{OpenUntil: maxTime(now.Add(d), b.OpenUntil), Hold: true, Linear: linear || b.Linear, Reason: reason,
		RefusingSince: b.refusingFrom(now)}
}

// success records n accepted sends. In half-open it is a clean step of the
// ramp: the next carrier gets more connections (double, or one more when
// Linear), and past rampTo the breaker closes. Successes do not clear
// failures of a closed one: the rule is a share in a window, not a run of
// failures in a row. In the open period a success is a straggler from
// before it opened.
func (b *BreakerState) success(now time.Time, n, rampTo int) {
	switch b.phase(now) {
	case PhaseHalfOpen:
		c := b.conns()
		if b.Linear {
			c++
		} else {
			c *= 2
		}
		if c > rampTo {
			*b = BreakerState{}
			return
		}
		b.Conns, b.ProbeAt, b.SteppedAt, b.RefusingSince = c, time.Time{}, now, time.Time{}
	case PhaseClosed:
		b.forget(now)
		if n > 0 {
			b.RefusingSince = time.Time{} // it takes mail again
		}
		if len(b.Minutes) > 0 {
			b.minute(now).Sent += n
		}
	}
}

// step judges a carried ramp step (Domain.RecordStep): sent accepted,
// failed refused. Half-open, the step re-opens the breaker when the worker
// ended it (ended: the rule below met on the sends it had answers for, or
// more than a deferral), by the rule that opened it, at least
// l.BreakerFailures refusals that are at least l.BreakerShare of its
// attempts, or when it had more refusals than acceptances (a step with
// fewer recipients than the floor, or the time of a few slow sends: no
// sign the provider is back);
// otherwise it is a clean step. The first refusal alone
// is not the provider's answer, since most providers defer a few percent
// at random. In any other phase the counts are taken one by one, successes
// first, as before the ramp.
func (b *BreakerState) step(now time.Time, sent, failed int, ended bool, l Limits, window sendWindow, reply string) {
	if b.phase(now) != PhaseHalfOpen {
		if sent > 0 {
			b.success(now, sent, l.RampConnections)
		}
		for range failed {
			b.failure(now, l.BreakerOpen, l.BreakerFailures, l.BreakerShare, window, reply)
		}
		return
	}
	// A step with more refused than accepted re-opens it too, however
	// few its attempts: a step into a slow provider has the time of a few
	// sends only (pageworker.StepFor), too few for the rule's floor.
	if ended || StepEnds(sent+failed, failed, l.BreakerShare, l.BreakerFailures) || failed > sent {
		if sent > 0 {
			// It took some: this re-open starts a new run of refusals.
			b.RefusingSince = time.Time{}
		}
		linear := b.Linear
		why := fmt.Sprintf("refused again while ramping up: %d of a step's %d attempts", failed, sent+failed)
		if sent+failed == 0 {
			// Ended before any send reached a recipient (a connection or
			// STARTTLS failure): there is no share to state.
			why = "a ramp step ended before any of its sends reached a recipient"
		}
		b.trip(now, l.BreakerOpen, why+replySuffix(reply))
		b.Linear = linear
		return
	}
	if sent > 0 {
		b.success(now, sent, l.RampConnections)
	}
}

// StepEnds reports whether a carried ramp step that has made attempts, of
// which refused were refused for a transient reason, has met its
// provider's answer: at least floor refusals, and at least share of its
// attempts (the breaker's own rule, which RecordStep judges the step by;
// with floor and share 0, the first refusal). The worker stops sending the
// step's recipients then; the rest wait.
func StepEnds(attempts, refused int, share float64, floor int) bool {
	return refused > 0 && refused >= floor && float64(refused) >= share*float64(attempts)
}

// conns is the connections the next half-open carrier may use.
func (b *BreakerState) conns() int { return max(b.Conns, 1) }

// release ends a carrier that had nothing of the provider's to send: the
// next may go at once, on the same connections.
func (b *BreakerState) release(now time.Time) {
	if b.phase(now) == PhaseHalfOpen {
		b.ProbeAt = time.Time{}
	}
}

// trip opens the breaker on a clean counter, so that after it closes again
// it takes BreakerFailures new failures to open it.
func (b *BreakerState) trip(now time.Time, open time.Duration, reason string) {
	*b = BreakerState{OpenUntil: now.Add(open), Reason: reason, RefusingSince: b.refusingFrom(now)}
}

// refusingFrom is RefusingSince for a trip or hold at now: kept if a run
// of refusals is on already, now if this one starts it.
func (b *BreakerState) refusingFrom(now time.Time) time.Time {
	if b.RefusingSince.IsZero() {
		return now
	}
	return b.RefusingSince
}

// replySuffix is " (451 4.3.0)" for a reply, "" for none.
func replySuffix(reply string) string {
	if reply == "" {
		return ""
	}
	return " (" + reply + ")"
}

// percent writes a share as people read it: "3 %", "0.4 %", "100 %".
func percent(share float64) string {
	p := share * 100
	switch {
	case p >= 10 || p == 0:
		return fmt.Sprintf("%.0f %%", p)
	case p >= 1:
		return strconv.FormatFloat(math.Round(p*10)/10, 'f', -1, 64) + " %"
	}
	return strconv.FormatFloat(math.Round(p*100)/100, 'f', -1, 64) + " %"
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

// tidied is the breaker as the state keeps it at now, and false when there
// is nothing to keep: a closed breaker with nothing recent to remember, or
// a ramp with no step for RampIdle. A ramp dropped while its provider is
// still refusing leaves a closed breaker holding RefusingSince alone, kept
// until an accepted send or RefusalMemory: a gap in sending (a pause, a
// daily ceiling reached) must not restart the count towards giving the
// provider's recipients up, or a ceiling-bound broadcast never reaches it.
func (b BreakerState) tidied(now time.Time) (BreakerState, bool) {
	// No clone: forget only reslices, and the caller keeps one of the two.
	b.forget(now)
	remember := !b.RefusingSince.IsZero() && now.Sub(b.RefusingSince) < RefusalMemory
	if b.phase(now) == PhaseHalfOpen && (b.ProbeAt.IsZero() || !now.Before(b.ProbeAt.Add(ProbeLease))) &&
		now.Sub(maxTime(b.OpenUntil, b.SteppedAt)) >= RampIdle {
		return BreakerState{RefusingSince: b.RefusingSince}, remember
	}
	if b.quiet() && !remember {
		return BreakerState{}, false
	}
	return b, true
}

// quiet reports whether the breaker is closed with no failure or minute in
// its window.
func (b BreakerState) quiet() bool {
	return b.OpenUntil.IsZero() && len(b.Failures) == 0 && len(b.Minutes) == 0
}

// onlyRefusing reports whether the breaker is closed with nothing to
// remember but a run of refusals (what tidied leaves of an idle ramp).
func (b BreakerState) onlyRefusing() bool { return b.quiet() && !b.RefusingSince.IsZero() }

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
