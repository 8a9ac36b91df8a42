package coordinator_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rangecast/rangecast/internal/bus"
	"github.com/rangecast/rangecast/internal/capture"
	"github.com/rangecast/rangecast/internal/coordinator"
	"github.com/rangecast/rangecast/internal/store"
	"github.com/rangecast/rangecast/internal/testenv"
	pb "github.com/rangecast/rangecast/proto/rangecast/v1"
)

// TestOneLeaderAndFollowerWrites: of two coordinators one leads; pause and
// resume sent to the follower reach the leader's actor through KV; when the
// leader steps down the follower takes over and completes the broadcast,
// nobody twice.
func TestOneLeaderAndFollowerWrites(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{workers: 2, concurrency: 8, pageLimit: 50, sinkOpts: []capture.Option{capture.WithLatency(2 * time.Millisecond)}})
	testenv.Eventually(t, "first coordinator leads", 10*time.Second, s.coord.Leading)
	cfg := s.coordCfg
	cfg.Name = "second"
	follower := s.runReplica(cfg)
	time.Sleep(500 * time.Millisecond)
	if follower.coord.Leading() {
		t.Fatal("two coordinators lead at once")
	}
	a := s.seed(3000)
	id := s.create("", 0)
	ctx := context.Background()
	// Start through the follower: it writes the store and KV; the leader
	// picks the broadcast up from the state it wrote.
	if _, err := follower.client.StartBroadcast(ctx, &pb.StartBroadcastRequest{Id: id}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "sending starts", 20*time.Second, func() bool { return s.sink.Count() > 300 })
	if _, err := follower.client.PauseBroadcast(ctx, &pb.PauseBroadcastRequest{Id: id}); err != nil {
		t.Fatal(err)
	}
	paused := s.waitQuiet(time.Second)
	if paused >= len(a.eligible(false)) {
		t.Fatal("the broadcast finished before the pause could be tested")
	}
	// The leader's actor knows: resuming through the follower carries on.
	s.stopCoord() // the leader steps down
	testenv.Eventually(t, "the follower takes over", 10*time.Second, follower.coord.Leading)
	if _, err := follower.client.ResumeBroadcast(ctx, &pb.ResumeBroadcastRequest{Id: id}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := follower.client.GetBroadcast(ctx, &pb.GetBroadcastRequest{Id: id})
		if err != nil {
			t.Fatal(err)
		}
		if resp.GetBroadcast().GetState() == pb.BroadcastState_BROADCAST_STATE_COMPLETED {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not completed after failover: %v", resp.GetBroadcast().GetState())
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.exactlyOnce(a.eligible(false))
	t.Logf("%d sent before the pause; the follower led the rest", paused)
}

// TestLapsedLeaseIsTaken: a leader that died without stepping down holds the
// lease until its TTL lapses; then a coordinator takes over and completes the
// broadcast.
func TestLapsedLeaseIsTaken(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{workers: 2, concurrency: 8})
	s.stopCoord()
	// A dead leader's lease, never renewed.
	if _, err := s.bus.Lease.Put(context.Background(), "coordinator", []byte("dead")); err != nil {
		t.Fatal(err)
	}
	s.startCoordinator()
	a := s.seed(500)
	id := s.create("", 0)
	s.start(id) // served by a follower: the API works on every replica
	if s.coord.Leading() {
		t.Fatal("took the lease of a live-looking leader")
	}
	began := time.Now()
	s.waitState(id, pb.BroadcastState_BROADCAST_STATE_COMPLETED, bus.LeaseTTL+30*time.Second)
	s.exactlyOnce(a.eligible(false))
	t.Logf("took over and completed %s after the dead leader's last renewal (lease TTL %s)", time.Since(began).Round(100*time.Millisecond), bus.LeaseTTL)
}

// TestSplitBrainSendsNobodyTwice: two coordinators that both believe they
// lead (separate leases, on purpose) dispatch the same pages; claims and
// compare-and-set cursors keep every contact to one message.
func TestSplitBrainSendsNobodyTwice(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{workers: 3, concurrency: 8, pageLimit: 50})
	cfg := s.coordCfg
	cfg.Name, cfg.LeaseKey = "rogue", "another-lease"
	rogue := s.runReplica(cfg)
	testenv.Eventually(t, "both lead", 10*time.Second, func() bool { return s.coord.Leading() && rogue.coord.Leading() })
	a := s.seed(3000)
	id := s.create("", 0)
	s.start(id)
	s.waitState(id, pb.BroadcastState_BROADCAST_STATE_COMPLETED, time.Minute)
	s.exactlyOnce(a.eligible(false))
}

// TestLeaderMirrorsStateOfAHalfDoneStart: a Start whose process stopped
// after the store accepted the broadcast but before KV had its state record.
// Workers drop the pages of a broadcast KV does not show running, so the
// next leader must write the state from the store before it dispatches:
// otherwise every first page is dropped and waits minutes to be re-issued.
func TestLeaderMirrorsStateOfAHalfDoneStart(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{workers: 1, concurrency: 4, pageLimit: 50})
	a := s.seed(200)
	id := s.create("", 0)
	s.stopCoord()
	// The store half of Start, and nothing in KV.
	if _, err := s.store.AcceptBroadcast(context.Background(), ulid.MustParseStrict(id), time.Now()); err != nil {
		t.Fatal(err)
	}
	s.startCoordinator()
	s.waitState(id, pb.BroadcastState_BROADCAST_STATE_COMPLETED, 30*time.Second)
	s.exactlyOnce(a.eligible(false))
}

// TestRetriedTransitionRepairsKV: a Cancel whose store write landed but
// whose KV write did not leaves workers running the broadcast's pages. The
// client's retry is refused (it is cancelled already) but brings KV level
// first, so the workers stop.
func TestRetriedTransitionRepairsKV(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{workers: 1, concurrency: 4, pageLimit: 20})
	s.seed(200)
	id := s.create("", 3600) // 1 a second: running for the whole test
	s.start(id)
	ctx := context.Background()
	bid := ulid.MustParseStrict(id)
	// The store half of Cancel, and nothing in KV.
	if _, err := s.store.SetState(ctx, bid, []store.State{store.StateRunning}, store.StateCancelled, "", time.Now()); err != nil {
		t.Fatal(err)
	}
	_, err := s.client.CancelBroadcast(ctx, &pb.CancelBroadcastRequest{Id: id})
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("retried cancel: %v, want FailedPrecondition (it is cancelled already)", err)
	}
	var rec bus.StateRecord
	if _, _, err := bus.GetJSON(ctx, s.bus.Broadcasts, bus.StateKey(id), &rec); err != nil {
		t.Fatal(err)
	}
	if rec.State != string(store.StateCancelled) {
		t.Fatalf("KV state after the retried cancel = %q, want cancelled", rec.State)
	}
}

// TestRetriedStartCompletesIt: a Start that stopped after the store
// accepted the broadcast (no range records, nothing in KV) while this
// coordinator kept leading. The client's retry is refused (it is running
// already) but completes the start, and the broadcast goes out.
func TestRetriedStartCompletesIt(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{workers: 1, concurrency: 4, pageLimit: 50})
	a := s.seed(200)
	id := s.create("", 0)
	ctx := context.Background()
	if _, err := s.store.AcceptBroadcast(ctx, ulid.MustParseStrict(id), time.Now()); err != nil {
		t.Fatal(err)
	}
	_, err := s.client.StartBroadcast(ctx, &pb.StartBroadcastRequest{Id: id})
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("retried start: %v, want FailedPrecondition (it is running already)", err)
	}
	s.waitState(id, pb.BroadcastState_BROADCAST_STATE_COMPLETED, 30*time.Second)
	s.exactlyOnce(a.eligible(false))
}

// TestRunRefusesABadConfig: a negative duration is refused at once, named,
// before the coordinator touches NATS.
func TestRunRefusesABadConfig(t *testing.T) {
	t.Parallel()
	err := coordinator.New(coordinator.Config{InDoubtAfter: -time.Second, Tick: -time.Second}).Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "--in-doubt-after") || !strings.Contains(err.Error(), "Config.Tick") {
		t.Fatalf("Run = %v; want both the lease and the tick refused", err)
	}
}
