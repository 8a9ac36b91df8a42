package api_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/rangecast/rangecast/internal/api"
	"github.com/rangecast/rangecast/internal/bus"
	"github.com/rangecast/rangecast/internal/capture"
	"github.com/rangecast/rangecast/internal/clock"
	"github.com/rangecast/rangecast/internal/coordinator"
	"github.com/rangecast/rangecast/internal/pageworker"
	"github.com/rangecast/rangecast/internal/store"
	"github.com/rangecast/rangecast/internal/testenv"
	"github.com/rangecast/rangecast/internal/transport"
	pb "github.com/rangecast/rangecast/proto/rangecast/v1"
)

// stack is the whole system on real parts: Postgres, embedded JetStream, a
// real SMTP server, a coordinator behind the real gRPC API, and page
// workers. It is the engine tests' stack (coordinator/stack_test.go), kept
// the same.
type stack struct {
	t      *testing.T
	store  store.Store
	bus    *bus.Bus
	sink   *capture.Server
	client pb.BroadcastServiceClient
	conn   *grpc.ClientConn // the client's connection, for the other services
	coord  *coordinator.Coordinator

	coordCfg   coordinator.Config
	stopCoord  func()
	workers    []func()
	workerConc int
	clock      clock.Clock
	sweepRetry time.Duration
}

type stackOptions struct {
	// sqlite runs the stack on SQLite; otherwise testenv.Store picks
	// Postgres when one is reachable.
	sqlite      bool
	workers     int
	concurrency int
	pageLimit   int
	sinkOpts    []capture.Option
	// clock, when set, is every part's clock (default: the wall clock).
	clock clock.Clock
	// governor turns on the per-domain governors.
	governor *coordinator.GovernorConfig
	// sweepRetry, when set, is the workers' SweepRetry.
	sweepRetry time.Duration
}

func testLogger(t *testing.T) *slog.Logger {
	if os.Getenv("RANGECAST_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

func newStack(t *testing.T, o stackOptions) *stack {
	t.Helper()
	ctx := context.Background()
	var st store.Store
	if o.sqlite {
		st = testenv.SQLite(t)
	} else {
		st = testenv.Store(t)
	}
	_, js := testenv.NATS(t)
	b, err := bus.Setup(ctx, js, bus.Options{Memory: true})
	if err != nil {
		t.Fatal(err)
	}
	sink, err := capture.Start("127.0.0.1:0", o.sinkOpts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sink.Close() })
	s := &stack{t: t, store: st, bus: b, sink: sink, workerConc: o.concurrency, clock: o.clock, sweepRetry: o.sweepRetry}
	if s.clock == nil {
		s.clock = clock.Real{}
	}
	if s.sweepRetry == 0 {
		s.sweepRetry = 200 * time.Millisecond // a refused row is tried again soon
	}
	s.coordCfg = coordinator.Config{Store: st, Bus: b, Log: testLogger(t), PageLimit: o.pageLimit, Tick: 500 * time.Millisecond,
		Clock: s.clock, Governor: o.governor}
	s.startCoordinator()
	for range o.workers {
		s.startWorker()
	}
	t.Cleanup(func() {
		for _, stop := range s.workers {
			stop()
		}
		s.stopCoord()
	})
	return s
}

// replica is a coordinator with a gRPC server in front of it.
type replica struct {
	coord  *coordinator.Coordinator
	conn   *grpc.ClientConn
	client pb.BroadcastServiceClient
	stop   func()
}

// runReplica starts a coordinator with cfg on the stack's store and bus.
func (s *stack) runReplica(cfg coordinator.Config) *replica {
	t := s.t
	ctx, cancel := context.WithCancel(context.Background())
	c := coordinator.New(cfg)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := c.Run(ctx); err != nil {
			t.Errorf("coordinator: %v", err)
		}
	}()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := api.NewGRPCServer(api.Config{Engine: c, Store: cfg.Store, Clock: cfg.Clock, Log: cfg.Log})
	go srv.Serve(lis) //nolint:errcheck
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	r := &replica{coord: c, conn: conn, client: pb.NewBroadcastServiceClient(conn), stop: func() {
		once.Do(func() {
			conn.Close()
			srv.Stop()
			cancel()
			<-done
		})
	}}
	t.Cleanup(r.stop)
	return r
}

// startCoordinator runs the stack's main coordinator (s.coordCfg).
func (s *stack) startCoordinator() {
	r := s.runReplica(s.coordCfg)
	s.coord, s.client, s.conn, s.stopCoord = r.coord, r.client, r.conn, r.stop
}

func (s *stack) startWorker() {
	t := s.t
	tr, err := transport.NewSMTP(s.sink.URL() + fmt.Sprintf("&pool=%d", max(s.workerConc, 1)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := pageworker.New(pageworker.Config{
		Store: s.store, Bus: s.bus, Transport: tr, Log: testLogger(t), Clock: s.clock,
		Concurrency: s.workerConc, SweepRetry: s.sweepRetry, RetryAfter: 200 * time.Millisecond,
		// Ten delays at their least (50 ms with SweepRetry 100 ms) span it:
		// MaxAttempts (10) is what gives a refused row up.
		RetryFor:  400 * time.Millisecond,
		ParkDelay: 300 * time.Millisecond, FetchWait: 200 * time.Millisecond,
	})
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := w.Run(ctx); err != nil {
			t.Errorf("worker: %v", err)
		}
	}()
	var once sync.Once
	s.workers = append(s.workers, func() {
		once.Do(func() {
			cancel()
			<-done
			tr.Close()
		})
	})
}

// audience describes generated contacts.
type audience struct {
	contacts []store.Contact
	segment  map[ulid.ULID]bool
}

// seed imports n contacts, their ids spread over the past year like real
// sign-ups; every 20th unsubscribed, every 50th do-not-contact, and every
// contact with i%5 != 0 in segment "newsletter".
func (s *stack) seed(n int) audience {
	t := s.t
	ctx := context.Background()
	now := time.Now()
	entropy := ulid.Monotonic(rand.Reader, 0)
	start := now.Add(-365 * 24 * time.Hour)
	a := audience{segment: map[ulid.ULID]bool{}}
	seg, err := s.store.EnsureSegment(ctx, "newsletter", now)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		at := start.Add(time.Duration(int64(365*24*time.Hour) / int64(n) * int64(i)))
		c := store.Contact{
			ID:         ulid.MustNew(ulid.Timestamp(at), entropy),
			Email:      fmt.Sprintf("user%06d@example.org", i),
			Name:       fmt.Sprintf("User %d", i),
			Attributes: map[string]any{"plan": []string{"free", "pro"}[i%2]},
			Subscribed: i%20 != 7, DoNotContact: i%50 == 3,
		}
		a.contacts = append(a.contacts, c)
		if i%5 != 0 {
			a.segment[c.ID] = true
		}
	}
	for i := 0; i < n; i += 1000 {
		batch := a.contacts[i:min(i+1000, n)]
		if _, err := s.store.ImportContacts(ctx, batch, now); err != nil {
			t.Fatal(err)
		}
		var members []ulid.ULID
		for _, c := range batch {
			if a.segment[c.ID] {
				members = append(members, c.ID)
			}
		}
		if _, err := s.store.AddMembers(ctx, seg, members); err != nil {
			t.Fatal(err)
		}
	}
	return a
}

// eligible is the audience the gate should pass, computed independently of
// the SQL: subscribed, not do-not-contact, and (with inSegment) in the segment.
func (a audience) eligible(inSegment bool) map[string]bool {
	out := map[string]bool{}
	for _, c := range a.contacts {
		if c.Subscribed && !c.DoNotContact && (!inSegment || a.segment[c.ID]) {
			out[c.Email] = true
		}
	}
	return out
}

func (s *stack) create(segment string, throttle int64) string {
	s.t.Helper()
	resp, err := s.client.CreateBroadcast(context.Background(), &pb.CreateBroadcastRequest{
		Name:    "November news",
		Segment: segment,
		Content: &pb.BroadcastContent{
			FromName: "Rangecast News", FromAddress: "news@rangecast.test",
			Subject: "Hello {{.Name}}", Html: "<p>Hi {{.Name}}, you are on the {{.Attributes.plan}} plan.</p><a href=\"{{.UnsubscribeURL}}\">Unsubscribe</a>",
		},
		ThrottlePerHour: throttle,
	})
	if err != nil {
		s.t.Fatalf("create broadcast: %v", err)
	}
	return resp.GetBroadcast().GetId()
}

func (s *stack) status(id string) *pb.Broadcast {
	s.t.Helper()
	resp, err := s.client.GetBroadcast(context.Background(), &pb.GetBroadcastRequest{Id: id})
	if err != nil {
		s.t.Fatalf("get broadcast: %v", err)
	}
	return resp.GetBroadcast()
}

// waitState polls until the broadcast reaches want or the deadline passes.
func (s *stack) waitState(id string, want pb.BroadcastState, within time.Duration) *pb.Broadcast {
	s.t.Helper()
	var b *pb.Broadcast
	if !testenv.Poll(within, func() bool { b = s.status(id); return b.GetState() == want }) {
		s.t.Fatalf("broadcast %s is %s (%s) after %s, want %s; progress: %d/%d ranges, sent %d",
			id, b.GetState(), b.GetReason(), within, want, b.GetProgress().GetRangesDone(), b.GetProgress().GetRangesTotal(), b.GetProgress().GetSent())
	}
	return b
}

// waitQuiet waits until the sink has received nothing new for d.
func (s *stack) waitQuiet(d time.Duration) int {
	last, since := s.sink.Count(), time.Now()
	for time.Since(since) < d {
		time.Sleep(20 * time.Millisecond)
		if n := s.sink.Count(); n != last {
			last, since = n, time.Now()
		}
	}
	return last
}

// exactlyOnce checks the sink received every address in want once and
// nothing else.
func (s *stack) exactlyOnce(want map[string]bool) {
	s.t.Helper()
	got := s.sink.CountByRecipient()
	missing, dup, extra := 0, 0, 0
	for email := range want {
		switch n := got[email]; {
		case n == 0:
			missing++
		case n > 1:
			dup++
		}
	}
	for email := range got {
		if !want[email] {
			extra++
		}
	}
	if missing+dup+extra > 0 || len(got) != len(want) {
		s.t.Fatalf("delivery: %d eligible, %d received; %d missing, %d duplicated, %d sent to someone not eligible",
			len(want), len(got), missing, dup, extra)
	}
}

func (s *stack) start(id string) {
	s.t.Helper()
	if _, err := s.client.StartBroadcast(context.Background(), &pb.StartBroadcastRequest{Id: id}); err != nil {
		s.t.Fatal(err)
	}
}
