package pageworker

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/rangecast/rangecast/internal/bus"
	"github.com/rangecast/rangecast/internal/clock"
	"github.com/rangecast/rangecast/internal/message"
	"github.com/rangecast/rangecast/internal/store"
	"github.com/rangecast/rangecast/internal/testenv"
)

// gauge is a transport that counts the sends in flight and keeps the most
// it saw, around a send the test decides.
type gauge struct {
	mu       sync.Mutex
	now, top int
	accepted map[string]int
	answer   func(to string) error
}

func (g *gauge) Send(_ context.Context, m message.Rendered) (string, error) {
	g.mu.Lock()
	g.now++
	g.top = max(g.top, g.now)
	g.mu.Unlock()
	err := g.answer(m.To)
	g.mu.Lock()
	defer g.mu.Unlock()
	g.now--
	if err != nil {
		return "", err
	}
	g.accepted[m.To]++
	return "250 ok", nil
}

func (g *gauge) Close() error { return nil }

// TestNextPageStartsWhileLastWindowSends is "no gap between pages": a
// worker running one page at a time starts its next page (fetch, read,
// claim, first sends) while the last window of the page before is still
// sending. The first send of page 1's last window does not finish until a
// send of page 2 has started; a worker that waited for page 1 to end
// would wait out the timeout, and the send would fail. Meanwhile the
// worker never has more in flight than its window, nor more claims
// without an outcome than InDoubtBound.
func TestNextPageStartsWhileLastWindowSends(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st := testenv.SQLite(t)
	_, js := testenv.NATS(t)
	b, err := bus.Setup(ctx, js, bus.Options{Memory: true})
	if err != nil {
		t.Fatal(err)
	}
	tr := &gauge{accepted: map[string]int{}}
	f := newCopiesFixture(t, st, 16, tr) // 16 contacts, windows of 4
	cs := slices.SortedFunc(slices.Values(f.contacts), func(a, b store.Contact) int { return a.ID.Compare(b.ID) })
	page2 := map[string]bool{}
	for _, c := range cs[8:] {
		page2[c.Email] = true
	}
	w := New(Config{Store: st, Bus: b, Transport: tr, Clock: clock.Real{}, Log: slog.New(slog.DiscardHandler),
		Concurrency: 4, Pages: 1, States: running{}, ID: "w", FetchWait: 100 * time.Millisecond})
	publish := func(i int, from, until store.Contact) {
		job := bus.PageJob{Broadcast: f.b.ID.String(), Range: i, From: from.ID.String(), Until: until.ID.String(), Limit: 8}
		if err := b.PublishPage(ctx, job, time.Now()); err != nil {
			t.Error(err)
		}
	}
	started := make(chan struct{})
	var once sync.Once
	tr.answer = func(to string) error {
		counts, err := st.Counts(ctx, f.b.ID)
		if bound := InDoubtBound(1, 4); err != nil || counts.Claimed > int64(bound) {
			t.Errorf("sending %s: %d claims without an outcome (%v), want ≤ %d", to, counts.Claimed, err, bound)
		}
		switch {
		case to == cs[0].Email: // page 2 is published once page 1 runs
			publish(1, cs[8], cs[15])
		case page2[to]:
			once.Do(func() { close(started) })
		case to == cs[4].Email: // the first of page 1's last window
			select {
			case <-started:
			case <-time.After(10 * time.Second):
				return errors.New("page 2 did not start while page 1's last window was sending")
			}
		}
		return nil
	}
	publish(0, cs[0], cs[7])
	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan struct{})
	go func() { defer close(ran); w.Run(runCtx) }() //nolint:errcheck
	testenv.Eventually(t, "every contact sent", 20*time.Second, func() bool {
		c, err := st.Counts(ctx, f.b.ID)
		return err == nil && c.Sent+c.Failed+c.Deferred == int64(len(cs))
	})
	stop()
	<-ran
	c, err := st.Counts(ctx, f.b.ID)
	if err != nil || c.Sent != int64(len(cs)) {
		t.Fatalf("counts %+v, %v; want all %d sent", c, err, len(cs))
	}
	for _, c := range cs {
		if n := tr.accepted[c.Email]; n != 1 {
			t.Errorf("%s received %d copies", c.Email, n)
		}
	}
	if tr.top > 4 {
		t.Errorf("%d sends in flight at once; the worker's window is 4", tr.top)
	}
}
