package cli

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/rangecast/rangecast/proto/rangecast/v1"
)

// TestStatusSaysWhoMayHaveTwoCopies: under the resend policy, the people
// sent again after an attempt that may have arrived are shown (they may
// have two copies); under skip, where there are none, no line is.
func TestStatusSaysWhoMayHaveTwoCopies(t *testing.T) {
	t.Parallel()
	for _, n := range []int64{0, 28} {
		var out strings.Builder
		printStatus(&out, &pb.Broadcast{Id: "b", State: pb.BroadcastState_BROADCAST_STATE_COMPLETED,
			Progress: &pb.Progress{Sent: 12000, SentAgainInDoubt: n}})
		shown := strings.Contains(out.String(), "sent again 28 of the sent after an attempt that may have arrived")
		if shown != (n > 0) {
			t.Errorf("status with %d sent again in doubt:\n%s", n, out.String())
		}
	}
}

// TestStatusSaysAScheduleDidNotStartIt: a broadcast started by hand before
// its scheduled time says so; one the schedule started shows the time.
func TestStatusSaysAScheduleDidNotStartIt(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		started time.Time
		want    string
	}{
		{at.Add(-time.Hour), "scheduled  for 2026-12-07 12:00:00 UTC, but started by hand before it, at 2026-12-07 11:00:00 UTC"},
		{at.Add(time.Second), "scheduled  for 2026-12-07 12:00:00 UTC\n"},
	} {
		var out strings.Builder
		printStatus(&out, &pb.Broadcast{Id: "b", State: pb.BroadcastState_BROADCAST_STATE_RUNNING,
			ScheduledAt: timestamppb.New(at), StartedAt: timestamppb.New(c.started), Progress: &pb.Progress{}})
		if !strings.Contains(out.String(), c.want) {
			t.Errorf("started at %s:\n%s\nwant %q", c.started, out.String(), c.want)
		}
	}
	// Cancelled before its time: it never started (it read "scheduled for"
	// as if it would).
	var out strings.Builder
	printStatus(&out, &pb.Broadcast{Id: "b", State: pb.BroadcastState_BROADCAST_STATE_CANCELLED,
		ScheduledAt: timestamppb.New(at), Progress: &pb.Progress{}})
	if want := "scheduled  for 2026-12-07 12:00:00 UTC, and cancelled before it started"; !strings.Contains(out.String(), want) {
		t.Errorf("cancelled before its schedule:\n%s\nwant %q", out.String(), want)
	}
}

// TestStatusSaysWhoACancelledBroadcastNeverReached: a cancelled
// broadcast's audience its pages never reached is counted, and said to be
// that (a tester's showed 1,476 sent of 6,988 and nothing of the rest).
func TestStatusSaysWhoACancelledBroadcastNeverReached(t *testing.T) {
	t.Parallel()
	var out strings.Builder
	printStatus(&out, &pb.Broadcast{Id: "b", State: pb.BroadcastState_BROADCAST_STATE_CANCELLED, SnapshotTotal: 6988,
		Progress: &pb.Progress{Sent: 1476, LeftOut: 5512, Deferred: 12}})
	if !strings.Contains(out.String(), "left out   5512 of the audience at start: never sent, the broadcast cancelled before their page") {
		t.Errorf("status of a cancelled broadcast:\n%s", out.String())
	}
	// Its deferred rows are not "deferred" to anything any more.
	if !strings.Contains(out.String(), "not sent   the 12 deferred will not be retried: the broadcast was cancelled") {
		t.Errorf("status of a cancelled broadcast with deferred rows:\n%s", out.String())
	}
	out.Reset()
	printStatus(&out, &pb.Broadcast{Id: "b", State: pb.BroadcastState_BROADCAST_STATE_RUNNING, SnapshotTotal: 6988,
		Progress: &pb.Progress{Sent: 1476, Deferred: 12}})
	if strings.Contains(out.String(), "will not be retried") {
		t.Errorf("status of a running broadcast says its deferred rows will not be retried:\n%s", out.String())
	}
}

// TestStatusWithoutCursors: while NATS does not answer, the ranges are
// unknown, not "0 of 0 done" (tester).
func TestStatusWithoutCursors(t *testing.T) {
	t.Parallel()
	var out strings.Builder
	printStatus(&out, &pb.Broadcast{Id: "b", State: pb.BroadcastState_BROADCAST_STATE_RUNNING,
		Progress: &pb.Progress{Sent: 10, WaitingFor: "range cursors unknown: NATS did not answer the coordinator (timeout)"}})
	if !strings.Contains(out.String(), "ranges     unknown: NATS did not answer") || strings.Contains(out.String(), "0 of 0 done") {
		t.Errorf("status without cursors:\n%s", out.String())
	}
}

// TestContactShowSaysACancelledBroadcastsDeferredRowIsFinal: a contact's
// row left deferred by a cancelled broadcast is never sent, and says so
// (tester: it read "Deferred", as if a retry would come).
func TestContactShowSaysACancelledBroadcastsDeferredRowIsFinal(t *testing.T) {
	t.Parallel()
	var out strings.Builder
	printContact(&out, &pb.GetContactResponse{Contact: &pb.Contact{Id: "c", Email: "a@example.org"}, History: []*pb.ContactSend{
		{BroadcastId: "b1", BroadcastName: "cancelled one", BroadcastState: pb.BroadcastState_BROADCAST_STATE_CANCELLED, Status: pb.SendStatus_SEND_STATUS_DEFERRED},
		{BroadcastId: "b2", BroadcastName: "running one", BroadcastState: pb.BroadcastState_BROADCAST_STATE_RUNNING, Status: pb.SendStatus_SEND_STATUS_DEFERRED},
	}})
	lines := strings.Split(out.String(), "\n")
	var cancelled, running string
	for _, l := range lines {
		switch {
		case strings.HasPrefix(l, "b1"):
			cancelled = l
		case strings.HasPrefix(l, "b2"):
			running = l
		}
	}
	if !strings.Contains(cancelled, "never sent: broadcast cancelled") || strings.Contains(running, "never sent") {
		t.Errorf("contacts show:\n%s", out.String())
	}
}
