package coordinator_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rangecast/rangecast/internal/api"
	"github.com/rangecast/rangecast/internal/store"
	pb "github.com/rangecast/rangecast/proto/rangecast/v1"
)

// TestPauseAndStatusWithNATSDown: with the coordinator up and its NATS
// gone, a pause is recorded in the store (where claims read it) and
// holds, and the answer says so, as the coordinator's own answer (an
// ErrorInfo detail), not as "the coordinator cannot be reached", which the
// CLI said before (a real deployment: the operator was told the pause had
// failed while it stood). Status still answers from the store: state and
// counts, and why the cursors are missing.
func TestPauseAndStatusWithNATSDown(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{workers: 1, concurrency: 2})
	s.seed(200)
	id := s.create("", 3600) // one page a second or so: still running when NATS goes
	if _, err := s.client.StartBroadcast(context.Background(), &pb.StartBroadcastRequest{Id: id}); err != nil {
		t.Fatal(err)
	}
	s.waitState(id, pb.BroadcastState_BROADCAST_STATE_RUNNING, 30*time.Second)
	s.nats.Shutdown()
	s.nats.WaitForShutdown()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := s.client.PauseBroadcast(ctx, &pb.PauseBroadcastRequest{Id: id})
	st := status.Convert(err)
	if st.Code() != codes.Unavailable || !strings.Contains(st.Message(), "paused in the database, and that holds") {
		t.Fatalf("pause with NATS down: %v; want Unavailable saying the pause is recorded and holds", err)
	}
	if !api.AnsweredByCoordinator(st) {
		t.Errorf("pause with NATS down: %v carries no %s detail: a client would take it for the coordinator being down", err, api.ReasonDependencyUnavailable)
	}
	// Repeated while NATS is still away, it says the same, not that the
	// call failed.
	_, err = s.client.PauseBroadcast(ctx, &pb.PauseBroadcastRequest{Id: id})
	if st := status.Convert(err); st.Code() != codes.Unavailable || !strings.Contains(st.Message(), "paused in the database, and that holds") {
		t.Errorf("pause repeated with NATS down: %v; want the same answer as the first", err)
	}
	b, err := s.store.GetBroadcast(context.Background(), ulid.MustParseStrict(id))
	if err != nil || b.State != store.StatePaused {
		t.Fatalf("broadcast in the store: %s, %v; want paused", b.State, err)
	}
	resp, err := s.client.GetBroadcast(ctx, &pb.GetBroadcastRequest{Id: id})
	if err != nil {
		t.Fatalf("status with NATS down: %v; want the store's state and counts", err)
	}
	got := resp.GetBroadcast()
	if got.GetState() != pb.BroadcastState_BROADCAST_STATE_PAUSED || !strings.Contains(got.GetProgress().GetWaitingFor(), "range cursors unknown: NATS did not answer") {
		t.Errorf("status with NATS down: state %s, waiting %q; want paused, and why the cursors are missing", got.GetState(), got.GetProgress().GetWaitingFor())
	}
}
