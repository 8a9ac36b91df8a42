package govstate_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rangecast/rangecast/internal/bus"
	"github.com/rangecast/rangecast/internal/governor"
	"github.com/rangecast/rangecast/internal/govstate"
	"github.com/rangecast/rangecast/internal/testenv"
)

func setup(t *testing.T) (*bus.Bus, *govstate.KV) {
	t.Helper()
	_, js := testenv.NATS(t)
	b, err := bus.Setup(context.Background(), js, bus.Options{Memory: true})
	if err != nil {
		t.Fatal(err)
	}
	return b, govstate.New(b.Governors)
}

// TestStateRoundTrip: learned state and hourly windows written are read
// back; domains with state are listed; what nobody wrote reads as nothing.
func TestStateRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, kv := setup(t)
	now := time.Now().UTC()
	if st, rev, err := kv.State(ctx, "example.com"); err != nil || st != nil || rev != 0 {
		t.Fatalf("State of a new domain = %v, %d, %v; want none", st, rev, err)
	}
	if l, err := kv.Limits(ctx, "example.com"); err != nil || l != nil {
		t.Fatalf("Limits of a new domain = %v, %v; want none", l, err)
	}
	for _, name := range []string{"b.example", "a.example"} {
		d := governor.NewDomain(name, governor.Limits{}, nil, now)
		d.Count(now, 7)
		if _, _, err := kv.WriteState(ctx, d, 0, now); err != nil {
			t.Fatal(err)
		}
	}
	st, rev, err := kv.State(ctx, "a.example")
	if err != nil || st == nil || st.SentToday != 7 || rev == 0 {
		t.Fatalf("State after a write = %+v, %d, %v; want 7 sent today", st, rev, err)
	}
	// A second writer at a stale revision merges instead of losing the count.
	d := governor.NewDomain("a.example", governor.Limits{}, nil, now)
	d.Count(now, 3)
	if _, _, err := kv.WriteState(ctx, d, rev-1, now); err != nil {
		t.Fatal(err)
	}
	if st, _, _ := kv.State(ctx, "a.example"); st.SentToday < 7 {
		t.Fatalf("a write at a stale revision lost the stored count: %+v", st)
	}
	if names, err := kv.Domains(ctx); err != nil || !slices.Equal(names, []string{"a.example", "b.example"}) {
		t.Fatalf("Domains = %v, %v", names, err)
	}
	srv := governor.NewServer("relay", 100, governor.HourlyWindow{})
	if _, err := kv.WriteHourly(ctx, srv, 0); err != nil {
		t.Fatal(err)
	}
	if _, rev, err := kv.Hourly(ctx, "relay"); err != nil || rev == 0 {
		t.Fatalf("Hourly after a write: rev %d, %v", rev, err)
	}
}

// TestWatchFollowsOperatorChanges: limits and resets written through any
// coordinator reach the watch as typed changes.
func TestWatchFollowsOperatorChanges(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, kv := setup(t)
	changes, err := kv.Watch(ctx, func(key string, err error) { t.Errorf("malformed %s: %v", key, err) })
	if err != nil {
		t.Fatal(err)
	}
	next := func() govstate.Change {
		t.Helper()
		select {
		case ch := <-changes:
			return ch
		case <-time.After(5 * time.Second):
			t.Fatal("no change seen within 5s")
			return govstate.Change{}
		}
	}
	// The watch's consumer may go live a moment after Watch returns: write
	// a reset until one is seen, then every later write must be.
	for {
		if _, err := kv.PutReset(ctx, "warm-up", time.Now()); err != nil {
			t.Fatal(err)
		}
		select {
		case ch := <-changes:
			if ch.Server != "warm-up" {
				t.Fatalf("warm-up change %+v", ch)
			}
		case <-time.After(50 * time.Millisecond):
			continue
		}
		break
	}
	for len(changes) > 0 {
		<-changes
	}
	set, err := kv.ChangeLimits(ctx, "example.com", func(l *govstate.Limits) { l.Burst = 9 })
	if err != nil || set.Domain != "example.com" || set.Limits.Burst != 9 {
		t.Fatalf("ChangeLimits = %+v, %v", set, err)
	}
	if ch := next(); ch.Domain != "example.com" || ch.Limits == nil || ch.Limits.Burst != 9 || ch.Limits.RatePerSecond != 0 {
		t.Fatalf("first change %+v; want burst 9", ch)
	}
	if _, err := kv.ChangeLimits(ctx, "example.com", func(l *govstate.Limits) { l.RatePerSecond = 2 }); err != nil {
		t.Fatal(err)
	}
	if ch := next(); ch.Limits == nil || ch.Limits.Burst != 9 || ch.Limits.RatePerSecond != 2 {
		t.Fatalf("second change %+v; want burst 9 kept and rate 2", ch)
	}
	at := time.Now().UTC().Truncate(time.Second)
	if _, err := kv.PutReset(ctx, "relay", at); err != nil {
		t.Fatal(err)
	}
	if ch := next(); ch.Server != "relay" || ch.Reset == nil || !ch.Reset.At.Equal(at) {
		t.Fatalf("third change %+v; want the reset of relay at %v", ch, at)
	}
	l, _ := kv.Limits(ctx, "example.com")
	if got := l.Over(governor.Limits{RatePerSecond: 50, Burst: 200, EmailsPerHour: 10}); got.RatePerSecond != 2 || got.Burst != 9 || got.EmailsPerHour != 10 {
		t.Fatalf("limits over the defaults = %+v", got)
	}
}

// TestManySmallDomainsStoreWhatMatters: a list of many small recipient
// domains, each of which deferred once (greylisting), gives the sending
// domain a breaker each, megabytes of them, more than NATS takes in one
// message. The state is still stored, within StateBudget, and keeps every
// provider whose recipients must not be sent to: page workers read the held
// ones from it.
func TestManySmallDomainsStoreWhatMatters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, kv := setup(t)
	now := time.Now().UTC()
	d := governor.NewDomain("example.com", governor.Limits{}, nil, now)
	const greylisting, tripped = 20_000, 300
	for i := range greylisting {
		d.RecordTransientReply(now, fmt.Sprintf("small-%05d.example", i), "450 4.7.1 <someone>: Recipient address rejected: Greylisted, see http://postgrey.schweikert.ch/help/example.html")
	}
	for i := range tripped {
		for range governor.BreakerFailures {
			d.RecordTransientReply(now, fmt.Sprintf("down-%03d.example", i), "451 4.3.0 Temporary lookup failure")
		}
	}
	d.HoldProvider(now, governor.ProviderGoogle, time.Hour, "421 4.7.28 rate limited", true)
	d.RecordTransientReply(now, governor.ProviderMicrosoft, "451 4.7.500 Server busy")

	rev, leftOut, err := kv.WriteState(ctx, d, 0, now)
	if err != nil {
		t.Fatalf("WriteState with %d providers: %v", greylisting+tripped+2, err)
	}
	e, err := b.Governors.Get(ctx, "state.example.com")
	if err != nil {
		t.Fatal(err)
	}
	if len(e.Value()) > govstate.StateBudget {
		t.Fatalf("stored state is %d bytes, over the budget of %d", len(e.Value()), govstate.StateBudget)
	}
	st, _, err := kv.State(ctx, "example.com")
	if err != nil {
		t.Fatal(err)
	}
	if got := len(st.Breakers); leftOut == 0 || got+leftOut != greylisting+tripped+2 {
		t.Fatalf("stored %d breakers and left out %d; want them to add up to %d, some left out", got, leftOut, greylisting+tripped+2)
	}
	if _, ok := st.Breakers[governor.ProviderMicrosoft]; !ok {
		t.Error("a big provider's closed breaker was left out before small domains'")
	}
	held, err := govstate.NewView(b.Governors).Held(ctx, "example.com", now)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := held[governor.ProviderGoogle]; !ok || len(held) != tripped+1 {
		t.Fatalf("page workers see %d held providers (google held: %v); want all %d", len(held), ok, tripped+1)
	}
	// A writer at a stale revision merges what is stored and stays within
	// the budget too.
	d2 := governor.NewDomain("example.com", governor.Limits{}, nil, now)
	d2.RecordTransientReply(now, "late.example", "450 4.2.0 try later")
	if _, _, err := kv.WriteState(ctx, d2, rev-1, now); err != nil {
		t.Fatalf("merging write: %v", err)
	}
	if held, _ := govstate.NewView(b.Governors).Held(ctx, "example.com", now); len(held) != tripped+1 {
		t.Fatalf("after a merging write page workers see %d held providers; want %d", len(held), tripped+1)
	}
}

// TestBoundedStateKeepsTheLeadersMemory: a write that loses a race to
// another merges the stored record in; providers the record left out for
// want of room are not taken as forgotten by the other writer, so the
// leader keeps remembering them (here, runs of refusals that count towards
// giving recipients up).
func TestBoundedStateKeepsTheLeadersMemory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, kv := setup(t)
	now := time.Now().UTC()
	st := governor.DomainState{Breakers: map[string]governor.BreakerState{}}
	for i := range 50 {
		st.Breakers[fmt.Sprintf("dead-%02d.example", i)] = governor.BreakerState{RefusingSince: now.Add(-time.Hour)}
	}
	d := governor.NewDomain("example.com", governor.Limits{}, &st, now)
	for i := range 20_000 {
		d.RecordTransientReply(now, fmt.Sprintf("small-%05d.example", i), "450 4.7.1 greylisted")
	}
	rev, leftOut, err := kv.WriteState(ctx, d, 0, now)
	if err != nil || leftOut == 0 {
		t.Fatalf("first write: left out %d, %v; want some left out", leftOut, err)
	}
	if _, _, err := kv.WriteState(ctx, d, rev-1, now); err != nil { // as if another write came between
		t.Fatal(err)
	}
	remembered := 0
	for p := range d.State().Breakers {
		if strings.HasPrefix(p, "dead-") {
			remembered++
		}
	}
	if remembered != 50 {
		t.Fatalf("after a merging write the leader remembers %d of 50 runs of refusals", remembered)
	}
}
