package pageworker

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/rangecast/rangecast/internal/store"
	"github.com/rangecast/rangecast/internal/testenv"
)

// TestWindowsOverlap: the first send of a page's first window does not
// finish until the first send of its second window has: the second window
// must start as slots free up, not after the slowest send of the first.
// Walking windows one after another, the page would wait out the timeout
// and the blocked send would fail. At the end every contact is sent once,
// and no moment had more claims without an outcome than InDoubtWindows
// windows.
func TestWindowsOverlap(t *testing.T) {
	t.Parallel()
	st := testenv.SQLite(t)
	tr := &scripted{accepted: map[string]int{}}
	f := newCopiesFixture(t, st, 12, tr) // windows of 4
	cs := slices.SortedFunc(slices.Values(f.contacts), func(a, b store.Contact) int { return a.ID.Compare(b.ID) })
	second := make(chan struct{})
	ctx := t.Context()
	tr.answer = func(to string) error {
		held, err := st.InDoubt(ctx, f.b.ID, "w/1", 100)
		if err != nil || len(held) > InDoubtWindows*f.w.cfg.Concurrency {
			t.Errorf("sending %s: %d claims without an outcome (%v), want ≤ %d", to, len(held), err, InDoubtWindows*f.w.cfg.Concurrency)
		}
		switch to {
		case cs[4].Email:
			close(second)
		case cs[0].Email:
			select {
			case <-second:
			case <-time.After(10 * time.Second):
				return errors.New("window 2 did not start while window 1 was still sending")
			}
		}
		return nil
	}
	rep, err := f.w.RunPage(ctx, f.job(), "w/1")
	if err != nil {
		t.Fatal(err)
	}
	if rep.Sent != len(cs) || !rep.Done || rep.Class != "" {
		t.Fatalf("report %+v; want all %d sent and the range done", rep, len(cs))
	}
	for _, c := range cs {
		if n := tr.accepted[c.Email]; n != 1 {
			t.Errorf("%s received %d copies", c.Email, n)
		}
	}
}
