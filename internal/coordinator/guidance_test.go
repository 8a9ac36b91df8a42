package coordinator_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/emersion/go-smtp"
	"github.com/oklog/ulid/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rangecast/rangecast/internal/capture"
	"github.com/rangecast/rangecast/internal/clock"
	"github.com/rangecast/rangecast/internal/coordinator"
	"github.com/rangecast/rangecast/internal/governor"
	"github.com/rangecast/rangecast/internal/store"
	pb "github.com/rangecast/rangecast/proto/rangecast/v1"
)

// TestGmailRateLimitHoldsTenMinutesThenRampsBack runs the whole system
// against a server that answers Gmail's "421 4.7.28 … rate limited" to
// gmail recipients once 30 have been accepted. Google is held for 10
// minutes (the clock jumps them) while example.org and yahoo go on and the
// domain's ceiling stays; status says why. After the hold google comes back
// on one connection, one more per clean step, and every contact is sent
// exactly once with nobody failed.
func TestGmailRateLimitHoldsTenMinutesThenRampsBack(t *testing.T) {
	t.Parallel()
	clk := &clock.Jumping{}
	var limited atomic.Bool
	limited.Store(true)
	var gmailAccepted, refusals atomic.Int64
	// Gmail's sessions in flight, measured at RCPT (each held 25 ms), and
	// the most seen at once among the first sends after the hold.
	var mu sync.Mutex
	inflight, afterHold, maxEarly := 0, 0, 0
	var holdOver atomic.Bool
	s := newStack(t, stackOptions{workers: 2, concurrency: 8, pageLimit: 40, clock: clk,
		governor: &coordinator.GovernorConfig{Limits: governor.Limits{RatePerSecond: 1e6, Burst: 1_000_000}},
		sinkOpts: []capture.Option{capture.WithRcptHook(func(to string) *smtp.SMTPError {
			if !strings.HasSuffix(to, "@gmail.com") {
				return nil
			}
			if limited.Load() && gmailAccepted.Load() >= 30 {
				refusals.Add(1)
				return reply(421, smtp.EnhancedCode{4, 7, 28}, "Our system has detected an unusual rate of unsolicited mail originating from your IP address. To protect our users from spam, mail sent from your IP address has been temporarily rate limited. - gsmtp")
			}
			mu.Lock()
			inflight++
			if holdOver.Load() {
				afterHold++
				if afterHold <= 6 {
					maxEarly = max(maxEarly, inflight)
				}
			}
			mu.Unlock()
			time.Sleep(25 * time.Millisecond)
			mu.Lock()
			inflight--
			mu.Unlock()
			gmailAccepted.Add(1)
			return nil
		})},
	})
	s.withFastRetries(50)
	all, contacts := s.seedProviders(600)
	id := s.create("", 0)
	s.start(id)

	// Held, with the reply as the reason, for at least 10 minutes; the
	// ceiling is not lowered.
	var held *pb.ProviderStatus
	for deadline := time.Now().Add(30 * time.Second); held == nil; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("google not held after %d refusals: %v", refusals.Load(), s.pollDomain("rangecast.test"))
		}
		if d := s.pollDomain("rangecast.test"); d != nil {
			for _, p := range d.GetProviders() {
				if p.GetProvider() == governor.ProviderGoogle && p.GetPhase() == pb.ProviderPhase_PROVIDER_PHASE_HELD {
					held = p
				}
			}
		}
	}
	if held.GetReason() != "421 4.7.28" || held.GetUntil().AsTime().Before(clk.Now().Add(9*time.Minute)) {
		t.Fatalf("google held %v; want the reason 421 4.7.28 and about 10 minutes", held)
	}
	// Meanwhile the others go on and google gets nothing.
	gmailAtHold := countBy(s.sink.CountByRecipient(), "@gmail.com")
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		got := s.sink.CountByRecipient()
		if g := countBy(got, "@gmail.com"); g != gmailAtHold {
			t.Fatalf("%d gmail messages accepted while google was held (had %d)", g, gmailAtHold)
		}
		if countBy(got, "@yahoo.com")+countBy(got, "@example.org") == 400 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the other providers did not finish while google was held: %d of 400", countBy(got, "@yahoo.com")+countBy(got, "@example.org"))
		}
	}
	d := s.domainStatus("rangecast.test")
	if d.GetRejectedToday() || d.GetDailyCeiling() != governor.DefaultCeiling {
		t.Fatalf("after Gmail's rate limit: rejected today %v, ceiling %d; want the ceiling left at %d", d.GetRejectedToday(), d.GetDailyCeiling(), governor.DefaultCeiling)
	}
	w := s.status(id).GetProgress().GetWaitingFor()
	if !strings.Contains(w, "google: held until") || !strings.Contains(w, "(421 4.7.28)") {
		t.Fatalf("waiting_for = %q; want it to say google is held and why", w)
	}
	t.Logf("held: %s", w)

	// Ten minutes later, Gmail takes mail again: one connection, then one
	// more per clean step.
	limited.Store(false)
	holdOver.Store(true)
	clk.Jump(10*time.Minute + time.Second)
	var seen []int32
	b := s.status(id)
	for deadline := time.Now().Add(90 * time.Second); b.GetState() != pb.BroadcastState_BROADCAST_STATE_COMPLETED; b = s.status(id) {
		if time.Now().After(deadline) {
			t.Fatalf("not completed after the hold: %v; ramp seen %v", b, seen)
		}
		for _, p := range s.domainStatus("rangecast.test").GetProviders() {
			if p.GetProvider() == governor.ProviderGoogle && p.GetPhase() == pb.ProviderPhase_PROVIDER_PHASE_HALF_OPEN {
				if n := len(seen); n == 0 || seen[n-1] != p.GetConnections() {
					seen = append(seen, p.GetConnections())
				}
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.exactlyOnce(all)
	if b.GetProgress().GetFailed() != 0 {
		t.Fatalf("completed with %d failed", b.GetProgress().GetFailed())
	}
	if len(seen) < 3 || seen[0] != 1 {
		t.Fatalf("ramp seen %v; want it to start at one connection and grow", seen)
	}
	for i := 1; i < len(seen); i++ {
		if seen[i] != seen[i-1]+1 {
			t.Fatalf("ramp seen %v; want one connection more per step", seen)
		}
	}
	if maxEarly != 1 {
		t.Fatalf("the first gmail sends after the hold had %d in flight at once; want 1 (one connection)", maxEarly)
	}
	for _, c := range contacts {
		row, err := s.store.GetSend(context.Background(), ulid.MustParseStrict(id), c.ID)
		if err != nil {
			t.Fatal(err)
		}
		if row.Status != store.SendSent {
			t.Fatalf("%s: %s (%s); want sent", c.Email, row.Status, row.Error)
		}
	}
	t.Logf("%d refusals of 421 4.7.28; ramp %v; %d gmail sends after the hold", refusals.Load(), seen, afterHold)
}

// TestDeferredRowsDoNotWaitForATick: a recipient refused once at random is
// due again about a second later, and the broadcast's actor wakes for it
// even when nothing else is left to report back: with a tick of an hour
// the broadcast still completes, everyone sent exactly once.
func TestDeferredRowsDoNotWaitForATick(t *testing.T) {
	t.Parallel()
	var refused atomic.Int64
	s := newStack(t, stackOptions{workers: 2, concurrency: 4, pageLimit: 20,
		sinkOpts: []capture.Option{capture.WithRcptHook(func(to string) *smtp.SMTPError {
			if strings.HasSuffix(to, "@yahoo.com") && refused.Add(1) <= 3 {
				return reply(451, smtp.EnhancedCode{4, 3, 0}, "Temporary failure, please try again later")
			}
			return nil
		})},
	})
	s.stopCoord()
	s.coordCfg.Tick = time.Hour
	s.startCoordinator()
	all, _ := s.seedProviders(60)
	id := s.create("", 0)
	s.start(id)
	s.waitState(id, pb.BroadcastState_BROADCAST_STATE_COMPLETED, time.Minute)
	s.exactlyOnce(all)
	if refused.Load() < 3 {
		t.Fatalf("only %d refusals: the test did not defer anyone", refused.Load())
	}
}

// TestOperatorLiftsAProvidersHold: Gmail's 421 4.7.28 holds google for 10
// minutes; an operator who knows it is over lifts it (governor release).
// Google ramps back from one connection at once, the recipients deferred
// while it was held are due at once rather than at the hold's end (the
// clock never jumps here), and every contact is sent exactly once. Lifting
// a provider not held, or naming none, is refused.
func TestOperatorLiftsAProvidersHold(t *testing.T) {
	t.Parallel()
	clk := &clock.Jumping{}
	var limited atomic.Bool
	limited.Store(true)
	var gmailAccepted atomic.Int64
	s := newStack(t, stackOptions{workers: 2, concurrency: 8, pageLimit: 40, clock: clk,
		governor: &coordinator.GovernorConfig{Limits: governor.Limits{RatePerSecond: 1e6, Burst: 1_000_000}},
		sinkOpts: []capture.Option{capture.WithRcptHook(func(to string) *smtp.SMTPError {
			if !strings.HasSuffix(to, "@gmail.com") {
				return nil
			}
			if limited.Load() && gmailAccepted.Load() >= 30 {
				return reply(421, smtp.EnhancedCode{4, 7, 28}, "Our system has detected an unusual rate of unsolicited mail originating from your IP address. - gsmtp")
			}
			gmailAccepted.Add(1)
			return nil
		})},
	})
	s.withFastRetries(50)
	all, contacts := s.seedProviders(600)
	id := s.create("", 0)
	s.start(id)
	gc := s.governorClient()
	ctx := t.Context()
	if _, err := gc.ReleaseProvider(ctx, &pb.ReleaseProviderRequest{Domain: "rangecast.test"}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("release naming no provider: %v; want InvalidArgument", err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("google not held: %v", s.pollDomain("rangecast.test"))
		}
		held := false
		if d := s.pollDomain("rangecast.test"); d != nil {
			for _, p := range d.GetProviders() {
				held = held || p.GetProvider() == governor.ProviderGoogle && p.GetPhase() == pb.ProviderPhase_PROVIDER_PHASE_HELD
			}
		}
		if held {
			break
		}
	}
	if _, err := gc.ReleaseProvider(ctx, &pb.ReleaseProviderRequest{Domain: "rangecast.test", Provider: "yahoo"}); status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "not held") {
		t.Fatalf("release of a provider not held: %v; want FailedPrecondition saying so", err)
	}
	// Let the pages walk past the gmail recipients while google is held,
	// so some wait deferred until the hold's end.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		got := s.sink.CountByRecipient()
		if countBy(got, "@yahoo.com")+countBy(got, "@example.org") == 400 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the other providers did not finish while google was held")
		}
	}
	limited.Store(false)
	releasedAt := clk.Now()
	r, err := gc.ReleaseProvider(ctx, &pb.ReleaseProviderRequest{Domain: "rangecast.test", Provider: "gmail.com"})
	if err != nil {
		t.Fatal(err)
	}
	if r.GetProvider() != governor.ProviderGoogle || r.GetWas() != pb.ProviderPhase_PROVIDER_PHASE_HELD || r.GetDue() == 0 {
		t.Fatalf("release: %v; want google, held before, its held recipients made due", r)
	}
	for _, p := range r.GetDomain().GetProviders() {
		// Ramping back (the release waits for the workers to see it, and
		// a step or two may have gone meanwhile), not held.
		if p.GetProvider() == governor.ProviderGoogle && p.GetPhase() != pb.ProviderPhase_PROVIDER_PHASE_HALF_OPEN {
			t.Fatalf("google after the release: %v; want it ramping back up", p)
		}
	}
	b := s.status(id)
	for deadline := time.Now().Add(60 * time.Second); b.GetState() != pb.BroadcastState_BROADCAST_STATE_COMPLETED; b = s.status(id) {
		if time.Now().After(deadline) {
			for _, c := range contacts {
				if row, err := s.store.GetSend(context.Background(), ulid.MustParseStrict(id), c.ID); err == nil && row.Status == store.SendDeferred {
					t.Logf("DEBUG %s %s attempt %d updated %v owner %s (released at %v)", c.Email, row.Error, row.Attempt, row.UpdatedAt, row.Owner, releasedAt)
				}
			}
			t.Fatalf("not completed within a minute of the release (the hold had 10 to run): %v", b.GetProgress())
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.exactlyOnce(all)
	if b.GetProgress().GetFailed() != 0 {
		t.Fatalf("completed with %d failed", b.GetProgress().GetFailed())
	}
	t.Logf("released with %d held recipients made due", r.GetDue())
}
