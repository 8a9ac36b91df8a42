package coordinator_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/rangecast/rangecast/internal/coordinator"
	"github.com/rangecast/rangecast/internal/message"
	"github.com/rangecast/rangecast/internal/store"
	pb "github.com/rangecast/rangecast/proto/rangecast/v1"
)

func TestAlarmsCheck(t *testing.T) {
	t.Parallel()
	def := coordinator.Alarms{}
	small := coordinator.Alarms{MinSample: 100}
	off := coordinator.Alarms{BounceRate: -1, ComplaintRate: -1, MinSample: 1}
	rep := func(accepted, delivered, bounced, complained int64) store.Reputation {
		return store.Reputation{Accepted: accepted, Delivered: delivered, Bounced: bounced, Complained: complained}
	}
	cases := []struct {
		name   string
		a      coordinator.Alarms
		r      store.Reputation
		since  store.Reputation
		reason string // substring; "" means carry on
	}{
		{"clean", def, rep(100000, 90000, 100, 10), store.Reputation{}, ""},
		{"bounces at exactly 2%", def, rep(1000, 900, 20, 0), store.Reputation{}, ""},
		{"bounces past 2%", def, rep(1000, 900, 21, 0), store.Reputation{}, "hard-bounce rate 2.1% (21 of 1000 accepted) passed 2%"},
		{"bounces past 2% below the sample", def, rep(999, 900, 100, 0), store.Reputation{}, ""},
		{"complaints at 0.1%", def, rep(5000, 3000, 0, 3), store.Reputation{}, ""},
		{"complaints past 0.1%", def, rep(5000, 3000, 0, 4), store.Reputation{}, "complaint rate 0.13% (4 of 3000 delivered) passed 0.1%"},
		{"complaints without enough deliveries", def, rep(5000, 999, 0, 500), store.Reputation{}, ""},
		{"configured sample", small, rep(100, 0, 3, 0), store.Reputation{}, "hard-bounce rate 3%"},
		{"off", off, rep(100, 100, 100, 100), store.Reputation{}, ""},
		// Resumed after an alarm: only what happened since counts.
		{"resumed, nothing new", small, rep(150, 0, 30, 0), rep(100, 0, 30, 0), ""},
		{"resumed, clean since", small, rep(300, 0, 31, 0), rep(100, 0, 30, 0), ""},
		{"resumed, bad again", small, rep(300, 0, 36, 0), rep(100, 0, 30, 0), "hard-bounce rate 3% (6 of 200 accepted)"},
	}
	for _, c := range cases {
		got := c.a.Check(c.r, c.since)
		if (c.reason == "") != (got == "") || !strings.Contains(got, c.reason) {
			t.Errorf("%s: Check(%+v, since %+v) = %q, want %q", c.name, c.r, c.since, got, c.reason)
		}
	}
}

// A running broadcast whose hard-bounce rate passes the threshold pauses
// itself with the reason shown; once resumed, the same bounces do not pause
// it again.
func TestBounceAlarmPausesBroadcast(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{workers: 2, concurrency: 4, pageLimit: 10})
	s.stopCoord()
	s.coordCfg.Alarms = coordinator.Alarms{MinSample: 20, Interval: 50 * time.Millisecond}
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
