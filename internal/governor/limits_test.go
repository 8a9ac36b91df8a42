package governor

import (
	"testing"
	"time"
)

func TestInitialCeilingOnlyForNewDomains(t *testing.T) {
	t.Parallel()
	now := time.Date(2031, 3, 14, 9, 0, 0, 0, time.UTC)
	cases := []struct {
		name    string
		initial int
		stored  *DomainState
		want    int
	}{
		{"default", 0, nil, DefaultCeiling},
		{"configured", 50_000, nil, 50_000},
		{"below the floor", 10, nil, MinCeiling},
		{"above the cap", 10 * MaxCeiling, nil, MaxCeiling},
		{"learned state wins", 50_000, &DomainState{Ceiling: 1_500, Day: "2031-03-14"}, 1_500},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := NewDomain("example.com", Limits{InitialCeiling: c.initial}, c.stored, now)
			if got := d.State().Ceiling; got != c.want {
				t.Fatalf("ceiling %d, want %d", got, c.want)
			}
		})
	}
}

func TestConfiguredQuotaHold(t *testing.T) {
	t.Parallel()
	now := time.Date(2031, 3, 14, 9, 0, 0, 0, time.UTC)
	d := NewDomain("example.com", Limits{QuotaHold: 2 * time.Second}, nil, now)
	d.RecordQuotaRejection(now, "gmail.com")
	if open, at := d.ProviderOpen(now.Add(time.Second), "gmail.com"); !open || !at.Equal(now.Add(2*time.Second)) {
		t.Fatalf("held %v until %v, want until %v", open, at, now.Add(2*time.Second))
	}
	if open, _ := d.ProviderOpen(now.Add(2*time.Second), "gmail.com"); open {
		t.Fatal("still held after the configured hold")
	}
}

func TestSetLimitsKeepsStateAndInFlight(t *testing.T) {
	t.Parallel()
	now := time.Date(2031, 3, 14, 9, 0, 0, 0, time.UTC)
	d := NewDomain("example.com", Limits{RatePerSecond: 1000, Burst: 1000}, nil, now)
	if g, _ := d.Grant(now, 300); g != 300 {
		t.Fatalf("granted %d, want 300", g)
	}
	d.RecordSent(now, 100)
	d.SetLimits(now, Limits{RatePerSecond: 10, Burst: 50, EmailsPerHour: 400})
	s := d.Status(now)
	if s.SentToday != 100 || s.InFlight != 200 || s.Burst != 50 || s.Tokens != 50 || s.EmailsPerHour != 400 {
		t.Fatalf("after SetLimits: %+v", s)
	}
	// 100 sent + 200 in flight leave 100 of the hourly 400; the burst of 50 binds first.
	if g, r := d.Grant(now, 200); g != 50 || r.Limit != LimitRate {
		t.Fatalf("granted %d (%+v), want the burst of 50, held by the rate", g, r)
	}
}

func TestSetCeilingClamps(t *testing.T) {
	t.Parallel()
	now := time.Date(2031, 3, 14, 9, 0, 0, 0, time.UTC)
	d := NewDomain("example.com", Limits{}, nil, now)
	for i, c := range []struct{ set, want int }{{20_000, 20_000}, {1, MinCeiling}, {MaxCeiling * 3, MaxCeiling}} {
		d.SetCeiling(now, now.Add(time.Duration(i+1)*time.Second), c.set)
		if got := d.State().Ceiling; got != c.want {
			t.Fatalf("SetCeiling(%d): %d, want %d", c.set, got, c.want)
		}
	}
	// Learning moves it; replaying the last setting does not undo that.
	d.RecordSent(now, 40_000)
	d.RecordQuotaRejection(now, "gmail.com")
	d.SetCeiling(now, now.Add(3*time.Second), MaxCeiling)
	if got := d.State().Ceiling; got != 20_000 {
		t.Fatalf("after a rejection and a replayed setting: ceiling %d, want 20,000", got)
	}
}

func TestSettleAndCountKeepGrantsApart(t *testing.T) {
	t.Parallel()
	now := time.Date(2031, 3, 14, 9, 0, 0, 0, time.UTC)
	d := NewDomain("example.com", Limits{RatePerSecond: 1, Burst: 100}, nil, now)
	if g, _ := d.Grant(now, 100); g != 100 {
		t.Fatalf("granted %d", g)
	}
	d.Count(now, 60) // the report: 60 went out
	if s := d.Status(now); s.SentToday != 60 || s.InFlight != 100 {
		t.Fatalf("after Count: sent %d, in flight %d; want 60, 100 (the grant is still open)", s.SentToday, s.InFlight)
	}
	d.Settle(100, 60)
	if s := d.Status(now); s.InFlight != 0 || s.Tokens != 40 {
		t.Fatalf("after Settle: in flight %d, tokens %v; want 0 and the 40 unsent back", s.InFlight, s.Tokens)
	}
	d.Settle(100, 0) // a grant settled twice cannot go below zero
	if s := d.Status(now); s.InFlight != 0 {
		t.Fatalf("in flight %d after a second settle", s.InFlight)
	}
	// Sent mail counts against the ceiling whether or not it had a grant.
	d.Count(now, DefaultCeiling)
	if g, r := d.Grant(now, 1); g != 0 || r.Limit != LimitCeiling {
		t.Fatalf("granted %d past the ceiling", g)
	}
}

// TestSharedServerHourlyLimit: two sending domains through one SMTP server
// share its hourly limit; a reset of the server frees both.
func TestSharedServerHourlyLimit(t *testing.T) {
	t.Parallel()
	now := time.Date(2031, 3, 14, 9, 0, 0, 0, time.UTC)
	relay := NewServer("relay", 100, HourlyWindow{})
	l := Limits{RatePerSecond: 1e6, Burst: 1e6}
	a := NewDomain("a.example", l, nil, now)
	b := NewDomain("b.example", l, nil, now)
	a.ShareServer(relay)
	b.ShareServer(relay)
	if g, _ := a.Grant(now, 70); g != 70 {
		t.Fatalf("a granted %d, want 70", g)
	}
	g, r := b.Grant(now, 50)
	if g != 30 || r.Limit != LimitHourly || r.Text != "hourly limit of 100 for SMTP server relay reached; resumes 10:00 UTC" || !r.Until.Equal(now.Add(time.Hour)) {
		t.Fatalf("b granted %d (%+v); want the 30 the server has left, then 10:00", g, r)
	}
	a.Settle(70, 70)
	a.Count(now, 70)
	b.Settle(30, 30)
	b.Count(now, 30)
	if s := b.Status(now); s.HourlyCount != 100 || s.EmailsPerHour != 100 {
		t.Fatalf("b sees the server at %d of %d; want 100 of 100", s.HourlyCount, s.EmailsPerHour)
	}
	if g, _ := a.Grant(now.Add(time.Minute), 1); g != 0 {
		t.Fatalf("a granted %d past the server's limit", g)
	}
	relay.Reset(now.Add(2 * time.Minute))
	if g, _ := a.Grant(now.Add(2*time.Minute), 60); g != 60 {
		t.Fatalf("after a reset a was granted %d, want 60", g)
	}
	if g, _ := b.Grant(now.Add(2*time.Minute), 60); g != 40 {
		t.Fatalf("after a reset b was granted %d, want the 40 a left", g)
	}
	if st := a.State(); len(st.Hourly.Slots) != 0 {
		t.Fatalf("a shared server's window is stored with a domain: %+v", st.Hourly)
	}
}
