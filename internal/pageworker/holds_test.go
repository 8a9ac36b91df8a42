package pageworker

import (
	"testing"
	"time"

	"github.com/rangecast/rangecast/internal/bus"
)

func TestHoldsDeferHeldProvidersAndSpendOneProbe(t *testing.T) {
	t.Parallel()
	at := time.Date(2031, 3, 14, 9, 0, 0, 0, time.UTC)
	h := newHolds(bus.PageJob{
		Defer: map[string]time.Time{"google": at, "yahoo": at.Add(time.Minute)},
		Probe: []string{"yahoo"},
	})
	steps := []struct {
		email, provider string
		until           time.Time
	}{
		{"a@gmail.com", "google", at},
		{"b@GoogleMail.com", "google", at},
		{"c@example.org", "example.org", time.Time{}},
		{"d@yahoo.com", "yahoo", time.Time{}}, // the probe
		{"e@ymail.com", "yahoo", at.Add(time.Minute)},
		{"f@outlook.fr", "microsoft", time.Time{}},
	}
	for _, s := range steps {
		p, until := h.check(s.email)
		if p != s.provider || !until.Equal(s.until) {
			t.Errorf("check(%s) = %s, %v; want %s, %v", s.email, p, until, s.provider, s.until)
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
