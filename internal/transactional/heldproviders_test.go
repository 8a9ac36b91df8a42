package transactional_test

import (
	"context"
	"testing"
	"time"

	"github.com/rangecast/rangecast/internal/bus"
	"github.com/rangecast/rangecast/internal/governor"
	"github.com/rangecast/rangecast/internal/govstate"
	"github.com/rangecast/rangecast/internal/testenv"
	"github.com/rangecast/rangecast/internal/transactional"
	"github.com/rangecast/rangecast/internal/transport"
)

// TestHeldProvidersHoldWhatTheLeaderHolds: a worker holds back transactional
// mail to a provider the leader's governor holds (read from KV), lets the
// rest through whatever the ceiling, and reports outcomes to the leader.
func TestHeldProvidersHoldWhatTheLeaderHolds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, js := testenv.NATS(t)
	b, err := bus.Setup(ctx, js, bus.Options{Memory: true})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	st := governor.DomainState{Domain: "example.com", Ceiling: 100, Day: now.Format(time.DateOnly), SentToday: 100,
		Holds: map[string]time.Time{governor.ProviderGoogle: now.Add(time.Minute)}}
	if _, _, err := govstate.New(b.Governors).WriteState(ctx, governor.NewDomain("example.com", governor.Limits{}, &st, now), 0, now); err != nil {
		t.Fatal(err)
	}
	g := transactional.NewHeldProviders(b, testLogger())
	held, err := g.Admit(ctx, "Example.com", "someone@googlemail.com", now)
	if err != nil || !held.Until.Equal(st.Holds[governor.ProviderGoogle]) || held.Limit != governor.LimitHeld || held.Text == "" {
		t.Fatalf("Admit to a held provider = %+v, %v; want held until %v", held, err, st.Holds[governor.ProviderGoogle])
	}
	if held, err := g.Admit(ctx, "example.com", "someone@example.org", now); err != nil || !held.Until.IsZero() {
		t.Fatalf("Admit at the daily ceiling to a provider not held = %+v, %v; transactional mail is not refused for the ceiling", held, err)
	}
	if held, err := g.Admit(ctx, "never-sent.example", "someone@gmail.com", now); err != nil || !held.Until.IsZero() {
		t.Fatalf("Admit for a domain with no state = %+v, %v; want admitted", held, err)
	}

	g.Observe("example.com", "someone@example.org", nil, now)
	g.Observe("example.com", "someone@yahoo.com", &transport.SendError{Stage: transport.StageRcpt, Code: 451, Enhanced: "4.3.0", Text: "try later"}, now)
	g.Observe("example.com", "someone@gmail.com", &transport.SendError{Stage: transport.StageRcpt, Code: 421, Enhanced: "4.7.28", Text: "rate limited - gsmtp"}, now)
	var got []bus.Usage
	for _, seq := range []uint64{1, 2, 3} {
		m, err := b.JS.Stream(ctx, bus.ReportStream)
		if err != nil {
			t.Fatal(err)
		}
		raw, err := m.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		if raw.Subject != bus.UsageSubject {
			t.Fatalf("usage published on %s, want %s", raw.Subject, bus.UsageSubject)
		}
		var u bus.Usage
		if err := bus.Decode(raw.Data, &u); err != nil {
			t.Fatal(err)
		}
		got = append(got, u)
	}
	if got[0].Sent != 1 || got[0].Providers["example.org"].Sent != 1 || got[1].Sent != 0 || got[1].Providers[governor.ProviderYahoo].Transient != 1 {
		t.Fatalf("usage reports %+v; want one sent to example.org, one transient failure at yahoo", got)
	}
	// Gmail's 421 4.7.28 is the provider's own pause, as for a page.
	if r := got[2].Providers[governor.ProviderGoogle]; r.Hold < 10*time.Minute || !r.Linear || r.Quota || r.Reply != "421 4.7.28" {
		t.Fatalf("usage for a 421 4.7.28: %+v; want a 10-minute hold, ramped back one connection at a time, no quota", r)
	}
}
