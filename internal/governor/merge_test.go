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

// TestMergeDropsARefusalOneSideForgot: a run of refusals remembered past
// its ramp (BreakerState.tidied) by one version only may have been ended
// by an accepted send the other saw; merged back, the next trip would give
// the provider's recipients up at once. Dropped, the count starts again.
func TestMergeDropsARefusalOneSideForgot(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2031, 3, 14, 9, 0, 0, 0, time.UTC)
	remembers := DomainState{Domain: "example.com", Breakers: map[string]BreakerState{
		"yahoo": {RefusingSince: t0}, "apple": {OpenUntil: t0.Add(time.Minute), RefusingSince: t0}}}
	forgot := DomainState{Domain: "example.com"}
	for _, got := range []DomainState{Merge(remembers, forgot), Merge(forgot, remembers)} {
		if _, ok := got.Breakers["yahoo"]; ok {
			t.Fatalf("merged breakers %+v; want yahoo's remembered refusal dropped", got.Breakers)
		}
		if b := got.Breakers["apple"]; !b.RefusingSince.Equal(t0) {
			t.Fatalf("merged breakers %+v; want apple's open breaker kept whole", got.Breakers)
		}
	}
	if got := Merge(remembers, remembers); !got.Breakers["yahoo"].RefusingSince.Equal(t0) {
		t.Fatalf("both remember: merged %+v; want yahoo's refusal kept", got.Breakers)
	}
}
