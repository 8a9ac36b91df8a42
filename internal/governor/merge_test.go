package governor

import (
	"reflect"
	"testing"
	"time"
)

func TestMergeKeepsTheCautiousSide(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2031, 3, 14, 9, 0, 0, 0, time.UTC)
	oldLeader := DomainState{
		Domain: "example.com", Ceiling: 5_000, Day: "2031-03-14", SentToday: 2_900,
		Holds:    map[string]time.Time{"yahoo": t0.Add(time.Minute)},
		Breakers: map[string]BreakerState{"apple": {Failures: []time.Time{t0, t0}}},
		Hourly:   HourlyWindow{Slots: []HourSlot{{Start: t0, Count: 2_900}}},
	}
	newLeader := DomainState{
		Domain: "example.com", Ceiling: 1_500, Day: "2031-03-14", SentToday: 3_000, RejectedToday: true,
		Holds:    map[string]time.Time{"google": t0.Add(5 * time.Minute), "yahoo": t0.Add(30 * time.Second)},
		Breakers: map[string]BreakerState{"apple": {OpenUntil: t0.Add(30 * time.Second)}},
		Hourly:   HourlyWindow{Slots: []HourSlot{{Start: t0, Count: 3_000}}, ResetAt: t0.Add(-time.Minute)},
	}
	want := DomainState{
		Domain: "example.com", Ceiling: 1_500, Day: "2031-03-14", SentToday: 3_000, RejectedToday: true,
		Holds:    map[string]time.Time{"google": t0.Add(5 * time.Minute), "yahoo": t0.Add(time.Minute)},
		Breakers: map[string]BreakerState{"apple": {OpenUntil: t0.Add(30 * time.Second)}},
		Hourly:   HourlyWindow{Slots: []HourSlot{{Start: t0, Count: 3_000}}, ResetAt: t0.Add(-time.Minute)},
	}
	for _, got := range []DomainState{Merge(oldLeader, newLeader), Merge(newLeader, oldLeader)} {
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("Merge =\n%+v\nwant\n%+v", got, want)
		}
	}
	// A later day wins the day's counts; the ceiling stays the lower.
	tomorrow := DomainState{Domain: "example.com", Ceiling: 3_000, Day: "2031-03-15", SentToday: 10}
	got := Merge(newLeader, tomorrow)
	if got.Day != "2031-03-15" || got.SentToday != 10 || got.RejectedToday || got.Ceiling != 1_500 {
		t.Fatalf("Merge across midnight = day %s sent %d rejected %v ceiling %d", got.Day, got.SentToday, got.RejectedToday, got.Ceiling)
	}
}
