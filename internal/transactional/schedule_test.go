package transactional

import (
	"testing"
	"time"

	"github.com/rangecast/rangecast/internal/transport"
)

func TestScheduleRetry(t *testing.T) {
	t.Parallel()
	s := DefaultSchedule
	cases := []struct {
		name  string
		done  int
		class transport.Class
		rnd   float64
		want  time.Duration
		retry bool
	}{
		{"first transient, no jitter", 1, transport.Transient, 0.5, 10 * time.Second, true},
		{"second transient", 2, transport.Transient, 0.5, 30 * time.Second, true},
		{"third transient", 3, transport.Transient, 0.5, 2 * time.Minute, true},
		{"fourth transient", 4, transport.Transient, 0.5, 10 * time.Minute, true},
		{"fifth transient", 5, transport.Transient, 0.5, 30 * time.Minute, true},
		{"sixth: exhausted", 6, transport.Transient, 0.5, 0, false},
		{"jitter low end", 1, transport.Transient, 0, 8 * time.Second, true},
		{"jitter high end", 2, transport.Transient, 1, 36 * time.Second, true},
		{"quota grows like transient", 2, transport.Quota, 0.5, 30 * time.Second, true},
		{"channel waits the longest step at once", 1, transport.Channel, 0.5, 30 * time.Minute, true},
		{"channel jittered", 1, transport.Channel, 0, 24 * time.Minute, true},
		{"channel exhausted", 6, transport.Channel, 0.5, 0, false},
		{"recipient never retried", 1, transport.Recipient, 0.5, 0, false},
		{"no attempt yet", 0, transport.Transient, 0.5, 0, false},
	}
	for _, tc := range cases {
		got, retry := s.Retry(tc.done, tc.class, tc.rnd)
		if got != tc.want || retry != tc.retry {
			t.Errorf("%s: Retry(%d, %s, %v) = %s, %v; want %s, %v", tc.name, tc.done, tc.class, tc.rnd, got, retry, tc.want, tc.retry)
		}
	}
	if s.MaxAttempts() != 6 {
		t.Errorf("MaxAttempts = %d, want 6", s.MaxAttempts())
	}
}

// The waits grow: with any jitter draw, every step's latest retry comes
// before the next step's earliest.
func TestScheduleGrows(t *testing.T) {
	t.Parallel()
	s := DefaultSchedule
	for n := 1; n < s.MaxAttempts()-1; n++ {
		hi, _ := s.Retry(n, transport.Transient, 0.999)
		lo, _ := s.Retry(n+1, transport.Transient, 0)
		if hi >= lo {
			t.Errorf("step %d can wait %s, step %d as little as %s", n, hi, n+1, lo)
		}
	}
}

func TestPayloadDiffers(t *testing.T) {
	t.Parallel()
	base := payload{FromAddress: "a@x.org", To: "b@y.org", Subject: "s", Text: "t"}
	same := base
	same.To = "B@Y.org"
	if base.hash() != same.hash() || base.differs(same) != "" {
		t.Fatal("the recipient's case changed the payload")
	}
	for field, edit := range map[string]func(*payload){
		"subject":      func(p *payload) { p.Subject = "other" },
		"text":         func(p *payload) { p.Text = "other" },
		"html":         func(p *payload) { p.HTML = "<p>x</p>" },
		"from_address": func(p *payload) { p.FromAddress = "c@x.org" },
		"from_name":    func(p *payload) { p.FromName = "C" },
		"to_name":      func(p *payload) { p.ToName = "B" },
	} {
		q := base
		edit(&q)
		if base.hash() == q.hash() || base.differs(q) != field {
			t.Errorf("a different %s: hash equal %v, differs = %q", field, base.hash() == q.hash(), base.differs(q))
		}
	}
}

// TestScheduleRetryUnreached: a relay that takes nothing is retried at the
// backoff's steps (the longest once they run out, and for a channel error)
// for Unreached, a day by default, however many attempts that makes.
func TestScheduleRetryUnreached(t *testing.T) {
	t.Parallel()
	s := DefaultSchedule
	for _, c := range []struct {
		name  string
		done  int
		class transport.Class
		age   time.Duration
		want  time.Duration
		retry bool
	}{
		{"first", 1, transport.Transient, time.Second, 10 * time.Second, true},
		{"past the attempts", 40, transport.Transient, 20 * time.Hour, 30 * time.Minute, true},
		{"channel", 1, transport.Channel, time.Second, 30 * time.Minute, true},
		{"a day on", 50, transport.Transient, 24 * time.Hour, 0, false},
	} {
		got, ok := s.RetryUnreached(c.done, c.class, c.age, 0.5)
		if got != c.want || ok != c.retry {
			t.Errorf("%s: %s, %v; want %s, %v", c.name, got, ok, c.want, c.retry)
		}
	}
	if _, ok := (Schedule{Backoff: s.Backoff, Unreached: time.Hour}).RetryUnreached(3, transport.Transient, time.Hour, 0.5); ok {
		t.Error("retried past its own Unreached")
	}
}
