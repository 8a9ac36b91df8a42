package governor

import (
	"encoding/json"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestGrant: a grant is the smallest of what n, the token bucket, the daily
// ceiling and the hourly limit allow; the reason names what stopped it.
func TestGrant(t *testing.T) {
	t.Parallel()
	now := dayAt(0, "12:00:00")
	tests := []struct {
		name      string
		limits    Limits
		state     *DomainState
		setup     func(d *Domain)
		n         int
		want      int
		wantRetry time.Time
		wantWhy   string
	}{
		{
			// The retry is when a quarter of what was asked is back: a
			// page worth dispatching, not one of a single message.
			name: "default bucket: burst 200, then 50/s", limits: Limits{},
			n: 500, want: 200, wantRetry: now.Add(2500 * time.Millisecond),
			wantWhy: "rate of 50/s for example.com used up; next page in 2.5s",
		},
		{
			name: "the bucket refills", limits: Limits{},
			setup: func(d *Domain) { d.Grant(now.Add(-time.Second), 200) },
			n:     100, want: 50, wantRetry: now.Add(500 * time.Millisecond),
		},
		{
			name: "returned grants can be granted again", limits: Limits{},
			setup: func(d *Domain) { d.Grant(now, 200); d.Return(30) },
			n:     100, want: 30, wantRetry: now.Add(500 * time.Millisecond),
		},
		{
			// Three tokens back since the last grant are no page: 32
			// ranges at 50/s sent pages of 3 when each took what there
			// was. Wait for a quarter of what was asked.
			name: "a few tokens are not a page", limits: Limits{},
			setup: func(d *Domain) { d.Grant(now.Add(-60*time.Millisecond), 200) },
			n:     100, want: 0, wantRetry: now.Add(440 * time.Millisecond),
			wantWhy: "rate of 50/s for example.com used up; next page in 440ms",
		},
		{
			// A small burst is a whole page's worth.
			name: "a burst below a quarter page", limits: Limits{RatePerSecond: 2, Burst: 2},
			setup: func(d *Domain) { d.Grant(now.Add(-time.Second), 2) },
			n:     100, want: 2, wantRetry: now.Add(time.Second),
		},
		{
			name: "configured rate", limits: Limits{RatePerSecond: 2, Burst: 10},
			n: 11, want: 10, wantRetry: now.Add(time.Second),
			wantWhy: "rate of 2/s for example.com used up; next page in 1s",
		},
		{
			name: "the ceiling binds before the bucket", limits: Limits{},
			state: &DomainState{Ceiling: 5000, Day: date(0), SentToday: 4900},
			n:     200, want: 100, wantRetry: dayAt(1, "00:00:00"),
			wantWhy: "daily ceiling of 5,000 for example.com reached; resumes 00:00 UTC",
		},
		{
			name: "the hourly limit binds before the bucket", limits: Limits{EmailsPerHour: 1000},
			setup: func(d *Domain) { d.RecordSent(now.Add(-30*time.Minute), 950) },
			n:     200, want: 50, wantRetry: now.Add(31 * time.Minute),
			wantWhy: "hourly limit of 1,000 for example.com reached; resumes 12:31 UTC",
		},
		{
			name: "of two binding limits the reason is the longer wait", limits: Limits{EmailsPerHour: 1000},
			state: &DomainState{Ceiling: 5000, Day: date(0), SentToday: 4000},
			setup: func(d *Domain) { d.RecordSent(now.Add(-30*time.Minute), 1000) },
			n:     10, want: 0, wantRetry: dayAt(1, "00:00:00"),
			wantWhy: "daily ceiling of 5,000 for example.com reached; resumes 00:00 UTC",
		},
		{name: "nothing asked, nothing said", limits: Limits{}, n: 0, want: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d := NewDomain("example.com", tt.limits, tt.state, now.Add(-time.Hour))
			if tt.setup != nil {
				tt.setup(d)
			}
			g, r := d.Grant(now, tt.n)
			retry, why := r.Until, r.Text
			if g != tt.want || !retry.Equal(tt.wantRetry) {
				t.Fatalf("Grant(%d) = %d, retry %v (%q); want %d, retry %v", tt.n, g, retry, why, tt.want, tt.wantRetry)
			}
			if (tt.wantWhy != "" && why != tt.wantWhy) || (g == tt.n && why != "") || (g < tt.n && why == "") {
				t.Fatalf("reason %q; want %q", why, tt.wantWhy)
			}
		})
	}
}

// TestRefusedGrantSpendsNoTokens: the bucket is asked last, for what the
// other limits allow, so a refusal leaves its tokens for later.
func TestRefusedGrantSpendsNoTokens(t *testing.T) {
	t.Parallel()
	now := dayAt(0, "12:00:00")
	d := NewDomain("example.com", Limits{Burst: 10}, &DomainState{Ceiling: 100, Day: date(0), SentToday: 100}, now)
	for range 5 {
		if g, _ := d.Grant(now, 10); g != 0 {
			t.Fatalf("granted %d over the ceiling", g)
		}
	}
	if tok := d.Status(now).Tokens; tok != 10 {
		t.Fatalf("%v tokens left; want the full burst, 10", tok)
	}
}

// TestGrantsInFlight: grants count against the ceiling until they are
// recorded sent (then they count as sent) or returned (then they are free).
func TestGrantsInFlight(t *testing.T) {
	t.Parallel()
	now := dayAt(0, "12:00:00")
	d := NewDomain("example.com", unpaced, nil, now)
	steps := []struct {
		name                 string
		do                   func()
		wantSent, wantFlight int
		wantGrantable        int
	}{
		{"grant the whole ceiling", func() { d.Grant(now, 5000) }, 0, 5000, 0},
		{"3,000 of it sent", func() { d.RecordSent(now, 3000) }, 3000, 2000, 0},
		{"the rest returned", func() { d.Return(2000) }, 3000, 0, 2000},
		{"returning more than is in flight frees nothing more", func() { d.Return(500) }, 3000, 0, 2000},
		{"mail sent without a grant counts too", func() { d.RecordSent(now, 500) }, 3500, 0, 1500},
	}
	for _, s := range steps {
		s.do()
		st := d.Status(now)
		if st.SentToday != s.wantSent || st.InFlight != s.wantFlight {
			t.Fatalf("%s: sent %d, in flight %d; want %d, %d", s.name, st.SentToday, st.InFlight, s.wantSent, s.wantFlight)
		}
		if left, _ := d.left(now); left != s.wantGrantable {
			t.Fatalf("%s: %d grantable; want %d", s.name, left, s.wantGrantable)
		}
	}
}

// TestStateRoundTrip: the state survives JSON, a domain rebuilt from it
// behaves the same, and State is a copy.
func TestStateRoundTrip(t *testing.T) {
	t.Parallel()
	now := dayAt(0, "12:00:00")
	d := NewDomain("example.com", Limits{EmailsPerHour: 500}, nil, now)
	d.RecordSent(now, 300)
	d.ResetRateLimit(now.Add(10 * time.Second))
	d.RecordSent(now.Add(20*time.Second), 20)
	d.RecordQuotaRejection(now.Add(time.Minute), "gmail.com")
	for range BreakerFailures {
		d.RecordTransient(now.Add(time.Minute), "outlook.com")
	}
	d.RecordTransient(now.Add(time.Minute), "example.org")
	st := d.State()
	raw, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	var back DomainState
	if err := json.Unmarshal(raw, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(st, back) {
		t.Fatalf("JSON round trip changed the state:\n%+v\n%+v\n%s", st, back, raw)
	}
	later := now.Add(2 * time.Minute)
	d2 := NewDomain("example.com", Limits{EmailsPerHour: 500}, &back, later)
	if a, b := d.Status(later), d2.Status(later); !reflect.DeepEqual(a, b) {
		t.Fatalf("status differs after reload:\n%+v\n%+v", a, b)
	}
	st.Holds["gmail.com"] = time.Time{}
	st.Breakers["microsoft"] = BreakerState{}
	st.Hourly.Slots[0].Count = 0
	if again := d.State(); !reflect.DeepEqual(again, back) {
		t.Fatal("changing the copy returned by State changed the domain")
	}
	back.Ceiling = 1
	if d2.State().Ceiling == 1 {
		t.Fatal("NewDomain kept the caller's state")
	}
}

// TestStatus: the status says in words what the domain waits for.
func TestStatus(t *testing.T) {
	t.Parallel()
	now := dayAt(0, "12:00:00")
	tests := []struct {
		name    string
		limits  Limits
		setup   func(d *Domain)
		at      time.Time
		want    string
		resumes time.Time
	}{
		{name: "nothing to wait for", limits: unpaced, at: now},
		{
			name: "ceiling reached and a provider held", limits: unpaced,
			setup: func(d *Domain) {
				d.RecordSent(now, 3000)
				d.RecordQuotaRejection(now, "gmail.com")
			},
			at:      now.Add(time.Minute),
			want:    "daily ceiling of 1,500 for example.com reached; resumes 00:00 UTC; google: held until 12:05 UTC after a quota rejection",
			resumes: dayAt(1, "00:00:00"),
		},
		{
			name: "breakers open and half-open", limits: unpaced,
			setup: func(d *Domain) {
				for range BreakerFailures {
					d.RecordTransient(now.Add(-time.Minute), "yahoo.com")
					d.RecordTransient(now.Add(15*time.Second), "aol.co.uk")
				}
				d.RecordTransient(now, "icloud.com")
			},
			at: now.Add(20 * time.Second),
			want: "aol.co.uk: breaker open until 12:00:45 UTC after 5 of 5 attempts refused in the last 5 min; " +
				"yahoo: ramping back up, 1 of 16 connections (opened: 5 of 5 attempts refused in the last 5 min); " +
				"apple: sending, 100 % of 1 attempt deferred in the last 5 min, those retried later",
		},
		{
			name: "rate", limits: Limits{RatePerSecond: 0.5, Burst: 1},
			setup: func(d *Domain) { d.Grant(now, 1) },
			at:    now, want: "rate of 0.5/s for example.com used up; next page in 2s", resumes: now.Add(2 * time.Second),
		},
		{
			name: "hourly", limits: Limits{EmailsPerHour: 10},
			setup: func(d *Domain) { d.RecordSent(now, 10) },
			at:    now, want: "hourly limit of 10 for example.com reached; resumes 13:01 UTC", resumes: dayAt(0, "13:01:00"),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d := NewDomain("example.com", tt.limits, nil, now.Add(-time.Hour))
			if tt.setup != nil {
				tt.setup(d)
			}
			s := d.Status(tt.at)
			if s.Waiting != tt.want || !s.ResumesAt.Equal(tt.resumes) {
				t.Fatalf("waiting %q, resumes %v; want %q, %v", s.Waiting, s.ResumesAt, tt.want, tt.resumes)
			}
		})
	}
}

func TestStatusProviders(t *testing.T) {
	t.Parallel()
	now := dayAt(0, "12:00:00")
	d := NewDomain("example.com", unpaced, nil, now)
	d.RecordTransient(now, "me.com")
	for range BreakerFailures {
		d.RecordTransient(now, "gmail.com")
	}
	d.RecordQuotaRejection(now, "hotmail.com")
	d.ProviderOpen(now.Add(BreakerOpen), "gmail.com") // the probe goes
	got := d.Status(now.Add(BreakerOpen + time.Second)).Providers
	want := []ProviderStatus{
		{Provider: "apple", Phase: PhaseClosed, Failures: 1, Deferred: 1, Attempts: 1,
			Summary: "apple: sending, 100 % of 1 attempt deferred in the last 5 min, those retried later"},
		{Provider: "google", Phase: PhaseHalfOpen, ProbeInFlight: true, Connections: 1, RampTo: RampConnections,
			Reason: "5 of 5 attempts refused in the last 5 min", RefusingSince: now,
			Summary: "google: ramping back up, 1 of 16 connections (opened: 5 of 5 attempts refused in the last 5 min); waiting for its current step"},
		{Provider: "microsoft", Phase: PhaseHeld, Until: now.Add(QuotaHold), Reason: "quota rejection", RefusingSince: now,
			Summary: "microsoft: held until 12:05 UTC after a quota rejection"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("providers\n%+v\nwant\n%+v", got, want)
	}
}

// TestConcurrentUse: a Domain may be shared by the actors of several
// broadcasts sending from one domain.
func TestConcurrentUse(t *testing.T) {
	t.Parallel()
	now := dayAt(0, "12:00:00")
	d := NewDomain("example.com", Limits{Burst: 1000}, nil, now)
	var wg sync.WaitGroup
	var mu sync.Mutex
	sent := 0
	for w := range 8 {
		wg.Go(func() {
			for i := range 100 {
				at := now.Add(time.Duration(w*100+i) * time.Millisecond)
				g, _ := d.Grant(at, 10)
				d.RecordSent(at, g/2)
				d.Return(g - g/2)
				d.RecordTransient(at, "gmail.com")
				d.ProviderOpen(at, "gmail.com")
				d.Status(at)
				mu.Lock()
				sent += g / 2
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if s := d.Status(now.Add(time.Minute)); s.SentToday != sent || s.InFlight != 0 {
		t.Fatalf("sent %d, in flight %d; want %d, 0", s.SentToday, s.InFlight, sent)
	}
}

func TestThousands(t *testing.T) {
	t.Parallel()
	for n, want := range map[int]string{0: "0", 100: "100", 1000: "1,000", 5000: "5,000", 123456: "123,456", 5_000_000: "5,000,000", -1500: "-1,500"} {
		if got := Thousands(n); got != want {
			t.Errorf("Thousands(%d) = %q; want %q", n, got, want)
		}
	}
}

// A share early in the window says how many attempts it is of: "20 %"
// alone read as the relay's rate (a tester's 3 % sink).
func TestDeferredShareNamesItsAttempts(t *testing.T) {
	t.Parallel()
	now := dayAt(0, "12:00:00")
	d := NewDomain("example.com", unpaced, nil, now)
	d.RecordSuccess(now, "yahoo.com", 4)
	d.RecordTransient(now, "yahoo.com")
	got := d.Status(now.Add(time.Second)).Providers
	if len(got) != 1 || got[0].Attempts != 5 || !strings.Contains(got[0].Summary, "yahoo: sending, 20 % of 5 attempts deferred") {
		t.Fatalf("providers %+v; want yahoo at 20 %% of 5 attempts", got)
	}
}
