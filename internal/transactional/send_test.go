package transactional_test

import (
	"context"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/emersion/go-smtp"
	"github.com/oklog/ulid/v2"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rangecast/rangecast/internal/bus"
	"github.com/rangecast/rangecast/internal/capture"
	"github.com/rangecast/rangecast/internal/message"
	"github.com/rangecast/rangecast/internal/store"
	"github.com/rangecast/rangecast/internal/testenv"
	"github.com/rangecast/rangecast/internal/transactional"
	"github.com/rangecast/rangecast/internal/transport"
	pb "github.com/rangecast/rangecast/proto/rangecast/v1"
)

const (
	statusQueued  = pb.TransactionalStatus_TRANSACTIONAL_STATUS_QUEUED
	statusSent    = pb.TransactionalStatus_TRANSACTIONAL_STATUS_SENT
	statusFailed  = pb.TransactionalStatus_TRANSACTIONAL_STATUS_FAILED
	statusUnknown = pb.TransactionalStatus_TRANSACTIONAL_STATUS_UNKNOWN
)

// 451, 451, 250: delivered once, on the third attempt, with all three
// attempts and both replies recorded.
func TestTransientTwiceThenDelivered(t *testing.T) {
	t.Parallel()
	var rcpts atomic.Int64
	e := setup(t, envOptions{sinkOpts: []capture.Option{capture.WithRcptHook(func(string) *smtp.SMTPError {
		if rcpts.Add(1) <= 2 {
			return reply(451, smtp.EnhancedCode{4, 3, 0}, "Temporary local problem, please try again")
		}
		return nil
	})}})
	e.consumer(nil)
	id := e.send(request("reset:ann:1", "ann@example.org")).GetMessage().GetId()
	m := e.waitStatus(id, statusSent, 10*time.Second)
	settle(200 * time.Millisecond)
	if n := e.sink.Count(); n != 1 {
		t.Fatalf("server received %d messages, want 1", n)
	}
	if got := e.sink.Messages()[0].MessageID; got != m.GetMessageId() || !strings.HasPrefix(got, "tx."+id+"@") {
		t.Fatalf("delivered Message-ID %q; want the message's own %q", got, m.GetMessageId())
	}
	as := m.GetAttempts()
	if m.GetAttemptCount() != 3 || len(as) != 3 {
		t.Fatalf("%d attempts recorded (%s); want 3", len(as), attemptsSummary(m))
	}
	for i, want := range []string{"transient", "transient", "sent"} {
		a := as[i]
		if a.GetNumber() != int32(i+1) || a.GetResult() != want || a.GetStartedAt() == nil || a.GetFinishedAt() == nil {
			t.Fatalf("attempt %d = %v; want #%d %s with start and finish times", i+1, a, i+1, want)
		}
		if want == "transient" && !strings.Contains(a.GetReply(), "451") {
			t.Fatalf("attempt %d reply %q does not show the server's 451", i+1, a.GetReply())
		}
		// The delivery's reply is the server's own answer to the data,
		// queue id and all, not a fixed word.
		if want == "sent" && (!strings.HasPrefix(a.GetReply(), "250 2.0.0 ") || !strings.Contains(a.GetReply(), "queued")) {
			t.Fatalf("attempt %d reply %q is not the server's 250", i+1, a.GetReply())
		}
	}
	// The retries waited their backoff (20 ms each, no jitter).
	if gap := as[1].GetStartedAt().AsTime().Sub(as[0].GetFinishedAt().AsTime()); gap < 20*time.Millisecond {
		t.Fatalf("second attempt started %s after the first failed; the schedule says 20ms", gap)
	}
}

// 550 5.1.1: the address does not exist; failed after one attempt, never
// retried, with the reply.
func TestRecipientRejectedFailsAtOnce(t *testing.T) {
	t.Parallel()
	var rcpts atomic.Int64
	e := setup(t, envOptions{sinkOpts: []capture.Option{capture.WithRcptHook(func(string) *smtp.SMTPError {
		rcpts.Add(1)
		return reply(550, smtp.EnhancedCode{5, 1, 1}, "The email account that you tried to reach does not exist.")
	})}})
	e.consumer(nil)
	id := e.send(request("reset:nobody:1", "nobody@example.org")).GetMessage().GetId()
	m := e.waitStatus(id, statusFailed, 10*time.Second)
	settle(200 * time.Millisecond)
	if m.GetAttemptCount() != 1 || len(m.GetAttempts()) != 1 || m.GetAttempts()[0].GetResult() != "recipient" {
		t.Fatalf("attempts: %s (count %d); want one recipient failure", attemptsSummary(m), m.GetAttemptCount())
	}
	if !strings.Contains(m.GetReason(), "550") || !strings.Contains(m.GetReason(), "does not exist") {
		t.Fatalf("reason %q should carry the server's reply", m.GetReason())
	}
	if n := rcpts.Load(); n != 1 {
		t.Fatalf("RCPT tried %d times, want 1", n)
	}
	if e.sink.Count() != 0 {
		t.Fatal("a rejected message was accepted")
	}
}

// 451 forever: failed after the last attempt, every attempt recorded, never
// reported sent.
func TestTransientForeverFailsAfterLastAttempt(t *testing.T) {
	t.Parallel()
	e := setup(t, envOptions{sinkOpts: []capture.Option{capture.WithRcptHook(func(string) *smtp.SMTPError {
		return reply(451, smtp.EnhancedCode{4, 4, 1}, "Connection timed out downstream")
	})}})
	e.consumer(nil)
	id := e.send(request("receipt:77", "ann@example.org")).GetMessage().GetId()
	m := e.waitStatus(id, statusFailed, 10*time.Second)
	settle(200 * time.Millisecond)
	max := fastSchedule.MaxAttempts()
	if int(m.GetAttemptCount()) != max || len(m.GetAttempts()) != max {
		t.Fatalf("%d attempts recorded (%s); want all %d", len(m.GetAttempts()), attemptsSummary(m), max)
	}
	for _, a := range m.GetAttempts() {
		if a.GetResult() != "transient" || !strings.Contains(a.GetReply(), "451") || a.GetFinishedAt() == nil {
			t.Fatalf("attempt %d = %v; want a finished transient failure with the 451", a.GetNumber(), a)
		}
	}
	if !strings.Contains(m.GetReason(), "gave up after 4 attempts") || !strings.Contains(m.GetReason(), "451") {
		t.Fatalf("reason %q should say it gave up and show the last reply", m.GetReason())
	}
	if e.sink.Count() != 0 {
		t.Fatal("the server accepted a message it always deferred")
	}
	// Nothing is left in the stream: exhausted is an outcome, not a job
	// dropped at a delivery limit.
	st, err := e.js.Stream(context.Background(), bus.TxStream)
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "the job to leave the stream", 5*time.Second, func() bool {
		info, err := st.Info(context.Background())
		return err == nil && info.State.Msgs == 0
	})
}

// 20 clients racing with one key: one message stored, one sent, every
// caller told the same id.
func TestConcurrentSendsOneKeyOneMessage(t *testing.T) {
	t.Parallel()
	for _, sqlite := range []bool{false, true} {
		name := "default store"
		if sqlite {
			name = "sqlite"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			concurrentSends(t, setup(t, envOptions{sqlite: sqlite}))
		})
	}
}

func concurrentSends(t *testing.T, e *env) {
	e.consumer(nil)
	const n = 20
	ids := make([]string, n)
	replayed := make([]bool, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			resp, err := e.client.Send(context.Background(), request("order:1234:confirmation", "buyer@example.org"))
			errs[i] = err
			ids[i], replayed[i] = resp.GetMessage().GetId(), resp.GetReplayed()
		})
	}
	close(start)
	wg.Wait()
	fresh := 0
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("call %d: %v", i, errs[i])
		}
		if ids[i] != ids[0] {
			t.Fatalf("call %d got message %s, call 0 got %s", i, ids[i], ids[0])
		}
		if !replayed[i] {
			fresh++
		}
	}
	if fresh != 1 {
		t.Fatalf("%d calls created the message; want exactly 1 (the rest replays)", fresh)
	}
	e.waitStatus(ids[0], statusSent, 10*time.Second)
	settle(300 * time.Millisecond)
	if got := e.sink.CountByRecipient()["buyer@example.org"]; got != 1 || e.sink.Count() != 1 {
		t.Fatalf("server received %d messages for the key (%d in all); want exactly 1", got, e.sink.Count())
	}
}

// A worker killed mid-send leaves its claim; after the lease another worker
// settles it. The message is delivered once or reported in doubt, never
// twice.
func TestWorkerKilledMidSend(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name       string
		delivered  bool // the dying worker handed the message over first
		lookup     bool
		want       pb.TransactionalStatus
		wantCopies int
		results    string // each attempt's result
	}{
		{"after the server accepted it, lookup confirms", true, true, statusSent, 1, "sent"},
		{"after the server accepted it, no lookup", true, false, statusUnknown, 1, "unknown"},
		{"before it reached the server, lookup says not accepted", false, true, statusSent, 1, "lost sent"},
		{"before it reached the server, no lookup", false, false, statusUnknown, 0, "unknown"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t, envOptions{})
			frozen := make(chan struct{})
			dying := &freezingTransport{Transport: e.smtp(), deliver: tc.delivered, entered: make(chan struct{}), frozen: frozen}
			stopDying := e.consumer(func(c *transactional.ConsumerConfig) { c.Transport, c.Slots = dying, 1 })
			// Cleanups run last-in first-out: thaw the dead worker before
			// stopping it, so its late return meets a settled message.
			t.Cleanup(func() { close(frozen); stopDying() })

			id := e.send(request("reset:kill", "ann@example.org")).GetMessage().GetId()
			select {
			case <-dying.entered:
			case <-time.After(10 * time.Second):
				t.Fatal("the dying worker never began the send")
			}
			lookup := func(_ context.Context, messageID string) (bool, error) { return e.sink.Accepted(messageID), nil }
			e.consumer(func(c *transactional.ConsumerConfig) {
				if tc.lookup {
					c.Lookup = lookup
				}
			})
			m := e.waitStatus(id, tc.want, 15*time.Second)
			settle(500 * time.Millisecond)
			if got := e.sink.Count(); got != tc.wantCopies {
				t.Fatalf("server received %d copies, want %d (attempts: %s)", got, tc.wantCopies, attemptsSummary(m))
			}
			m = e.get(id)
			if m.GetStatus() != tc.want {
				t.Fatalf("status moved on to %s", m.GetStatus())
			}
			if tc.want == statusUnknown && !strings.Contains(m.GetReason(), "in doubt") {
				t.Fatalf("unknown reason %q should say it is in doubt", m.GetReason())
			}
			var results []string
			for _, a := range m.GetAttempts() {
				if a.GetFinishedAt() == nil {
					t.Fatalf("attempt %d was never settled: %v", a.GetNumber(), a)
				}
				results = append(results, a.GetResult())
			}
			if got := strings.Join(results, " "); got != tc.results {
				t.Fatalf("attempt results %q, want %q (%s)", got, tc.results, attemptsSummary(m))
			}
		})
	}
}

// The same key and payload replays; the same key with different content is
// refused naming the field; another recipient is another message.
func TestReplayAndReusedKey(t *testing.T) {
	t.Parallel()
	e := setup(t, envOptions{})
	e.consumer(nil)
	first := e.send(request("welcome:9", "ann@example.org"))
	if first.GetReplayed() {
		t.Fatal("the first call reported a replay")
	}
	id := first.GetMessage().GetId()
	e.waitStatus(id, statusSent, 10*time.Second)
	again := request("welcome:9", "ANN@example.org")
	replay := e.send(again)
	if !replay.GetReplayed() || replay.GetMessage().GetId() != id || replay.GetMessage().GetStatus() != statusSent {
		t.Fatalf("repeat: replayed=%v id=%s status=%s; want a replay of %s, sent", replay.GetReplayed(), replay.GetMessage().GetId(), replay.GetMessage().GetStatus(), id)
	}
	changed := request("welcome:9", "ann@example.org")
	changed.Subject = "Welcome (second version)"
	_, err := e.client.Send(context.Background(), changed)
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "subject") || !strings.Contains(err.Error(), id) {
		t.Fatalf("reused key with another subject: %v; want FailedPrecondition naming subject and the message", err)
	}
	other := e.send(request("welcome:9", "bob@example.org"))
	if other.GetReplayed() || other.GetMessage().GetId() == id {
		t.Fatal("the same key for another recipient did not make a new message")
	}
	e.waitStatus(other.GetMessage().GetId(), statusSent, 10*time.Second)
	settle(200 * time.Millisecond)
	if got := e.sink.CountByRecipient(); got["ann@example.org"] != 1 || got["bob@example.org"] != 1 || e.sink.Count() != 2 {
		t.Fatalf("received %v; want one each for ann and bob", got)
	}
}

// Bad input is InvalidArgument with the field named; nothing is stored.
func TestSendValidation(t *testing.T) {
	t.Parallel()
	e := setup(t, envOptions{sqlite: true})
	cases := []struct {
		name string
		edit func(*pb.SendRequest)
		want string
	}{
		{"no key", func(r *pb.SendRequest) { r.IdempotencyKey = "" }, "idempotency_key is required"},
		{"key too long", func(r *pb.SendRequest) { r.IdempotencyKey = strings.Repeat("k", 257) }, "at most 256"},
		{"CR LF in a header", func(r *pb.SendRequest) {
			r.Headers = []*pb.Header{{Name: "X-Ref", Value: "a\r\nBcc: victim@example.org"}}
		}, "headers[0]"},
		{"Message-ID header", func(r *pb.SendRequest) { r.Headers = []*pb.Header{{Name: "Message-ID", Value: "<x@y>"}} }, "cannot be overridden"},
		{"From header", func(r *pb.SendRequest) { r.Headers = []*pb.Header{{Name: "from", Value: "ceo@example.org"}} }, "cannot be overridden"},
		{"List-Unsubscribe header", func(r *pb.SendRequest) {
			r.Headers = []*pb.Header{{Name: "List-Unsubscribe", Value: "<https://x>"}}
		}, "cannot be overridden"},
		{"bad header name", func(r *pb.SendRequest) { r.Headers = []*pb.Header{{Name: "X Ref", Value: "1"}} }, "not a header field name"},
		{"newline in subject", func(r *pb.SendRequest) { r.Subject = "Hi\nBcc: x@example.org" }, "subject"},
		{"no body", func(r *pb.SendRequest) { r.Text, r.Html = "", "" }, "both empty"},
		{"bad recipient", func(r *pb.SendRequest) { r.To = "Ann <ann@example.org>" }, "to"},
		{"bad sender", func(r *pb.SendRequest) { r.FromAddress = "not an address" }, "from_address"},
		{"wait too long", func(r *pb.SendRequest) { r.Wait = wait(time.Minute) }, "at most 30s"},
	}
	for _, tc := range cases {
		req := request("validation:"+tc.name, "ann@example.org")
		tc.edit(req)
		_, err := e.client.Send(context.Background(), req)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want InvalidArgument mentioning %q", tc.name, err, tc.want)
		}
	}
	if rs, err := e.store.StaleReceipts(context.Background(), time.Now().Add(time.Hour), time.Now().Add(time.Hour), 10); err != nil || len(rs) != 0 {
		t.Fatalf("invalid requests stored %d receipts (%v)", len(rs), err)
	}
	if _, err := e.client.Get(context.Background(), &pb.GetRequest{Id: "nope"}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("Get of a malformed id: %v; want InvalidArgument", err)
	}
	if _, err := e.client.Get(context.Background(), &pb.GetRequest{Id: ulid.Make().String()}); status.Code(err) != codes.NotFound {
		t.Fatalf("Get of an unknown id: %v; want NotFound", err)
	}
}

// wait returns once the first attempt has an outcome; custom headers and
// the HTML body reach the server.
func TestWaitReturnsFirstOutcome(t *testing.T) {
	t.Parallel()
	e := setup(t, envOptions{})
	e.consumer(nil)
	req := request("wait:1", "ann@example.org")
	req.Html = "<p>Follow <a href=\"https://rangecast.test/r/42\">this link</a>.</p>"
	req.Headers = []*pb.Header{{Name: "X-Request-ID", Value: "req-42"}}
	req.Wait = wait(10 * time.Second)
	resp := e.send(req)
	m := resp.GetMessage()
	if m.GetStatus() != statusSent || len(m.GetAttempts()) != 1 || m.GetAttempts()[0].GetResult() != "sent" {
		t.Fatalf("Send with wait answered %s with %s; want sent after one attempt", m.GetStatus(), attemptsSummary(m))
	}
	if e.sink.Count() != 1 {
		t.Fatalf("server has %d messages", e.sink.Count())
	}
	raw := string(e.sink.Messages()[0].Raw)
	for _, want := range []string{"X-Request-ID: req-42\r\n", "Content-Type: multipart/alternative", "text/html", "Message-ID: <" + m.GetMessageId() + ">"} {
		if !strings.Contains(raw, want) {
			t.Fatalf("delivered message lacks %q:\n%s", want, raw)
		}
	}
}

// A channel-wide error (authentication) is retried with the longest step
// and counted for the alert.
func TestChannelErrorRetriesWithLongestBackoff(t *testing.T) {
	t.Parallel()
	var broken atomic.Bool
	broken.Store(true)
	e := setup(t, envOptions{sinkOpts: []capture.Option{capture.WithMailHook(func(string) *smtp.SMTPError {
		if broken.Load() {
			return reply(535, smtp.EnhancedCode{5, 7, 8}, "Username and Password not accepted")
		}
		return nil
	})}})
	before := counter(t, "rangecast_transactional_channel_errors_total")
	schedule := transactional.Schedule{Backoff: []time.Duration{10 * time.Millisecond, 700 * time.Millisecond, 20 * time.Millisecond}}
	e.consumer(func(c *transactional.ConsumerConfig) { c.Schedule = schedule })
	id := e.send(request("channel:1", "ann@example.org")).GetMessage().GetId()
	var m *pb.TransactionalMessage
	testenv.Eventually(t, "the first attempt's outcome", 10*time.Second, func() bool {
		m = e.get(id)
		return m.GetAttemptCount() == 1 && m.GetStatus() == statusQueued
	})
	a := m.GetAttempts()[0]
	if a.GetResult() != "unreached" || !strings.Contains(a.GetReply(), "535") {
		t.Fatalf("attempt = %v; want a channel error before the recipient was named (unreached), with the 535", a)
	}
	if wait := m.GetNextAttemptAt().AsTime().Sub(a.GetFinishedAt().AsTime()); wait < 600*time.Millisecond {
		t.Fatalf("next attempt %s after a channel error; want the longest step (700ms)", wait)
	}
	if after := counter(t, "rangecast_transactional_channel_errors_total"); after < before+1 {
		t.Fatalf("channel error counter %v -> %v; want it raised", before, after)
	}
	broken.Store(false)
	e.waitStatus(id, statusSent, 10*time.Second)
}

// A message stored by a Send that could not queue its job is found by the
// sweep and sent: never silently left queued.
func TestLostJobIsSwept(t *testing.T) {
	t.Parallel()
	e := setup(t, envOptions{})
	id := ulid.Make()
	now := time.Now()
	r := request("lost:1", "ann@example.org")
	// Stored as Send stores it, but no job published: the publish failed.
	if _, _, err := e.store.CreateReceipt(context.Background(), store.Receipt{
		ID: id, Kind: transactional.Kind, Key: r.GetIdempotencyKey(), Email: r.GetTo(), PayloadHash: "h",
		Payload:   []byte(`{"from_address":"no-reply@rangecast.test","to":"ann@example.org","subject":"Lost","text":"hello"}`),
		MessageID: "tx." + id.String() + "@rangecast.test", NextAttemptAt: now.Add(-time.Minute), CreatedAt: now.Add(-time.Minute),
	}); err != nil {
		t.Fatal(err)
	}
	e.consumer(func(c *transactional.ConsumerConfig) { c.SweepEvery = 100 * time.Millisecond })
	e.waitStatus(id.String(), statusSent, 10*time.Second)
	settle(300 * time.Millisecond)
	if e.sink.Count() != 1 {
		t.Fatalf("server received %d copies, want 1", e.sink.Count())
	}
}

func counter(t *testing.T, name string) float64 {
	t.Helper()
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			var sum float64
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
			return sum
		}
	}
	return 0
}

// maybeDelivered hands the message over, then reports the connection lost
// before the server's reply: the outcome is in doubt.
type maybeDelivered struct{ transport.Transport }

func (m maybeDelivered) Send(ctx context.Context, msg message.Rendered) (string, error) {
	if _, err := m.Transport.Send(ctx, msg); err != nil {
		return "", err
	}
	return "", &transport.SendError{Stage: transport.StageData, Err: io.ErrUnexpectedEOF, MaybeDelivered: true}
}

// A connection lost after the data: never resent. Without a lookup the
// message is unknown at once, with the reply; with one, it is confirmed
// sent after the lease.
func TestConnectionLostAfterData(t *testing.T) {
	t.Parallel()
	for _, lookup := range []bool{false, true} {
		t.Run(map[bool]string{false: "no lookup", true: "lookup"}[lookup], func(t *testing.T) {
			t.Parallel()
			e := setup(t, envOptions{})
			e.consumer(func(c *transactional.ConsumerConfig) {
				c.Transport = maybeDelivered{e.smtp()}
				if lookup {
					c.Lookup = func(_ context.Context, id string) (bool, error) { return e.sink.Accepted(id), nil }
				}
			})
			id := e.send(request("lost-reply:1", "ann@example.org")).GetMessage().GetId()
			want, result := statusUnknown, "in_doubt"
			if lookup {
				want, result = statusSent, "sent"
			}
			m := e.waitStatus(id, want, 10*time.Second)
			settle(300 * time.Millisecond)
			if e.sink.Count() != 1 || len(m.GetAttempts()) != 1 || m.GetAttempts()[0].GetResult() != result {
				t.Fatalf("%d copies, attempts %s; want 1 copy and one %s attempt", e.sink.Count(), attemptsSummary(m), result)
			}
			if !lookup && (!strings.Contains(m.GetReason(), "in doubt") || !strings.Contains(m.GetAttempts()[0].GetReply(), "unexpected EOF")) {
				t.Fatalf("reason %q, reply %q; want the doubt explained and the error kept", m.GetReason(), m.GetAttempts()[0].GetReply())
			}
		})
	}
}

// A refusal a server may give of one mailbox alone (a policy filter's 550
// 5.7.1 at RCPT) fails the message when it comes twice in a row with the
// relay taking other mail in between: it is that mailbox's. The first
// time it is retried at the schedule's step, without the channel alert.
// Refused so by a relay that takes nothing else, a message is never
// failed as its recipient's: retried, the second time as a channel error.
// Every such refusal was the channel's, retried for hours with the alert
// (tester); failing the first one at once failed, for good, the first
// messages of a relay that starts refusing everyone (reviewer).
func TestOneMailboxsPolicyRefusal(t *testing.T) {
	t.Parallel()
	var everyone atomic.Bool
	e := setup(t, envOptions{sinkOpts: []capture.Option{capture.WithRcptHook(func(to string) *smtp.SMTPError {
		if everyone.Load() || strings.HasPrefix(to, "block") {
			return reply(550, smtp.EnhancedCode{5, 7, 1}, "Message rejected by policy for <"+to+">")
		}
		return nil
	})}})
	// The first step leaves time for another message to be accepted
	// between the two tries.
	step := transactional.Schedule{Backoff: []time.Duration{2 * time.Second, 300 * time.Millisecond, 300 * time.Millisecond}}
	e.consumer(func(c *transactional.ConsumerConfig) { c.Schedule = step })
	before := counter(t, "rangecast_transactional_channel_errors_total")
	id := e.send(request("policy:block", "block@example.org")).GetMessage().GetId()
	testenv.Eventually(t, "the first refusal's outcome", 10*time.Second, func() bool {
		as := e.get(id).GetAttempts()
		return len(as) >= 1 && as[0].GetResult() == "lone"
	})
	e.waitStatus(e.send(request("policy:ok", "ok@example.org")).GetMessage().GetId(), statusSent, 10*time.Second)
	m := e.waitStatus(id, statusFailed, 10*time.Second)
	as := m.GetAttempts()
	if len(as) != 2 || as[0].GetResult() != "lone" || as[1].GetResult() != "recipient" || !strings.Contains(m.GetReason(), "relay took other mail in between") {
		t.Fatalf("a mailbox refused twice with mail accepted between: %s, reason %q; want lone, then failed as the recipient's", attemptsSummary(m), m.GetReason())
	}

	// The relay refuses everyone: never failed as the recipient's.
	everyone.Store(true)
	id = e.send(request("policy:all", "ann@example.org")).GetMessage().GetId()
	m = e.waitStatus(id, statusFailed, 30*time.Second)
	for _, a := range m.GetAttempts() {
		if a.GetResult() != "lone" {
			t.Fatalf("attempts of a message a relay refusing everyone refused: %s; want every one lone", attemptsSummary(m))
		}
	}
	if len(m.GetAttempts()) != step.MaxAttempts() || !strings.Contains(m.GetReason(), "gave up after 4 attempts") {
		t.Fatalf("%s, reason %q; want all %d attempts, then given up", attemptsSummary(m), m.GetReason(), step.MaxAttempts())
	}
	if after := counter(t, "rangecast_transactional_channel_errors_total"); after <= before {
		t.Errorf("channel errors %v -> %v; refused again with nothing accepted is one", before, after)
	}
}

// A request repeated under its key after its recipient was erased is a
// replay of the message sent before, not a second copy; a new key is a new
// message. The erased receipt keeps its content's hash keyed, so other
// content under the key is refused as before the erasure.
func TestReplayAfterErasure(t *testing.T) {
	t.Parallel()
	e := setup(t, envOptions{})
	e.consumer(nil)
	first := e.send(request("reset:1", "ann@example.org"))
	id := first.GetMessage().GetId()
	e.waitStatus(id, statusSent, 10*time.Second)
	if _, err := e.store.Erase(context.Background(), []string{"Ann@Example.org"}, time.Now()); err != nil {
		t.Fatal(err)
	}
	replay := e.send(request("reset:1", "ann@example.org"))
	if !replay.GetReplayed() || replay.GetMessage().GetId() != id || replay.GetMessage().GetStatus() != statusSent {
		t.Fatalf("repeat after erasure: replayed=%v id=%s status=%s; want a replay of %s, sent", replay.GetReplayed(), replay.GetMessage().GetId(), replay.GetMessage().GetStatus(), id)
	}
	changed := request("reset:1", "ann@example.org")
	changed.Subject = "Your new code"
	if _, err := e.client.Send(context.Background(), changed); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("the key repeated after the erasure with another subject: %v; want FailedPrecondition, as before the erasure", err)
	}
	fresh := e.send(request("reset:2", "ann@example.org"))
	if fresh.GetReplayed() {
		t.Fatal("a new key after the erasure was taken as a replay")
	}
	e.waitStatus(fresh.GetMessage().GetId(), statusSent, 10*time.Second)
	settle(200 * time.Millisecond)
	if got := e.sink.CountByRecipient()["ann@example.org"]; got != 2 {
		t.Fatalf("ann received %d messages; want 2 (reset:1 once, reset:2 once)", got)
	}
}
