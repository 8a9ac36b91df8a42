package governor

import (
	"testing"
	"time"
)

// TestHourlyLimit: sends count over [max(now−1h, reset_at), now]; a reset
// moves reset_at and deletes nothing; unset means no limit.
func TestHourlyLimit(t *testing.T) {
	t.Parallel()
	at := func(clock string) time.Time { return dayAt(0, clock) }
	// 60 sent at 12:00:10 and 40 at 12:30 against a limit of 100.
	full := func(d *Domain) {
		d.RecordSent(at("12:00:10"), 60)
		d.RecordSent(at("12:30:00"), 40)
	}
	tests := []struct {
		name      string
		perHour   int
		setup     func(d *Domain)
		at        time.Time
		n         int
		want      int
		wantRetry time.Time
		wantWhy   string
		// what Status shows at the same time, before the grant
		wantCount, wantSent int
	}{
		{
			name: "unset means no limit", perHour: 0,
			setup: func(d *Domain) { d.RecordSent(at("12:00:00"), 100_000) },
			at:    at("12:30:00"), n: 1000, want: 1000, wantCount: 100_000, wantSent: 100_000,
		},
		{
			name: "a full hour refuses until its oldest minute leaves", perHour: 100, setup: full,
			at: at("12:45:00"), n: 1, want: 0, wantRetry: at("13:01:00"),
			wantWhy:   "hourly limit of 100 for example.com reached; resumes 13:01 UTC",
			wantCount: 100, wantSent: 100,
		},
		{
			name: "a minute counts until it has wholly left the hour", perHour: 100, setup: full,
			at: at("13:00:59"), n: 1, want: 0, wantRetry: at("13:01:00"), wantCount: 100, wantSent: 100,
		},
		{
			name: "the oldest minute left the hour", perHour: 100, setup: full,
			at: at("13:01:00"), n: 100, want: 60, wantRetry: at("13:31:00"), wantCount: 40, wantSent: 40,
			wantWhy: "hourly limit of 100 for example.com reached; resumes 13:31 UTC",
		},
		{
			name: "the whole hour left", perHour: 100, setup: full,
			at: at("13:31:00"), n: 100, want: 100,
		},
		{
			name: "partial grant up to the limit", perHour: 100,
			setup: func(d *Domain) { d.RecordSent(at("12:00:00"), 90) },
			at:    at("12:10:00"), n: 50, want: 10, wantRetry: at("13:01:00"), wantCount: 90, wantSent: 90,
		},
		{
			name: "grants in flight count against the limit", perHour: 100,
			setup: func(d *Domain) { d.Grant(at("12:00:00"), 70) },
			at:    at("12:00:01"), n: 50, want: 30,
			// Nothing recorded: the 70 in flight will count for an hour once sent.
			wantRetry: at("13:00:01"),
		},
		{
			name: "a reset lets the full hour go again, deleting nothing", perHour: 100,
			setup: func(d *Domain) { full(d); d.ResetRateLimit(at("12:45:00")) },
			at:    at("12:45:00"), n: 100, want: 100, wantCount: 0, wantSent: 100,
		},
		{
			name: "after a reset only later sends count", perHour: 100,
			setup: func(d *Domain) { full(d); d.ResetRateLimit(at("12:45:00")); d.RecordSent(at("12:50:00"), 30) },
			at:    at("12:55:00"), n: 100, want: 70, wantRetry: at("13:51:00"), wantCount: 30, wantSent: 130,
		},
		{
			name: "a reset inside a minute splits it", perHour: 100,
			setup: func(d *Domain) {
				d.RecordSent(at("12:45:10"), 30)
				d.ResetRateLimit(at("12:45:20"))
				d.RecordSent(at("12:45:30"), 5)
			},
			at: at("12:45:40"), n: 100, want: 95, wantRetry: at("13:46:00"), wantCount: 5, wantSent: 35,
		},
		{
			name: "a reset does not move back", perHour: 100,
			setup: func(d *Domain) {
				full(d)
				d.ResetRateLimit(at("12:40:00"))
				d.ResetRateLimit(at("12:20:00")) // would let the 40 of 12:30 count again
			},
			at: at("12:45:00"), n: 100, want: 100, wantCount: 0, wantSent: 100,
		},
		{
			name: "the window spans midnight", perHour: 100,
			setup: func(d *Domain) { d.RecordSent(dayAt(0, "23:30:00"), 100) },
			at:    dayAt(1, "00:15:00"), n: 1, want: 0, wantRetry: dayAt(1, "00:31:00"), wantCount: 100, wantSent: 100,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			st := &DomainState{Ceiling: MaxCeiling} // keep the daily ceiling out of it
			d := NewDomain("example.com", Limits{RatePerSecond: 1e9, Burst: 1e9, EmailsPerHour: tt.perHour}, st, at("11:00:00"))
			tt.setup(d)
			s := d.Status(tt.at)
			if s.HourlyCount != tt.wantCount || s.HourlySent != tt.wantSent {
				t.Fatalf("status: hourly count %d, sent %d; want %d, %d", s.HourlyCount, s.HourlySent, tt.wantCount, tt.wantSent)
			}
			g, r := d.Grant(tt.at, tt.n)
			retry, why := r.Until, r.Text
			if g != tt.want || !retry.Equal(tt.wantRetry) {
				t.Fatalf("Grant(%d) = %d, retry %v (%q); want %d, retry %v", tt.n, g, retry, why, tt.want, tt.wantRetry)
			}
			if tt.wantWhy != "" && why != tt.wantWhy {
				t.Fatalf("reason %q; want %q", why, tt.wantWhy)
			}
			if g < tt.n && r.Limit != LimitHourly { // rate and ceiling are out of the way
				t.Fatalf("limit %q; want %q", r.Limit, LimitHourly)
			}
		})
	}
}

// TestHourlyWindowBounded: per-minute slots keep the state small however many
// sends and resets there are, and counting stays exact.
func TestHourlyWindowBounded(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		resets    bool
		wantSlots int
	}{
		{"sends every 10 s for 3 hours", false, 61},
		{"with a reset between every two sends", true, 122},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var w HourlyWindow
			t0 := dayAt(0, "09:00:00")
			var now time.Time
			for i := range 3 * 360 {
				now = t0.Add(time.Duration(i) * 10 * time.Second)
				w.Record(now, 1)
				if tt.resets {
					w.Reset(now.Add(5 * time.Second))
				}
				if len(w.Slots) > tt.wantSlots {
					t.Fatalf("at %v %d slots; want at most %d", now, len(w.Slots), tt.wantSlots)
				}
			}
			// The last send is at 11:59:50; the minutes 10:59 to 11:59 count
			// (10:59's ends after 10:59:50), six sends each.
			wantSent := 61 * 6
			if got := w.Sent(now); got != wantSent {
				t.Fatalf("sent in the last hour = %d; want %d", got, wantSent)
			}
			wantCount := wantSent
			if tt.resets {
				wantCount = 0 // every send precedes the last reset
			}
			if got := w.Count(now); got != wantCount {
				t.Fatalf("counted = %d; want %d", got, wantCount)
			}
		})
	}
}

// TestHourlyLateRecord: a send recorded with an earlier time than the newest
// slot (a late report) still counts, in the newest slot.
func TestHourlyLateRecord(t *testing.T) {
	t.Parallel()
	var w HourlyWindow
	w.Record(dayAt(0, "12:10:00"), 5)
	w.Record(dayAt(0, "12:05:00"), 3)
	if len(w.Slots) != 1 || w.Count(dayAt(0, "13:10:30")) != 8 || w.Count(dayAt(0, "13:11:00")) != 0 {
		t.Fatalf("slots %+v", w.Slots)
	}
}
