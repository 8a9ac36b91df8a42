package coordinator_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/rangecast/rangecast/internal/bus"
	"github.com/rangecast/rangecast/internal/pageworker"
	"github.com/rangecast/rangecast/internal/ranges"
	"github.com/rangecast/rangecast/internal/store"
	"github.com/rangecast/rangecast/internal/transport"
	pb "github.com/rangecast/rangecast/proto/rangecast/v1"
)

// kvState reads the state workers see for a broadcast ("" when the key is
// missing).
func (s *stack) kvState(id string) string {
	s.t.Helper()
	var rec bus.StateRecord
	_, found, err := bus.GetJSON(context.Background(), s.bus.Broadcasts, bus.StateKey(id), &rec)
	if err != nil {
		s.t.Fatal(err)
	}
	if !found {
		return ""
	}
	return rec.State
}

func (s *stack) putKVState(id string, state store.State) {
	s.t.Helper()
	if _, err := s.bus.Broadcasts.Put(context.Background(), bus.StateKey(id), bus.Encode(bus.StateRecord{State: string(state)})); err != nil {
		s.t.Fatal(err)
	}
}

// waitKVState polls KV until the broadcast's state there is want.
func (s *stack) waitKVState(id string, want store.State, within time.Duration) {
	s.t.Helper()
	start := time.Now()
	for s.kvState(id) != string(want) {
		if time.Since(start) > within {
			s.t.Fatalf("KV state of %s is %q after %v, want %q (store: %v)", id, s.kvState(id), within, want, s.status(id).GetState())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if d := time.Since(start); d > 5*time.Second {
		s.t.Logf("KV state of %s became %q after %v (the leader mirrors once a tick): a slow box", id, want, d.Round(time.Millisecond))
	}
}

// TestKVStateConvergesToTheStore is hole 2 of the reliability issue: the
// store is the truth and KV the workers' copy. A KV state that says paused
// while the store says running (two racing transitions, a lost write) would
// have every worker drop every page for ever; one that says running while
// the store says paused would keep workers sending; a missing key used to
// read as cancelled. The leader brings KV back to the store, and workers
// that find no key ask the store.
func TestKVStateConvergesToTheStore(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{workers: 2, concurrency: 4, pageLimit: 20})
	a := s.seed(300)
	id := s.create("", 72000) // 20 a second: slow enough to meddle with
	s.start(id)
	bid := ulid.MustParseStrict(id)

	// Store running, KV paused. The leader mirrors once a tick (500 ms
	// here); the bound is far above that because the stack shares the box
	// with the rest of the suite: in CI and beside a simulation, the whole
	// stack (store, NATS, workers) once stood still for more than 5 s, one
	// page done in 6 s, and this failed at a 5 s bound. Without the mirror
	// KV never converges, whatever the bound.
	const converges = 30 * time.Second
	s.putKVState(id, store.StatePaused)
	s.waitKVState(id, store.StateRunning, converges)

	// Store paused behind the leader's back, KV still running: workers
	// must stop within a tick or so.
	if _, err := s.store.SetState(context.Background(), bid, []store.State{store.StateRunning}, store.StatePaused, "paused directly in the store", time.Now()); err != nil {
		t.Fatal(err)
	}
	s.waitKVState(id, store.StatePaused, converges)
	quiet := s.waitQuiet(500 * time.Millisecond)
	time.Sleep(time.Second)
	if n := s.sink.Count(); n != quiet {
		t.Fatalf("%d messages sent while the store says paused (was %d)", n-quiet, quiet)
	}

	// Resumed in the store, and the KV key lost: nothing reads that as
	// cancelled; the leader puts it back and the broadcast completes.
	if _, err := s.store.SetState(context.Background(), bid, []store.State{store.StatePaused}, store.StateRunning, "", time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := s.bus.Broadcasts.Delete(context.Background(), bus.StateKey(id)); err != nil {
		t.Fatal(err)
	}
	s.waitState(id, pb.BroadcastState_BROADCAST_STATE_COMPLETED, time.Minute)
	s.exactlyOnce(a.eligible(false))
}

// pageReads counts the pages workers start (their eligible reads).
type pageReads struct {
	store.Store
	n atomic.Int64
}

func (p *pageReads) EligiblePage(ctx context.Context, b store.Broadcast, from, until ulid.ULID, limit int) ([]store.Contact, error) {
	p.n.Add(1)
	return p.Store.EligiblePage(ctx, b, from, until, limit)
}

// TestPausedInStoreStopsRedispatch: when the store says paused and KV still
// says running (the pause's KV write lost), workers start pages, the store
// refuses their claims, and they report the page stopped by the pause. The
// leader then reads the store at once instead of redispatching every
// range's page as fast as the reports come back until its next tick
// brings KV level (found by review: a tight loop of pages for up to a
// tick, 5 s by default).
func TestPausedInStoreStopsRedispatch(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{concurrency: 4, pageLimit: 20})
	reads := &pageReads{Store: s.store}
	s.stopCoord()
	s.coordCfg.Tick = 20 * time.Second // no tick's mirror within the test
	s.startCoordinator()
	s.store = reads
	s.startWorker()
	s.startWorker()
	s.seed(2000)
	id := s.create("", 36000) // 10 a second: running for the whole test
	s.start(id)
	for s.sink.Count() < 5 {
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := s.store.SetState(context.Background(), ulid.MustParseStrict(id), []store.State{store.StateRunning}, store.StatePaused, "paused directly in the store", time.Now()); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	before := reads.n.Load()
	time.Sleep(2 * time.Second)
	n := reads.n.Load() - before
	t.Logf("%d pages started in 2 s with the store paused and KV running", n)
	if n > 2*ranges.Count {
		t.Fatalf("%d pages started in 2 s while the store says paused; want the leader to stop dispatching at the first page the store refused", n)
	}
	if got := s.kvState(id); got != string(store.StatePaused) {
		t.Fatalf("KV state %q a second after a page met the store's pause; want paused", got)
	}
}

// downStore fails every call while down is set: a Postgres failover or a
// dropped network, as the coordinator and the workers both see it.
type downStore struct {
	store.Store
	down atomic.Bool
}

var errStoreDown = errors.New("dial tcp 127.0.0.1:5432: connect: connection refused")

func (d *downStore) EligiblePage(ctx context.Context, b store.Broadcast, from, until ulid.ULID, limit int) ([]store.Contact, error) {
	if d.down.Load() {
		return nil, errStoreDown
	}
	return d.Store.EligiblePage(ctx, b, from, until, limit)
}

func (d *downStore) LastEligible(ctx context.Context, b store.Broadcast, until ulid.ULID) (store.Contact, bool, error) {
	if d.down.Load() {
		return store.Contact{}, false, errStoreDown
	}
	return d.Store.LastEligible(ctx, b, until)
}

func (d *downStore) Claim(ctx context.Context, b ulid.ULID, owner string, claims []store.Claim, now time.Time) ([]ulid.ULID, error) {
	if d.down.Load() {
		return nil, errStoreDown
	}
	return d.Store.Claim(ctx, b, owner, claims, now)
}

func (d *downStore) RecordAndClaim(ctx context.Context, b ulid.ULID, owner string, outcomes []store.Outcome, next []store.Claim, now time.Time) ([]ulid.ULID, error) {
	if d.down.Load() {
		return nil, errStoreDown
	}
	return d.Store.RecordAndClaim(ctx, b, owner, outcomes, next, now)
}

func (d *downStore) GetBroadcast(ctx context.Context, id ulid.ULID) (store.Broadcast, error) {
	if d.down.Load() {
		return store.Broadcast{}, errStoreDown
	}
	return d.Store.GetBroadcast(ctx, id)
}

func (d *downStore) Counts(ctx context.Context, id ulid.ULID) (store.Counts, error) {
	if d.down.Load() {
		return store.Counts{}, errStoreDown
	}
	return d.Store.Counts(ctx, id)
}

// TestStoreOutageIsNotAPoisonPage is hole 3: while the store is down, pages
// used to be NAK'd every few seconds until the delivery limit called them
// poison and failed the broadcast, which cannot be resumed. An outage is
// waited out in place; the broadcast carries on when the store is back and
// nobody is sent twice.
func TestStoreOutageIsNotAPoisonPage(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{workers: 0, concurrency: 4, pageLimit: 20})
	if _, err := bus.Setup(context.Background(), s.bus.JS, bus.Options{Memory: true, PageAckWait: 2 * time.Second, PageMaxDeliver: 3}); err != nil {
		t.Fatal(err)
	}
	down := &downStore{Store: s.store}
	s.stopCoord()
	s.coordCfg.Store = down
	s.startCoordinator()
	s.store = down
	s.startWorker()
	s.startWorker()
	a := s.seed(400)
	id := s.create("", 72000) // 20 a second: the outage lands mid-broadcast
	s.start(id)
	for s.sink.Count() < 40 {
		time.Sleep(10 * time.Millisecond)
	}
	down.down.Store(true)
	time.Sleep(8 * time.Second) // many ack waits and park delays: old code failed here
	down.down.Store(false)
	s.waitState(id, pb.BroadcastState_BROADCAST_STATE_COMPLETED, 2*time.Minute)
	s.exactlyOnce(a.eligible(false))
}

// TestWorkerStopsDuringAnOutage: a worker holding a page while the store is
// down (waiting, retrying its writes) still stops promptly when asked to,
// handing the page back; it does not wait the outage out.
func TestWorkerStopsDuringAnOutage(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{workers: 0, concurrency: 4, pageLimit: 20})
	down := &downStore{Store: s.store}
	a := s.seed(200)
	id := s.create("", 0)
	down.down.Store(true)
	tr, err := transport.NewSMTP(s.sink.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	ctx, cancel := context.WithCancel(context.Background())
	w := pageworker.New(pageworker.Config{Store: down, Bus: s.bus, Transport: tr, Log: testLogger(t), Concurrency: 4,
		FetchWait: 100 * time.Millisecond, ParkDelay: 200 * time.Millisecond})
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	s.start(id) // the coordinator's store is up; the worker's is not
	time.Sleep(3 * time.Second)
	stopped := time.Now()
	cancel()
	select {
	case err := <-done:
		t.Logf("worker stopped %v after the signal, during the outage", time.Since(stopped).Round(time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("worker still running 15 s after it was asked to stop during a store outage")
	}
	// The pages it held go to a healthy worker; nobody is lost or doubled.
	down.down.Store(false)
	s.startWorker()
	s.waitState(id, pb.BroadcastState_BROADCAST_STATE_COMPLETED, time.Minute)
	s.exactlyOnce(a.eligible(false))
}
