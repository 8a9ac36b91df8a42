package governor

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/rangecast/rangecast/internal/clock"
)

// TestBreaker walks a breaker through scripts on a fake clock: closed → 5
// failures in 5 minutes → open 30 s → half-open → one probe → closed, or
// re-opened.
func TestBreaker(t *testing.T) {
	t.Parallel()
	const (
		fail = "fail" // RecordTransient
		ok   = "ok"   // RecordSuccess
		ask  = "ask"  // ProviderOpen: want open, and until want
		// conns: Connections, want n; hold: HoldProvider for until, linear;
		// release: ReleaseProbe.
		conns   = "conns"
		hold    = "hold"
		release = "release"
	)
	type step struct {
		after    time.Duration // advance the clock by this first
		op       string
		provider string // "" means gmail.com
		open     bool
		until    time.Duration // from the start; 0 means no retry time
		n        int           // conns: the connections wanted
	}
	fails := func(n int, every time.Duration) []step {
		s := make([]step, n)
		for i := range s {
			s[i] = step{op: fail}
			if i > 0 {
				s[i].after = every
			}
		}
		return s
	}
	// ramp is n clean steps of a half-open ramp: a carrier goes and succeeds.
	ramp := func(n int) []step {
		var s []step
		for range n {
			s = append(s, step{op: ask, open: false}, step{op: ok})
		}
		return s
	}
	script := func(parts ...[]step) []step {
		var all []step
		for _, p := range parts {
			all = append(all, p...)
		}
		return all
	}
	m := time.Minute
	tests := []struct {
		name  string
		steps []step
	}{
		{"four failures stay closed", script(
			fails(4, m),
			[]step{{op: ask, open: false}},
		)},
		{"five failures over more than 5 minutes stay closed", script(
			fails(4, 100*time.Second),                                      // 0, 1:40, 3:20, 5:00
			[]step{{after: time.Second, op: fail}, {op: ask, open: false}}, // 5:01: the first has left the window
		)},
		{"exactly 5 minutes apart is within the window", script(
			fails(5, 75*time.Second), // 0 … 5:00
			[]step{{op: ask, open: true, until: 5*m + 30*time.Second}},
		)},
		{"five in 5 minutes open for 30 s, one probe, success ramps up", script(
			fails(5, m), // trips at 4:00
			[]step{
				{op: ask, open: true, until: 4*m + 30*time.Second},
				{after: 29 * time.Second, op: ask, open: true, until: 4*m + 30*time.Second},
				{op: conns, n: 0},
				{after: time.Second, op: ask, open: false}, // 4:30 the probe
				{op: conns, n: 1},                          // on one connection
				{op: ask, open: true, until: 5 * m},        // only one carrier at a time
				{after: 10 * time.Second, op: ask, open: true, until: 5*m + 10*time.Second}, // still waiting for it
				{op: ok},
				{op: conns, n: 2},
				{op: ask, open: false}, // the next carrier, on two
				{op: ask, open: true, until: 5*m + 10*time.Second},
			},
		)},
		{"the ramp doubles 1, 2, 4, 8, 16, then closes", script(
			fails(5, 0),
			[]step{{after: 30 * time.Second, op: conns, n: 1}},
			ramp(1), []step{{op: conns, n: 2}},
			ramp(1), []step{{op: conns, n: 4}},
			ramp(1), []step{{op: conns, n: 8}},
			ramp(1), []step{{op: conns, n: 16}},
			ramp(1), []step{{op: conns, n: 0}, {op: ask, open: false}, {op: ask, open: false}},
		)},
		{"a failure while ramping re-opens and starts again from one", script(
			fails(5, 0),
			[]step{{after: 30 * time.Second}},
			ramp(2), []step{{op: conns, n: 4}, {op: ask, open: false}},
			[]step{{after: time.Second, op: fail}, {op: ask, open: true, until: 61 * time.Second}, {op: conns, n: 0}},
			[]step{{after: 30 * time.Second, op: ask, open: false}, {op: conns, n: 1}},
		)},
		{"a ramp with no step for half an hour is dropped", script(
			fails(5, 0),
			[]step{
				{after: 30*time.Second + RampIdle - time.Second, op: conns, n: 1},
				{after: time.Second, op: ask, open: false},
				{op: ask, open: false}, // closed: no carrier to wait for
				{op: conns, n: 0},
			},
		)},
		{"a carrier with nothing to send frees the step at once", script(
			fails(5, 0),
			[]step{
				{after: 30 * time.Second, op: ask, open: false},
				{op: ask, open: true, until: 60 * time.Second},
				{op: release},
				{op: ask, open: false},
				{op: conns, n: 1},
			},
		)},
		{"a provider's hold: 10 minutes, then one connection more per clean step", script(
			[]step{
				{op: hold, until: 10 * m},
				{op: fail}, // a straggler does not extend it
				{after: 10*m - time.Second, op: ask, open: true, until: 10 * m},
				{after: time.Second, op: ask, open: false},
				{op: conns, n: 1},
				{op: ok},
				{op: conns, n: 2},
			},
			ramp(13), []step{{op: conns, n: 15}},
			ramp(1), []step{{op: conns, n: 16}},
			ramp(1), []step{{op: conns, n: 0}},
		)},
		{"refused again after a hold: ramps one at a time from one", script(
			[]step{{op: hold, until: 10 * m}, {after: 10 * m}},
			ramp(3), []step{{op: conns, n: 4}, {op: ask, open: false}, {op: fail}},
			[]step{{after: 30 * time.Second, op: ask, open: false}, {op: ok}, {op: conns, n: 2}},
		)},
		{"probe failure re-opens for 30 s, then probes again", script(
			fails(5, m),
			[]step{
				{after: 30 * time.Second, op: ask, open: false}, // 4:30 the probe
				{after: time.Second, op: fail},                  // 4:31 it failed
				{op: ask, open: true, until: 5*m + time.Second},
				{after: 30 * time.Second, op: ask, open: false}, // 5:01 the next probe
				{op: ask, open: true, until: 5*m + 31*time.Second},
				{op: ok},
				{op: ask, open: false},
			},
		)},
		{"closed again on a clean counter", script(
			fails(5, time.Second),
			[]step{{after: 30 * time.Second}},
			ramp(5),
			fails(4, time.Second),
			[]step{{op: ask, open: false}, {op: fail}, {op: ask, open: true, until: 37*time.Second + 30*time.Second}},
		)},
		{"failures while open are stragglers and do not extend it", script(
			fails(5, 0),
			[]step{
				{after: 10 * time.Second, op: fail},
				{after: 19 * time.Second, op: fail},
				{op: ask, open: true, until: 30 * time.Second},
				{after: time.Second, op: ask, open: false},
			},
		)},
		{"a success while open does not close it", script(
			fails(5, 0),
			[]step{{after: 10 * time.Second, op: ok}, {op: ask, open: true, until: 30 * time.Second}},
		)},
		{"a success does not reset a closed breaker's count", script(
			fails(3, time.Second),
			[]step{{op: ok}},
			fails(2, time.Second),
			[]step{{op: ask, open: true, until: 3*time.Second + 30*time.Second}},
		)},
		{"a lost probe is replaced after the lease", script(
			fails(5, 0),
			[]step{
				{after: 30 * time.Second, op: ask, open: false},
				{after: ProbeLease - time.Second, op: ask, open: true, until: 30*time.Second + ProbeLease},
				{after: time.Second, op: ask, open: false},
				{op: ask, open: true, until: 60*time.Second + ProbeLease},
			},
		)},
		{"a provider's domains share one breaker", []step{
			{op: fail, provider: "outlook.com"},
			{op: fail, provider: "hotmail.co.uk"},
			{op: fail, provider: "live.fr"},
			{op: fail, provider: "msn.com"},
			{op: ask, provider: "outlook.de", open: false},
			{op: fail, provider: "microsoft"},
			{op: ask, provider: "hotmail.com", open: true, until: 30 * time.Second},
			{op: ask, provider: "gmail.com", open: false},
		}},
		{"other domains are their own provider", []step{
			{op: fail, provider: "a.example"}, {op: fail, provider: "a.example"}, {op: fail, provider: "a.example"},
			{op: fail, provider: "b.example"}, {op: fail, provider: "b.example"},
			{op: ask, provider: "a.example", open: false},
			{op: ask, provider: "b.example", open: false},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			start := dayAt(0, "10:00:00")
			fk := clock.NewFake(start)
			d := NewDomain("example.com", Limits{}, nil, fk.Now())
			for i, s := range tt.steps {
				fk.Advance(s.after)
				p := s.provider
				if p == "" {
					p = "gmail.com"
				}
				switch s.op {
				case fail:
					d.RecordTransient(fk.Now(), p)
				case ok:
					d.RecordSuccess(fk.Now(), p, 1)
				case conns:
					if got := d.Connections(fk.Now(), p); got != s.n {
						t.Fatalf("step %d at +%v: Connections(%s) = %d; want %d", i, fk.Now().Sub(start), p, got, s.n)
					}
				case hold:
					d.HoldProvider(fk.Now(), p, s.until, "421 4.7.28", true)
				case release:
					d.ReleaseProbe(fk.Now(), p)
				case ask:
					open, until := d.ProviderOpen(fk.Now(), p)
					var want time.Time
					if s.until != 0 {
						want = start.Add(s.until)
					}
					if s.open != open || (s.open && !until.Equal(want)) {
						t.Fatalf("step %d at +%v: ProviderOpen(%s) = %v until %v; want %v until %v",
							i, fk.Now().Sub(start), p, open, until, s.open, want)
					}
				}
			}
		})
	}
}

// TestHoldSparesTheProbe: while a provider is held after a quota rejection,
// asking about it does not spend its breaker's probe.
func TestHoldSparesTheProbe(t *testing.T) {
	t.Parallel()
	t0 := dayAt(0, "10:00:00")
	d := NewDomain("example.com", Limits{}, nil, t0)
	for range BreakerFailures {
		d.RecordTransient(t0, "yahoo.com")
	}
	d.RecordQuotaRejection(t0.Add(10*time.Second), "yahoo.com")
	if open, until := d.ProviderOpen(t0.Add(20*time.Second), "yahoo.com"); !open || !until.Equal(t0.Add(10*time.Second+QuotaHold)) {
		t.Fatalf("held and open: open %v until %v; want the later, the hold", open, until)
	}
	if open, _ := d.ProviderOpen(t0.Add(time.Minute), "yahoo.com"); !open {
		t.Fatal("half-open but held: let an attempt through")
	}
	at := t0.Add(10*time.Second + QuotaHold)
	if open, _ := d.ProviderOpen(at, "yahoo.com"); open {
		t.Fatal("hold over, half-open: the probe should go")
	}
	if open, _ := d.ProviderOpen(at, "yahoo.com"); !open {
		t.Fatal("two probes")
	}
}

// TestBreakerStateStaysSmall: closed breakers with nothing recent and
// expired holds are dropped.
func TestBreakerStateStaysSmall(t *testing.T) {
	t.Parallel()
	t0 := dayAt(0, "10:00:00")
	d := NewDomain("example.com", Limits{}, nil, t0)
	for i := range 1000 {
		d.RecordTransient(t0.Add(time.Duration(i)*time.Second), "d"+time.Duration(i).String()+".example")
	}
	if n := len(d.State().Breakers); n != 301 { // failures in [now-5m, now] at one a second
		t.Fatalf("%d breakers kept; want the 301 with a failure in the last 5 minutes", n)
	}
	d.RecordQuotaRejection(t0, "gmail.com")
	d.ProviderOpen(t0.Add(time.Hour), "gmail.com")
	// An hour later the hold and the ramp are gone; what is left is when
	// gmail began refusing, since nothing has been accepted there since.
	st := d.State()
	if len(st.Holds) != 0 || len(st.Breakers) != 1 || !st.Breakers["google"].RefusingSince.Equal(t0) ||
		!st.Breakers["google"].OpenUntil.IsZero() {
		t.Fatalf("an hour later state keeps %d holds, breakers %+v; want google's RefusingSince alone", len(st.Holds), st.Breakers)
	}
	d.RecordSuccess(t0.Add(time.Hour+time.Second), "gmail.com", 1)
	if st := d.State(); len(st.Breakers) != 0 {
		t.Fatalf("after an accepted send state keeps breakers %+v", st.Breakers)
	}
	// Unanswered, the memory of a refusal is bounded too.
	d.RecordQuotaRejection(t0.Add(2*time.Hour), "yahoo.com")
	d.ProviderOpen(t0.Add(3*time.Hour), "yahoo.com")
	if st := d.State(); len(st.Breakers) != 1 {
		t.Fatalf("breakers %+v; want yahoo's refusal remembered", st.Breakers)
	}
	d.ProviderOpen(t0.Add(2*time.Hour+RefusalMemory), "aol.com")
	if st := d.State(); len(st.Breakers) != 0 {
		t.Fatalf("after RefusalMemory state keeps breakers %+v", st.Breakers)
	}
}

// TestBreakerOpensOnAShare: at volume the breaker opens on the share of
// failed attempts in its window, not on five failures; five stay the floor
// at small volumes (issue 15).
func TestBreakerOpensOnAShare(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2031, 3, 14, 9, 0, 0, 0, time.UTC)
	cases := []struct {
		name string
		// per second for ten minutes: sent and transient failures
		sent, failed int
		limits       Limits
		wantOpen     bool
	}{
		{"3 % of 300 a second stays closed", 291, 9, Limits{}, false},
		{"19 % stays closed", 81, 19, Limits{}, false},
		{"30 % opens", 70, 30, Limits{}, true},
		{"everyone refused opens", 0, 2, Limits{}, true},
		{"a share of its own: 5 %", 90, 10, Limits{BreakerShare: 0.05}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			d := NewDomain("example.com", c.limits, nil, t0)
			opened := false
			for s := range 600 {
				now := t0.Add(time.Duration(s) * time.Second)
				if c.sent > 0 {
					d.RecordSuccess(now, "yahoo.com", c.sent)
				}
				for range c.failed {
					d.RecordTransient(now, "yahoo.com")
				}
				if open, _ := d.ProviderOpen(now, "yahoo.com"); open {
					opened = true
					break
				}
			}
			if opened != c.wantOpen {
				t.Fatalf("breaker opened = %v, want %v", opened, c.wantOpen)
			}
		})
	}
}

// TestBreakerFloorAtSmallVolume: at a few messages a minute, five failures
// in five minutes still open the breaker, and four do not.
func TestBreakerFloorAtSmallVolume(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2031, 3, 14, 9, 0, 0, 0, time.UTC)
	for _, failures := range []int{4, 5} {
		d := NewDomain("example.com", Limits{}, nil, t0)
		for i := range failures {
			now := t0.Add(time.Duration(i) * time.Minute)
			d.RecordSuccess(now, "gmail.com", 2)
			d.RecordTransient(now, "gmail.com")
		}
		open, _ := d.ProviderOpen(t0.Add(4*time.Minute+time.Second), "gmail.com")
		if open != (failures == 5) {
			t.Errorf("%d failures among %d attempts: open = %v", failures, 3*failures, open)
		}
	}
}

// TestBreakerShareSurvivesANewLeader: a new leader starts from the stored
// state; the window's sends are in it, so the first failure it sees does not
// look like 100 % (the chaos run's coordinator kills tripped it so).
func TestBreakerShareSurvivesANewLeader(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2031, 3, 14, 9, 0, 0, 0, time.UTC)
	d := NewDomain("example.com", Limits{}, nil, t0)
	run := func(d *Domain, from, seconds int) bool {
		for s := from; s < from+seconds; s++ {
			now := t0.Add(time.Duration(s) * time.Second)
			d.RecordSuccess(now, "chaos.example", 97)
			for range 3 {
				d.RecordTransient(now, "chaos.example")
			}
			if open, _ := d.ProviderOpen(now, "chaos.example"); open {
				return true
			}
		}
		return false
	}
	if run(d, 0, 120) {
		t.Fatal("3 % opened the breaker")
	}
	st := d.State()
	next := NewDomain("example.com", Limits{}, &st, t0.Add(120*time.Second))
	if run(next, 120, 120) {
		t.Fatal("3 % opened the breaker of the new leader")
	}
}

// TestRampStepJudgedByItsShare: a half-open provider's ramp step is judged
// as a whole by the breaker's share rule (RecordStep): an isolated refusal
// among many accepted sends advances the ramp; refusals at the share
// re-open the breaker.
func TestRampStepJudgedByItsShare(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2031, 3, 14, 9, 0, 0, 0, time.UTC)
	halfOpen := func() *Domain {
		d := NewDomain("example.com", Limits{}, nil, t0)
		for range BreakerFailures {
			d.RecordTransient(t0, "yahoo.com")
		}
		if open, _ := d.ProviderOpen(t0.Add(BreakerOpen), "yahoo.com"); open {
			t.Fatal("not half-open after the open period")
		}
		return d
	}
	at := t0.Add(BreakerOpen + time.Second)

	d := halfOpen()
	d.RecordStep(at, "yahoo.com", 30, 1, false, "451 4.7.1")
	if c := d.Connections(at, "yahoo.com"); c != 2 {
		t.Errorf("after a step of 30 accepted and 1 refused: %d connections; want the ramp's next step, 2", c)
	}

	d = halfOpen()
	d.RecordStep(at, "yahoo.com", 3, 1, false, "451 4.7.1")
	if c := d.Connections(at, "yahoo.com"); c != 2 {
		t.Errorf("after a step of 3 accepted and 1 refused (one refusal, under the floor of %d): %d connections; want 2", BreakerFailures, c)
	}

	d = halfOpen()
	d.RecordStep(at, "yahoo.com", 15, 5, false, "451 4.7.1")
	if open, _ := d.ProviderOpen(at, "yahoo.com"); !open {
		t.Error("a step of 15 accepted and 5 refused (25 %) did not re-open the breaker")
	}

	d = halfOpen()
	d.RecordStep(at, "yahoo.com", 0, BreakerFailures, false, "451 4.7.1")
	if open, _ := d.ProviderOpen(at, "yahoo.com"); !open {
		t.Errorf("a step whose %d attempts were all refused did not re-open the breaker", BreakerFailures)
	}

	// The worker ended the step (its refusals met the rule on the sends it
	// had answers for); sends still in flight then, accepted, do not undo
	// that: the coordinator and the worker agree the step failed.
	d = halfOpen()
	d.RecordStep(at, "yahoo.com", 35, 5, true, "451 4.7.1")
	if open, _ := d.ProviderOpen(at, "yahoo.com"); !open {
		t.Error("a step the worker ended (5 of 40 refused once its last sends came back) did not re-open the breaker")
	}

	// A step with fewer recipients than the floor, all refused: nothing
	// says the provider is back (and leaving it half-open with its probe
	// spent held the provider until ProbeLease).
	d = halfOpen()
	d.RecordStep(at, "yahoo.com", 0, 2, false, "451 4.7.1")
	if open, _ := d.ProviderOpen(at, "yahoo.com"); !open {
		t.Error("a step of 2 recipients, both refused, did not re-open the breaker")
	}

	// A step the worker ended before any send reached a recipient (the
	// relay stopped offering STARTTLS) re-opens it, saying so rather than
	// "0 of a step's 0 attempts" (found by a tester).
	d = halfOpen()
	d.RecordStep(at, "yahoo.com", 0, 0, true, "smtp: server doesn't support STARTTLS")
	if open, _ := d.ProviderOpen(at, "yahoo.com"); !open {
		t.Error("a step ended before any send reached a recipient did not re-open the breaker")
	}
	if st := d.providerStatus(at, Provider("yahoo.com")); strings.Contains(st.Summary, "0 of") || !strings.Contains(st.Summary, "before any of its sends reached a recipient (smtp: server doesn't support STARTTLS)") {
		t.Errorf("status of a step ended before any send reached a recipient: %q", st.Summary)
	}
}

// TestRampClosesUnderRandomDeferrals replays a provider that refuses a
// share of attempts at random after a short outage opened its breaker, 20
// times each on its own seed: each step carries 100 of its recipients and
// stops where the worker would (StepEnds). At 3 % (an ordinary provider)
// every replay must close within ten minutes, and at 10 % nearly all
// within thirty; judged by its first refusal, a step of 100 was re-opened
// 95 times in 100 at 3 % and a broadcast stalled for good. At 50 % the
// provider is unwell and none may close.
func TestRampClosesUnderRandomDeferrals(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		refused   float64
		within    time.Duration
		leastOf20 int // replays that must close within; at 50 %: at most 0
	}{{0.03, 10 * time.Minute, 20}, {0.10, 30 * time.Minute, 17}, {0.5, 30 * time.Minute, 0}} {
		closed := 0
		for seed := range uint64(20) {
			if rampCloses(rand.New(rand.NewPCG(seed, uint64(c.refused*1000))), c.refused, c.within) {
				closed++
			}
		}
		if c.leastOf20 == 0 && closed > 0 || closed < c.leastOf20 {
			t.Errorf("%.0f %% refused at random: %d of 20 replays closed within %s; want %s", c.refused*100, closed, c.within,
				map[bool]string{true: "none", false: fmt.Sprintf("at least %d", c.leastOf20)}[c.leastOf20 == 0])
		}
		t.Logf("%.0f %% refused at random: %d of 20 closed within %s", c.refused*100, closed, c.within)
	}
}

// rampCloses replays one provider refusing share of attempts after an
// outage tripped its breaker, looking every 5 s, and reports whether the
// breaker closed within d.
func rampCloses(rng *rand.Rand, share float64, d time.Duration) bool {
	t0 := time.Date(2031, 3, 14, 9, 0, 0, 0, time.UTC)
	dom := NewDomain("example.com", Limits{}, nil, t0)
	for range BreakerFailures { // the outage
		dom.RecordTransient(t0, "yahoo.com")
	}
	for now := t0; now.Before(t0.Add(d)); {
		now = now.Add(5 * time.Second)
		if open, _ := dom.ProviderOpen(now, "yahoo.com"); open {
			continue
		}
		if dom.Connections(now, "yahoo.com") == 0 {
			return true
		}
		sent, failed := 0, 0
		for range 100 {
			if rng.Float64() < share {
				failed++
			} else {
				sent++
			}
			if StepEnds(sent+failed, failed, BreakerShare, BreakerFailures) {
				break
			}
		}
		dom.RecordStep(now, "yahoo.com", sent, failed, StepEnds(sent+failed, failed, BreakerShare, BreakerFailures), "451 4.3.0")
	}
	return false
}

// TestRefusingSince: a provider's run of refusals starts at the trip that
// ends its accepting mail, lasts through every re-open of its ramp while it
// accepts nothing, and ends with the first message it accepts; a step that
// took some and was re-opened starts a new run. The coordinator gives up on
// held recipients by it, so a run must neither reset on a re-open (a
// provider refusing for good would never be given up on) nor outlive an
// acceptance.
func TestRefusingSince(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2031, 3, 14, 9, 0, 0, 0, time.UTC)
	since := func(d *Domain, at time.Time) time.Time {
		for _, p := range d.Status(at).Providers {
			if p.Provider == "yahoo" {
				return p.RefusingSince
			}
		}
		return time.Time{}
	}
	d := NewDomain("example.com", Limits{}, nil, t0)
	d.RecordTransient(t0, "yahoo.com")
	if got := since(d, t0); !got.IsZero() {
		t.Fatalf("one refusal, breaker closed: refusing since %v; want not refusing", got)
	}
	for range BreakerFailures - 1 {
		d.RecordTransient(t0, "yahoo.com")
	}
	if got := since(d, t0); !got.Equal(t0) {
		t.Fatalf("after the trip: refusing since %v; want %v", got, t0)
	}
	// An hour of ramp steps, each refused whole.
	at := t0
	for range 60 {
		at = at.Add(BreakerOpen + time.Second)
		if open, _ := d.ProviderOpen(at, "yahoo.com"); open {
			t.Fatalf("%v: still open after its open period", at)
		}
		d.RecordStep(at, "yahoo.com", 0, BreakerFailures, true, "451 4.3.0")
	}
	if got := since(d, at); !got.Equal(t0) {
		t.Fatalf("after an hour of refused steps: refusing since %v; want %v (the run goes on)", got, t0)
	}
	if got := summaryOf(d.Status(at), "yahoo"); !strings.HasSuffix(got, "; nothing accepted since Mar 14 09:00 UTC") {
		t.Fatalf("after an hour of refused steps: summary %q; want it to say since when nothing was accepted", got)
	}
	// A gap in sending longer than RampIdle (a pause, a daily ceiling
	// reached) drops the ramp, but not the run: the full pool goes, is
	// refused, and the run still dates from t0.
	at = at.Add(BreakerOpen + RampIdle + time.Minute)
	if open, _ := d.ProviderOpen(at, "yahoo.com"); open {
		t.Fatalf("%v: an idle ramp should have been dropped", at)
	}
	if b, ok := d.State().Breakers["yahoo"]; !ok || b.phase(at) != PhaseClosed || !b.RefusingSince.Equal(t0) {
		t.Fatalf("idle ramp dropped: %+v (kept %v); want closed, refusing since %v", b, ok, t0)
	}
	if got, want := summaryOf(d.Status(at), "yahoo"), "yahoo: not tried lately; nothing accepted since Mar 14 09:00 UTC"; got != want {
		t.Fatalf("idle ramp dropped: summary %q; want %q", got, want)
	}
	for range BreakerFailures {
		d.RecordTransient(at, "yahoo.com")
	}
	if got := since(d, at); !got.Equal(t0) {
		t.Fatalf("tripped again after a gap: refusing since %v; want %v", got, t0)
	}
	// A step that took some and was still re-opened: a new run.
	at = at.Add(BreakerOpen + time.Second)
	d.ProviderOpen(at, "yahoo.com")
	d.RecordStep(at, "yahoo.com", 2, BreakerFailures, true, "451 4.3.0")
	if got := since(d, at); !got.Equal(at) {
		t.Fatalf("after a step that took 2: refusing since %v; want %v", got, at)
	}
	// A clean step: accepting again.
	at = at.Add(BreakerOpen + time.Second)
	d.ProviderOpen(at, "yahoo.com")
	d.RecordStep(at, "yahoo.com", 1, 0, false, "")
	if got := since(d, at); !got.IsZero() {
		t.Fatalf("after a clean step: refusing since %v; want not refusing", got)
	}
	// A provider's own hold (Gmail's 421 4.7.28) starts a run too.
	d.HoldProvider(at, "gmail.com", 10*time.Minute, "421 4.7.28", true)
	for _, p := range d.Status(at).Providers {
		if p.Provider == "google" && !p.RefusingSince.Equal(at) {
			t.Fatalf("held by its own guidance: refusing since %v; want %v", p.RefusingSince, at)
		}
	}
}

// summaryOf is provider's summary in s, "" when s does not list it.
func summaryOf(s Status, provider string) string {
	for _, p := range s.Providers {
		if p.Provider == provider {
			return p.Summary
		}
	}
	return ""
}

// TestReleaseProvider: an operator lifts a provider's pause (Gmail's 421
// 4.7.28, a quota hold, a tripped breaker) before it runs out: the probe
// may go at once, on one connection, and the ramp goes on as after a hold
// that ran out (one more connection a step after a provider's own pause).
// A provider ramping back already is left as it is (its step in flight
// keeps its lease: a release applied twice lets no second step go), and so
// is a closed one.
func TestReleaseProvider(t *testing.T) {
	t.Parallel()
	t0 := dayAt(0, "10:00:00")
	at := t0.Add(time.Minute)
	for _, tc := range []struct {
		name  string
		setup func(d *Domain)
		was   string
	}{
		{"Gmail's own pause", func(d *Domain) { d.HoldProvider(t0, "gmail.com", 10*time.Minute, "421 4.7.28", true) }, PhaseHeld},
		{"a quota hold", func(d *Domain) { d.RecordQuotaRejection(t0, "gmail.com") }, PhaseHeld},
		{"a tripped breaker", func(d *Domain) {
			for range BreakerFailures {
				d.RecordTransientReply(t0.Add(50*time.Second), "gmail.com", "451 4.3.0")
			}
		}, PhaseOpen},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := NewDomain("example.com", Limits{}, nil, t0)
			tc.setup(d)
			if open, _ := d.ProviderOpen(at, "gmail.com"); !open {
				t.Fatal("not held before the release")
			}
			if was := d.ReleaseProvider(at, "googlemail.com"); was != tc.was {
				t.Fatalf("ReleaseProvider = %q; want %q", was, tc.was)
			}
			ps := d.Status(at).Providers
			if len(ps) != 1 || ps[0].Phase != PhaseHalfOpen || !strings.HasPrefix(ps[0].Summary, "google: ramping back up, 1 of 16 connections") ||
				!strings.Contains(ps[0].Summary, "(lifted by an operator; it was held for ") {
				t.Fatalf("after the release: %+v; want google half-open, lifted by an operator", ps)
			}
			if n := d.Connections(at, "gmail.com"); n != 1 {
				t.Fatalf("ramp step of %d connections; want the probe's one", n)
			}
			if open, _ := d.ProviderOpen(at, "gmail.com"); open {
				t.Fatal("released, the probe may not go")
			}
			if open, _ := d.ProviderOpen(at, "gmail.com"); !open {
				t.Fatal("two probes at once after a release")
			}
			// Half-open: a second release (the leader's watch seeing its
			// own) changes nothing.
			if was := d.ReleaseProvider(at, "gmail.com"); was != PhaseHalfOpen {
				t.Fatalf("second ReleaseProvider = %q; want half-open", was)
			}
			if open, _ := d.ProviderOpen(at, "gmail.com"); !open {
				t.Fatal("a second release let a second step go beside the first")
			}
		})
	}
	d := NewDomain("example.com", Limits{}, nil, t0)
	if was := d.ReleaseProvider(at, "yahoo.com"); was != PhaseClosed || len(d.Status(at).Providers) != 0 {
		t.Fatalf("a closed provider released: %q, %+v; want closed, nothing kept", was, d.Status(at).Providers)
	}
}

// TestShortStepJudgedByMajority: a ramp step with fewer attempts than the
// breaker's floor (a step into a slow provider has a minute, a few sends)
// re-opens the breaker when more were refused than accepted, and is a
// clean step when more were accepted.
func TestShortStepJudgedByMajority(t *testing.T) {
	t.Parallel()
	t0 := dayAt(0, "10:00:00")
	for _, tc := range []struct {
		sent, failed int
		phase        string
	}{{1, 2, PhaseOpen}, {2, 1, PhaseHalfOpen}, {1, 1, PhaseHalfOpen}} {
		d := NewDomain("example.com", Limits{}, nil, t0)
		d.HoldProvider(t0, "slow.example", time.Minute, "421 4.7.0 slow down", false)
		at := t0.Add(2 * time.Minute)
		if open, _ := d.ProviderOpen(at, "slow.example"); open {
			t.Fatal("the probe may not go after the hold")
		}
		d.RecordStep(at, "slow.example", tc.sent, tc.failed, false, "451 4.3.0")
		ps := d.Status(at.Add(time.Second)).Providers
		if len(ps) != 1 || ps[0].Phase != tc.phase {
			t.Errorf("a step of %d accepted and %d refused: %+v; want %s", tc.sent, tc.failed, ps, tc.phase)
		}
	}
}
