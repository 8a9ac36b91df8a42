package coordinator

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rangecast/rangecast/internal/bus"
	"github.com/rangecast/rangecast/internal/clock"
)

// TestReportToStoppedActor: a report handed to an actor that stopped after
// the consumer looked it up comes back at once. Reports are consumed one at
// a time, so waiting there for the "actor busy" timeout (30 s) held back
// every broadcast's reports behind one that had just finished.
func TestReportToStoppedActor(t *testing.T) {
	t.Parallel()
	a := &actor{
		c:       &Coordinator{cfg: Config{Clock: clock.NewFake(time.Unix(0, 0))}},
		reports: make(chan reportReq),
		done:    make(chan struct{}),
	}
	close(a.done)
	errc := make(chan error, 1)
	go func() { errc <- a.report(context.Background(), bus.Report{}) }()
	select {
	case err := <-errc:
		if !errors.Is(err, errActorGone) {
			t.Fatalf("report = %v, want errActorGone", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a report to a stopped actor waits (for a clock that is not moving)")
	}
}

// TestUnknownReasonSaysWhatIsKnown: an in-doubt claim with no account of
// its own says the worker stopped before recording whether it was sent (a
// relay hanging at connect left claims never sent), and how to send it;
// one the worker handed over keeps its own account.
func TestUnknownReasonSaysWhatIsKnown(t *testing.T) {
	if r := unknownReason(""); !strings.Contains(r, "before recording whether it was sent") || !strings.Contains(r, "--include-unknown") {
		t.Errorf("unknownReason(\"\") = %q; want it to say the outcome was never recorded, and how to send it", r)
	}
	if r := unknownReason("in doubt: smtp data: connection reset after the final dot"); !strings.HasPrefix(r, "in doubt: smtp data: connection reset") ||
		!strings.Contains(r, "not sent again") {
		t.Errorf("unknownReason of a handed-over claim = %q; want its own account first", r)
	}
}

// TestRefusalsFromBeforeTheResumeDoNotCount: a refused page issued before
// the operator's last resume is old news. Its report can come in minutes
// later (a page's sends, redeliveries); counted, an outage's late reports
// failed a broadcast whose relay was taking mail again (simulation seed
// 14872). A page issued after it counts, so a relay still refusing fails
// the broadcast as before, and so does a report without Issued (a worker
// older than it), or failure detection would be off during an upgrade.
func TestRefusalsFromBeforeTheResumeDoNotCount(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Unix(1_000_000, 0))
	a := &actor{c: &Coordinator{cfg: Config{Clock: clk, MaxFruitless: 100, Backoff: time.Second, MaxBackoff: time.Second,
		Jitter: func(int64) int64 { return 0 }}}, fruitlessBase: map[int]int{}}
	issuedBefore := clk.Now()
	clk.Advance(time.Second)
	a.resumedAt = clk.Now()
	count := func(issued time.Time, n int) int {
		before := a.refusedPages
		for range n {
			clk.Advance(2 * time.Second)
			if _, err := a.refused(context.Background(), bus.Report{Issued: issued}, clk.Now()); err != nil {
				t.Fatal(err)
			}
		}
		return a.refusedPages - before
	}
	if n := count(issuedBefore, 5); n != 0 {
		t.Errorf("%d refused pages counted from pages issued before the resume; want 0", n)
	}
	if n := count(time.Time{}, 3); n != 3 {
		t.Errorf("%d of 3 refused pages without Issued counted; want 3", n)
	}
	if n := count(clk.Now().Add(time.Second), 5); n != 5 {
		t.Errorf("%d of 5 refused pages issued after the resume counted; want 5", n)
	}
}

// TestFruitlessFromBeforeTheResumeDoesNotCount: a range's page issued
// before the operator's last resume backs the range off but adds nothing
// to its fruitless count (no KV write: this actor has no KV, and a write
// would fail the test), and only the resumptions after the resume count
// toward the limit: a count an outage brought near it before the pause is
// neither pushed over it by that page's late report nor by the first
// refused page after the resume.
func TestFruitlessFromBeforeTheResumeDoesNotCount(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Unix(1_000_000, 0))
	a := &actor{c: &Coordinator{cfg: Config{Clock: clk, MaxFruitless: 8, Backoff: time.Second, MaxBackoff: time.Minute,
		Jitter: func(int64) int64 { return 0 }}},
		recs: []bus.RangeRecord{{Fruitless: 7}}, notBefore: map[int]time.Time{}, lastErr: map[int]string{}, fruitlessBase: map[int]int{0: 7}}
	issued := clk.Now()
	clk.Advance(time.Minute)
	a.resumedAt = clk.Now()
	clk.Advance(time.Second)
	if err := a.fruitless(context.Background(), 0, bus.Report{Issued: issued, Error: "smtp connect: connection refused"}, clk.Now()); err != nil {
		t.Fatal(err)
	}
	if a.recs[0].Fruitless != 7 || !a.notBefore[0].After(clk.Now()) || a.lastErr[0] == "" {
		t.Errorf("after a late report from before the resume: fruitless %d, not before %v, last error %q; want 7, a backoff, the error",
			a.recs[0].Fruitless, a.notBefore[0], a.lastErr[0])
	}
	// The range sent since (its record's count is back to 0): the base
	// follows it down, so the next resumptions count from there.
	a.recs[0].Fruitless = 0
	a.resumedAt = time.Time{}
	func() {
		defer func() { _ = recover() }() // the KV write of the count: this actor has none
		_ = a.fruitless(context.Background(), 0, bus.Report{Issued: clk.Now()}, clk.Now())
	}()
	if a.fruitlessBase[0] != 0 {
		t.Errorf("base %d after the record's count went back to 0; want 0", a.fruitlessBase[0])
	}
}

// TestNATSDataLost: a NATS that answers without rangecast's buckets or
// streams (its data lost) is told from one that does not answer, so the
// status can say to restart the processes, which recreate them.
func TestNATSDataLost(t *testing.T) {
	t.Parallel()
	for err, want := range map[error]bool{
		fmt.Errorf("read range: %w", nats.ErrNoResponders): true,
		fmt.Errorf("kv: %w", jetstream.ErrBucketNotFound):  true,
		context.DeadlineExceeded:                           false,
		nats.ErrConnectionClosed:                           false,
	} {
		if got := natsDataLost(err); got != want {
			t.Errorf("%v: data lost %v, want %v", err, got, want)
		}
	}
}

// TestFruitlessWhileOthersSendDoesNotCount: a range's page that sent
// nothing is not counted toward failing the broadcast when the broadcast
// sent since that range's previous such page (a worker holding none of the
// connections a relay allows met 421 on every page while the other worker
// sent: counted, a range that kept landing on it failed a broadcast the
// relay was taking 50 messages a second of; a tester). It backs off all
// the same; with nothing sent since, it counts (a KV write, which this
// actor without KV cannot make: the panic is the count).
func TestFruitlessWhileOthersSendDoesNotCount(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Unix(1_000_000, 0))
	a := &actor{c: &Coordinator{cfg: Config{Clock: clk, MaxFruitless: 8, Backoff: time.Second, MaxBackoff: time.Minute,
		Jitter: func(int64) int64 { return 0 }}},
		recs: []bus.RangeRecord{{Fruitless: 7}}, notBefore: map[int]time.Time{}, lastErr: map[int]string{}, fruitlessBase: map[int]int{},
		fruitlessAt: map[int]time.Time{0: clk.Now()}}
	rep := bus.Report{Issued: clk.Now().Add(time.Second), Error: "smtp connect: 421 4.7.0 Too many concurrent SMTP connections"}
	clk.Advance(time.Second)
	a.lastSent = clk.Now() // another range's page sent
	clk.Advance(time.Second)
	if err := a.fruitless(context.Background(), 0, rep, clk.Now()); err != nil {
		t.Fatal(err)
	}
	if a.recs[0].Fruitless != 7 || !a.notBefore[0].After(clk.Now()) || a.lastErr[0] == "" {
		t.Errorf("with mail sent since: fruitless %d, not before %v, last error %q; want 7 (the 8th not counted), a backoff, the error",
			a.recs[0].Fruitless, a.notBefore[0], a.lastErr[0])
	}
	clk.Advance(time.Second) // nothing sent since the last one
	counted := func() (counted bool) {
		defer func() { counted = recover() != nil }()
		_ = a.fruitless(context.Background(), 0, rep, clk.Now())
		return false
	}()
	if !counted {
		t.Error("a fruitless page with nothing sent since the last was not counted")
	}
}
