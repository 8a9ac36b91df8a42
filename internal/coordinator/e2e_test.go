package coordinator_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/emersion/go-smtp"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/oklog/ulid/v2"

	"github.com/rangecast/rangecast/internal/bus"
	"github.com/rangecast/rangecast/internal/capture"
	"github.com/rangecast/rangecast/internal/pageworker"
	"github.com/rangecast/rangecast/internal/ranges"
	"github.com/rangecast/rangecast/internal/store"
	pb "github.com/rangecast/rangecast/proto/rangecast/v1"
)

// TestBroadcastEndToEnd: 20,000 contacts, a segment, three workers; pause
// midway; resume; every eligible contact receives exactly one message and
// nobody else does.
func TestBroadcastEndToEnd(t *testing.T) {
	t.Parallel()
	t.Run("Postgres", func(t *testing.T) { t.Parallel(); endToEnd(t, false) })
	t.Run("SQLite", func(t *testing.T) { t.Parallel(); endToEnd(t, true) })
}

func endToEnd(t *testing.T, sqlite bool) {
	const workers, conc = 3, 16
	var pauseOnce sync.Once
	pauseAt := make(chan struct{})
	s := newStack(t, stackOptions{sqlite: sqlite, workers: workers, concurrency: conc})
	a := s.seed(20000)
	want := a.eligible(true)
	id := s.create("newsletter", 0)

	var received atomic.Int64
	s.sink.OnMessage(func(capture.Message) {
		if received.Add(1) == int64(len(want)/3) {
			pauseOnce.Do(func() { close(pauseAt) })
		}
	})
	// Small claim batches: claims without an outcome never exceed the
	// in-flight windows of all workers.
	bid := ulid.MustParseStrict(id)
	sampling, sampled := make(chan struct{}), make(chan int64)
	go func() {
		var worst int64
		defer func() { sampled <- worst }()
		for {
			select {
			case <-sampling:
				return
			case <-time.After(5 * time.Millisecond):
			}
			if n, err := s.pending(bid); err == nil {
				worst = max(worst, n)
			}
		}
	}()
	started := time.Now()
	if _, err := s.client.StartBroadcast(context.Background(), &pb.StartBroadcastRequest{Id: id}); err != nil {
		t.Fatal(err)
	}
	<-pauseAt
	if _, err := s.client.PauseBroadcast(context.Background(), &pb.PauseBroadcastRequest{Id: id}); err != nil {
		t.Fatal(err)
	}
	atPause := s.sink.Count()
	pauseReturned := time.Now()
	quiet := s.waitQuiet(time.Second)
	if after, most := quiet-atPause, workers*pageworker.InDoubtBound(1, conc); after > most {
		t.Fatalf("%d messages arrived after pause returned; at most the claimed windows of each worker (%d, pageworker.InDoubtBound) may", after, most)
	}
	b := s.status(id)
	if b.GetState() != pb.BroadcastState_BROADCAST_STATE_PAUSED || b.GetProgress().GetSent() >= int64(len(want)) {
		t.Fatalf("after pause: state %s, sent %d of %d", b.GetState(), b.GetProgress().GetSent(), len(want))
	}
	t.Logf("paused with %d of %d sent; %d arrived after pause returned", quiet, len(want), quiet-atPause)
	cursorsNotAhead(t, s, bid, a, b)

	if _, err := s.client.ResumeBroadcast(context.Background(), &pb.ResumeBroadcastRequest{Id: id}); err != nil {
		t.Fatal(err)
	}
	pausedFor := time.Since(pauseReturned)
	b = s.waitState(id, pb.BroadcastState_BROADCAST_STATE_COMPLETED, 3*time.Minute)
	elapsed := time.Since(started) - pausedFor
	close(sampling)
	if worst, most := <-sampled, int64(workers*pageworker.InDoubtBound(1, conc)); worst > most {
		t.Errorf("up to %d claims were without an outcome at once; pageworker.InDoubtBound allows %d", worst, most)
	} else {
		t.Logf("at most %d claims without an outcome at any sample (limit %d)", worst, most)
	}
	s.exactlyOnce(want)
	p := b.GetProgress()
	if p.GetRangesTotal() != ranges.Count || p.GetRangesDone() != ranges.Count {
		t.Errorf("ranges: %d/%d done, want %d/%d", p.GetRangesDone(), p.GetRangesTotal(), ranges.Count, ranges.Count)
	}
	if p.GetSent() != int64(len(want)) || p.GetFailed() != 0 || p.GetInDoubt() != 0 {
		t.Errorf("status: sent %d failed %d in doubt %d, want sent %d", p.GetSent(), p.GetFailed(), p.GetInDoubt(), len(want))
	}
	if b.GetSnapshotTotal() != int64(len(want)) {
		t.Errorf("snapshot total %d, want %d", b.GetSnapshotTotal(), len(want))
	}
	var kvSent int64
	for _, r := range p.GetRanges() {
		kvSent += r.GetSent()
		if r.GetPosition() != 1 {
			t.Errorf("range %d position %v, want 1 when done", r.GetIndex(), r.GetPosition())
		}
	}
	if kvSent != int64(len(want)) {
		t.Errorf("sum of range records' sent = %d, want %d", kvSent, len(want))
	}
	writes := s.coord.KVWrites()
	t.Logf("sent %d in %s (excluding the pause): %.0f msg/s; coordinator KV writes: %d (%.1f per 1,000 messages); pages dispatched: %d",
		len(want), elapsed.Round(time.Millisecond), float64(len(want))/elapsed.Seconds(), writes,
		float64(writes)*1000/float64(len(want)), p.GetPagesDispatched())
}

// TestRewalkedPagesSendNothing sets every cursor back to its range's start
// (a stale or lost KV write) and restarts the coordinator: pages walked again
// find their claims and send nothing twice.
func TestRewalkedPagesSendNothing(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{workers: 2, concurrency: 8, pageLimit: 50})
	a := s.seed(3000)
	want := a.eligible(false)
	id := s.create("", 0)
	var pauseOnce sync.Once
	pauseAt := make(chan struct{})
	s.sink.OnMessage(func(capture.Message) {
		if s.sink.Count() >= len(want)/2 {
			pauseOnce.Do(func() { close(pauseAt) })
		}
	})
	ctx := context.Background()
	if _, err := s.client.StartBroadcast(ctx, &pb.StartBroadcastRequest{Id: id}); err != nil {
		t.Fatal(err)
	}
	<-pauseAt
	paused, err := s.client.PauseBroadcast(ctx, &pb.PauseBroadcastRequest{Id: id})
	if err != nil {
		t.Fatal(err)
	}
	// The answer is the broadcast as it stands (a start answers with every
	// range at its start; a pause must not).
	if p := paused.GetBroadcast().GetProgress(); p.GetSent() == 0 || p.GetPagesDispatched() == 0 || p.GetRangesTotal() != ranges.Count {
		t.Errorf("the pause answered with %d sent, %d pages dispatched, %d ranges; want the sends so far", p.GetSent(), p.GetPagesDispatched(), p.GetRangesTotal())
	}
	before := s.waitQuiet(500 * time.Millisecond)
	s.stopCoord()

	// Move every cursor back to the start of its range.
	kv := s.bus.Broadcasts
	for i := range ranges.Count {
		e, err := kv.Get(ctx, bus.RangeKey(id, i))
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue // never reported: at its start already
		}
		if err != nil {
			t.Fatal(err)
		}
		var rec bus.RangeRecord
		if err := bus.Decode(e.Value(), &rec); err != nil {
			t.Fatal(err)
		}
		rec.Next, rec.Done = rec.Start, false
		if _, err := kv.Put(ctx, bus.RangeKey(id, i), bus.Encode(rec)); err != nil {
			t.Fatal(err)
		}
	}
	s.startCoordinator()
	if _, err := s.client.ResumeBroadcast(ctx, &pb.ResumeBroadcastRequest{Id: id}); err != nil {
		t.Fatal(err)
	}
	s.waitState(id, pb.BroadcastState_BROADCAST_STATE_COMPLETED, 2*time.Minute)
	s.exactlyOnce(want)
	t.Logf("%d sent before the rewind, %d after; every eligible contact once", before, s.sink.Count()-before)
}

// TestLowerCursorReportIgnored feeds reports straight to the coordinator (no
// workers): a report behind the cursor, or repeating it, changes nothing.
func TestLowerCursorReportIgnored(t *testing.T) {
	t.Parallel()
	s, id, start, end := reportOnlyStack(t)
	ctx := context.Background()
	mid := midpoint(start, end)
	low := midpoint(start, mid)

	send := func(next ulid.ULID, sent int) {
		t.Helper()
		rep := bus.Report{Broadcast: id, Range: 0, From: start.String(), Next: next.String(), Sent: sent, Claimed: sent}
		if _, err := s.bus.JS.Publish(ctx, bus.ReportSubject(id), bus.Encode(rep)); err != nil {
			t.Fatal(err)
		}
	}
	record := func() bus.RangeRecord {
		t.Helper()
		e, err := s.bus.Broadcasts.Get(ctx, bus.RangeKey(id, 0))
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return bus.RangeRecord{} // the first report is not applied yet
		}
		if err != nil {
			t.Fatal(err)
		}
		var rec bus.RangeRecord
		if err := bus.Decode(e.Value(), &rec); err != nil {
			t.Fatal(err)
		}
		return rec
	}
	waitFor := func(cond func(bus.RangeRecord) bool) bus.RangeRecord {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			rec := record()
			if cond(rec) || time.Now().After(deadline) {
				return rec
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	send(mid, 7)
	rec := waitFor(func(r bus.RangeRecord) bool { return r.Next == mid.String() })
	if rec.Next != mid.String() || rec.Sent != 7 {
		t.Fatalf("advance not applied: next %s sent %d, want %s and 7", rec.Next, rec.Sent, mid)
	}
	send(low, 5) // behind the cursor: ignored
	send(mid, 7) // a duplicate: ignored
	// A marker report that does advance proves the two above were consumed.
	marker, _ := ranges.Next(mid)
	send(marker, 1)
	rec = waitFor(func(r bus.RangeRecord) bool { return r.Next == marker.String() })
	if rec.Next != marker.String() || rec.Sent != 8 {
		t.Fatalf("after a lower and a repeated report: next %s sent %d, want %s and 8 (the lower and repeated ones ignored)", rec.Next, rec.Sent, marker)
	}
}

// TestRedeliveredFruitlessReportCountsOnce: a page that met a transient
// error and moved the cursor past rows it deferred, its report delivered
// again and again (its first application's KV write timed out after it
// happened): the copies are behind the cursor, so they are no resumptions
// of the range, and must not count toward MaxFruitless. Counted, ten
// copies of one report failed the broadcast (simulation seed 1664).
func TestRedeliveredFruitlessReportCountsOnce(t *testing.T) {
	t.Parallel()
	s, id, start, end := reportOnlyStack(t)
	ctx := context.Background()
	mid := midpoint(start, end)
	publish := func(rep bus.Report) {
		t.Helper()
		if _, err := s.bus.JS.Publish(ctx, bus.ReportSubject(id), bus.Encode(rep)); err != nil {
			t.Fatal(err)
		}
	}
	refused := bus.Report{Broadcast: id, Range: 0, From: start.String(), Next: mid.String(), Deferred: 4,
		Class: bus.ClassTransient, Error: "smtp rcpt: 451 4.3.0 try again later"}
	for range 10 {
		publish(refused)
	}
	marker, _ := ranges.Next(mid)
	publish(bus.Report{Broadcast: id, Range: 0, From: mid.String(), Next: marker.String(), Sent: 1, Claimed: 1})
	deadline := time.Now().Add(10 * time.Second)
	for s.status(id).GetProgress().GetRanges()[0].GetNext() != marker.String() && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	st := s.status(id)
	if st.GetState() != pb.BroadcastState_BROADCAST_STATE_RUNNING {
		t.Fatalf("broadcast %s (%s) after one fruitless page reported ten times, want running", st.GetState(), st.GetReason())
	}
	if got := st.GetProgress().GetRanges()[0].GetNext(); got != marker.String() {
		t.Fatalf("range 0 at %s, want %s: the reports were not all applied", got, marker)
	}
}

// reportOnlyStack is a running broadcast of 1,000 contacts and no workers,
// for tests that publish reports themselves, and the bounds of its range 0.
func reportOnlyStack(t *testing.T) (s *stack, id string, start, end ulid.ULID) {
	t.Helper()
	s = newStack(t, stackOptions{workers: 0, concurrency: 4})
	s.seed(1000)
	id = s.create("", 0)
	if _, err := s.client.StartBroadcast(context.Background(), &pb.StartBroadcastRequest{Id: id}); err != nil {
		t.Fatal(err)
	}
	r0 := s.status(id).GetProgress().GetRanges()[0]
	return s, id, ulid.MustParseStrict(r0.GetStart()), ulid.MustParseStrict(r0.GetEnd())
}

func midpoint(a, b ulid.ULID) ulid.ULID {
	// Average of two 128-bit big-endian numbers, byte by byte with carry.
	var out ulid.ULID
	carry := 0
	for i := 15; i >= 0; i-- {
		s := int(a[i]) + int(b[i]) + carry
		out[i], carry = byte(s), s>>8
	}
	// Shift right by one across the 129-bit sum.
	for i := 0; i < 16; i++ {
		next := carry
		carry = int(out[i] & 1)
		out[i] = out[i]>>1 | byte(next<<7)
	}
	return out
}

// TestUnsubscribeMidBroadcast: contacts unsubscribed after the broadcast
// started, before their page ran, receive nothing.
func TestUnsubscribeMidBroadcast(t *testing.T) {
	t.Parallel()
	const pageLimit = 20
	var once sync.Once
	var victims []store.Contact
	var s *stack
	s = newStack(t, stackOptions{workers: 2, concurrency: 4, pageLimit: pageLimit, sinkOpts: []capture.Option{
		// The first RCPT of the broadcast blocks every sender until the
		// unsubscribes are committed: no page has finished yet, so no page
		// after the first of any range has been read.
		capture.WithRcptHook(func(string) *smtp.SMTPError {
			once.Do(func() {
				for _, c := range victims {
					if err := s.store.UnsubscribeContact(context.Background(), c.ID, ulid.ULID{}, time.Now()); err != nil {
						t.Error(err)
					}
				}
			})
			return nil
		}),
	}})
	a := s.seed(2000)
	want := a.eligible(false)
	id := s.create("", 0)

	// Victims: in each range, the eligible contacts past its first page.
	var ids []store.Contact
	for _, c := range a.contacts {
		if want[c.Email] {
			ids = append(ids, c)
		}
	}
	rs, err := audienceRanges(ids)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]int{}
	for _, c := range ids {
		r := ranges.Find(rs, c.ID)
		seen[r]++
		if seen[r] > pageLimit && seen[r]%3 == 0 {
			victims = append(victims, c)
			delete(want, c.Email)
		}
	}
	if len(victims) < 20 {
		t.Fatalf("only %d victims; the test needs ranges longer than a page", len(victims))
	}
	if _, err := s.client.StartBroadcast(context.Background(), &pb.StartBroadcastRequest{Id: id}); err != nil {
		t.Fatal(err)
	}
	b := s.waitState(id, pb.BroadcastState_BROADCAST_STATE_COMPLETED, 2*time.Minute)
	s.exactlyOnce(want)
	// The status accounts for them: the audience at start is what was
	// sent and failed, and those left out.
	p := b.GetProgress()
	if p.GetLeftOut() != int64(len(victims)) || p.GetSent()+p.GetFailed()+p.GetLeftOut() != b.GetSnapshotTotal() {
		t.Errorf("completed: audience %d, sent %d, failed %d, left out %d; want %d left out and the sums equal to the audience",
			b.GetSnapshotTotal(), p.GetSent(), p.GetFailed(), p.GetLeftOut(), len(victims))
	}
	if r, err := pb.NewBroadcastOpsServiceClient(s.conn).ReportBroadcast(context.Background(), &pb.ReportBroadcastRequest{Id: id}); err != nil || r.GetLeftOut() != int64(len(victims)) {
		t.Errorf("report: left out %d, %v; want %d", r.GetLeftOut(), err, len(victims))
	} else if rp := r.GetBroadcast().GetProgress(); rp.GetSent() != p.GetSent() || rp.GetLeftOut() != p.GetLeftOut() || len(rp.GetRanges()) != len(p.GetRanges()) {
		t.Errorf("report's progress: sent %d, left out %d, %d ranges; want the status's %d, %d, %d",
			rp.GetSent(), rp.GetLeftOut(), len(rp.GetRanges()), p.GetSent(), p.GetLeftOut(), len(p.GetRanges()))
	}
	t.Logf("%d contacts unsubscribed mid-broadcast received nothing", len(victims))
}

// cursorsNotAhead checks, with sending stopped, that every eligible contact
// below each range's cursor has a committed outcome.
func cursorsNotAhead(t *testing.T, s *stack, bid ulid.ULID, a audience, b *pb.Broadcast) {
	t.Helper()
	want := a.eligible(true)
	checked := 0
	for _, r := range b.GetProgress().GetRanges() {
		start, next := ulid.MustParseStrict(r.GetStart()), ulid.MustParseStrict(r.GetNext())
		end := ulid.MustParseStrict(r.GetEnd())
		for _, c := range a.contacts {
			if !want[c.Email] || c.ID.Compare(start) < 0 || c.ID.Compare(end) > 0 || (!r.GetDone() && c.ID.Compare(next) >= 0) {
				continue
			}
			row, err := s.store.GetSend(context.Background(), bid, c.ID)
			if err != nil || row.Status != store.SendSent {
				t.Fatalf("range %d's cursor %s passed %s, which has no committed outcome (row %+v, err %v)", r.GetIndex(), r.GetNext(), c.ID, row, err)
			}
			checked++
		}
	}
	t.Logf("every one of %d contacts behind the cursors has a committed outcome", checked)
}
