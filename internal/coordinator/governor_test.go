package coordinator_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/emersion/go-smtp"
	"github.com/oklog/ulid/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/rangecast/rangecast/internal/capture"
	"github.com/rangecast/rangecast/internal/clock"
	"github.com/rangecast/rangecast/internal/coordinator"
	"github.com/rangecast/rangecast/internal/governor"
	"github.com/rangecast/rangecast/internal/store"
	"github.com/rangecast/rangecast/internal/transactional"
	"github.com/rangecast/rangecast/internal/transport"
	pb "github.com/rangecast/rangecast/proto/rangecast/v1"
)

// seedProviders imports n subscribed contacts whose addresses cycle through
// gmail.com, example.org and yahoo.com, ids in that order. It returns every
// address and the contacts.
func (s *stack) seedProviders(n int) (map[string]bool, []store.Contact) {
	s.t.Helper()
	ctx := context.Background()
	now := time.Now()
	entropy := ulid.Monotonic(rand.Reader, 0)
	domains := []string{"gmail.com", "example.org", "yahoo.com"}
	all := map[string]bool{}
	var cs []store.Contact
	for i := range n {
		email := fmt.Sprintf("user%05d@%s", i, domains[i%3])
		cs = append(cs, store.Contact{
			ID:    ulid.MustNew(ulid.Timestamp(now.Add(time.Duration(i-n)*time.Minute)), entropy),
			Email: email, Name: fmt.Sprintf("User %d", i), Subscribed: true,
			Attributes: map[string]any{"plan": "free"},
		})
		all[email] = true
	}
	if _, err := s.store.ImportContacts(ctx, cs, now); err != nil {
		s.t.Fatal(err)
	}
	return all, cs
}

// tryLater is the 451 these tests' sinks defer a recipient with.
func tryLater() *smtp.SMTPError {
	return reply(451, smtp.EnhancedCode{4, 3, 0}, "Temporary failure, please try again later")
}

// refuseYahoo is a sink that defers every yahoo recipient while refusing
// says so (nil: always), calling each on the address refused.
func refuseYahoo(refusing func() bool, each func(to string)) capture.Option {
	return capture.WithRcptHook(func(to string) *smtp.SMTPError {
		if !strings.HasSuffix(to, "@yahoo.com") || (refusing != nil && !refusing()) {
			return nil
		}
		if each != nil {
			each(to)
		}
		return tryLater()
	})
}

func (s *stack) governorClient() pb.GovernorServiceClient { return pb.NewGovernorServiceClient(s.conn) }

func (s *stack) domainStatus(domain string) *pb.DomainStatus {
	s.t.Helper()
	r, err := s.governorClient().GetDomain(context.Background(), &pb.GetDomainRequest{Domain: domain})
	if err != nil {
		s.t.Fatalf("GetDomain(%s): %v", domain, err)
	}
	return r.GetDomain()
}

// pollDomain is domainStatus for polling loops: nil until the domain has
// state.
func (s *stack) pollDomain(domain string) *pb.DomainStatus {
	r, err := s.governorClient().GetDomain(context.Background(), &pb.GetDomainRequest{Domain: domain})
	if status.Code(err) == codes.NotFound {
		return nil
	}
	if err != nil {
		s.t.Fatalf("GetDomain(%s): %v", domain, err)
	}
	return r.GetDomain()
}

func providerPhase(d *pb.DomainStatus, provider string) pb.ProviderPhase {
	for _, p := range d.GetProviders() {
		if p.GetProvider() == provider {
			return p.GetPhase()
		}
	}
	return pb.ProviderPhase_PROVIDER_PHASE_CLOSED
}

// countBy counts received messages to addresses with the given suffix.
func countBy(got map[string]int, suffix string) int {
	n := 0
	for email, k := range got {
		if strings.HasSuffix(email, suffix) {
			n += k
		}
	}
	return n
}

// TestGovernorQuotaRejection runs the whole system, on a clock set just
// before a UTC midnight, against an SMTP server that answers 452 4.5.3 for
// gmail addresses once 70 % of the audience has been accepted, until its day
// ends. The ceiling halves (below what was sent, so the domain waits for
// midnight and says so), google is held; after midnight the others keep
// going while google's recipients are deferred; when the hold ends the sweep
// sends them, each once, and the broadcast completes.
func TestGovernorQuotaRejection(t *testing.T) {
	t.Parallel()
	start := time.Date(2031, 3, 14, 23, 59, 45, 0, time.UTC)
	midnight := time.Date(2031, 3, 15, 0, 0, 0, 0, time.UTC)
	clk := clock.OffsetTo(start)
	const n, threshold = 600, 420
	var accepted, rejected atomic.Int64
	s := newStack(t, stackOptions{workers: 2, concurrency: 8, pageLimit: 40, clock: clk,
		governor: &coordinator.GovernorConfig{Limits: governor.Limits{RatePerSecond: 1e6, Burst: 1_000_000, QuotaHold: 25 * time.Second}},
		sinkOpts: []capture.Option{capture.WithRcptHook(func(to string) *smtp.SMTPError {
			if strings.HasSuffix(to, "@gmail.com") && accepted.Load() >= threshold && clk.Now().Before(midnight) {
				rejected.Add(1)
				return reply(452, smtp.EnhancedCode{4, 5, 3}, "Your message was rate limited: too many messages sent today")
			}
			accepted.Add(1)
			return nil
		})},
	})
	s.withFastRetries(50)
	all, contacts := s.seedProviders(n)
	id := s.create("", 0)
	s.start(id)

	// Before midnight: the rejection lowered the ceiling below what was
	// sent, google is held, and the broadcast says what it waits for.
	var atRejection *pb.DomainStatus
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no quota rejection took effect; rejected %d, status %v", rejected.Load(), s.pollDomain("rangecast.test"))
		}
		if rejected.Load() == 0 {
			continue
		}
		d := s.pollDomain("rangecast.test")
		if d.GetRejectedToday() && providerPhase(d, governor.ProviderGoogle) == pb.ProviderPhase_PROVIDER_PHASE_HELD &&
			strings.Contains(s.status(id).GetProgress().GetWaitingFor(), "daily ceiling of") {
			atRejection = d
			break
		}
	}
	if !clk.Now().Before(midnight) {
		t.Fatalf("the rejection took effect only at %v, after midnight; the machine is too slow for this test's timeline", clk.Now())
	}
	ceiling := atRejection.GetDailyCeiling()
	if ceiling < governor.MinCeiling || ceiling > atRejection.GetSentToday()/2+1 || ceiling >= governor.DefaultCeiling {
		t.Fatalf("ceiling %d after a rejection at %d sent today; want max(100, sent/2)", ceiling, atRejection.GetSentToday())
	}
	w := s.status(id).GetProgress().GetWaitingFor()
	if want := fmt.Sprintf("daily ceiling of %s for rangecast.test reached; resumes 00:00 UTC", governor.Thousands(int(ceiling))); !strings.Contains(w, want) {
		t.Fatalf("waiting_for = %q; want it to say %q", w, want)
	}
	t.Logf("quota rejection at %d sent: ceiling %d, google held until %v", atRejection.GetSentToday(), ceiling,
		atRejection.GetProviders()[0].GetUntil().AsTime())

	// After midnight and before google's hold ends: the others go on,
	// google's recipients are deferred, none of them sent.
	for clk.Now().Before(midnight) {
		time.Sleep(20 * time.Millisecond)
	}
	holdEnd := atRejection.GetProviders()[0].GetUntil().AsTime()
	gmailAtMidnight := countBy(s.sink.CountByRecipient(), "@gmail.com")
	sawDeferred, sawOthers := false, false
	for clk.Now().Before(holdEnd.Add(-time.Second)) {
		got := s.sink.CountByRecipient()
		if g := countBy(got, "@gmail.com"); g != gmailAtMidnight {
			t.Fatalf("%d gmail messages sent while google was held (had %d at midnight)", g, gmailAtMidnight)
		}
		c, err := s.store.Counts(context.Background(), ulid.MustParseStrict(id))
		if err != nil {
			t.Fatal(err)
		}
		sawDeferred = sawDeferred || c.Deferred > 0
		sawOthers = sawOthers || countBy(got, "@yahoo.com")+countBy(got, "@example.org") == 2*n/3
		time.Sleep(50 * time.Millisecond)
	}
	if !sawDeferred || !sawOthers {
		t.Fatalf("while google was held after midnight: deferred rows seen %v, every other provider's recipient sent %v; want both", sawDeferred, sawOthers)
	}

	// The sweep sends google's deferred recipients once the hold ends.
	b := s.waitState(id, pb.BroadcastState_BROADCAST_STATE_COMPLETED, time.Minute)
	s.exactlyOnce(all)
	if b.GetProgress().GetDeferred() != 0 {
		t.Fatalf("completed with %d deferred", b.GetProgress().GetDeferred())
	}
	d := s.domainStatus("rangecast.test")
	if d.GetDay() != "2031-03-15" || d.GetDailyCeiling() != ceiling || d.GetRejectedToday() {
		t.Fatalf("after midnight: day %s, ceiling %d (want %d: a rejected day never doubles), rejected today %v",
			d.GetDay(), d.GetDailyCeiling(), ceiling, d.GetRejectedToday())
	}
	// Every message is in the ledger as sent; google's deferred ones were
	// sent by the sweep, on their second attempt.
	swept := 0
	for _, c := range contacts {
		row, err := s.store.GetSend(context.Background(), ulid.MustParseStrict(id), c.ID)
		if err != nil {
			t.Fatal(err)
		}
		if row.Status != store.SendSent {
			t.Fatalf("%s: ledger status %s, want sent", c.Email, row.Status)
		}
		if row.Attempt > 1 {
			if !strings.HasSuffix(c.Email, "@gmail.com") {
				t.Fatalf("%s was swept (attempt %d); only google was held", c.Email, row.Attempt)
			}
			swept++
		}
	}
	if swept == 0 {
		t.Fatal("no deferred gmail recipient was sent by the sweep")
	}
	t.Logf("%d gmail recipients deferred and swept after the hold", swept)
}

// TestGovernorStateSurvivesRestart: the ceiling, today's count, a held
// provider and a breaker's failures are in KV; a new coordinator finds them.
func TestGovernorStateSurvivesRestart(t *testing.T) {
	t.Parallel()
	var gmailAccepted atomic.Int64
	s := newStack(t, stackOptions{workers: 1, concurrency: 4, pageLimit: 20,
		governor: &coordinator.GovernorConfig{Limits: governor.Limits{RatePerSecond: 1e6, Burst: 1_000_000}},
		sinkOpts: []capture.Option{capture.WithRcptHook(func(to string) *smtp.SMTPError {
			switch {
			case strings.HasSuffix(to, "@yahoo.com"):
				return tryLater()
			case strings.HasSuffix(to, "@gmail.com") && gmailAccepted.Add(1) > 30:
				return reply(452, smtp.EnhancedCode{4, 5, 3}, "Your message was rate limited")
			}
			return nil
		})},
	})
	s.withFastRetries(1000)
	s.seedProviders(300)
	id := s.create("", 0)
	s.start(id)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("governor never saw both a quota rejection and transient failures: %v", s.pollDomain("rangecast.test"))
		}
		d := s.pollDomain("rangecast.test")
		if providerPhase(d, governor.ProviderGoogle) == pb.ProviderPhase_PROVIDER_PHASE_HELD && providerPhase(d, governor.ProviderYahoo) != pb.ProviderPhase_PROVIDER_PHASE_CLOSED {
			break
		}
	}
	if _, err := s.client.PauseBroadcast(context.Background(), &pb.PauseBroadcastRequest{Id: id}); err != nil {
		t.Fatal(err)
	}
	s.waitQuiet(time.Second)
	time.Sleep(1500 * time.Millisecond) // past one flush interval
	before := s.domainStatus("rangecast.test")
	if !before.GetLive() {
		t.Fatal("the leader answered from KV, not from its governor")
	}

	s.stopCoord()
	s.startCoordinator()
	after := s.domainStatus("rangecast.test")

	for _, d := range []*pb.DomainStatus{before, after} {
		d.Live, d.Tokens, d.InFlight, d.Waiting, d.ResumesAt = false, 0, 0, "", nil
		for _, p := range d.Providers {
			p.ProbeInFlight = false
		}
	}
	if !proto.Equal(before, after) {
		t.Fatalf("governor state changed across a coordinator restart:\nbefore %v\nafter  %v", before, after)
	}
	if after.GetDailyCeiling() >= governor.DefaultCeiling || after.GetSentToday() == 0 || !after.GetRejectedToday() {
		t.Fatalf("restored state lost what was learned: %v", after)
	}
}

// TestHourlyLimitAndReset: an hourly limit holds the broadcast with the
// reason shown; ResetRateLimit lets it go on at its next tick, and the
// mail sent before the reset stays counted for display.
func TestHourlyLimitAndReset(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{workers: 1, concurrency: 8, pageLimit: 20,
		governor: &coordinator.GovernorConfig{Limits: governor.Limits{RatePerSecond: 1e6, Burst: 1_000_000, EmailsPerHour: 40, Server: "relay"}},
	})
	s.withFastRetries(8)
	all, _ := s.seedProviders(100)
	id := s.create("", 0)
	s.start(id)
	ctx := context.Background()
	for _, want := range []int{40, 80} {
		for deadline := time.Now().Add(20 * time.Second); s.sink.Count() < want && time.Now().Before(deadline); {
			time.Sleep(20 * time.Millisecond)
		}
		if got := s.waitQuiet(time.Second); got != want {
			t.Fatalf("%d sent; the hourly limit allows %d until a reset", got, want)
		}
		if w := s.status(id).GetProgress().GetWaitingFor(); !strings.Contains(w, "hourly limit of 40 for SMTP server relay reached") {
			t.Fatalf("waiting_for = %q; want the hourly limit", w)
		}
		// A follower, which runs no actor, says so too (from KV).
		cfg := s.coordCfg
		cfg.Name = fmt.Sprintf("follower-%d", want)
		f := s.runReplica(cfg)
		resp, err := f.client.GetBroadcast(ctx, &pb.GetBroadcastRequest{Id: id})
		if err != nil {
			t.Fatal(err)
		}
		if f.coord.Leading() {
			t.Fatal("the second replica leads")
		}
		if w := resp.GetBroadcast().GetProgress().GetWaitingFor(); !strings.Contains(w, "hourly limit of 40 for SMTP server relay reached") {
			t.Fatalf("a follower's waiting_for = %q; want the hourly limit", w)
		}
		f.stop()
		r, err := s.governorClient().ResetRateLimit(ctx, &pb.ResetRateLimitRequest{Server: "relay"})
		if err != nil {
			t.Fatal(err)
		}
		if len(r.GetDomains()) != 1 || r.GetDomains()[0] != "rangecast.test" {
			t.Fatalf("reset domains %v; want rangecast.test", r.GetDomains())
		}
		d := s.domainStatus("rangecast.test")
		if d.GetHourlyCount() != 0 || d.GetHourlySent() != int64(want) || d.GetServer() != "relay" {
			t.Fatalf("after the reset: hourly count %d (want 0), sent in the hour %d (want %d, nothing deleted)", d.GetHourlyCount(), d.GetHourlySent(), want)
		}
	}
	s.waitState(id, pb.BroadcastState_BROADCAST_STATE_COMPLETED, 30*time.Second)
	s.exactlyOnce(all)
}

// TestBreakerDefersProviderAndRecovers: yahoo answers 451 to its first
// recipients; five transient failures open its breaker, so yahoo's
// recipients are recorded deferred while the others go on; after the open
// period one probe goes, succeeds and closes the breaker, and the sweep sends
// the deferred ones, each once.
func TestBreakerDefersProviderAndRecovers(t *testing.T) {
	t.Parallel()
	var yahooTries atomic.Int64
	s := newStack(t, stackOptions{workers: 2, concurrency: 4, pageLimit: 20,
		governor: &coordinator.GovernorConfig{Limits: governor.Limits{RatePerSecond: 1e6, Burst: 1_000_000, BreakerOpen: 3 * time.Second}},
		sinkOpts: []capture.Option{capture.WithRcptHook(func(to string) *smtp.SMTPError {
			if strings.HasSuffix(to, "@yahoo.com") && yahooTries.Add(1) <= 5 {
				return tryLater()
			}
			return nil
		})},
	})
	s.withFastRetries(50)
	all, _ := s.seedProviders(300)
	id := s.create("", 0)
	s.start(id)
	sawOpen, sawDeferred := false, false
	deadline := time.Now().Add(time.Minute)
	for s.status(id).GetState() != pb.BroadcastState_BROADCAST_STATE_COMPLETED {
		if time.Now().After(deadline) {
			t.Fatalf("not completed in a minute: %v", s.status(id))
		}
		if d := s.pollDomain("rangecast.test"); d != nil && providerPhase(d, governor.ProviderYahoo) == pb.ProviderPhase_PROVIDER_PHASE_OPEN {
			sawOpen = true
		}
		c, err := s.store.Counts(context.Background(), ulid.MustParseStrict(id))
		if err != nil {
			t.Fatal(err)
		}
		sawDeferred = sawDeferred || c.Deferred > 0
		time.Sleep(20 * time.Millisecond)
	}
	s.exactlyOnce(all)
	if !sawOpen || !sawDeferred {
		t.Fatalf("yahoo's breaker seen open %v, deferred rows seen %v; want both", sawOpen, sawDeferred)
	}
	// Recovered: closed, or ramping back up (a clean step per sweep that
	// carried yahoo's recipients; a small audience can run out of them
	// before the ramp's top), never left open or held. The leader's
	// governor learns of refusals from reports, after the sends: on a
	// loaded machine the deferred rows can be retried and sent before it
	// opens the breaker, which then opens once the broadcast is done and
	// must still end its open period.
	recovered := func(d *pb.DomainStatus) bool {
		p := providerPhase(d, governor.ProviderYahoo)
		return p == pb.ProviderPhase_PROVIDER_PHASE_CLOSED || p == pb.ProviderPhase_PROVIDER_PHASE_HALF_OPEN
	}
	for until := time.Now().Add(10 * time.Second); !recovered(s.domainStatus("rangecast.test")); {
		if time.Now().After(until) {
			t.Fatalf("yahoo's breaker after recovery: %v; want closed or ramping back", s.domainStatus("rangecast.test").GetProviders())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestRelayRefusingEveryoneFailsPastTheBreakers: with breakers on, a relay
// that refuses everyone opens every provider's breaker within the first
// pages, so pages then hold their recipients (no attempt, no refusal) and
// only the sweeps' ramp steps meet the refusals. Those refused sweeps
// count; uncounted, the broadcast stayed running for good, failing one
// recipient at a time as ramp probes used up their attempts.
func TestRelayRefusingEveryoneFailsPastTheBreakers(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{workers: 2, concurrency: 4, pageLimit: 20,
		governor: &coordinator.GovernorConfig{Limits: governor.Limits{RatePerSecond: 1e6, Burst: 1_000_000, BreakerOpen: 3 * time.Second}},
		sinkOpts: []capture.Option{capture.WithRcptHook(func(string) *smtp.SMTPError {
			return tryLater()
		})},
	})
	s.stopCoord()
	// Eight refused pages or sweeps in a row at the backoff's pace (0.3 s
	// doubling to 1 s): several breaker periods, so that most of them are
	// met while the breakers hold.
	s.coordCfg.Backoff, s.coordCfg.MaxBackoff, s.coordCfg.MaxFruitless = 300*time.Millisecond, time.Second, 8
	s.coordCfg.Tick = 50 * time.Millisecond
	s.startCoordinator()
	s.seedProviders(1000)
	id := s.create("", 0)
	s.start(id)
	s.waitFailedRefused(id, "451 4.3.0")
}

// TestTransactionalUsageCounted: mail sent outside pages (transactional) is
// reported on the report stream and counted by the leader's governor, and a
// provider's transient failures feed its breaker.
func TestTransactionalUsageCounted(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{governor: &coordinator.GovernorConfig{}})
	g := transactional.NewHeldProviders(s.bus, testLogger(t))
	now := time.Now()
	for range 3 {
		g.Observe("Rangecast.test", "someone@example.org", nil, now)
	}
	for range governor.BreakerFailures {
		g.Observe("rangecast.test", "someone@ymail.com", &transport.SendError{Stage: transport.StageRcpt, Code: 451, Enhanced: "4.3.0", Text: "try later"}, now)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		d := s.pollDomain("rangecast.test")
		if d != nil && d.GetSentToday() == 3 && providerPhase(d, governor.ProviderYahoo) == pb.ProviderPhase_PROVIDER_PHASE_OPEN {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("governor after 3 transactional sends and %d transient failures at yahoo: %v", governor.BreakerFailures, d)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// And a worker then holds yahoo's transactional mail.
	held, err := g.Admit(context.Background(), "rangecast.test", "x@yahoo.com", time.Now().Add(2*time.Second))
	if err != nil || held.Until.IsZero() || held.Limit != governor.LimitBreaker {
		t.Fatalf("Admit to yahoo with its breaker open = %+v, %v; want held by the breaker", held, err)
	}
}

// TestGovernorGrantsEndWithTheirPages: pages dropped by a pause, given up
// on or re-issued on resume end their grants; at completion nothing is in
// flight and the day counts exactly what was sent.
func TestGovernorGrantsEndWithTheirPages(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{workers: 1, concurrency: 2, pageLimit: 5,
		governor: &coordinator.GovernorConfig{Limits: governor.Limits{RatePerSecond: 1e6, Burst: 1_000_000}},
		sinkOpts: []capture.Option{capture.WithLatency(2 * time.Millisecond)},
	})
	all, _ := s.seedProviders(400)
	id := s.create("", 0)
	s.start(id)
	ctx := context.Background()
	for range 3 {
		for n := s.sink.Count(); s.sink.Count() < n+40; {
			time.Sleep(5 * time.Millisecond)
		}
		if _, err := s.client.PauseBroadcast(ctx, &pb.PauseBroadcastRequest{Id: id}); err != nil {
			t.Fatal(err)
		}
		s.waitQuiet(300 * time.Millisecond)
		if _, err := s.client.ResumeBroadcast(ctx, &pb.ResumeBroadcastRequest{Id: id}); err != nil {
			t.Fatal(err)
		}
	}
	s.waitState(id, pb.BroadcastState_BROADCAST_STATE_COMPLETED, time.Minute)
	s.exactlyOnce(all)
	var d *pb.DomainStatus
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if d = s.domainStatus("rangecast.test"); d.GetInFlight() == 0 && d.GetSentToday() == int64(len(all)) {
			return
		}
	}
	t.Fatalf("after completion: %d in flight (grants that outlived their pages), %d sent today; want 0 and %d", d.GetInFlight(), d.GetSentToday(), len(all))
}

// TestDeferredRowsGiveUp: a provider that never recovers cannot keep a
// broadcast running for ever: its deferred rows are retried a bounded
// number of times, then recorded failed with the reason, and the broadcast
// completes with the failures shown. Only real attempts count (a row held
// while the breaker is open is not attempted), so the rows reach their ten
// attempts one half-open probe at a time.
func TestDeferredRowsGiveUp(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{workers: 1, concurrency: 4, pageLimit: 20, sweepRetry: 100 * time.Millisecond,
		governor: &coordinator.GovernorConfig{Limits: governor.Limits{RatePerSecond: 1e6, Burst: 1_000_000, BreakerOpen: 200 * time.Millisecond}},
		sinkOpts: []capture.Option{refuseYahoo(nil, nil)},
	})
	s.withFastRetries(1000)
	all, contacts := s.seedProviders(90)
	id := s.create("", 0)
	s.start(id)
	b := s.waitState(id, pb.BroadcastState_BROADCAST_STATE_COMPLETED, 4*time.Minute)
	want := map[string]bool{}
	for e := range all {
		if !strings.HasSuffix(e, "@yahoo.com") {
			want[e] = true
		}
	}
	s.exactlyOnce(want)
	if b.GetProgress().GetFailed() != 30 || !strings.Contains(b.GetReason(), "gave up after 10 attempts") {
		t.Fatalf("completed with %d failed, reason %q; want the 30 yahoo recipients failed after 10 attempts", b.GetProgress().GetFailed(), b.GetReason())
	}
	for _, c := range contacts {
		row, err := s.store.GetSend(context.Background(), ulid.MustParseStrict(id), c.ID)
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(c.Email, "@yahoo.com") != (row.Status == store.SendFailed) {
			t.Fatalf("%s: %s (%s)", c.Email, row.Status, row.Error)
		}
	}
}

// TestRefusingProviderGivenUp: a provider that refuses every attempt for
// good, with breakers on, cannot keep a broadcast running: its recipients
// are held while its breaker is open and only a ramp step of a few is
// attempted per open period, so by their attempts alone 100 recipients
// would take 200 open periods (17 minutes here, months at production
// pacing and volume). Once it has accepted nothing for GiveUpAfter, the
// recipients it holds fail with the reason, and the broadcast completes;
// every other provider's recipients are sent exactly once.
func TestRefusingProviderGivenUp(t *testing.T) {
	t.Parallel()
	const giveUp = 2 * time.Second
	s := newStack(t, stackOptions{workers: 1, concurrency: 4, pageLimit: 20, sweepRetry: 100 * time.Millisecond,
		governor: &coordinator.GovernorConfig{GiveUpAfter: giveUp,
			Limits: governor.Limits{RatePerSecond: 1e6, Burst: 1_000_000, BreakerOpen: 5 * time.Second}},
		sinkOpts: []capture.Option{refuseYahoo(nil, nil)},
	})
	s.withFastRetries(1000)
	all, contacts := s.seedProviders(300)
	id := s.create("", 0)
	start := time.Now()
	s.start(id)
	b := s.waitState(id, pb.BroadcastState_BROADCAST_STATE_COMPLETED, time.Minute)
	t.Logf("completed %s after the start", time.Since(start).Round(time.Millisecond))
	want := map[string]bool{}
	for e := range all {
		if !strings.HasSuffix(e, "@yahoo.com") {
			want[e] = true
		}
	}
	s.exactlyOnce(want)
	if b.GetProgress().GetFailed() != 100 {
		t.Fatalf("completed with %d failed; want the 100 yahoo recipients", b.GetProgress().GetFailed())
	}
	gaveUp := 0
	for _, c := range contacts {
		row, err := s.store.GetSend(context.Background(), ulid.MustParseStrict(id), c.ID)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasSuffix(c.Email, "@yahoo.com") {
			continue
		}
		if row.Status != store.SendFailed || !strings.HasPrefix(row.Error, store.GaveUpPrefix) {
			t.Fatalf("%s: %s (%s); want failed, given up", c.Email, row.Status, row.Error)
		}
		if strings.Contains(row.Error, "yahoo has accepted nothing since") {
			gaveUp++
		}
	}
	if gaveUp == 0 {
		t.Fatal("no yahoo recipient failed because the provider was given up on")
	}
	t.Logf("%d of 100 failed as given up on, the rest by their own attempts", gaveUp)

	// A second broadcast while yahoo still refuses gets its own
	// GiveUpAfter from its start: what yahoo refused before it started
	// does not count against its recipients.
	id2 := s.create("", 0)
	s.start(id2)
	b2 := s.waitState(id2, pb.BroadcastState_BROADCAST_STATE_COMPLETED, time.Minute)
	started := b2.GetStartedAt().AsTime()
	gaveUp = 0
	for _, c := range contacts {
		row, err := s.store.GetSend(context.Background(), ulid.MustParseStrict(id2), c.ID)
		if err != nil {
			t.Fatal(err)
		}
		if row.Status == store.SendFailed && strings.Contains(row.Error, "has accepted nothing since") && row.UpdatedAt.Sub(started) < giveUp {
			t.Fatalf("%s given up %s after the second broadcast started; want at least %s", c.Email, row.UpdatedAt.Sub(started), giveUp)
		}
		if strings.HasPrefix(row.Error, store.GaveUpPrefix) && strings.Contains(row.Error, "has accepted nothing since") {
			gaveUp++
		}
	}
	t.Logf("second broadcast: completed %s after its start, %d given up", b2.GetFinishedAt().AsTime().Sub(started).Round(time.Millisecond), gaveUp)
	if gaveUp == 0 {
		t.Fatal("second broadcast: nobody given up")
	}
}

// TestHourlyLimitSharedByDomains: the hourly limit is the SMTP server's, so
// two sending domains through it share one count.
func TestHourlyLimitSharedByDomains(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{workers: 1, concurrency: 8, pageLimit: 10,
		governor: &coordinator.GovernorConfig{Limits: governor.Limits{RatePerSecond: 1e6, Burst: 1_000_000, EmailsPerHour: 50, Server: "relay"}},
	})
	s.withFastRetries(8)
	s.seedProviders(60)
	ctx := context.Background()
	var ids []string
	for _, from := range []string{"news@a.example", "news@b.example"} {
		resp, err := s.client.CreateBroadcast(ctx, &pb.CreateBroadcastRequest{Name: from,
			Content: &pb.BroadcastContent{FromAddress: from, Subject: "Hi", Html: "<p>Hi {{.Name}}</p><a href=\"{{.UnsubscribeURL}}\">Unsubscribe</a>"}})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, resp.GetBroadcast().GetId())
	}
	for _, id := range ids {
		s.start(id)
	}
	for deadline := time.Now().Add(20 * time.Second); s.sink.Count() < 50 && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	if got := s.waitQuiet(time.Second); got != 50 {
		t.Fatalf("%d sent by two domains through one server with an hourly limit of 50", got)
	}
	a, b := s.domainStatus("a.example"), s.domainStatus("b.example")
	if a.GetHourlyCount() != 50 || b.GetHourlyCount() != 50 || a.GetSentToday()+b.GetSentToday() != 50 {
		t.Fatalf("hourly counts %d and %d (want the server's 50 for both), sent today %d + %d", a.GetHourlyCount(), b.GetHourlyCount(), a.GetSentToday(), b.GetSentToday())
	}
	for range 2 {
		if _, err := s.governorClient().ResetRateLimit(ctx, &pb.ResetRateLimitRequest{Server: "relay"}); err != nil {
			t.Fatal(err)
		}
		for n := s.sink.Count(); s.sink.Count() == n; {
			time.Sleep(20 * time.Millisecond)
		}
		s.waitQuiet(time.Second)
	}
	for _, id := range ids {
		s.waitState(id, pb.BroadcastState_BROADCAST_STATE_COMPLETED, 30*time.Second)
	}
	if got := s.sink.Count(); got != 120 {
		t.Fatalf("%d messages at the end, want 2 × 60", got)
	}
}

// TestGivenUpProviderStillProbed: once a provider is given up, its waiting
// recipients fail untried, but pages still carry its ramp step, so when it
// takes mail again the rest of the broadcast's recipients there are sent.
// With the step left to sweeps (as for a provider not given up), no row of
// the provider stayed deferred for a sweep to carry it, the breaker sat
// half-open, and every later recipient there was given up untried.
func TestGivenUpProviderStillProbed(t *testing.T) {
	t.Parallel()
	var refusing atomic.Bool
	refusing.Store(true)
	var mu sync.Mutex
	refused := map[string]int{} // 451s the sink gave each address
	s := newStack(t, stackOptions{workers: 1, concurrency: 4, pageLimit: 10, sweepRetry: 100 * time.Millisecond,
		governor: &coordinator.GovernorConfig{GiveUpAfter: 2 * time.Second,
			Limits: governor.Limits{RatePerSecond: 40, Burst: 10, BreakerOpen: time.Second}},
		sinkOpts: []capture.Option{refuseYahoo(refusing.Load, func(to string) {
			mu.Lock()
			refused[to]++
			mu.Unlock()
		})},
	})
	s.withFastRetries(1000)
	all, contacts := s.seedProviders(600)
	id := s.create("", 0)
	s.start(id)
	// Yahoo stays down while pages give up 30 of its recipients.
	for deadline := time.Now().Add(time.Minute); s.status(id).GetProgress().GetFailed() < 30; {
		if time.Now().After(deadline) {
			t.Fatal("fewer than 30 yahoo recipients given up within a minute")
		}
		time.Sleep(20 * time.Millisecond)
	}
	refusing.Store(false)
	givenUpBefore := s.status(id).GetProgress().GetFailed()
	b := s.waitState(id, pb.BroadcastState_BROADCAST_STATE_COMPLETED, 2*time.Minute)
	sentYahoo, gaveUp := 0, 0
	for _, c := range contacts {
		row, err := s.store.GetSend(context.Background(), ulid.MustParseStrict(id), c.ID)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case row.Status == store.SendSent && strings.HasSuffix(c.Email, "@yahoo.com"):
			sentYahoo++
		case row.Status == store.SendFailed:
			mu.Lock()
			n := refused[c.Email]
			mu.Unlock()
			if !strings.HasPrefix(row.Error, store.GaveUpPrefix) || row.Attempt != n {
				t.Fatalf("%s: failed after %d attempts (%s); want given up, the attempts its %d refusals, none for giving up", c.Email, row.Attempt, row.Error, n)
			}
			gaveUp++
			delete(all, c.Email)
		}
	}
	s.exactlyOnce(all)
	t.Logf("%d given up when yahoo came back, %d in all; %d of 200 yahoo recipients sent after", givenUpBefore, gaveUp, sentYahoo)
	if sentYahoo == 0 || int64(gaveUp) != int64(b.GetProgress().GetFailed()) {
		t.Fatalf("yahoo sent %d after it came back, %d given up, progress failed %d; want some sent", sentYahoo, gaveUp, b.GetProgress().GetFailed())
	}
	if gaveUp > 200-sentYahoo {
		t.Fatalf("%d given up but only %d yahoo recipients were not sent", gaveUp, 200-sentYahoo)
	}
}

// TestDomainRateIsTheRate: a sending domain's rate is what it sends at,
// not a burst per coordinator tick. The actor slept a whole tick (5 s)
// after the token bucket granted nothing, so --rate 2 --burst 2 sent 0.4
// a second (a real-process probe) and the default 50/s with its burst of
// 200, 40. Here 20/s with a burst of 20 and the production tick: the old
// pace was 4 a second, 25 s for this audience; the rate's is 5 s.
func TestDomainRateIsTheRate(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{workers: 1, concurrency: 8, tick: 5 * time.Second,
		governor: &coordinator.GovernorConfig{Limits: governor.Limits{RatePerSecond: 20, Burst: 20}}})
	a := s.seed(120)
	want := a.eligible(false)
	id := s.create("", 0)
	start := time.Now()
	s.start(id)
	s.waitState(id, pb.BroadcastState_BROADCAST_STATE_COMPLETED, time.Minute)
	took := time.Since(start)
	s.exactlyOnce(want)
	rate := float64(len(want)) / took.Seconds()
	t.Logf("%d messages in %s: %.1f/s at a domain rate of 20/s", len(want), took.Round(time.Millisecond), rate)
	// Half the rate leaves room for a slow machine; the old pace was a
	// fifth of it.
	if rate < 10 {
		t.Errorf("sent at %.1f/s with a domain rate of 20/s: the rate is not what binds", rate)
	}
}

// TestDomainRateSendsWorthwhilePages: a broadcast held back by its sending
// domain's rate goes out in pages worth their KV write, job and report, not
// in pages of whatever tokens came back since the last report. Each range
// took what the bucket held: a tester's 12,000 contacts at the default
// 50/s went out in 3,640 pages (3 messages each, 270 KV writes per 1,000).
func TestDomainRateSendsWorthwhilePages(t *testing.T) {
	t.Parallel()
	const n = 3000
	s := newStack(t, stackOptions{workers: 2, concurrency: 16,
		governor: &coordinator.GovernorConfig{Limits: governor.Limits{RatePerSecond: 600, Burst: 200}}})
	a := s.seed(n)
	id := s.create("", 0)
	s.start(id)
	b := s.waitState(id, pb.BroadcastState_BROADCAST_STATE_COMPLETED, 2*time.Minute)
	s.exactlyOnce(a.eligible(false))
	sent, pages := b.GetProgress().GetSent(), b.GetProgress().GetPagesDispatched()
	t.Logf("%d sent in %d pages (%.1f a page), %d KV writes", sent, pages, float64(sent)/float64(pages), s.coord.KVWrites())
	// A quarter of a full page (192) is 48; each of the 32 ranges ends on
	// a shorter page. Pages of the bucket's leftovers averaged 3–10.
	if per := float64(sent) / float64(pages); per < 24 {
		t.Errorf("%d sent in %d pages, %.1f a page; want at least 24 (a worthwhile page is a quarter of 192)", sent, pages, per)
	}
}
