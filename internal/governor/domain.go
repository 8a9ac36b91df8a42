package governor

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Daily ceiling and rate rules, per sending domain.
const (
	// DefaultCeiling is where a domain with no history starts: low enough
	// that a new domain cannot burn its reputation in one broadcast, high
	// enough for a small list to go out on day one.
	DefaultCeiling = 5_000
	// MinCeiling is the floor after a quota rejection, so one early
	// rejection cannot stop a domain for good; it still sends a little and
	// can earn its way back up.
	MinCeiling = 100
	// MaxCeiling caps the doubling: beyond it a sender should be configured
	// by hand, not learned.
	MaxCeiling = 5_000_000
	// QuotaHold is how long a provider that rejected us for quota is left
	// alone: retrying into a quota rejection is what gets a sender blocked.
	QuotaHold = 5 * time.Minute
	// DefaultRatePerSecond and DefaultBurst pace a domain whose Limits leave
	// them unset: fast enough for a page a few times a second, smooth
	// enough that providers do not see a spike.
	DefaultRatePerSecond = 50
	DefaultBurst         = 200
)

// Limits are a domain's configured limits (not state: they come from the
// configuration each time a Domain is made).
type Limits struct {
	// RatePerSecond and Burst shape the domain's token bucket; zero or less
	// means DefaultRatePerSecond and DefaultBurst.
	RatePerSecond float64 `json:"rate_per_second,omitempty"`
	Burst         int     `json:"burst,omitempty"`
	// EmailsPerHour is the hourly limit of the SMTP server the domain sends
	// through (set with the server's configuration); zero or less means none.
	EmailsPerHour int `json:"emails_per_hour,omitempty"`
	// Server names the SMTP server the domain sends through: the hourly
	// limit is that server's, and ResetRateLimit names it.
	Server string `json:"server,omitempty"`
	// InitialCeiling is where a domain with no history starts; zero or less
	// means DefaultCeiling. It never applies to a domain with stored state:
	// what was learned stands.
	InitialCeiling int `json:"initial_ceiling,omitempty"`
	// QuotaHold overrides how long a provider is held after a quota
	// rejection; zero or less means QuotaHold.
	QuotaHold time.Duration `json:"quota_hold,omitempty"`
	// BreakerOpen overrides how long a tripped breaker stays open; zero or
	// less means BreakerOpen.
	BreakerOpen time.Duration `json:"breaker_open,omitempty"`
	// BreakerFailures and BreakerShare override when a breaker opens: at
	// least that many transient failures in BreakerWindow, and at least
	// that share of its attempts; zero or less means the constants.
	BreakerFailures int     `json:"breaker_failures,omitempty"`
	BreakerShare    float64 `json:"breaker_share,omitempty"`
	// RampConnections overrides how many connections a provider coming
	// back is ramped up to before its breaker closes; zero or less means
	// RampConnections.
	RampConnections int `json:"ramp_connections,omitempty"`
}

// withDefaults fills what a caller left unset (zero). It also mends values
// out of range, so a Domain never runs on them, but a configuration does
// not rely on that: coordinator.GovernorConfig.Validate refuses them at
// start, and the flags refuse an explicit zero too.
func (l Limits) withDefaults() Limits {
	if l.RatePerSecond <= 0 || math.IsNaN(l.RatePerSecond) || math.IsInf(l.RatePerSecond, 0) {
		l.RatePerSecond = DefaultRatePerSecond
	}
	if l.Burst <= 0 {
		l.Burst = DefaultBurst
	}
	if l.EmailsPerHour < 0 {
		l.EmailsPerHour = 0
	}
	if l.InitialCeiling <= 0 {
		l.InitialCeiling = DefaultCeiling
	}
	l.InitialCeiling = min(max(l.InitialCeiling, MinCeiling), MaxCeiling)
	if l.QuotaHold <= 0 {
		l.QuotaHold = QuotaHold
	}
	if l.BreakerOpen <= 0 {
		l.BreakerOpen = BreakerOpen
	}
	if l.BreakerFailures <= 0 {
		l.BreakerFailures = BreakerFailures
	}
	if l.BreakerShare <= 0 || l.BreakerShare > 1 || math.IsNaN(l.BreakerShare) {
		l.BreakerShare = BreakerShare
	}
	if l.RampConnections <= 0 {
		l.RampConnections = RampConnections
	}
	return l
}

// DomainState is what a sending domain's governor learns and must keep across
// restarts (stored as JSON in KV, compare-and-set by the caller). Times are
// UTC. What is in flight (grants not yet sent or returned) and the token
// bucket are not in it: they belong to the running actor, like its
// outstanding pages, and a new actor starts with none and a full bucket.
type DomainState struct {
	Domain string `json:"domain"`
	// Ceiling is the learned daily ceiling.
	Ceiling int `json:"ceiling"`
	// Day is the UTC date (2006-01-02) that SentToday and RejectedToday
	// belong to. A call with a later date first closes that day (the
	// rollover), so a state stored days ago is judged correctly on load.
	Day           string `json:"day,omitempty"`
	SentToday     int    `json:"sent_today"`
	RejectedToday bool   `json:"rejected_today,omitempty"`
	// Holds are the providers held after a quota rejection, until when.
	Holds map[string]time.Time `json:"holds,omitempty"`
	// Breakers are the providers with recent transient failures or an open
	// breaker; a closed breaker with nothing recent is dropped.
	Breakers map[string]BreakerState `json:"breakers,omitempty"`
	// Hourly counts sends for the hourly limit of the domain's SMTP server.
	Hourly HourlyWindow `json:"hourly,omitzero"`
	// CeilingSetAt is when an operator last set the ceiling by hand, so a
	// setting is applied once and not again after learning moved on.
	CeilingSetAt time.Time `json:"ceiling_set_at,omitzero"`
	// LeftOut is how many providers a stored record left out (Keeping):
	// Merge does not take their absence for a provider forgotten. Always 0
	// in a Domain's own state.
	LeftOut int `json:"left_out,omitempty"`
}

func (s DomainState) clone() DomainState {
	s.Holds = maps.Clone(s.Holds)
	if s.Breakers != nil {
		b := make(map[string]BreakerState, len(s.Breakers))
		for p, st := range s.Breakers {
			b[p] = st.clone()
		}
		s.Breakers = b
	}
	s.Hourly = s.Hourly.clone()
	return s
}

// Domain is the governor of one sending domain (the From address's domain):
// its learned state, its token bucket and its grants in flight. It is safe
// for concurrent use, though the design is one actor per domain calling it.
// Every method taking now first applies the UTC day rollover if now is on a
// later date than the state's day.
type Domain struct {
	mu       sync.Mutex
	limits   Limits
	st       DomainState
	bucket   *Bucket
	inFlight int
	// server is the hourly limit; private (its window kept in st.Hourly)
	// until ShareServer.
	server *Server
	shared bool
	// sent counts each receiving provider's accepted sends over the
	// breaker window, in memory, until the provider's first failure moves
	// them into its stored breaker state (BreakerState.Minutes).
	sent map[string]sendWindow
	// tidied is when tidy last went over every provider; sentPruned when
	// countSent last pruned sent.
	tidied, sentPruned time.Time
}

// NewDomain returns the governor of domain name with limits l. st is its
// stored state, nil for a domain with no history (which starts at
// l.InitialCeiling, DefaultCeiling unless set); it is copied, not kept. The token bucket starts full.
func NewDomain(name string, l Limits, st *DomainState, now time.Time) *Domain {
	l = l.withDefaults()
	now = now.UTC()
	d := &Domain{
		limits: l,
		bucket: &Bucket{perSecond: l.RatePerSecond, burst: float64(l.Burst), tokens: float64(l.Burst), last: now},
	}
	if st != nil {
		d.st = st.clone()
		d.st.LeftOut = 0
	}
	d.st.Domain = strings.ToLower(strings.TrimSpace(name))
	switch {
	case d.st.Ceiling <= 0:
		d.st.Ceiling = l.InitialCeiling
	case d.st.Ceiling < MinCeiling:
		d.st.Ceiling = MinCeiling
	case d.st.Ceiling > MaxCeiling:
		d.st.Ceiling = MaxCeiling
	}
	if _, err := time.Parse(time.DateOnly, d.st.Day); err != nil {
		// No day (new domain) or one we cannot read: today is day one,
		// and whatever it counted is kept as today's.
		d.st.Day = ""
	}
	d.st.SentToday = max(d.st.SentToday, 0)
	d.server = NewServer(l.Server, l.EmailsPerHour, d.st.Hourly)
	d.st.Hourly = HourlyWindow{} // the server holds it; State puts it back
	d.roll(now)
	return d
}

// roll closes the state's day if now is on a later UTC date. Only the day
// that was recorded can double the ceiling: the days a domain sat idle
// between it and today ended with nothing sent, so they never do, and an idle
// week doubles at most once. A now on an earlier date than the state's (a
// clock stepping back) changes nothing.
func (d *Domain) roll(now time.Time) {
	today := now.UTC().Format(time.DateOnly)
	switch {
	case d.st.Day == "":
		d.st.Day = today
	case today > d.st.Day: // DateOnly strings order like the dates
		// A clean day that used at least 90 % shows the providers took
		// what we sent and the domain wants more: double, never more, so
		// the reputation grows with the volume.
		if !d.st.RejectedToday && d.st.SentToday*10 >= d.st.Ceiling*9 {
			d.st.Ceiling = min(d.st.Ceiling*2, MaxCeiling)
		}
		d.st.Day, d.st.SentToday, d.st.RejectedToday = today, 0, false
	}
}

// Grant hands out up to n messages, as many as the token bucket, the daily
// ceiling and the hourly limit all allow; grants in flight count against the
// ceiling and the hourly limit, so concurrent pages cannot overshoot them.
// When it grants fewer than n, the Refusal names the binding limit, when it
// frees up (the next UTC midnight for the ceiling) and says so in words.
//
// Settle every grant: RecordSent for what went out, Return for the rest.
func (d *Domain) Grant(now time.Time, n int) (granted int, r Refusal) {
	d.mu.Lock()
	defer d.mu.Unlock()
	now = now.UTC()
	d.roll(now)
	if n <= 0 {
		return 0, Refusal{}
	}
	daily, hourly := d.left(now)
	if g := min(n, daily, hourly); g > 0 && d.bucket.Available(now) >= float64(d.worthwhile(n, g)) {
		granted = d.bucket.Take(now, g)
	}
	d.inFlight += granted
	d.server.reserve(granted)
	if granted == n {
		return granted, Refusal{}
	}
	return granted, d.why(now, granted, daily, hourly, n)
}

// left is what the daily ceiling and the hourly limit allow now.
func (d *Domain) left(now time.Time) (daily, hourly int) {
	daily = max(0, d.st.Ceiling-d.st.SentToday-d.inFlight)
	return daily, d.server.left(now)
}

// worthwhile is the fewest messages the rate grants of a request for want
// when the ceiling and the hourly limit allow allowed: a quarter of want, at
// most the burst (and what the limits allow), a page worth its KV write,
// job and report. Granting whatever the bucket held made pages as small as
// the refill between two reports: 32 ranges at the default 50/s sent pages
// of 3, 270 KV writes per 1,000 messages (a tester's run, 12,000 contacts).
func (d *Domain) worthwhile(want, allowed int) int {
	return max(1, min(want/4, int(d.bucket.Burst()), allowed))
}

// why names the limit that stopped a grant of want at got (the one lasting
// longest when several did) and when it frees up. For the rate, that is
// when a worthwhile page's tokens are back: the first token alone would ask
// for pages of one.
func (d *Domain) why(now time.Time, got, daily, hourly, want int) (r Refusal) {
	consider := func(l Limit, t time.Time, text string) {
		if !r.Refused() || t.After(r.Until) {
			r = Refusal{Limit: l, Until: t, Text: text}
		}
	}
	if daily <= got {
		consider(LimitCeiling, nextMidnight(now), fmt.Sprintf("daily ceiling of %s for %s reached; resumes 00:00 UTC",
			Thousands(d.st.Ceiling), d.st.Domain))
	}
	if l, t := d.server.binds(now); l > 0 && hourly <= got {
		on := d.st.Domain
		if d.shared {
			on = "SMTP server " + d.server.Name()
		}
		consider(LimitHourly, t, fmt.Sprintf("hourly limit of %s for %s reached; resumes %s UTC",
			Thousands(l), on, clockTime(t)))
	}
	if !r.Refused() {
		w := d.bucket.WaitFor(now, d.worthwhile(want, min(want, daily, hourly)))
		consider(LimitRate, now.Add(w), fmt.Sprintf("rate of %s/s for %s used up; next page in %s",
			strconv.FormatFloat(d.limits.RatePerSecond, 'f', -1, 64), d.st.Domain, roundUp(w)))
	}
	return r
}

// Return gives back n granted messages that did not go out (a page that
// stopped early, a dispatch that failed), to the bucket and the ceiling.
func (d *Domain) Return(n int) {
	if n <= 0 {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.bucket.Return(n)
	d.inFlight = max(0, d.inFlight-n)
	d.server.release(n)
}

// Settle closes a grant of granted messages of which sent went out: none of
// it is in flight any more, and the bucket gets back what was not sent.
// What was sent is counted by Count (separately: the outcome report and the
// grant's end need not arrive together, or at all, for a page that was
// dropped).
func (d *Domain) Settle(granted, sent int) {
	if granted <= 0 {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.bucket.Return(max(0, granted-sent))
	d.inFlight = max(0, d.inFlight-granted)
	d.server.release(granted)
}

// Count counts n messages accepted by the SMTP server at now toward today's
// total and the hourly window, leaving grants in flight alone.
func (d *Domain) Count(now time.Time, n int) {
	if n <= 0 {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	now = now.UTC()
	d.roll(now)
	d.st.SentToday += n
	d.server.record(now, n)
}

// RecordSent counts n messages accepted by the SMTP server at now toward
// today's total and the hourly window, and settles that many grants in
// flight. Mail sent without a grant (transactional, the reconciler's sweep of
// deferred rows) is recorded the same way: the provider counts it too.
func (d *Domain) RecordSent(now time.Time, n int) {
	if n <= 0 {
		return
	}
	d.Count(now, n)
	d.mu.Lock()
	defer d.mu.Unlock()
	d.inFlight = max(0, d.inFlight-n)
	d.server.release(n)
}

// RecordQuotaRejection lowers the ceiling to max(MinCeiling, sent today / 2)
// — the provider has just told us what it accepts, and half of it leaves
// room for what other senders on the account use — never raising it, marks
// the day as rejected (it will not double), and holds the provider for
// QuotaHold. A hold is a wall-clock time: it outlasts midnight if it spans it.
func (d *Domain) RecordQuotaRejection(now time.Time, provider string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	now = now.UTC()
	d.roll(now)
	d.st.Ceiling = min(d.st.Ceiling, max(MinCeiling, d.st.SentToday/2))
	d.st.RejectedToday = true
	p := Provider(provider)
	if d.st.Holds == nil {
		d.st.Holds = map[string]time.Time{}
	}
	d.st.Holds[p] = maxTime(d.st.Holds[p], now.Add(d.limits.QuotaHold))
	// When the hold ends the provider ramps back (one probe, then doubling
	// connections) rather than taking every worker's pool at once: it has
	// just said we send too much.
	d.changeBreaker(now, p, func(b *BreakerState) { b.hold(now, d.st.Holds[p].Sub(now), reasonQuota, false) })
}

// ProviderOpen reports whether sends to provider (a provider name or a
// recipient domain) must wait: it is held after a quota rejection, or its
// breaker is open. retryAt is when to look again; page workers record the
// provider's recipients deferred until then. In half-open it answers false
// exactly once — that caller's next send is the probe — and true after that
// until the probe's outcome is recorded (or ProbeLease passes).
func (d *Domain) ProviderOpen(now time.Time, provider string) (open bool, retryAt time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	now = now.UTC()
	d.roll(now)
	p := Provider(provider)
	d.tidy(now, p)
	b, hasBreaker := d.st.Breakers[p]
	if hold, ok := d.st.Holds[p]; ok && now.Before(hold) {
		// Held: no probe is spent; report whichever lasts longer.
		if hasBreaker && b.phase(now) == PhaseOpen {
			hold = maxTime(hold, b.OpenUntil)
		}
		return true, hold
	}
	if !hasBreaker {
		return false, time.Time{}
	}
	ok, retryAt := b.allow(now, d.limits.BreakerOpen)
	d.st.Breakers[p] = b
	return !ok, retryAt
}

// RecordTransient counts a transient failure (4xx, timeout, reset) of a send
// to provider toward its breaker.
func (d *Domain) RecordTransient(now time.Time, provider string) {
	d.RecordTransientReply(now, provider, "")
}

// RecordTransientReply is RecordTransient with the reply that refused
// ("451 4.3.0"), which status shows beside the provider's deferred share.
func (d *Domain) RecordTransientReply(now time.Time, provider, reply string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	now = now.UTC()
	d.roll(now)
	p := Provider(provider)
	d.changeBreaker(now, p, func(b *BreakerState) {
		b.failure(now, d.limits.BreakerOpen, d.limits.BreakerFailures, d.limits.BreakerShare, d.sent[p], reply)
	})
}

// changeBreaker applies change to provider p's breaker (a new one if it has
// none) and tidies the state. d.mu is held.
func (d *Domain) changeBreaker(now time.Time, p string, change func(*BreakerState)) {
	d.tidyProvider(now, p) // what the change meets is what tidy keeps
	b := d.st.Breakers[p]
	change(&b)
	if d.st.Breakers == nil {
		d.st.Breakers = map[string]BreakerState{}
	}
	d.st.Breakers[p] = b
	d.tidy(now, p)
}

// HoldProvider stops sends to provider for at least hold, because the
// provider's own documentation says to (Gmail's 421 4.7.28: at least 10
// minutes): its breaker opens, shown as held with reason, and when the hold
// ends the provider is ramped back up, one connection at a time when
// linear. Unlike a quota rejection it leaves the domain's ceiling alone:
// one provider's rate limit is no reason to send less to the others.
func (d *Domain) HoldProvider(now time.Time, provider string, hold time.Duration, reason string, linear bool) {
	if hold <= 0 {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	now = now.UTC()
	d.roll(now)
	d.changeBreaker(now, Provider(provider), func(b *BreakerState) { b.hold(now, hold, reason, linear) })
}

// liftedReason starts the reason of a breaker an operator lifted, before
// the reason it had.
const liftedReason = "lifted by an operator; it was held for "

// ReleaseProvider lifts provider's hold or open breaker at now, for an
// operator: it ramps back from one connection (doubling, or one more a
// step after a provider's own pause), as when a hold runs out. It returns
// the phase the provider had; only held and open ones are changed. One
// ramping back already (half-open) is left as it is: its step in flight
// keeps its lease, so a release repeated (the leader applies its own and
// then sees it in KV) never lets two steps go at once. The run of
// refusals (RefusingSince) stays: only an accepted send ends it.
func (d *Domain) ReleaseProvider(now time.Time, provider string) (was string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	now = now.UTC()
	d.roll(now)
	p := Provider(provider)
	d.tidy(now, p)
	was = d.providerPhase(now, p).Phase
	if was != PhaseHeld && was != PhaseOpen {
		return was
	}
	delete(d.st.Holds, p)
	if _, ok := d.st.Breakers[p]; ok {
		d.changeBreaker(now, p, func(b *BreakerState) {
			if b.phase(now) == PhaseOpen {
				b.OpenUntil, b.Conns, b.Hold, b.ProbeAt = now, 0, false, time.Time{}
				b.Reason = liftedReason + b.Reason
			}
		})
	}
	return was
}

// ReleaseProbe ends a half-open provider's carrier that had none of its
// recipients to send, so the next carrier need not wait for ProbeLease.
func (d *Domain) ReleaseProbe(now time.Time, provider string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	p := Provider(provider)
	if b, ok := d.st.Breakers[p]; ok {
		b.release(now.UTC())
		d.st.Breakers[p] = b
	}
}

// Connections is how many connections a half-open provider's carrier may
// use now (the ramp's step), 0 when the provider is not half-open.
func (d *Domain) Connections(now time.Time, provider string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	b, ok := d.st.Breakers[Provider(provider)]
	if !ok || b.phase(now.UTC()) != PhaseHalfOpen {
		return 0
	}
	return b.conns()
}

// RecordSuccess records n sends to provider that were accepted (the
// breaker's share counts them); it closes a half-open breaker.
func (d *Domain) RecordSuccess(now time.Time, provider string, n int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	now = now.UTC()
	d.roll(now)
	p := Provider(provider)
	d.countSent(now, p, n)
	d.tidyProvider(now, p)
	b, ok := d.st.Breakers[p]
	if !ok {
		return
	}
	b.success(now, n, d.limits.RampConnections)
	d.st.Breakers[p] = b
	d.tidy(now, p)
}

// countSent adds n accepted sends to provider p's window (what the
// breaker's share counts them against). d.mu is held.
func (d *Domain) countSent(now time.Time, p string, n int) {
	if d.sent == nil {
		d.sent = map[string]sendWindow{}
	}
	d.sent[p] = d.sent[p].add(now, n)
	// Pruned at most once per tidyEvery: a list of many small recipient
	// domains keeps thousands seen lately, and pruning them on every
	// accepted send cost 1.3 ms a send at 20,000.
	if len(d.sent) > 4*len(d.st.Breakers)+64 && (now.Before(d.sentPruned) || now.Sub(d.sentPruned) >= tidyEvery) {
		d.sentPruned = now
		for q, w := range d.sent { // keep the map to providers seen lately
			if w = w.prune(now); len(w) == 0 {
				delete(d.sent, q)
			} else {
				d.sent[q] = w
			}
		}
	}
}

// RecordStep takes what a page that carried a half-open provider's ramp
// step met there: sent accepted, failed refused for a transient reason
// (reply, the latest), and whether the worker ended the step (ended: its
// refusals met the rule, or the provider said more than a deferral). The
// step is judged as a whole (BreakerState.step): it re-opens the breaker
// when the worker ended it, when its refusals are at least BreakerFailures
// and BreakerShare of its attempts, or when it had refusals and nothing
// accepted; otherwise the ramp goes on, or the breaker closes. Judged by
// its first refusal instead, a provider that defers a few percent at
// random, as most do, re-opened on nearly every step carrying a few dozen
// recipients, and a broadcast stalled for good after one short relay
// outage (make chaos -relay-outage). Outside half-open (the step's page
// came back after the breaker moved on) the counts go in as RecordSuccess
// and RecordTransientReply would put them.
func (d *Domain) RecordStep(now time.Time, provider string, sent, failed int, ended bool, reply string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	now = now.UTC()
	d.roll(now)
	p := Provider(provider)
	if sent > 0 {
		d.countSent(now, p, sent)
	}
	if _, ok := d.st.Breakers[p]; !ok && failed == 0 {
		return
	}
	d.changeBreaker(now, p, func(b *BreakerState) { b.step(now, sent, failed, ended, d.limits, d.sent[p], reply) })
}

// ResetRateLimit resets the hourly limit: sends before now stop counting
// (they stay recorded). For an operator who knows the server's counter was
// reset, or raised its limit by hand.
func (d *Domain) ResetRateLimit(now time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	now = now.UTC()
	d.roll(now)
	d.server.Reset(now)
}

// SetLimits replaces the configured limits (an operator changed them). The
// learned state and the grants in flight are kept; the token bucket keeps
// its tokens, up to the new burst.
func (d *Domain) SetLimits(now time.Time, l Limits) {
	l = l.withDefaults()
	d.mu.Lock()
	defer d.mu.Unlock()
	now = now.UTC()
	tokens := min(d.bucket.Available(now), float64(l.Burst))
	d.limits = l
	d.bucket = &Bucket{perSecond: l.RatePerSecond, burst: float64(l.Burst), tokens: tokens, last: now}
	if !d.shared {
		d.server.SetLimit(l.EmailsPerHour)
	}
}

// Limits returns the configured limits, defaults applied.
func (d *Domain) Limits() Limits {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.limits
}

// SetCeiling sets the daily ceiling by hand, between MinCeiling and
// MaxCeiling: for an operator who knows what the providers accept (a warmed
// domain moved to rangecast, say). Learning carries on from there. at is
// when the operator set it; a setting no later than the last one applied is
// ignored, so replaying it changes nothing.
func (d *Domain) SetCeiling(now, at time.Time, n int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.roll(now.UTC())
	if !at.After(d.st.CeilingSetAt) {
		return
	}
	d.st.Ceiling = min(max(n, MinCeiling), MaxCeiling)
	d.st.CeilingSetAt = at.UTC()
}

// tidyEvery spaces out the sweeps of tidy over every provider. A sending
// domain can hold a breaker per small recipient domain that deferred it,
// tens of thousands (see Ranked); swept on every recorded outcome, they
// cost milliseconds of the domain's lock per refusal, and the governor's
// throughput fell with the number of domains in the list.
const tidyEvery = time.Second

// tidy drops expired holds and idle breakers, keeping the state small: the
// provider p just touched ("" for none) at once, every other one at most
// once per tidyEvery. Status tidies all of them (tidyAll).
func (d *Domain) tidy(now time.Time, p string) {
	if p != "" {
		d.tidyProvider(now, p)
	}
	if d.tidied.IsZero() || now.Before(d.tidied) || now.Sub(d.tidied) >= tidyEvery {
		d.tidyAll(now)
	}
}

// tidyAll tidies every provider.
func (d *Domain) tidyAll(now time.Time) {
	d.tidied = now
	d.eachProvider(func(p string) { d.tidyProvider(now, p) })
}

// eachProvider calls f once for each provider with a breaker or a hold, in
// no order, without building their union (tens of thousands). f may drop
// the provider it is given. d.mu is held.
func (d *Domain) eachProvider(f func(p string)) {
	for p := range d.st.Breakers {
		f(p)
	}
	for p := range d.st.Holds {
		if _, ok := d.st.Breakers[p]; !ok {
			f(p)
		}
	}
}

// tidyProvider drops p's hold once it has expired and its breaker once it
// is idle (BreakerState.tidied).
func (d *Domain) tidyProvider(now time.Time, p string) {
	if until, ok := d.st.Holds[p]; ok && !now.Before(until) {
		delete(d.st.Holds, p)
	}
	if b, ok := d.st.Breakers[p]; ok {
		if kept, keep := b.tidied(now); !keep {
			delete(d.st.Breakers, p)
		} else if b.phase(now) != kept.phase(now) {
			d.st.Breakers[p] = kept
		}
	}
	if len(d.st.Holds) == 0 {
		d.st.Holds = nil
	}
	if len(d.st.Breakers) == 0 {
		d.st.Breakers = nil
	}
}

// State is a copy of the state to persist.
func (d *Domain) State() DomainState {
	d.mu.Lock()
	defer d.mu.Unlock()
	st := d.st.clone()
	if !d.shared {
		st.Hourly = d.server.Window()
	}
	return st
}

// ShareServer makes the domain count against a server shared with other
// domains (its hourly limit and window), instead of its own. The domain's
// grants in flight move to it.
func (d *Domain) ShareServer(s *Server) {
	d.mu.Lock()
	defer d.mu.Unlock()
	s.reserve(d.inFlight)
	d.server, d.shared = s, true
	d.st.Hourly = HourlyWindow{}
}

// ProviderStatus is one receiving provider that is held, has a breaker that
// is not closed, or has recent transient failures.
type ProviderStatus struct {
	Provider string `json:"provider"`
	// Phase is "held", "open", "half-open" or "closed".
	Phase string `json:"phase"`
	// Failures are the transient failures in the breaker's window.
	Failures int `json:"failures,omitempty"`
	// Until is when a hold or an open breaker ends.
	Until time.Time `json:"until,omitzero"`
	// ProbeInFlight: half-open, and the probe has gone without an outcome.
	ProbeInFlight bool `json:"probe_in_flight,omitempty"`
	// Connections is the half-open ramp's step: how many connections the
	// provider's next carrier may use, of RampTo.
	Connections int `json:"connections,omitempty"`
	RampTo      int `json:"ramp_to,omitempty"`
	// Deferred is the share of the window's attempts the provider refused
	// for a transient reason (closed breakers with recent failures).
	Deferred float64 `json:"deferred,omitempty"`
	// Attempts is how many attempts Deferred is a share of: early in a
	// window one refusal of five reads "20 %" (a tester took it for the
	// relay's rate), so the summary gives the counts too.
	Attempts int `json:"attempts,omitempty"`
	// Reason is why it is held or open, or the latest refusal ("451 4.3.0").
	Reason string `json:"reason,omitempty"`
	// RefusingSince is when the provider last went from accepting mail to
	// refusing it (BreakerState.RefusingSince): held, open or ramping, it
	// has accepted nothing since. Zero when it is not refusing.
	RefusingSince time.Time `json:"refusing_since,omitzero"`
	// Summary says all of it in one line for people: "yahoo: sending, 3 %
	// of 1,024 attempts deferred in the last 5 min (451 4.3.0), those
	// retried later", "google: held until 14:10
	// UTC (421 4.7.28)".
	Summary string `json:"summary,omitempty"`
}

// Status is what GetDomain shows.
type Status struct {
	Domain        string  `json:"domain"`
	Day           string  `json:"day"`
	Ceiling       int     `json:"ceiling"`
	SentToday     int     `json:"sent_today"`
	InFlight      int     `json:"in_flight"`
	RejectedToday bool    `json:"rejected_today"`
	Tokens        float64 `json:"tokens"`
	RatePerSecond float64 `json:"rate_per_second"`
	Burst         int     `json:"burst"`
	// EmailsPerHour is the hourly limit, 0 for none; HourlyCount what counts
	// against it now; HourlySent what was sent in the last hour, including
	// before ResetAt.
	EmailsPerHour int              `json:"emails_per_hour,omitempty"`
	HourlyCount   int              `json:"hourly_count"`
	HourlySent    int              `json:"hourly_sent"`
	ResetAt       time.Time        `json:"reset_at,omitzero"`
	Providers     []ProviderStatus `json:"providers,omitempty"`
	// ProvidersSlowing counts the providers that slow sending
	// (ProviderStatus.Slowing), listed in Providers or not (Brief).
	ProvidersSlowing int `json:"providers_slowing,omitempty"`
	// Slowing is Waiting's part about providers (SummarizeSlowing).
	Slowing string `json:"-"`
	// Waiting says in words what the domain waits for, "" when it would
	// grant now and no provider is held or open. ResumesAt is when the
	// domain as a whole may send again, zero when it may now.
	Waiting   string    `json:"waiting,omitempty"`
	ResumesAt time.Time `json:"resumes_at,omitzero"`
}

// Status reports the domain at now without granting anything.
func (d *Domain) Status(now time.Time) Status { return d.status(now, -1) }

// Brief is Status with, as Providers, only the first top providers that
// slow sending (RankSlowing's order), and ProvidersSlowing counting them
// all: what metrics and status lines need. Status summarises every
// provider, and with a breaker per small recipient domain (tens of
// thousands) took tens of milliseconds, once a second for the metrics.
func (d *Domain) Brief(now time.Time, top int) Status { return d.status(now, max(top, 0)) }

// status is Status with every provider (top < 0), or Brief's.
func (d *Domain) status(now time.Time, top int) Status {
	d.mu.Lock()
	defer d.mu.Unlock()
	now = now.UTC()
	d.roll(now)
	d.tidyAll(now)
	srv := d.server.Status(now)
	s := Status{
		Domain:        d.st.Domain,
		Day:           d.st.Day,
		Ceiling:       d.st.Ceiling,
		SentToday:     d.st.SentToday,
		InFlight:      d.inFlight,
		RejectedToday: d.st.RejectedToday,
		Tokens:        d.bucket.Available(now),
		RatePerSecond: d.limits.RatePerSecond,
		Burst:         d.limits.Burst,
		EmailsPerHour: srv.EmailsPerHour,
		HourlyCount:   srv.Count,
		HourlySent:    srv.Sent,
		ResetAt:       srv.ResetAt,
	}
	var words []string
	daily, hourly := d.left(now)
	if min(daily, hourly, int(math.Floor(s.Tokens))) < 1 {
		why := d.why(now, 0, daily, hourly, 1)
		s.ResumesAt = why.Until
		words = append(words, why.Text)
	}
	var slowing []ProviderStatus
	if top < 0 {
		for _, p := range slices.Sorted(maps.Keys(union(d.st.Holds, d.st.Breakers))) {
			s.Providers = append(s.Providers, d.providerStatus(now, p))
		}
		slowing = RankSlowing(s.Providers)
		s.ProvidersSlowing = len(slowing)
	} else {
		// Ranked on what ranking needs; summaries for the first only.
		f := firstRanked{k: max(top, summarizedProviders)}
		d.eachProvider(func(p string) {
			if ps := d.providerPhase(now, p); ps.Slowing() {
				f.offer(ps)
			}
		})
		slowing = f.first
		for i := range slowing {
			slowing[i] = d.providerStatus(now, slowing[i].Provider)
		}
		s.Providers = slowing[:min(len(slowing), top)]
		s.ProvidersSlowing = f.n
	}
	if s.Slowing = summarizeSlowing(slowing, s.ProvidersSlowing); s.Slowing != "" {
		words = append(words, s.Slowing)
	}
	s.Waiting = strings.Join(words, "; ")
	return s
}

// Holding is Status's providers that are not closed (held, open or
// ramping back). A page dispatch asks for them: Status lists
// every provider with recent failures, and with a breaker per small
// recipient domain (tens of thousands) it cost tens of milliseconds.
func (d *Domain) Holding(now time.Time) []ProviderStatus {
	d.mu.Lock()
	defer d.mu.Unlock()
	now = now.UTC()
	d.roll(now)
	d.tidy(now, "")
	// The candidates are tidied first: a hold that has just ended, or a
	// ramp gone idle, within the last tidyEvery is not one any more.
	var candidates []string
	for p, until := range d.st.Holds {
		if now.Before(until) {
			candidates = append(candidates, p)
		}
	}
	for p, b := range d.st.Breakers {
		if until, held := d.st.Holds[p]; (!held || !now.Before(until)) && b.phase(now) != PhaseClosed {
			candidates = append(candidates, p)
		}
	}
	// By name, as Status lists them: callers' effects (a probe given) then
	// follow one order, and a simulation's seed replays.
	slices.Sort(candidates)
	var out []ProviderStatus
	for _, p := range candidates {
		d.tidyProvider(now, p)
		if ps := d.providerStatus(now, p); ps.Phase != PhaseClosed {
			out = append(out, ps)
		}
	}
	return out
}

// attempts is "1 attempt", "1,024 attempts".
func attempts(n int) string {
	if n == 1 {
		return "1 attempt"
	}
	return Thousands(n) + " attempts"
}

// Slowing reports whether the provider slows sending: held, open, ramping
// back, or refusing some attempts in the breaker's window. Its Summary says
// how.
func (p ProviderStatus) Slowing() bool { return p.Phase != PhaseClosed || p.Failures > 0 }

// providerPhase is what ranking needs of a provider's status (Provider,
// Phase, Failures), without the summary. d.mu is held.
func (d *Domain) providerPhase(now time.Time, p string) ProviderStatus {
	ps := ProviderStatus{Provider: p, Phase: PhaseClosed}
	if b, ok := d.st.Breakers[p]; ok {
		ps.Phase, ps.Failures = b.phase(now), len(b.Failures)
		if ps.Phase == PhaseOpen && b.Hold {
			ps.Phase = PhaseHeld
		}
	}
	if hold, ok := d.st.Holds[p]; ok && now.Before(hold) {
		ps.Phase = PhaseHeld
	}
	return ps
}

// providerStatus is one provider's part of Status, its summary included.
func (d *Domain) providerStatus(now time.Time, p string) ProviderStatus {
	ps := ProviderStatus{Provider: p, Phase: PhaseClosed}
	b, hasBreaker := d.st.Breakers[p]
	if hasBreaker {
		ps.Phase = b.phase(now)
		ps.Failures = len(b.Failures)
		ps.Reason = b.Reason
		ps.RefusingSince = b.RefusingSince
		switch ps.Phase {
		case PhaseOpen:
			ps.Until = b.OpenUntil
			if b.Hold {
				ps.Phase = PhaseHeld
			}
		case PhaseHalfOpen:
			ps.ProbeInFlight = !b.ProbeAt.IsZero() && now.Before(b.ProbeAt.Add(ProbeLease))
			ps.Connections, ps.RampTo = b.conns(), d.limits.RampConnections
		case PhaseClosed:
			ps.Deferred, ps.Reason = b.share(), b.LastReply
			sent, failed := b.counts()
			ps.Attempts = sent + failed
		}
	}
	if hold, ok := d.st.Holds[p]; ok && now.Before(hold) { // an ended one may wait for tidy
		if ps.Phase != PhaseHeld || hold.After(ps.Until) {
			ps.Reason = reasonQuota
		}
		ps.Phase, ps.Until = PhaseHeld, maxTime(hold, ps.Until)
	}
	switch ps.Phase {
	case PhaseHeld:
		why := replySuffix(ps.Reason)
		if ps.Reason == reasonQuota {
			why = " after a quota rejection"
		}
		ps.Summary = fmt.Sprintf("%s: held until %s UTC%s", p, clockTime(ps.Until), why)
	case PhaseOpen:
		ps.Summary = fmt.Sprintf("%s: breaker open until %s UTC after %s", p, clockTime(ps.Until), ps.Reason)
	case PhaseHalfOpen:
		ps.Summary = fmt.Sprintf("%s: ramping back up, %d of %d connections", p, ps.Connections, ps.RampTo)
		if b.Linear {
			ps.Summary += ", one more per clean step"
		}
		switch {
		case strings.HasPrefix(b.Reason, liftedReason):
			ps.Summary += " (" + b.Reason + ")"
		case b.Reason != "":
			ps.Summary += " (opened: " + b.Reason + ")"
		}
		if ps.ProbeInFlight {
			ps.Summary += "; waiting for its current step"
		}
	case PhaseClosed:
		if hasBreaker && b.onlyRefusing() {
			// Only a run of refusals is remembered (BreakerState.tidied).
			ps.Summary = p + ": not tried lately"
			break
		}
		// "sending" first: the provider is not held, and the share is of
		// attempts made (", retrying" read as waiting, found by a tester).
		ps.Summary = fmt.Sprintf("%s: sending, %s of %s deferred in the last %s%s, those retried later", p, percent(ps.Deferred), attempts(ps.Attempts), shortDuration(BreakerWindow), replySuffix(ps.Reason))
	}
	if !ps.RefusingSince.IsZero() && now.Sub(ps.RefusingSince) >= longRefusal {
		// What the coordinator gives its held recipients up by.
		ps.Summary += "; nothing accepted since " + ps.RefusingSince.UTC().Format("Jan 2 15:04") + " UTC"
	}
	return ps
}

// longRefusal is how long a provider's run of refusals lasts before its
// summary says since when: past a few breaker periods, not an outage that
// ramps back within minutes.
const longRefusal = 10 * time.Minute

// reasonQuota is the Reason of a provider held after a quota rejection.
const reasonQuota = "quota rejection"

// shortDuration writes whole minutes as "5 min", anything else as Go does.
func shortDuration(d time.Duration) string {
	if d%time.Minute == 0 {
		return fmt.Sprintf("%d min", d/time.Minute)
	}
	return d.String()
}

func union(holds map[string]time.Time, breakers map[string]BreakerState) map[string]struct{} {
	u := make(map[string]struct{}, len(holds)+len(breakers))
	for p := range holds {
		u[p] = struct{}{}
	}
	for p := range breakers {
		u[p] = struct{}{}
	}
	return u
}

// nextMidnight is the start of the UTC day after now's.
func nextMidnight(now time.Time) time.Time {
	t := now.UTC()
	return time.Date(t.Year(), t.Month(), t.Day()+1, 0, 0, 0, 0, time.UTC)
}

// clockTime is t's UTC time of day: "14:05", or "14:05:30" off the minute.
func clockTime(t time.Time) string {
	t = t.UTC()
	if t.Second() == 0 && t.Nanosecond() == 0 {
		return t.Format("15:04")
	}
	return t.Format("15:04:05")
}

// roundUp rounds a short wait up to the millisecond, so it never reads "0s".
func roundUp(d time.Duration) time.Duration {
	if r := d.Truncate(time.Millisecond); r < d {
		return r + time.Millisecond
	}
	return d
}

// Thousands formats n with comma separators, 5000 → "5,000", as the
// governor's reasons write numbers; displays use it to match them.
func Thousands(n int) string {
	s := strconv.Itoa(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}
