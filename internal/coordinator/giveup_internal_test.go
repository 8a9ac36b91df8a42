package coordinator

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/rangecast/rangecast/internal/bus"
	"github.com/rangecast/rangecast/internal/clock"
	"github.com/rangecast/rangecast/internal/governor"
	"github.com/rangecast/rangecast/internal/store"
)

// TestGiveUpReason: a held provider's recipients are given up once it has
// accepted nothing for GiveUpAfter since their broadcast started, and the
// reason is the same for every recipient of one run of refusals. A
// broadcast started during a long run gets the whole wait of its own.
func TestGiveUpReason(t *testing.T) {
	t.Parallel()
	now := time.Date(2031, 3, 14, 9, 0, 0, 0, time.UTC)
	g := &domainHost{giveUp: 24 * time.Hour}
	yahoo := func(since time.Time) governor.ProviderStatus {
		return governor.ProviderStatus{Provider: "yahoo", Phase: governor.PhaseOpen, RefusingSince: since}
	}
	for _, c := range []struct {
		name            string
		since, started  time.Time
		giveUp          bool
		wantSinceInText string
	}{
		{"not refusing", time.Time{}, now.Add(-48 * time.Hour), false, ""},
		{"refusing for 23h", now.Add(-23 * time.Hour), now.Add(-48 * time.Hour), false, ""},
		{"refusing for 24h", now.Add(-24 * time.Hour), now.Add(-48 * time.Hour), true, "2031-03-13 09:00"},
		{"refusing for 3 days, broadcast started 1h ago", now.Add(-72 * time.Hour), now.Add(-time.Hour), false, ""},
		{"refusing for 3 days, broadcast started 25h ago", now.Add(-72 * time.Hour), now.Add(-25 * time.Hour), true, "2031-03-13 08:00"},
	} {
		why := g.giveUpReason(now, yahoo(c.since), c.started)
		if (why != "") != c.giveUp {
			t.Errorf("%s: reason %q; want given up %v", c.name, why, c.giveUp)
			continue
		}
		if c.giveUp && (!strings.HasPrefix(why, store.GaveUpPrefix+"24h0m0s of refusals: yahoo") || !strings.Contains(why, c.wantSinceInText)) {
			t.Errorf("%s: reason %q; want it retryable (%q) and to say since %s", c.name, why, store.GaveUpPrefix, c.wantSinceInText)
		}
		if c.giveUp && why != g.giveUpReason(now.Add(time.Hour), yahoo(c.since), c.started) {
			t.Errorf("%s: the reason changes an hour later; one run of refusals gives one reason", c.name)
		}
	}
}

// TestPageJobHoldsFitAMessage: with thousands of small recipient domains
// held at once (a relay refusing a share of everything for minutes), a
// page job names as many as fit maxJobHoldBytes, the big providers among
// them, and still fits a NATS message, every one of them given up.
func TestPageJobHoldsFitAMessage(t *testing.T) {
	t.Parallel()
	now := time.Date(2031, 3, 14, 9, 0, 0, 0, time.UTC)
	clk := clock.NewFake(now)
	g := newDomainHost(context.Background(), newFakeKV(), GovernorConfig{GiveUpAfter: time.Hour}, clk, slog.New(slog.DiscardHandler))
	h, err := g.domain("example.com")
	if err != nil {
		t.Fatal(err)
	}
	const down = 5000
	for i := range down {
		h.d.HoldProvider(now.Add(-2*time.Hour), fmt.Sprintf("down-%05d.example", i), 3*time.Hour, "421 4.7.0 try again later", false)
	}
	h.d.HoldProvider(now.Add(-2*time.Hour), governor.ProviderYahoo, 3*time.Hour, "421 4.7.0 [TSS04]", false)
	got := g.Holds(now, "example.com", false, now.Add(-2*time.Hour))
	if len(got.Defer) < 1000 || len(got.Defer) == down+1 || len(got.GiveUp) != len(got.Defer) {
		t.Fatalf("a page names %d held and %d given up of %d; want over 1,000, not all, all held given up", len(got.Defer), len(got.GiveUp), down+1)
	}
	if _, ok := got.Defer[governor.ProviderYahoo]; !ok {
		t.Fatal("yahoo, a big provider, was left out of the page's holds")
	}
	job := bus.PageJob{Broadcast: ulid.Make().String(), Defer: got.Defer, GiveUp: got.GiveUp}
	if n := len(bus.Encode(job)); n > maxJobHoldBytes {
		t.Fatalf("a page job naming %d holds is %d bytes, over %d", len(got.Defer), n, maxJobHoldBytes)
	}
	t.Logf("a page job naming %d of %d held providers: %d bytes", len(got.Defer), down+1, len(bus.Encode(job)))
}
