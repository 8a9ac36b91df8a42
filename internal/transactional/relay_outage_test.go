package transactional_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/emersion/go-smtp"

	"github.com/rangecast/rangecast/internal/capture"
	"github.com/rangecast/rangecast/internal/message"
	"github.com/rangecast/rangecast/internal/transactional"
	"github.com/rangecast/rangecast/internal/transport"
)

// downFor is a relay that refuses connections for its first n sends.
type downFor struct {
	transport.Transport
	n atomic.Int32
}

func (d *downFor) Send(ctx context.Context, m message.Rendered) (string, error) {
	if d.n.Add(-1) >= 0 {
		return "", &transport.SendError{Stage: transport.StageConnect, Err: errors.New("smtp connect: dial tcp 127.0.0.1:2525: connect: connection refused")}
	}
	return d.Transport.Send(ctx, m)
}

// TestRelayOutageDoesNotExhaustAttempts: while the relay takes nothing
// (connection refused), a message is retried without its attempts running
// out: a 43-minute outage failed every password reset queued at its start
// for good (a tester). Once the relay is back, a deferral of the recipient
// is still retried as the message's first named attempt, and the message
// arrives once.
func TestRelayOutageDoesNotExhaustAttempts(t *testing.T) {
	t.Parallel()
	var deferred atomic.Bool
	e := setup(t, envOptions{sinkOpts: []capture.Option{capture.WithRcptHook(func(string) *smtp.SMTPError {
		if deferred.CompareAndSwap(false, true) {
			return reply(451, smtp.EnhancedCode{4, 3, 0}, "Temporary local problem, please try again")
		}
		return nil
	})}})
	down := 3 * fastSchedule.MaxAttempts() // far more than the attempts a message gets
	e.consumer(func(c *transactional.ConsumerConfig) {
		d := &downFor{Transport: c.Transport}
		d.n.Store(int32(down))
		c.Transport = d
	})
	id := e.send(request("reset:outage", "ann@example.org")).GetMessage().GetId()
	m := e.waitStatus(id, statusSent, 20*time.Second)
	if got := e.sink.CountByRecipient()["ann@example.org"]; got != 1 {
		t.Fatalf("ann received %d copies; want 1", got)
	}
	as := m.GetAttempts()
	if len(as) != down+2 {
		t.Fatalf("%d attempts (%s); want %d unreached, a deferral and the delivery", len(as), attemptsSummary(m), down)
	}
	for i, a := range as[:down] {
		if a.GetResult() != "unreached" || !strings.Contains(a.GetReply(), "connection refused") {
			t.Fatalf("attempt %d = %v; want unreached with the refusal", i+1, a)
		}
	}
	if as[down].GetResult() != "transient" || as[down+1].GetResult() != "sent" {
		t.Fatalf("attempts after the outage: %s; want a transient deferral, then sent", attemptsSummary(m))
	}
}

// TestRelayDownForADayFails: a relay that takes nothing for Unreached
// fails the message, saying so.
func TestRelayDownForADayFails(t *testing.T) {
	t.Parallel()
	e := setup(t, envOptions{})
	e.consumer(func(c *transactional.ConsumerConfig) {
		d := &downFor{Transport: c.Transport}
		d.n.Store(1 << 30)
		c.Transport = d
		c.Schedule.Unreached = 300 * time.Millisecond
	})
	id := e.send(request("reset:gone", "ann@example.org")).GetMessage().GetId()
	m := e.waitStatus(id, statusFailed, 20*time.Second)
	if !strings.Contains(m.GetReason(), "with the relay taking nothing") || !strings.Contains(m.GetReason(), "connection refused") {
		t.Fatalf("reason %q; want the relay taking nothing and its last reply", m.GetReason())
	}
}
