package coordinator_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/emersion/go-smtp"
	"github.com/oklog/ulid/v2"

	"github.com/rangecast/rangecast/internal/capture"

	"github.com/rangecast/rangecast/internal/maintenance"
	"github.com/rangecast/rangecast/internal/message"
	"github.com/rangecast/rangecast/internal/store"
	pb "github.com/rangecast/rangecast/proto/rangecast/v1"
)

// A running broadcast whose hard-bounce rate passes the threshold pauses
// itself with the reason shown; once resumed, the same bounces do not pause
// it again.
func TestBounceAlarmPausesBroadcast(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{workers: 2, concurrency: 4, pageLimit: 10})
	s.stopCoord()
	s.coordCfg.Alarms = maintenance.AlarmConfig{MinSample: 20, Interval: 50 * time.Millisecond}
	s.startCoordinator()
	a := s.seed(400)
	id := s.create("", 36000) // 10 a second: still running when the bounces come in
	s.start(id)
	bid := ulid.MustParse(id)
	ctx := context.Background()

	// Wait for 20 accepted messages, then report 3 of them hard-bounced.
	deadline := time.Now().Add(time.Minute)
	for {
		c, err := s.store.Counts(ctx, bid)
		if err != nil {
			t.Fatal(err)
		}
		if c.Sent >= 20 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d messages sent in a minute", c.Sent)
		}
		time.Sleep(50 * time.Millisecond)
	}
	var sent []store.Contact
	for _, c := range a.contacts {
		if row, err := s.store.GetSend(ctx, bid, c.ID); err == nil && row.Status == store.SendSent {
			sent = append(sent, c)
		}
	}
	if b := s.status(id); b.GetState() != pb.BroadcastState_BROADCAST_STATE_RUNNING {
		t.Fatalf("broadcast %s before any bounce: %s", b.GetState(), b.GetReason())
	}
	// The three bounces land while no coordinator runs, so the alarm sees
	// them together: recorded one by one under a live 50 ms check, the alarm
	// could pause on two, and the third would rightly count as new.
	s.stopCoord()
	for i, c := range sent[:3] {
		_, err := s.store.RecordEvent(ctx, store.DeliveryEvent{
			Provider: "test", EventID: fmt.Sprintf("bounce-%d", i), Type: store.EventBounced,
			MessageID: message.MessageID(bid, c.ID, "rangecast.test"), OccurredAt: time.Now(), Detail: "550 5.1.1 user unknown",
		}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
	}
	s.startCoordinator()
	b := s.waitState(id, pb.BroadcastState_BROADCAST_STATE_PAUSED, 10*time.Second)
	if !strings.Contains(b.GetReason(), "auto-paused: hard-bounce rate") || !strings.Contains(b.GetReason(), "(3 of ") {
		t.Errorf("paused with reason %q, want the bounce alarm's", b.GetReason())
	}
	t.Logf("paused: %s", b.GetReason())

	// Resumed by an operator: the same three bounces no longer count.
	if _, err := s.client.ResumeBroadcast(ctx, &pb.ResumeBroadcastRequest{Id: id}); err != nil {
		t.Fatal(err)
	}
	for range 10 { // 10 alarm intervals
		time.Sleep(50 * time.Millisecond)
		if b := s.status(id); b.GetState() != pb.BroadcastState_BROADCAST_STATE_RUNNING {
			t.Fatalf("after resume: %s (%s), want running", b.GetState(), b.GetReason())
		}
	}
	// A new leader knows the baseline too: it is in KV, not in memory.
	s.stopCoord()
	s.startCoordinator()
	for range 10 {
		time.Sleep(50 * time.Millisecond)
		if b := s.status(id); b.GetState() != pb.BroadcastState_BROADCAST_STATE_RUNNING {
			t.Fatalf("after a coordinator restart: %s (%s), want running", b.GetState(), b.GetReason())
		}
	}
	if _, err := s.client.CancelBroadcast(ctx, &pb.CancelBroadcastRequest{Id: id}); err != nil {
		t.Fatal(err)
	}
}

// TestBounceAlarmCountsRefusalsAtSend: a list of dead addresses sent
// straight to their servers is refused at RCPT (550 5.1.1), never accepted
// and never reported by a webhook. Those refusals are bounces all the same:
// the alarm pauses the broadcast and says how many were refused at send.
// Before they counted, a list a tenth dead ran to its end.
func TestBounceAlarmCountsRefusalsAtSend(t *testing.T) {
	t.Parallel()
	dead := func(to string) bool { return strings.HasSuffix(to, "7@example.org") }
	s := newStack(t, stackOptions{workers: 2, concurrency: 4, pageLimit: 10, sinkOpts: []capture.Option{
		capture.WithRcptHook(func(to string) *smtp.SMTPError {
			if dead(to) {
				return reply(550, smtp.EnhancedCode{5, 1, 1}, "5.1.1 <"+to+">: Recipient address rejected: User unknown")
			}
			return nil
		}),
	}})
	s.stopCoord()
	s.coordCfg.Alarms = maintenance.AlarmConfig{MinSample: 50, Interval: 50 * time.Millisecond}
	s.startCoordinator()
	s.seed(600)
	id := s.create("", 36000) // 10 a second: still running when the alarm looks
	s.start(id)
	b := s.waitState(id, pb.BroadcastState_BROADCAST_STATE_PAUSED, time.Minute)
	if !strings.Contains(b.GetReason(), "auto-paused: hard-bounce rate") || !strings.Contains(b.GetReason(), "refused at send") {
		t.Fatalf("paused with reason %q, want the bounce alarm's, counting refusals at send", b.GetReason())
	}
	t.Logf("paused: %s", b.GetReason())
	if p := b.GetProgress(); p.GetFailed() == 0 || p.GetSent() == 0 {
		t.Errorf("progress %+v: want some sent and the refused failed", p)
	}
}
