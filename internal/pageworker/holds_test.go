package pageworker

import (
	"testing"
	"time"

	"github.com/rangecast/rangecast/internal/bus"
)

func TestHoldsDeferHeldProvidersAndCarryTheRampStep(t *testing.T) {
	t.Parallel()
	at := time.Date(2031, 3, 14, 9, 0, 0, 0, time.UTC)
	h := newHolds(bus.PageJob{
		Defer: map[string]time.Time{"google": at, "yahoo": at.Add(time.Minute)},
		Probe: []string{"yahoo"},
		Conns: map[string]int{"yahoo": 3},
	})
	steps := []struct {
		email, provider string
		until           time.Time
		refused         bool // then the step ends
	}{
		{"a@gmail.com", "google", at, false},
		{"b@GoogleMail.com", "google", at, false},
		{"c@example.org", "example.org", time.Time{}, false},
		{"d@yahoo.com", "yahoo", time.Time{}, false},         // the step's recipients go
		{"e@ymail.com", "yahoo", time.Time{}, true},          // … until one is refused
		{"g@yahoo.com", "yahoo", at.Add(time.Minute), false}, // its hold, the breaker's open period
		{"f@outlook.fr", "microsoft", time.Time{}, false},
	}
	if h.lane("yahoo") == nil || h.lane("yahoo").conns != 3 || h.lane("google") != nil {
		t.Fatalf("lanes: yahoo %+v, google %+v; want yahoo's step on 3 connections, none for google", h.lane("yahoo"), h.lane("google"))
	}
	for _, s := range steps {
		p, until := h.check(s.email)
		if p != s.provider || !until.Equal(s.until) {
			t.Errorf("check(%s) = %s, %v; want %s, %v", s.email, p, until, s.provider, s.until)
		}
		if s.refused {
			h.lane(p).settle(at, true) // no StepShare (an older coordinator): the first refusal ends it
		}
	}
}

// TestRampStepOutlastsAnIsolatedRefusal: a carried step with the breaker's
// rule (5 refusals that are 20 % of its attempts) goes on past refusals
// that are a small share of its attempts (most providers defer a few
// percent at random) and ends once they meet the rule, the one the
// coordinator judges the step by.
func TestRampStepOutlastsAnIsolatedRefusal(t *testing.T) {
	t.Parallel()
	at := time.Date(2031, 3, 14, 9, 0, 0, 0, time.UTC)
	job := bus.PageJob{Defer: map[string]time.Time{"yahoo": at.Add(time.Minute)}, Probe: []string{"yahoo"}, StepShare: 0.2, StepFloor: 5}
	h := newHolds(job)
	ln := h.lane("yahoo")
	going := func(after string) {
		t.Helper()
		if _, until := h.check("a@yahoo.com"); !until.IsZero() {
			t.Fatalf("after %s the step ended (deferred until %v)", after, until)
		}
	}
	ln.settle(at, true)
	going("1 refused (under the floor)")
	for range 16 {
		ln.settle(at, false)
	}
	for range 3 {
		ln.settle(at, true)
	}
	going("16 accepted and 4 refused (20 %, under the floor)")
	for range 10 {
		ln.settle(at, false)
	}
	ln.settle(at, true)
	going("26 accepted and 5 refused (16 %)")
	ln.settle(at, true)
	ln.settle(at, true)
	if _, until := h.check("a@yahoo.com"); !until.Equal(at.Add(time.Minute)) {
		t.Errorf("26 accepted and 7 refused (21 %%): deferred until %v; want the step ended, until the page's hold %v", until, at.Add(time.Minute))
	}

	dead := newHolds(job)
	for range 5 {
		dead.lane("yahoo").settle(at, true)
	}
	if _, until := dead.check("a@yahoo.com"); until.IsZero() {
		t.Error("a step whose first 5 sends were refused went on")
	}
}
func TestHoldsRefreshKeepsProbesAndLaterTimes(t *testing.T) {
	t.Parallel()
	at := time.Date(2031, 3, 14, 9, 0, 0, 0, time.UTC)
	job := bus.PageJob{Defer: map[string]time.Time{"google": at.Add(time.Minute)}, Probe: []string{"yahoo"}}
	h := newHolds(job)
	h.refresh(map[string]time.Time{"google": at, "yahoo": at.Add(time.Hour), "microsoft": at.Add(2 * time.Minute)}, nil, at)
	if _, until := h.check("a@gmail.com"); !until.Equal(at.Add(time.Minute)) {
		t.Errorf("google until %v; the later of the two holds is %v", until, at.Add(time.Minute))
	}
	if _, until := h.check("b@yahoo.com"); !until.IsZero() {
		t.Errorf("the page's yahoo probe was taken away (deferred until %v)", until)
	}
	if _, until := h.check("c@hotmail.com"); !until.Equal(at.Add(2 * time.Minute)) {
		t.Errorf("microsoft, held since dispatch, deferred until %v; want %v", until, at.Add(2*time.Minute))
	}
	if len(job.Defer) != 1 {
		t.Errorf("the job's own map was changed: %v", job.Defer)
	}
}

// TestHoldsRefreshFollowsARelease: a page dispatched holding google for 10
// minutes learns that the governor ramps it back up (an operator lifted
// it): google's recipients are still not sent, but wait releasedWait, not
// the lifted hold's end. A hold the governor still has is kept whole, and
// so is one the governor's state does not name at all (not written yet).
func TestHoldsRefreshFollowsARelease(t *testing.T) {
	t.Parallel()
	at := time.Date(2031, 3, 14, 9, 0, 0, 0, time.UTC)
	job := bus.PageJob{Defer: map[string]time.Time{"google": at.Add(10 * time.Minute), "yahoo": at.Add(10 * time.Minute), "microsoft": at.Add(10 * time.Minute)}}
	h := newHolds(job)
	h.refresh(map[string]time.Time{"yahoo": at.Add(10 * time.Minute)}, map[string]bool{"google": true}, at.Add(time.Minute))
	if _, until := h.check("c@outlook.com"); !until.Equal(at.Add(10 * time.Minute)) {
		t.Errorf("microsoft, not in the governor's state, deferred until %v; want the page's hold %v", until, at.Add(10*time.Minute))
	}
	if _, until := h.check("a@gmail.com"); !until.Equal(at.Add(time.Minute + releasedWait)) {
		t.Errorf("google, released, deferred until %v; want %v", until, at.Add(time.Minute+releasedWait))
	}
	if _, until := h.check("b@yahoo.com"); !until.Equal(at.Add(10 * time.Minute)) {
		t.Errorf("yahoo, still held, deferred until %v; want %v", until, at.Add(10*time.Minute))
	}
}
