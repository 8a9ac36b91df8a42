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
			h.lane(p).end(at)
		}
	}
}

func TestHoldsAddKeepsProbesAndLaterTimes(t *testing.T) {
	t.Parallel()
	at := time.Date(2031, 3, 14, 9, 0, 0, 0, time.UTC)
	job := bus.PageJob{Defer: map[string]time.Time{"google": at.Add(time.Minute)}, Probe: []string{"yahoo"}}
	h := newHolds(job)
	h.add(map[string]time.Time{"google": at, "yahoo": at.Add(time.Hour), "microsoft": at.Add(2 * time.Minute)})
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
