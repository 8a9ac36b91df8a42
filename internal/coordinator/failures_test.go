package coordinator_test

import (
	"context"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/emersion/go-smtp"
	"github.com/oklog/ulid/v2"

	"github.com/rangecast/rangecast/internal/bus"
	"github.com/rangecast/rangecast/internal/capture"
	"github.com/rangecast/rangecast/internal/maintenance"
	"github.com/rangecast/rangecast/internal/ranges"
	"github.com/rangecast/rangecast/internal/store"
	"github.com/rangecast/rangecast/internal/testenv"
	pb "github.com/rangecast/rangecast/proto/rangecast/v1"
)

// withFastRetries restarts the coordinator with short backoffs so tests of
// transient failures run in seconds.
func (s *stack) withFastRetries(maxFruitless int) {
	s.stopCoord()
	s.coordCfg.Backoff, s.coordCfg.MaxBackoff, s.coordCfg.MaxFruitless = 20*time.Millisecond, 100*time.Millisecond, maxFruitless
	s.coordCfg.Tick = 50 * time.Millisecond
	s.startCoordinator()
}

func (s *stack) start(id string) {
	s.t.Helper()
	if _, err := s.client.StartBroadcast(context.Background(), &pb.StartBroadcastRequest{Id: id}); err != nil {
		s.t.Fatal(err)
	}
}

func reply(code int, enhanced smtp.EnhancedCode, text string) *smtp.SMTPError {
	return &smtp.SMTPError{Code: code, EnhancedCode: enhanced, Message: text}
}

// TestRecipientRejectionSkipsOnlyThatAddress: a 550 5.1.1 fails that row
// with the server's reply and the broadcast carries on to completion.
func TestRecipientRejectionSkipsOnlyThatAddress(t *testing.T) {
	t.Parallel()
	bad := func(to string) bool { return strings.HasSuffix(to, "3@example.org") }
	s := newStack(t, stackOptions{workers: 2, concurrency: 8, sinkOpts: []capture.Option{
		capture.WithRcptHook(func(to string) *smtp.SMTPError {
			if bad(to) {
				return reply(550, smtp.EnhancedCode{5, 1, 1}, "The email account that you tried to reach does not exist.")
			}
			return nil
		}),
	}})
	// A tenth of the list refused for good passes the bounce alarm
	// (TestBounceAlarmCountsRefusalsAtSend); here the broadcast must run
	// to its end, so the alarm is off.
	s.stopCoord()
	s.coordCfg.Alarms = maintenance.AlarmConfig{BounceRate: -1}
	s.startCoordinator()
	a := s.seed(1500)
	want := a.eligible(false)
	rejected := 0
	for e := range want {
		if bad(e) {
			delete(want, e)
			rejected++
		}
	}
	id := s.create("", 0)
	s.start(id)
	b := s.waitState(id, pb.BroadcastState_BROADCAST_STATE_COMPLETED, time.Minute)
	s.exactlyOnce(want)
	if got := b.GetProgress().GetFailed(); got != int64(rejected) {
		t.Fatalf("failed = %d, want %d", got, rejected)
	}
	if want := strconv.Itoa(rejected) + " messages failed, e.g. "; !strings.Contains(b.GetReason(), want) || !strings.Contains(b.GetReason(), "does not exist") {
		t.Fatalf("completed reason %q should count the failures and show one reply", b.GetReason())
	}
	for _, c := range a.contacts {
		if !bad(c.Email) || !c.Subscribed || c.DoNotContact {
			continue
		}
		row, err := s.store.GetSend(context.Background(), ulid.MustParseStrict(id), c.ID)
		if err != nil {
			t.Fatal(err)
		}
		if row.Status != store.SendFailed || !strings.Contains(row.Error, "550") || !strings.Contains(row.Error, "does not exist") {
			t.Fatalf("rejected recipient's row: status %s error %q; want failed with the server's reply", row.Status, row.Error)
		}
		break
	}
}

// TestTransientErrorsRetryAndSendOnce: 451s release the claims and the range
// retries with backoff; every contact still receives exactly one message.
func TestTransientErrorsRetryAndSendOnce(t *testing.T) {
	t.Parallel()
	var rcpts atomic.Int64
	s := newStack(t, stackOptions{workers: 2, concurrency: 8, pageLimit: 50, sinkOpts: []capture.Option{
		capture.WithRcptHook(func(string) *smtp.SMTPError {
			if n := rcpts.Add(1); n%7 == 0 && n < 2000 {
				return reply(451, smtp.EnhancedCode{4, 3, 0}, "Temporary local problem, please try again")
			}
			return nil
		}),
	}})
	s.withFastRetries(50)
	a := s.seed(1500)
	id := s.create("", 0)
	s.start(id)
	s.waitState(id, pb.BroadcastState_BROADCAST_STATE_COMPLETED, time.Minute)
	s.exactlyOnce(a.eligible(false))
	if n, err := s.pending(ulid.MustParseStrict(id)); err != nil || n != 0 {
		t.Fatalf("pending claims after completion: %d, %v", n, err)
	}
}

// TestTransientForeverFailsTheBroadcast: a server that only ever says 451
// ends the broadcast failed, with the reason, instead of running forever
// or failing each recipient by its attempts; also with windows smaller
// than the three refusals that otherwise stop a page (a relay that allows
// one or two connections).
func TestTransientForeverFailsTheBroadcast(t *testing.T) {
	t.Parallel()
	for _, window := range []int{1, 2, 4} {
		t.Run("window "+strconv.Itoa(window), func(t *testing.T) {
			t.Parallel()
			transientForever(t, window)
		})
	}
}

func transientForever(t *testing.T, window int) {
	s := newStack(t, stackOptions{workers: 1, concurrency: window, sinkOpts: []capture.Option{
		capture.WithRcptHook(func(string) *smtp.SMTPError {
			return reply(451, smtp.EnhancedCode{4, 4, 1}, "Connection timed out downstream")
		}),
	}})
	s.withFastRetries(3)
	s.seed(100)
	id := s.create("", 0)
	s.start(id)
	b := s.waitFailedRefused(id, "451 4.4.1")
	// A window already in flight when the broadcast failed finishes and
	// releases its claims; after that nothing is left claimed.
	deadline := time.Now().Add(10 * time.Second)
	for b.GetProgress().GetInDoubt() != 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
		b = s.status(id)
	}
	if p := b.GetProgress(); p.GetInDoubt() != 0 || p.GetSent() != 0 {
		t.Fatalf("after failing: in doubt %d, sent %d; want 0 and 0 (claims released)", p.GetInDoubt(), p.GetSent())
	}
}

// TestResumeAFailedBroadcast: a broadcast failed by a relay that refused
// everyone is resumed once the relay is fixed, and carries on where it
// stopped: every eligible contact is then sent exactly once, or recorded
// failed with the relay's reply if its own attempts ran out before the
// failure; nobody is skipped and nobody gets a second copy. A failed
// broadcast used to be terminal: its unsent audience could only be reached
// by a new broadcast, which does not know who has the message already.
func TestResumeAFailedBroadcast(t *testing.T) {
	t.Parallel()
	var refusing atomic.Bool
	refusing.Store(true)
	s := newStack(t, stackOptions{workers: 1, concurrency: 2, sinkOpts: []capture.Option{
		capture.WithRcptHook(func(string) *smtp.SMTPError {
			if refusing.Load() {
				return reply(451, smtp.EnhancedCode{4, 4, 1}, "Connection timed out downstream")
			}
			return nil
		}),
	}})
	s.withFastRetries(3)
	a := s.seed(300)
	eligible := a.eligible(false)
	id := s.create("", 0)
	s.start(id)
	s.waitFailedRefused(id, "451 4.4.1")
	if !testenv.Poll(10*time.Second, func() bool { return s.status(id).GetProgress().GetInDoubt() == 0 }) {
		t.Fatal("claims still open after the broadcast failed")
	}
	// The relay is fixed; the operator resumes the broadcast.
	refusing.Store(false)
	if _, err := s.client.ResumeBroadcast(context.Background(), &pb.ResumeBroadcastRequest{Id: id}); err != nil {
		t.Fatalf("resume a failed broadcast: %v", err)
	}
	b := s.waitState(id, pb.BroadcastState_BROADCAST_STATE_COMPLETED, time.Minute)
	if b.GetFinishedAt() == nil {
		t.Error("completed without a finish time")
	}
	received := map[string]int{}
	for _, m := range s.sink.Messages() {
		for _, to := range m.To {
			received[to]++
		}
	}
	bid := ulid.MustParse(id)
	failed := 0
	for _, c := range a.contacts {
		if !eligible[c.Email] {
			continue
		}
		row, err := s.store.GetSend(context.Background(), bid, c.ID)
		switch {
		case received[c.Email] > 1:
			t.Errorf("%s received %d copies", c.Email, received[c.Email])
		case received[c.Email] == 1 && (err != nil || !row.Status.Accepted()):
			t.Errorf("%s received its message; ledger %v %v", c.Email, row.Status, err)
		case received[c.Email] == 0 && (err != nil || row.Status != store.SendFailed || !strings.Contains(row.Error, "451")):
			t.Errorf("%s received nothing; ledger %v (%s) %v: skipped", c.Email, row.Status, row.Error, err)
		case received[c.Email] == 0:
			failed++
		}
	}
	if sent := len(eligible) - failed; sent < len(eligible)/2 {
		t.Errorf("%d of %d sent after the resume; want the unsent audience sent", sent, len(eligible))
	}
	t.Logf("after the resume: %d of %d eligible sent, %d failed by their own attempts before the relay was fixed", len(eligible)-failed, len(eligible), failed)
}

// waitFailedRefused waits for the broadcast to fail because a relay refuses
// everyone: the reason says no progress was made and shows the relay's
// reply, and the sink took nothing.
func (s *stack) waitFailedRefused(id, reply string) *pb.Broadcast {
	s.t.Helper()
	b := s.waitState(id, pb.BroadcastState_BROADCAST_STATE_FAILED, time.Minute)
	if !strings.Contains(b.GetReason(), "no progress") || !strings.Contains(b.GetReason(), reply) {
		s.t.Fatalf("reason %q should say no progress was made and show the %s", b.GetReason(), reply)
	}
	if n := s.sink.Count(); n != 0 {
		s.t.Fatalf("%d messages accepted by a relay that refuses everyone", n)
	}
	return b
}

// TestRefusedSweepsFailTheBroadcast: once every range is walked only sweeps
// run, so a relay that refuses everyone is met by sweeps alone. They count
// as refused pages do (at the backoff's pace); uncounted, the broadcast ran
// until each row had used its attempts and then completed, everyone failed
// (TestTransientForeverFailsTheBroadcast did so when its 32 one-page ranges
// reported in one burst).
func TestRefusedSweepsFailTheBroadcast(t *testing.T) {
	t.Parallel()
	s, id, _, _ := reportOnlyStack(t)
	s.withFastRetries(3) // backoff at most 100 ms
	for k := range 3 {
		rep := bus.Report{Broadcast: id, Range: bus.SweepRange, Sweep: true, Deferred: 4,
			Class: bus.ClassTransient, Error: "smtp rcpt: 451 4.4.1 Connection timed out downstream"}
		if _, err := s.bus.JS.Publish(context.Background(), bus.ReportSubject(id), bus.Encode(rep)); err != nil {
			t.Fatal(err)
		}
		if k < 2 {
			time.Sleep(300 * time.Millisecond) // past the backoff, so each one counts
		}
	}
	if b := s.waitFailedRefused(id, "451 4.4.1"); !strings.Contains(b.GetReason(), "3 pages in a row") {
		t.Fatalf("reason %q should count the three refused sweeps", b.GetReason())
	}
}

// TestSweepsThatReachNobodyFailTheBroadcast: after the broadcast has sent
// (so its refusals are no longer "nobody sent yet") only sweeps run, and
// the relay now fails every connection at STARTTLS. Those refusals are no
// recipient's attempts, so no row ever fails for them; the sweeps that
// reach nobody count toward no progress instead and fail the broadcast,
// with the reason. Sweeps refused as often that did reach their
// recipients (a tail of greylisting) do not: those rows end by their own
// attempts.
func TestSweepsThatReachNobodyFailTheBroadcast(t *testing.T) {
	t.Parallel()
	for _, reached := range []bool{false, true} {
		t.Run(map[bool]string{false: "reached nobody", true: "reached its recipients"}[reached], func(t *testing.T) {
			t.Parallel()
			s, id, start, end := reportOnlyStack(t)
			s.withFastRetries(3) // backoff at most 100 ms
			ctx := context.Background()
			publish := func(rep bus.Report) {
				t.Helper()
				if _, err := s.bus.JS.Publish(ctx, bus.ReportSubject(id), bus.Encode(rep)); err != nil {
					t.Fatal(err)
				}
			}
			mid := midpoint(start, end)
			publish(bus.Report{Broadcast: id, Range: 0, From: start.String(), Next: mid.String(), Sent: 4, Claimed: 4, Reached: 4})
			if !testenv.Poll(10*time.Second, func() bool { return s.status(id).GetProgress().GetRanges()[0].GetNext() == mid.String() }) {
				t.Fatal("the range's report was not applied")
			}
			for range 5 {
				rep := bus.Report{Broadcast: id, Range: bus.SweepRange, Sweep: true, Deferred: 4, Unreached: 4,
					Class: bus.ClassTransient, Error: "smtp connect: 454 4.7.0 TLS not available due to local problem"}
				if reached {
					rep.Reached, rep.Unreached, rep.Error = 4, 0, "smtp rcpt: 450 4.7.1 greylisted, try again later"
				}
				publish(rep)
				time.Sleep(300 * time.Millisecond) // past the backoff, so each one counts
			}
			if !reached {
				if b := s.waitState(id, pb.BroadcastState_BROADCAST_STATE_FAILED, time.Minute); !strings.Contains(b.GetReason(), "no progress") ||
					!strings.Contains(b.GetReason(), "454 4.7.0") || !strings.Contains(b.GetReason(), "no send reached a recipient") {
					t.Fatalf("reason %q should say no progress was made, that no send reached a recipient, and show the relay's 454", b.GetReason())
				}
				return
			}
			// A report that moves the cursor, applied after the sweeps'
			// (one consumer, in order), proves they were applied too.
			marker, _ := ranges.Next(mid)
			publish(bus.Report{Broadcast: id, Range: 0, From: mid.String(), Next: marker.String(), Sent: 1, Claimed: 1, Reached: 1})
			if !testenv.Poll(10*time.Second, func() bool { return s.status(id).GetProgress().GetRanges()[0].GetNext() == marker.String() }) {
				t.Fatal("the reports after the sweeps were not applied")
			}
			if st := s.status(id); st.GetState() != pb.BroadcastState_BROADCAST_STATE_RUNNING {
				t.Fatalf("broadcast %s (%s) after sweeps whose recipients kept refusing; want running", st.GetState(), st.GetReason())
			}
		})
	}
}

// TestPolicyRefusalOfOneRecipientFailsAlone: a relay that answers "550
// 5.7.1 rejected as spam" at DATA for a few recipients among 300 (a
// mailbox's own filter) fails those recipients alone, with the reply,
// never suppressed, and the broadcast completes; it halted at the first
// one, a tester's 1 % paused 5,000 contacts 36 times. The same reply to
// everyone still pauses at once, with nobody failed for it.
func TestPolicyRefusalOfOneRecipientFailsAlone(t *testing.T) {
	t.Parallel()
	for _, everyone := range []bool{false, true} {
		t.Run(map[bool]string{false: "three recipients", true: "everyone"}[everyone], func(t *testing.T) {
			t.Parallel()
			refused := func(to string) bool {
				return everyone || strings.HasSuffix(to, "00042@example.org") || strings.HasSuffix(to, "00142@example.org") ||
					strings.HasSuffix(to, "00242@example.org")
			}
			s := newStack(t, stackOptions{sqlite: true, workers: 1, concurrency: 4, sinkOpts: []capture.Option{
				capture.WithDataHook(func(m capture.Message) *smtp.SMTPError {
					if refused(m.To[0]) {
						return reply(550, smtp.EnhancedCode{5, 7, 1}, "Message rejected as spam by the recipient's filter")
					}
					return nil
				}),
			}})
			a := s.seed(300)
			id := s.create("", 0)
			s.start(id)
			bid := ulid.MustParseStrict(id)
			if everyone {
				b := s.waitState(id, pb.BroadcastState_BROADCAST_STATE_PAUSED, time.Minute)
				if !strings.Contains(b.GetReason(), "550 5.7.1") {
					t.Fatalf("reason %q does not show the 550 5.7.1", b.GetReason())
				}
				s.waitQuiet(300 * time.Millisecond)
				if p := s.status(id).GetProgress(); p.GetFailed() != 0 || p.GetSent() != 0 {
					t.Fatalf("paused with %d failed and %d sent; want nobody failed for a refusal of everyone", p.GetFailed(), p.GetSent())
				}
				return
			}
			b := s.waitState(id, pb.BroadcastState_BROADCAST_STATE_COMPLETED, time.Minute)
			want := map[string]bool{}
			failed := 0
			for e := range a.eligible(false) {
				if !refused(e) {
					want[e] = true
				}
			}
			s.exactlyOnce(want)
			for _, c := range a.contacts {
				if !refused(c.Email) || !c.Subscribed || c.DoNotContact {
					continue
				}
				row, err := s.store.GetSend(context.Background(), bid, c.ID)
				if err != nil || row.Status != store.SendFailed || !strings.Contains(row.Error, "550 5.7.1") {
					t.Fatalf("%s: row %+v (%v); want failed with the reply", c.Email, row, err)
				}
				failed++
				if d, err := s.store.GetContact(context.Background(), c.ID); err != nil || d.DoNotContact {
					t.Fatalf("%s suppressed (%v) after a policy refusal of one message", c.Email, err)
				}
			}
			if failed == 0 || b.GetProgress().GetFailed() != int64(failed) {
				t.Fatalf("completed with %d failed; want the %d refused recipients", b.GetProgress().GetFailed(), failed)
			}
		})
	}
}

// TestRelayRefusingEveryoneAsUnknownPauses: a relay that answers "550
// 5.1.1 User unknown in local recipient table" to everyone (Postfix taking
// the recipients' domain for its own) pauses the broadcast at its first
// window, nobody failed or suppressed; it failed and suppressed a whole
// list in seconds (found by a tester).
func TestRelayRefusingEveryoneAsUnknownPauses(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{sqlite: true, workers: 1, concurrency: 4, sinkOpts: []capture.Option{
		capture.WithRcptHook(func(string) *smtp.SMTPError {
			return reply(550, smtp.EnhancedCode{5, 1, 1}, "<x>: Recipient address rejected: User unknown in local recipient table")
		}),
	}})
	a := s.seed(300)
	id := s.create("", 0)
	s.start(id)
	b := s.waitState(id, pb.BroadcastState_BROADCAST_STATE_PAUSED, time.Minute)
	if !strings.Contains(b.GetReason(), "does not exist") || !strings.Contains(b.GetReason(), "550 5.1.1") {
		t.Fatalf("reason %q should say the relay refused everyone as unknown, with its reply", b.GetReason())
	}
	s.waitQuiet(300 * time.Millisecond)
	if p := s.status(id).GetProgress(); p.GetFailed() != 0 {
		t.Fatalf("paused with %d failed; want nobody failed", p.GetFailed())
	}
	for _, c := range a.contacts {
		if d, err := s.store.GetContact(context.Background(), c.ID); err != nil || (d.Suppressed && c.Subscribed && !c.DoNotContact) {
			t.Fatalf("%s suppressed (%v) by a relay refusing everyone", c.Email, err)
		}
	}
}

// TestRelayOutageOutlastsEveryRange: a relay that refuses everyone for a
// moment, while every range has a page out, is not a server that refuses
// everyone for good. Counted per report, the refused pages of every range
// reached MaxFruitless within the outage and failed the broadcast for
// good; counted at the backoff's pace, it rides the outage out and
// completes, everyone sent once.
func TestRelayOutageOutlastsEveryRange(t *testing.T) {
	t.Parallel()
	var outageEnds atomic.Int64 // Unix ns; 0 until the first RCPT starts it
	s := newStack(t, stackOptions{workers: 2, concurrency: 4, pageLimit: 8, sinkOpts: []capture.Option{
		capture.WithRcptHook(func(string) *smtp.SMTPError {
			outageEnds.CompareAndSwap(0, time.Now().Add(400*time.Millisecond).UnixNano())
			if time.Now().UnixNano() < outageEnds.Load() {
				return reply(451, smtp.EnhancedCode{4, 4, 1}, "Connection timed out downstream")
			}
			return nil
		}),
	}})
	s.stopCoord()
	// Eight refused pages in a row fail the broadcast; at the backoff's
	// pace (0.4, 0.8, 1.6, 2, 2, 2, 2 s, each jittered down to half at
	// worst) that takes at least 5.4 s, well past the outage.
	s.coordCfg.Backoff, s.coordCfg.MaxBackoff, s.coordCfg.MaxFruitless = 400*time.Millisecond, 2*time.Second, 8
	s.coordCfg.Tick = 50 * time.Millisecond
	s.startCoordinator()
	a := s.seed(400)
	id := s.create("", 0)
	s.start(id)
	b := s.waitState(id, pb.BroadcastState_BROADCAST_STATE_COMPLETED, time.Minute)
	if b.GetProgress().GetFailed() != 0 {
		t.Fatalf("completed with %d failed after a 400 ms outage: %s", b.GetProgress().GetFailed(), b.GetReason())
	}
	s.exactlyOnce(a.eligible(false))
}

// TestChannelErrorPausesWithReason: an authentication failure is not one
// address's fault; the broadcast pauses with the error shown, and a human's
// resume after the fix completes it with nobody sent twice.
func TestChannelErrorPausesWithReason(t *testing.T) {
	t.Parallel()
	var broken atomic.Bool
	broken.Store(true)
	var mu sync.Mutex
	s := newStack(t, stackOptions{workers: 2, concurrency: 8, sinkOpts: []capture.Option{
		capture.WithMailHook(func(string) *smtp.SMTPError {
			mu.Lock()
			defer mu.Unlock()
			if broken.Load() {
				return reply(535, smtp.EnhancedCode{5, 7, 8}, "Username and Password not accepted")
			}
			return nil
		}),
	}})
	a := s.seed(800)
	id := s.create("", 0)
	s.start(id)
	b := s.waitState(id, pb.BroadcastState_BROADCAST_STATE_PAUSED, 30*time.Second)
	if !strings.Contains(b.GetReason(), "535") {
		t.Fatalf("paused reason %q should show the server's 535", b.GetReason())
	}
	s.waitQuiet(300 * time.Millisecond)
	if s.sink.Count() != 0 {
		t.Fatalf("%d messages accepted while auth was failing", s.sink.Count())
	}
	broken.Store(false)
	if _, err := s.client.ResumeBroadcast(context.Background(), &pb.ResumeBroadcastRequest{Id: id}); err != nil {
		t.Fatal(err)
	}
	s.waitState(id, pb.BroadcastState_BROADCAST_STATE_COMPLETED, time.Minute)
	s.exactlyOnce(a.eligible(false))
}

// TestWorkerDrainsOnStop: a worker asked to stop mid-page lets its in-flight
// sends finish and records them; nothing is left in doubt, and another
// worker completes the broadcast without a second copy.
func TestWorkerDrainsOnStop(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{workers: 1, concurrency: 8, pageLimit: 100, sinkOpts: []capture.Option{
		capture.WithLatency(20 * time.Millisecond),
	}})
	a := s.seed(1000)
	id := s.create("", 0)
	s.start(id)
	for s.sink.Count() < 100 {
		time.Sleep(5 * time.Millisecond)
	}
	s.workers[0]() // cancel and wait for the drain
	bid := ulid.MustParseStrict(id)
	if n, err := s.pending(bid); err != nil || n != 0 {
		t.Fatalf("after a drained stop, %d claims have no outcome (err %v); want 0", n, err)
	}
	counts, err := s.store.Counts(context.Background(), bid)
	if err != nil {
		t.Fatal(err)
	}
	if int(counts.Sent) != s.sink.Count() {
		t.Fatalf("ledger says %d sent, the server received %d", counts.Sent, s.sink.Count())
	}
	s.startWorker()
	s.waitState(id, pb.BroadcastState_BROADCAST_STATE_COMPLETED, time.Minute)
	s.exactlyOnce(a.eligible(false))
}

// TestClaimBeforeSend: when a message reaches the SMTP server, its ledger row
// is already committed.
func TestClaimBeforeSend(t *testing.T) {
	t.Parallel()
	var s *stack
	var checked, unclaimed atomic.Int64
	var bid atomic.Value
	s = newStack(t, stackOptions{workers: 2, concurrency: 8, sinkOpts: []capture.Option{
		capture.WithDataHook(func(m capture.Message) *smtp.SMTPError {
			// Message-ID is <broadcast.contact@domain>.
			ids := strings.SplitN(strings.SplitN(m.MessageID, "@", 2)[0], ".", 2)
			if len(ids) != 2 {
				unclaimed.Add(1)
				return nil
			}
			b, c := ulid.MustParseStrict(ids[0]), ulid.MustParseStrict(ids[1])
			if b.String() != bid.Load() {
				unclaimed.Add(1)
			}
			row, err := s.store.GetSend(context.Background(), b, c)
			if err != nil || row.Status != store.SendClaimed || row.MessageID != m.MessageID {
				unclaimed.Add(1)
			}
			checked.Add(1)
			return nil
		}),
	}})
	a := s.seed(600)
	id := s.create("", 0)
	bid.Store(id)
	s.start(id)
	s.waitState(id, pb.BroadcastState_BROADCAST_STATE_COMPLETED, time.Minute)
	s.exactlyOnce(a.eligible(false))
	if unclaimed.Load() != 0 || checked.Load() != int64(len(a.eligible(false))) {
		t.Fatalf("%d of %d messages arrived without a committed claim carrying their Message-ID", unclaimed.Load(), checked.Load())
	}
}

// TestErrorClassesEndToEnd scripts the SMTP server to answer one class of
// reply for one in every 50 recipients and checks the broadcast's resulting
// state and every ledger row.
func TestErrorClassesEndToEnd(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		reply *smtp.SMTPError
		state pb.BroadcastState
		// rowStatus is the scripted recipients' rows: failed with the reply
		// (a 5xx of theirs, or a 4xx that outlasted every attempt), or
		// deferred (not sent for the channel's sake: sent after a resume).
		rowStatus store.SendStatus
		// lone: a refusal that may be about the recipient alone, so the
		// first of them fail alone (failed with the reply) until they are
		// a share that halts (pageworker's refusal tally).
		lone bool
	}{
		{"250 accepted", nil, pb.BroadcastState_BROADCAST_STATE_COMPLETED, store.SendSent, false},
		{"550 5.1.1 unknown user", reply(550, smtp.EnhancedCode{5, 1, 1}, "5.1.1 <x>: Recipient address rejected: User unknown in virtual mailbox table"),
			pb.BroadcastState_BROADCAST_STATE_COMPLETED, store.SendFailed, false},
		{"451 forever", reply(451, smtp.EnhancedCode{4, 3, 0}, "Temporary local problem - please try later"),
			pb.BroadcastState_BROADCAST_STATE_COMPLETED, store.SendFailed, false},
		{"452 session limit", reply(452, smtp.EnhancedCode{4, 5, 3}, "Error: too many recipients"),
			pb.BroadcastState_BROADCAST_STATE_COMPLETED, store.SendFailed, false},
		{"454 SES throttling", reply(454, smtp.NoEnhancedCode, "Throttling failure: Maximum sending rate exceeded."),
			pb.BroadcastState_BROADCAST_STATE_COMPLETED, store.SendFailed, false},
		{"535 auth", reply(535, smtp.EnhancedCode{5, 7, 8}, "Username and Password not accepted"),
			pb.BroadcastState_BROADCAST_STATE_PAUSED, store.SendDeferred, false},
		{"unknown 5xx", reply(554, smtp.EnhancedCode{5, 0, 0}, "Something nobody has seen before"),
			pb.BroadcastState_BROADCAST_STATE_PAUSED, store.SendDeferred, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			scripted := func(to string) bool { return strings.HasSuffix(to, "7@example.org") }
			s := newStack(t, stackOptions{sqlite: true, workers: 1, concurrency: 4, sinkOpts: []capture.Option{
				capture.WithRcptHook(func(to string) *smtp.SMTPError {
					if scripted(to) {
						return tc.reply
					}
					return nil
				}),
			}})
			s.withFastRetries(3)
			a := s.seed(300)
			id := s.create("", 0)
			s.start(id)
			b := s.waitState(id, tc.state, time.Minute)
			if tc.reply != nil && !strings.Contains(b.GetReason(), strconv.Itoa(tc.reply.Code)) {
				t.Errorf("reason %q does not show the %d", b.GetReason(), tc.reply.Code)
			}
			// A halt on a reply to one recipient names whose message it
			// was (a spam rejection is looked at message by message): the
			// contact, by id, never its address, which a reason keeps in
			// KV and logs past an erasure.
			if tc.state == pb.BroadcastState_BROADCAST_STATE_PAUSED && !regexp.MustCompile(`\(sending to contact [0-9A-Z]{26}\)`).MatchString(b.GetReason()) {
				t.Errorf("reason %q does not name the contact the server answered", b.GetReason())
			}
			if strings.Contains(b.GetReason(), "@example.org") {
				t.Errorf("reason %q holds a recipient's address", b.GetReason())
			}
			s.waitQuiet(300 * time.Millisecond)
			bid := ulid.MustParseStrict(id)
			got := s.sink.CountByRecipient()
			failedAlone := 0
			for _, c := range a.contacts {
				if !c.Subscribed || c.DoNotContact {
					continue
				}
				row, err := s.store.GetSend(context.Background(), bid, c.ID)
				switch {
				case got[c.Email] > 1:
					t.Fatalf("%s received %d messages", c.Email, got[c.Email])
				case got[c.Email] == 1:
					if err != nil || row.Status != store.SendSent {
						t.Fatalf("%s received its message but its row is %+v (%v)", c.Email, row, err)
					}
				case scripted(c.Email) && tc.reply != nil && err == nil && tc.lone && row.Status == store.SendFailed:
					if failedAlone++; failedAlone > 14 || !strings.Contains(row.Error, strconv.Itoa(tc.reply.Code)) {
						t.Fatalf("%s failed alone (%q), the %dth; want at most 14, with the reply, before the share halts", c.Email, row.Error, failedAlone)
					}
				case scripted(c.Email) && tc.reply != nil && (err == nil || tc.rowStatus == store.SendFailed):
					// A page that stopped before a scripted recipient's
					// window (channel error) claimed nothing there.
					if err != nil || row.Status != tc.rowStatus || !strings.Contains(row.Error, strconv.Itoa(tc.reply.Code)) {
						t.Fatalf("%s was refused; row %+v (%v), want %s with the reply", c.Email, row, err, tc.rowStatus)
					}
				case err == nil:
					// Not received and not refused: no page claimed it (the
					// broadcast paused first), so there is no row.
					t.Fatalf("%s received nothing but has a ledger row %+v", c.Email, row)
				}
				// A refusal of the address itself (5.1.1) suppresses the
				// contact, so the next broadcast does not mail it again;
				// no other reply does.
				d, err := s.store.GetContact(context.Background(), c.ID)
				if err != nil {
					t.Fatal(err)
				}
				if want := scripted(c.Email) && tc.reply != nil && tc.reply.EnhancedCode == (smtp.EnhancedCode{5, 1, 1}); d.Suppressed != want {
					t.Fatalf("%s: suppressed %v (%q) after %s; want %v", c.Email, d.Suppressed, d.SuppressedReason, tc.name, want)
				}
			}
		})
	}
}

// TestDonePageWithAHaltPauses: a page that reached its range's end and
// whose last sends (its stragglers) met a channel-wide refusal reports
// Done with the halt's class. The range is done, its cursor at the page's
// last contact, and the broadcast pauses with the server's reply: the
// halt is not lost because the range has nothing left to walk.
func TestDonePageWithAHaltPauses(t *testing.T) {
	t.Parallel()
	s, id, start, end := reportOnlyStack(t)
	ctx := context.Background()
	rep := bus.Report{Broadcast: id, Range: 0, From: start.String(), Next: end.String(), Done: true, Sent: 3, Claimed: 4, Reached: 3,
		Class: bus.ClassChannel, Error: "smtp mail: 535 5.7.8 Username and Password not accepted"}
	if _, err := s.bus.JS.Publish(ctx, bus.ReportSubject(id), bus.Encode(rep)); err != nil {
		t.Fatal(err)
	}
	b := s.waitState(id, pb.BroadcastState_BROADCAST_STATE_PAUSED, 30*time.Second)
	if !strings.Contains(b.GetReason(), "535 5.7.8") {
		t.Fatalf("paused with reason %q; want the server's 535", b.GetReason())
	}
	r0 := s.status(id).GetProgress().GetRanges()[0]
	if !r0.GetDone() || r0.GetNext() != end.String() {
		t.Fatalf("range 0 after a Done page that halted: done %v, next %s; want done at %s", r0.GetDone(), r0.GetNext(), end)
	}
}

// TestDraftKickedStartsNoActor: a draft's state change reaching the leader
// (its watch of the state records calls refresh) starts no actor for it. An actor made for a draft held a copy of it from
// before its accept, with no ranges; started later, the broadcast reused
// that actor and completed at once with its audience unsent (the
// TestRetryCommand flake). actor.adopt now also takes the accepted
// broadcast whole; this pins kick's part, and the start after it.
func TestDraftKickedStartsNoActor(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{workers: 2, concurrency: 8})
	a := s.seed(300)
	id := s.create("", 0)
	if !testenv.Poll(10*time.Second, s.coord.Leading) {
		t.Fatal("the coordinator does not lead")
	}
	if err := s.coord.Refresh(context.Background(), id); err != nil { // as the leader's watch does
		t.Fatal(err)
	}
	if s.coord.HasActor(ulid.MustParseStrict(id)) {
		t.Fatal("a kick started an actor for a draft")
	}
	s.start(id)
	s.waitState(id, pb.BroadcastState_BROADCAST_STATE_COMPLETED, time.Minute)
	s.exactlyOnce(a.eligible(false))
}

// TestTailWaitingOnEveryReplica: once every range is walked, a broadcast
// waits for its deferred rows; status says so, with when the next is due,
// whichever coordinator answers: a follower, behind a load balancer, runs
// no actor and said nothing of them.
func TestTailWaitingOnEveryReplica(t *testing.T) {
	t.Parallel()
	var greylisted sync.Map // three of the audience, chosen before the start
	s := newStack(t, stackOptions{workers: 1, concurrency: 8, pageLimit: 20, sinkOpts: []capture.Option{
		capture.WithRcptHook(func(to string) *smtp.SMTPError {
			if _, ok := greylisted.Load(to); ok {
				return reply(450, smtp.EnhancedCode{4, 7, 1}, "Greylisted for 3600 seconds")
			}
			return nil
		}),
	}})
	for _, e := range slices.Sorted(maps.Keys(s.seed(60).eligible(false)))[:3] {
		greylisted.Store(e, true)
	}
	id := s.create("", 0)
	s.start(id)
	want := "all ranges walked; 3 messages deferred, next due "
	var w string
	if !testenv.Poll(30*time.Second, func() bool { w = s.status(id).GetProgress().GetWaitingFor(); return strings.HasPrefix(w, want) }) {
		t.Fatalf("leader's waiting_for = %q; want %q…", w, want)
	}
	// With why the next is deferred, and how often it was tried (tester:
	// a full mailbox's rows said only "next due").
	if !strings.Contains(w, "450 4.7.1 Greylisted for 3600 seconds; 1 attempts so far") {
		t.Errorf("waiting_for = %q; want the next row's reply and attempts", w)
	}
	cfg := s.coordCfg
	cfg.Name = "follower"
	f := s.runReplica(cfg)
	defer f.stop()
	if f.coord.Leading() {
		t.Fatal("the second replica leads")
	}
	resp, err := f.client.GetBroadcast(context.Background(), &pb.GetBroadcastRequest{Id: id})
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.GetBroadcast().GetProgress().GetWaitingFor(); got != w {
		t.Fatalf("a follower's waiting_for = %q; want the leader's %q", got, w)
	}
}
