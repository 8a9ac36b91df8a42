package governor

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// manyProviders is a domain that heard from many small recipient domains,
// as a list of them gives it: n that each deferred once, a few whose
// breakers tripped, one ramping back, Google held, and Microsoft deferring.
func manyProviders(now time.Time, n int) *Domain {
	d := NewDomain("example.com", Limits{}, nil, now.Add(-time.Hour))
	for i := range n {
		d.RecordTransientReply(now, fmt.Sprintf("small-%05d.example", i), "450 4.7.1 greylisted")
	}
	for _, p := range []string{"down-a.example", "down-b.example", "ramping.example"} {
		for range BreakerFailures {
			d.RecordTransientReply(now.Add(-2*time.Minute), p, "451 4.3.0 try later")
		}
	}
	d.ProviderOpen(now, "ramping.example") // its breaker has been open 30 s: half-open
	for range BreakerFailures {
		d.RecordTransientReply(now, "down-a.example", "451 4.3.0 try later") // open again
		d.RecordTransientReply(now, "down-b.example", "451 4.3.0 try later")
	}
	d.HoldProvider(now, ProviderGoogle, time.Hour, "421 4.7.28", true)
	d.RecordTransientReply(now, "outlook.com", "451 4.7.500 busy")
	d.RecordTransientReply(now, "outlook.com", "451 4.7.500 busy")
	return d
}

// TestRankedKeepsWhatMattersFirst: held and open providers come first, then
// ramping ones, then closed ones with the big providers before small domains,
// and Keeping keeps a prefix and counts the rest.
func TestRankedKeepsWhatMattersFirst(t *testing.T) {
	t.Parallel()
	now := dayAt(0, "12:00:00")
	st := manyProviders(now, 50).State()
	ranked := st.Ranked(now)
	if len(ranked) != 50+3+2 {
		t.Fatalf("ranked %d providers; want 55", len(ranked))
	}
	want := []string{ProviderGoogle, "down-a.example", "down-b.example", "ramping.example", ProviderMicrosoft, "small-00000.example"}
	if got := ranked[:len(want)]; !slices.Equal(got, want) {
		t.Fatalf("ranked begins %v; want %v", got, want)
	}
	kept, left := st.Keeping(ranked, 4)
	if left != 51 || len(kept.Breakers) != 4 || len(st.Breakers) != 55 {
		t.Fatalf("keeping 4 of 55: %d breakers kept, %d left out (the state itself now has %d)", len(kept.Breakers), left, len(st.Breakers))
	}
	if _, ok := kept.Breakers["ramping.example"]; !ok {
		t.Fatal("the ramping provider was not kept")
	}
	if all, left := st.Keeping(ranked, 100); left != 0 || len(all.Breakers) != 55 {
		t.Fatalf("keeping more than there are left out %d", left)
	}
}

// TestSummarizeSlowingIsOneLine: however many providers defer, the summary
// names the few that matter and counts the rest.
func TestSummarizeSlowingIsOneLine(t *testing.T) {
	t.Parallel()
	now := dayAt(0, "12:00:00")
	s := manyProviders(now, 20_000).Status(now)
	if len(s.Providers) != 20_005 {
		t.Fatalf("status lists %d providers; want all 20,005", len(s.Providers))
	}
	got := s.Slowing
	if !strings.HasPrefix(got, "google: held until") || !strings.Contains(got, "down-a.example: breaker open") ||
		!strings.HasSuffix(got, "; 20,000 more providers deferring or held (see governor status)") {
		t.Fatalf("summary = %q", got)
	}
	if len(got) > 1000 || !strings.Contains(s.Waiting, got) {
		t.Fatalf("summary is %d bytes; waiting = %q", len(got), s.Waiting)
	}
	// Brief says the same with the first few providers only.
	b := manyProviders(now, 20_000).Brief(now, 20)
	ranked := RankSlowing(s.Providers)
	if b.Slowing != got || b.Waiting != s.Waiting || b.ProvidersSlowing != len(ranked) || s.ProvidersSlowing != len(ranked) || len(b.Providers) != 20 {
		t.Fatalf("Brief: %d slowing, %d listed, summary %q; want %d, 20, the Status's", b.ProvidersSlowing, len(b.Providers), b.Slowing, len(ranked))
	}
	for i, p := range b.Providers {
		if p != ranked[i] {
			t.Fatalf("Brief's provider %d = %+v; want %+v", i, p, ranked[i])
		}
	}
}

// TestTidyDropsOtherProvidersWithinASecond: tidying every provider on every
// outcome cost milliseconds per refusal with tens of thousands of them; now
// the touched provider is tidied at once and the others within tidyEvery.
func TestTidyDropsOtherProvidersWithinASecond(t *testing.T) {
	t.Parallel()
	now := dayAt(0, "12:00:00")
	d := NewDomain("example.com", Limits{}, nil, now)
	d.RecordTransient(now, "old.example")
	later := now.Add(BreakerWindow + time.Minute)
	d.RecordTransient(later, "new.example")
	if _, ok := d.State().Breakers["old.example"]; ok {
		t.Fatal("a breaker idle for longer than its window survived the first outcome after tidyEvery")
	}
	d.RecordTransient(later.Add(BreakerWindow+time.Minute), "new.example")
	if _, ok := d.State().Breakers["new.example"]; !ok {
		t.Fatal("the touched provider's fresh failure was dropped")
	}
}

// BenchmarkRecordTransientManyProviders: one refusal's cost to a domain that
// holds a breaker for each of 20,000 small recipient domains.
func BenchmarkRecordTransientManyProviders(b *testing.B) {
	now := dayAt(0, "12:00:00")
	d := manyProviders(now, 20_000)
	b.ResetTimer()
	for i := range b.N {
		d.RecordTransientReply(now, fmt.Sprintf("small-%05d.example", i%20_000), "450 4.7.1 greylisted")
	}
}

// TestHoldingIsStatusNotClosed: Holding lists exactly the providers Status
// shows held, open or ramping, by name.
func TestHoldingIsStatusNotClosed(t *testing.T) {
	t.Parallel()
	now := dayAt(0, "12:00:00")
	d := manyProviders(now, 100)
	d.RecordQuotaRejection(now, "down-b.example") // held and open at once
	var want []ProviderStatus
	for _, p := range d.Status(now).Providers {
		if p.Phase != PhaseClosed {
			want = append(want, p)
		}
	}
	got := d.Holding(now)
	if len(got) != 4 || !slices.EqualFunc(got, want, func(a, b ProviderStatus) bool {
		return a.Provider == b.Provider && a.Phase == b.Phase && a.Until.Equal(b.Until)
	}) {
		t.Fatalf("Holding = %+v; want %+v", got, want)
	}
}

// TestHoldingAtAHoldsEnd: a quota hold that ended within the last second,
// before any tidy of every provider, is not a hold: the provider ramps back
// (half-open), and a page defers it while a sweep carries the step.
func TestHoldingAtAHoldsEnd(t *testing.T) {
	t.Parallel()
	t0 := dayAt(0, "12:00:00")
	d := NewDomain("example.com", Limits{}, nil, t0)
	d.RecordQuotaRejection(t0, "gmail.com")
	end := d.State().Holds[ProviderGoogle]
	if end.IsZero() {
		t.Fatal("no hold after a quota rejection")
	}
	d.RecordTransient(end.Add(-500*time.Millisecond), "other.example") // tidies everyone
	got := d.Holding(end.Add(100 * time.Millisecond))
	if len(got) != 1 || got[0].Provider != ProviderGoogle || got[0].Phase != PhaseHalfOpen {
		t.Fatalf("Holding just after the hold = %+v; want google half-open", got)
	}
}

// BenchmarkRecordSuccessManyProviders: one accepted send's cost to a
// domain that sent to 20,000 small recipient domains in the last minutes,
// none of which refused.
func BenchmarkRecordSuccessManyProviders(b *testing.B) {
	now := dayAt(0, "12:00:00")
	d := NewDomain("example.com", Limits{}, nil, now)
	for i := range 20_000 {
		d.RecordSuccess(now, fmt.Sprintf("small-%05d.example", i), 1)
	}
	b.ResetTimer()
	for i := range b.N {
		d.RecordSuccess(now, fmt.Sprintf("small-%05d.example", i%20_000), 1)
	}
}

// BenchmarkReadManyProviders: what a domain holding a breaker for each of
// 20,000 small recipient domains costs to read: Status (governor status),
// Brief (metrics, once a second, and status lines) and Holding (each page
// dispatch).
func BenchmarkReadManyProviders(b *testing.B) {
	now := dayAt(0, "12:00:00")
	d := manyProviders(now, 20_000)
	for name, read := range map[string]func(){
		"Status":  func() { d.Status(now) },
		"Brief":   func() { d.Brief(now, 20) },
		"Holding": func() { d.Holding(now) },
	} {
		b.Run(name, func(b *testing.B) {
			for range b.N {
				read()
			}
		})
	}
}
