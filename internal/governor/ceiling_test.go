package governor

import (
	"testing"
	"time"
)

// day0 is a Monday noon, UTC; dayAt(n, "15:04:05") is a time on day0+n.
var day0 = time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC)

func dayAt(n int, clock string) time.Time {
	c, err := time.Parse(time.TimeOnly, clock)
	if err != nil {
		panic(err)
	}
	return time.Date(day0.Year(), day0.Month(), day0.Day()+n, c.Hour(), c.Minute(), c.Second(), c.Nanosecond(), time.UTC)
}

func date(n int) string { return dayAt(n, "00:00:00").Format(time.DateOnly) }

// unpaced takes the token bucket out of the way of tests about other rules.
var unpaced = Limits{RatePerSecond: 1e9, Burst: 1e9}

func TestFirstDayOfNewDomain(t *testing.T) {
	t.Parallel()
	now := dayAt(0, "09:30:00")
	d := NewDomain("Example.COM", unpaced, nil, now)
	st := d.State()
	if st.Domain != "example.com" || st.Ceiling != DefaultCeiling || st.Day != date(0) || st.SentToday != 0 || st.RejectedToday {
		t.Fatalf("new domain state = %+v; want example.com at 5,000 on %s with nothing sent", st, date(0))
	}
	const sentence = "daily ceiling of 5,000 for example.com reached; resumes 00:00 UTC"
	midnight := dayAt(1, "00:00:00")
	g, r := d.Grant(now, 6000)
	if g != 5000 || !r.Until.Equal(midnight) || r.Text != sentence || r.Limit != LimitCeiling {
		t.Fatalf("Grant(6000) = %d, %+v; want 5000, %s until %v, %q", g, r, LimitCeiling, midnight, sentence)
	}
	d.RecordSent(now, 5000)
	if g, r := d.Grant(dayAt(0, "23:59:59"), 1); g != 0 || !r.Until.Equal(midnight) || r.Text != sentence || r.Limit != LimitCeiling {
		t.Fatalf("at the ceiling Grant(1) = %d, %+v; want 0 until midnight", g, r)
	}
	if s := d.Status(now); s.Waiting != sentence || !s.ResumesAt.Equal(midnight) || s.SentToday != 5000 {
		t.Fatalf("status = %+v; want waiting %q", s, sentence)
	}
	// A clean day at 100 %: the next UTC day starts at double.
	if g, _ := d.Grant(midnight, 20000); g != 10000 {
		t.Fatalf("after midnight granted %d; want the doubled ceiling, 10000", g)
	}
}

// TestRollover: only a UTC day that ended with no quota rejection and at least
// 90 % of its ceiling used doubles the ceiling, once, capped.
func TestRollover(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		ceiling  int
		sent     int
		rejected bool
		day      string
		now      time.Time
		want     int
		wantSent int
		wantDay  string
	}{
		{name: "clean day at 95% doubles", ceiling: 5000, sent: 4750, day: date(0), now: dayAt(1, "00:00:01"), want: 10000, wantDay: date(1)},
		{name: "clean day at exactly 90% doubles", ceiling: 5000, sent: 4500, day: date(0), now: dayAt(1, "08:00:00"), want: 10000, wantDay: date(1)},
		{name: "clean day just under 90% is unchanged", ceiling: 5000, sent: 4499, day: date(0), now: dayAt(1, "08:00:00"), want: 5000, wantDay: date(1)},
		{name: "clean day at 80% is unchanged", ceiling: 5000, sent: 4000, day: date(0), now: dayAt(1, "08:00:00"), want: 5000, wantDay: date(1)},
		{name: "day over the ceiling doubles, never more", ceiling: 5000, sent: 12000, day: date(0), now: dayAt(1, "08:00:00"), want: 10000, wantDay: date(1)},
		{name: "rejected day at 100% is unchanged", ceiling: 1500, sent: 3000, rejected: true, day: date(0), now: dayAt(1, "08:00:00"), want: 1500, wantDay: date(1)},
		{name: "doubling is capped at 5,000,000", ceiling: 4_000_000, sent: 4_000_000, day: date(0), now: dayAt(1, "08:00:00"), want: MaxCeiling, wantDay: date(1)},
		{name: "at the cap stays at the cap", ceiling: MaxCeiling, sent: MaxCeiling, day: date(0), now: dayAt(1, "08:00:00"), want: MaxCeiling, wantDay: date(1)},
		{name: "idle for days after a clean 95% day doubles once", ceiling: 5000, sent: 4750, day: date(0), now: dayAt(5, "08:00:00"), want: 10000, wantDay: date(5)},
		{name: "idle for days after an 80% day is unchanged", ceiling: 5000, sent: 4000, day: date(0), now: dayAt(5, "08:00:00"), want: 5000, wantDay: date(5)},
		{name: "idle for days after a rejected day is unchanged", ceiling: 100, sent: 200, rejected: true, day: date(0), now: dayAt(5, "08:00:00"), want: 100, wantDay: date(5)},
		{name: "last instant of the day does not roll", ceiling: 5000, sent: 4750, day: date(0), now: dayAt(0, "23:59:59.999999999"), want: 5000, wantSent: 4750, wantDay: date(0)},
		{name: "midnight exactly rolls", ceiling: 5000, sent: 4750, day: date(0), now: dayAt(1, "00:00:00"), want: 10000, wantDay: date(1)},
		{
			name: "the UTC date decides, not the caller's zone", ceiling: 5000, sent: 4750, day: date(0),
			// 08:00 on day 1 in UTC+10 is 22:00 on day 0 in UTC.
			now:  time.Date(2026, 3, 3, 8, 0, 0, 0, time.FixedZone("AEST", 10*3600)),
			want: 5000, wantSent: 4750, wantDay: date(0),
		},
		{name: "a clock behind the state's day changes nothing", ceiling: 5000, sent: 4750, day: date(1), now: dayAt(0, "08:00:00"), want: 5000, wantSent: 4750, wantDay: date(1)},
		{name: "a state without a day starts today, counting what it had", ceiling: 5000, sent: 10, now: dayAt(0, "08:00:00"), want: 5000, wantSent: 10, wantDay: date(0)},
		{name: "an unreadable day starts today", ceiling: 5000, sent: 10, day: "someday", now: dayAt(3, "08:00:00"), want: 5000, wantSent: 10, wantDay: date(3)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			st := &DomainState{Ceiling: tt.ceiling, Day: tt.day, SentToday: tt.sent, RejectedToday: tt.rejected}
			d := NewDomain("example.com", unpaced, st, tt.now)
			got := d.State()
			if got.Ceiling != tt.want || got.SentToday != tt.wantSent || got.Day != tt.wantDay {
				t.Fatalf("after load at %v: ceiling %d, sent %d, day %s; want %d, %d, %s",
					tt.now, got.Ceiling, got.SentToday, got.Day, tt.want, tt.wantSent, tt.wantDay)
			}
			if tt.wantDay != tt.day && got.RejectedToday {
				t.Fatal("the new day starts marked rejected")
			}
			if tt.wantDay == tt.day {
				return // not rolled: nothing more to say about the days after
			}
			// Later calls the same day change nothing, and the idle days
			// after it ended with nothing sent, so they never double.
			for _, later := range []time.Time{tt.now.Add(time.Minute), tt.now.Add(24 * time.Hour), tt.now.Add(72 * time.Hour)} {
				if c := d.Status(later).Ceiling; c != tt.want {
					t.Fatalf("at %v the ceiling moved to %d; want %d", later, c, tt.want)
				}
			}
		})
	}
}

// TestRolloverOnTheWay: the day is closed lazily by whichever call comes
// first after midnight, and a stored state loaded days later agrees with a
// domain that stayed in memory.
func TestRolloverOnTheWay(t *testing.T) {
	t.Parallel()
	calls := map[string]func(d *Domain, now time.Time){
		"Grant":                func(d *Domain, now time.Time) { d.Grant(now, 1) },
		"RecordSent":           func(d *Domain, now time.Time) { d.RecordSent(now, 1) },
		"RecordQuotaRejection": func(d *Domain, now time.Time) { d.RecordQuotaRejection(now, "gmail.com") },
		"ProviderOpen":         func(d *Domain, now time.Time) { d.ProviderOpen(now, "gmail.com") },
		"RecordTransient":      func(d *Domain, now time.Time) { d.RecordTransient(now, "gmail.com") },
		"RecordSuccess":        func(d *Domain, now time.Time) { d.RecordSuccess(now, "gmail.com", 1) },
		"ResetRateLimit":       func(d *Domain, now time.Time) { d.ResetRateLimit(now) },
		"Status":               func(d *Domain, now time.Time) { d.Status(now) },
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			d := NewDomain("example.com", unpaced, nil, dayAt(0, "08:00:00"))
			d.RecordSent(dayAt(0, "23:59:00"), 4750)
			stored := d.State()
			call(d, dayAt(3, "00:00:30"))
			want := 10000
			if name == "RecordQuotaRejection" {
				want = MinCeiling // doubled, then a rejection with nothing sent today
			}
			if st := d.State(); st.Ceiling != want || st.Day != date(3) {
				t.Fatalf("after %s on day 3: ceiling %d on %s; want %d on %s", name, st.Ceiling, st.Day, want, date(3))
			}
			loaded := NewDomain("example.com", unpaced, &stored, dayAt(3, "00:00:30"))
			if st := loaded.State(); st.Ceiling != 10000 || st.SentToday != 0 {
				t.Fatalf("stored state loaded on day 3: ceiling %d, sent %d; want 10000, 0", st.Ceiling, st.SentToday)
			}
		})
	}
}

// TestQuotaRejection: the ceiling drops to max(100, sent today / 2), never
// rises, the day will not double, and the provider is held for 5 minutes.
func TestQuotaRejection(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		ceiling int
		sent    int
		want    int
	}{
		{"rejection at 3,000 sent", 5000, 3000, 1500},
		{"rejection at 150 sent hits the floor", 5000, 150, 100},
		{"rejection with nothing sent today", 5000, 0, 100},
		{"rejection at 201 sent rounds down to the floor", 5000, 201, 100},
		{"rejection at 250 sent", 5000, 250, 125},
		{"a second rejection never raises the ceiling", 1500, 3100, 1500},
		{"rejection at the floor", 100, 100, 100},
		{"rejection on a big domain", MaxCeiling, 4_000_000, 2_000_000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			now := dayAt(0, "12:00:00")
			d := NewDomain("example.com", unpaced, &DomainState{Ceiling: tt.ceiling, Day: date(0), SentToday: tt.sent}, now)
			d.RecordQuotaRejection(now, "gmail.com")
			st := d.State()
			if st.Ceiling != tt.want || !st.RejectedToday {
				t.Fatalf("after rejection at %d sent: ceiling %d, rejected %v; want %d, true", tt.sent, st.Ceiling, st.RejectedToday, tt.want)
			}
			if open, at := d.ProviderOpen(now.Add(QuotaHold-time.Nanosecond), "googlemail.com"); !open || !at.Equal(now.Add(QuotaHold)) {
				t.Fatalf("google during the hold: open %v until %v; want held until %v", open, at, now.Add(QuotaHold))
			}
			if open, _ := d.ProviderOpen(now, "yahoo.com"); open {
				t.Fatal("a rejection by google held yahoo")
			}
			if open, _ := d.ProviderOpen(now.Add(QuotaHold), "gmail.com"); open {
				t.Fatal("google still held after 5 minutes")
			}
			wantGrant := max(0, tt.want-tt.sent)
			if g, _ := d.Grant(now, 1_000_000); g != wantGrant {
				t.Fatalf("granted %d after the rejection; want %d", g, wantGrant)
			}
		})
	}
}

// TestRejectedDayThenCleanDays: a rejection at 3,000 → 1,500; the day does
// not double though it sent twice its new ceiling; clean days then regrow it.
func TestRejectedDayThenCleanDays(t *testing.T) {
	t.Parallel()
	d := NewDomain("example.com", unpaced, nil, dayAt(0, "06:00:00"))
	for h := range 3 {
		now := dayAt(0, "06:00:00").Add(time.Duration(h) * time.Hour)
		g, _ := d.Grant(now, 1000)
		d.RecordSent(now, g)
	}
	d.RecordQuotaRejection(dayAt(0, "09:00:00"), "outlook.com")
	if g, r := d.Grant(dayAt(0, "09:00:01"), 10); g != 0 || !r.Until.Equal(dayAt(1, "00:00:00")) ||
		r.Text != "daily ceiling of 1,500 for example.com reached; resumes 00:00 UTC" {
		t.Fatalf("after the rejection Grant = %d, %+v", g, r)
	}
	steps := []struct {
		day, sent, wantNextCeiling int
	}{
		{1, 1425, 3000}, // 95 % of 1,500, clean
		{2, 2400, 3000}, // 80 % of 3,000
		{3, 2700, 6000}, // 90 % of 3,000
	}
	for _, s := range steps {
		now := dayAt(s.day, "10:00:00")
		g, _ := d.Grant(now, s.sent)
		d.RecordSent(now, g)
		if c := d.Status(dayAt(s.day+1, "00:00:00")).Ceiling; c != s.wantNextCeiling {
			t.Fatalf("after day %d with %d sent the ceiling is %d; want %d", s.day, s.sent, c, s.wantNextCeiling)
		}
	}
}

// TestHoldAcrossMidnight: a hold is wall-clock time and outlasts midnight;
// the rollover does not double the rejected day and starts the new day clean.
func TestHoldAcrossMidnight(t *testing.T) {
	t.Parallel()
	d := NewDomain("example.com", unpaced, &DomainState{Ceiling: 5000, Day: date(0), SentToday: 4900}, dayAt(0, "23:00:00"))
	d.RecordQuotaRejection(dayAt(0, "23:58:00"), "icloud.com")
	tests := []struct {
		at       time.Time
		provider string
		open     bool
		until    time.Time
	}{
		{dayAt(1, "00:01:00"), "me.com", true, dayAt(1, "00:03:00")},
		{dayAt(1, "00:02:59"), "apple", true, dayAt(1, "00:03:00")},
		{dayAt(1, "00:03:00"), "mac.com", false, time.Time{}},
	}
	for _, tt := range tests {
		if open, until := d.ProviderOpen(tt.at, tt.provider); open != tt.open || !until.Equal(tt.until) {
			t.Fatalf("at %v %s: open %v until %v; want %v until %v", tt.at, tt.provider, open, until, tt.open, tt.until)
		}
	}
	st := d.State()
	if st.Ceiling != 2450 || st.Day != date(1) || st.SentToday != 0 || st.RejectedToday || len(st.Holds) != 0 {
		t.Fatalf("state on the new day = %+v; want ceiling 2450 (not doubled), nothing sent, not rejected, no holds", st)
	}
}

// TestRejectionExtendsHold: a second rejection while held holds from then.
func TestRejectionExtendsHold(t *testing.T) {
	t.Parallel()
	now := dayAt(0, "12:00:00")
	d := NewDomain("example.com", unpaced, nil, now)
	d.RecordQuotaRejection(now, "yahoo.com")
	d.RecordQuotaRejection(now.Add(2*time.Minute), "aol.com")
	if open, until := d.ProviderOpen(now.Add(6*time.Minute), "ymail.com"); !open || !until.Equal(now.Add(7*time.Minute)) {
		t.Fatalf("open %v until %v; want held until %v", open, until, now.Add(7*time.Minute))
	}
}
