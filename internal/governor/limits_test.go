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
	if g, _, _ := d.Grant(now, 300); g != 300 {
		t.Fatalf("granted %d, want 300", g)
	}
	d.RecordSent(now, 100)
	d.SetLimits(now, Limits{RatePerSecond: 10, Burst: 50, EmailsPerHour: 400})
	s := d.Status(now)
	if s.SentToday != 100 || s.InFlight != 200 || s.Burst != 50 || s.Tokens != 50 || s.EmailsPerHour != 400 {
		t.Fatalf("after SetLimits: %+v", s)
	}
	// 100 sent + 200 in flight leave 100 of the hourly 400; the burst of 50 binds first.
	if g, _, why := d.Grant(now, 200); g != 50 {
		t.Fatalf("granted %d (%s), want the burst of 50", g, why)
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
	if g, _, _ := d.Grant(now, 100); g != 100 {
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
	if g, _, why := d.Grant(now, 1); g != 0 || why == "" {
		t.Fatalf("granted %d past the ceiling", g)
	}
}
