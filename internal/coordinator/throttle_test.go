package coordinator_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/emersion/go-smtp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rangecast/rangecast/internal/bus"
	"github.com/rangecast/rangecast/internal/capture"
	"github.com/rangecast/rangecast/internal/coordinator"
	"github.com/rangecast/rangecast/internal/governor"
	"github.com/rangecast/rangecast/internal/testenv"
	pb "github.com/rangecast/rangecast/proto/rangecast/v1"
)

// TestThrottleLimitsPages: a broadcast throttled to 36 messages an hour (one
// every 100 s) sends one message and then waits, saying why; a coordinator
// restart, which makes the broadcast's actor and its bucket again, adds at
// most one more. The bucket used to start full, a page, so every start and
// every restart sent a page at once (192 under --throttle 10).
func TestThrottleLimitsPages(t *testing.T) {
	t.Parallel()
	const pageLimit = 10
	s := newStack(t, stackOptions{workers: 1, concurrency: 4, pageLimit: pageLimit})
	s.seed(300)
	id := s.create("", 36)
	s.start(id)
	deadline := time.Now().Add(20 * time.Second)
	for s.sink.Count() < 1 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := s.waitQuiet(1500 * time.Millisecond); got != 1 {
		t.Fatalf("%d messages sent; a 36/hour throttle allows one now, the next in 100 s", got)
	}
	b := s.status(id)
	if w := b.GetProgress().GetWaitingFor(); !strings.Contains(w, "throttle of 36/hour") {
		t.Fatalf("waiting_for = %q; want it to name the throttle", w)
	}
	for range 3 {
		s.stopCoord()
		s.startCoordinator()
		time.Sleep(300 * time.Millisecond)
	}
	if got := s.waitQuiet(1500 * time.Millisecond); got > 4 {
		t.Fatalf("%d messages sent after three coordinator restarts; each may add one (a new actor's first page), no more", got)
	}
}

// TestThrottleChangesWhileRunning: a running broadcast's throttle can be
// raised and lowered, and the coordinator follows within a tick: 36/hour
// sends one and waits; raised to none, the rest goes; a second broadcast
// lowered to 36/hour while sending stops within the pages already out.
// Before, the throttle was fixed at create (tester).
func TestThrottleChangesWhileRunning(t *testing.T) {
	t.Parallel()
	const pageLimit = 10
	s := newStack(t, stackOptions{workers: 1, concurrency: 2, pageLimit: pageLimit, tick: 200 * time.Millisecond,
		sinkOpts: []capture.Option{capture.WithRcptHook(func(string) *smtp.SMTPError {
			time.Sleep(2 * time.Millisecond) // a relay's pace, so the second broadcast is caught sending
			return nil
		})}})
	// Enough for several pages a range: the pages already out when the
	// throttle is lowered (one a range) finish at the old pace.
	a := s.seed(3000)
	ops := pb.NewBroadcastOpsServiceClient(s.conn)
	setThrottle := func(id string, perHour int64) {
		t.Helper()
		resp, err := ops.UpdateBroadcast(context.Background(), &pb.UpdateBroadcastRequest{Id: id, ThrottlePerHour: &perHour})
		if err != nil || resp.GetBroadcast().GetThrottlePerHour() != perHour {
			t.Fatalf("UpdateBroadcast(throttle %d) = %v, %v", perHour, resp, err)
		}
	}

	slow := s.create("", 36)
	s.start(slow)
	testenv.Eventually(t, "the first message", 20*time.Second, func() bool { return s.sink.Count() >= 1 })
	if got := s.waitQuiet(time.Second); got != 1 {
		t.Fatalf("%d messages sent; a 36/hour throttle allows one now", got)
	}
	setThrottle(slow, 0)
	s.waitState(slow, pb.BroadcastState_BROADCAST_STATE_COMPLETED, time.Minute)
	s.exactlyOnce(a.eligible(false))

	// Content and throttle in one call of a started broadcast is refused whole.
	subject, perHour := "Changed", int64(10)
	_, err := ops.UpdateBroadcast(context.Background(), &pb.UpdateBroadcastRequest{Id: slow, Subject: &subject, ThrottlePerHour: &perHour})
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("UpdateBroadcast of a completed broadcast = %v; want FailedPrecondition", err)
	}

	fast := s.create("", 0)
	before := s.sink.Count()
	s.start(fast)
	testenv.Eventually(t, "the second broadcast sending", 20*time.Second, func() bool { return s.sink.Count() >= before+20 })
	setThrottle(fast, 36)
	sent := s.waitQuiet(2*time.Second) - before
	if all := len(a.eligible(false)); sent > all/2 {
		t.Fatalf("the second broadcast sent %d of %d after its throttle was lowered to 36/hour; want at most the pages already out", sent, all)
	}
	if w := s.status(fast).GetProgress().GetWaitingFor(); !strings.Contains(w, "throttle of 36/hour") {
		t.Fatalf("waiting_for = %q after lowering the throttle; want it to name the throttle", w)
	}
}

// budgetPacer grants from a fixed budget, like a governor at its daily ceiling.
type budgetPacer struct {
	mu      sync.Mutex
	budget  int
	domains map[string]bool
}

func (p *budgetPacer) Grant(_ time.Time, domain string, n int) (int, governor.Refusal) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.domains[domain] = true
	g := min(n, p.budget)
	p.budget -= g
	if g == 0 {
		return 0, governor.Refusal{Limit: governor.LimitCeiling, Text: "daily ceiling of 25 for " + domain + " reached; resumes 00:00 UTC"}
	}
	return g, governor.Refusal{}
}

func (p *budgetPacer) Settle(_ string, granted, sent int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.budget += granted - sent
}

// Observe has nothing to count: what was sent was taken from the budget at
// the grant and is never returned.
func (p *budgetPacer) Observe(time.Time, string, bus.Report) {}

// Holds holds no provider: this pacer only budgets.
func (p *budgetPacer) Holds(time.Time, string, bool, time.Time) coordinator.ProviderHolds {
	return coordinator.ProviderHolds{}
}

// TestPacerGatesDispatch: the governor hook is asked before every page, the
// page shrinks to its grant, unused grants come back, and its reason shows.
func TestPacerGatesDispatch(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{workers: 1, concurrency: 4, pageLimit: 10})
	pacer := &budgetPacer{budget: 25, domains: map[string]bool{}}
	s.stopCoord()
	s.coordCfg.Pacer = pacer
	s.startCoordinator()
	s.seed(300)
	id := s.create("", 0)
	s.start(id)
	deadline := time.Now().Add(20 * time.Second)
	for s.sink.Count() < 25 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := s.waitQuiet(time.Second); got != 25 {
		t.Fatalf("%d messages sent; the pacer granted 25", got)
	}
	pacer.mu.Lock()
	asked := pacer.domains["rangecast.test"]
	pacer.mu.Unlock()
	if !asked {
		t.Fatal("the pacer was not asked for the From address's domain, rangecast.test")
	}
	if w := s.status(id).GetProgress().GetWaitingFor(); !strings.Contains(w, "daily ceiling of 25") {
		t.Fatalf("waiting_for = %q; want the pacer's reason", w)
	}
}

// closingPacer is a budgetPacer that, once closed, grants nothing
// whatever comes back to its budget.
type closingPacer struct {
	budgetPacer
	closed atomic.Bool
}

func (p *closingPacer) Grant(now time.Time, domain string, n int) (int, governor.Refusal) {
	if p.closed.Load() {
		return 0, governor.Refusal{Limit: governor.LimitCeiling, Text: "daily ceiling of 25 for " + domain + " reached; resumes 00:00 UTC"}
	}
	return p.budgetPacer.Grant(now, domain, n)
}

// TestStatusSaysWhatHoldsDueRows: once every range is walked, a deferred
// row that is due but whose sweep the governor refuses (the daily ceiling)
// is shown as due now and held, with the governor's reason, not as "next
// due" at a time in the past (found by a tester).
func TestStatusSaysWhatHoldsDueRows(t *testing.T) {
	t.Parallel()
	pacer := &closingPacer{budgetPacer: budgetPacer{budget: 1000, domains: map[string]bool{}}}
	// others is how many besides the refused recipient are to be sent;
	// once they are, the refusal closes the pacer, so no sweep can go out
	// (under load the row would otherwise use its attempts first).
	var others atomic.Int64
	var s *stack
	s = newStack(t, stackOptions{workers: 1, concurrency: 4, pageLimit: 10, sinkOpts: []capture.Option{
		capture.WithRcptHook(func(to string) *smtp.SMTPError {
			if !strings.HasPrefix(to, "user000004@") {
				return nil
			}
			if n := others.Load(); n > 0 && int64(s.sink.Count()) >= n {
				pacer.closed.Store(true)
			}
			return &smtp.SMTPError{Code: 451, EnhancedCode: smtp.EnhancedCode{4, 3, 0}, Message: "try again later"}
		}),
	}})
	s.stopCoord()
	s.coordCfg.Pacer = pacer
	s.startCoordinator()
	a := s.seed(20)
	others.Store(int64(len(a.eligible(false)) - 1))
	id := s.create("", 0)
	s.start(id)
	var w string
	if !testenv.Poll(30*time.Second, func() bool {
		w = s.status(id).GetProgress().GetWaitingFor()
		return strings.Contains(w, "due now and held: daily ceiling of 25")
	}) {
		b := s.status(id)
		t.Fatalf("waiting_for = %q (%s, %s; sent %d of %d others); want the due row held by the daily ceiling", w, b.GetState(), b.GetReason(), s.sink.Count(), others.Load())
	}
}
