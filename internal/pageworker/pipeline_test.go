package pageworker

import (
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/rangecast/rangecast/internal/store"
	"github.com/rangecast/rangecast/internal/testenv"
	"github.com/rangecast/rangecast/internal/transport"
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

// TestTarpittedSendHoldsNoPage: one recipient's server holds its reply
// until every other contact of the page has been sent (a tarpit, a slow
// end-of-data reply). The page must go on without it: its window is
// recorded without the straggler, later windows are claimed and sent, and
// the straggler's outcome, whatever it is, is recorded before the page
// reports. Waiting for every window whole, the page would sit until the
// tarpit gave up (here: 10 s, then the send fails). At every send the run
// holds at most InDoubtWindows windows without an outcome.
func TestTarpittedSendHoldsNoPage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		answer error // the tarpitted recipient's, once the others are sent
		want   store.SendStatus
	}{
		{"accepted", nil, store.SendSent},
		{"deferred", &transport.SendError{Code: 451, Enhanced: "4.3.0", Text: "try again later", Stage: transport.StageData}, store.SendDeferred},
		{"refused", &transport.SendError{Code: 550, Enhanced: "5.1.1", Text: "no such user", Stage: transport.StageRcpt}, store.SendFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			st := testenv.SQLite(t)
			tr := &scripted{accepted: map[string]int{}}
			f := newCopiesFixture(t, st, 24, tr) // six windows of 4
			f.w.cfg.StragglerAfter = 20 * time.Millisecond
			cs := slices.SortedFunc(slices.Values(f.contacts), func(a, b store.Contact) int { return a.ID.Compare(b.ID) })
			slow := cs[1].Email
			var mu sync.Mutex
			others := 0
			allOthers := make(chan struct{})
			ctx := t.Context()
			tr.answer = func(to string) error {
				held, err := st.InDoubt(ctx, f.b.ID, "w/1", 100)
				if bound := InDoubtWindows * f.w.cfg.Concurrency; err != nil || len(held) > bound {
					t.Errorf("sending %s: %d claims without an outcome (%v), want ≤ %d", to, len(held), err, bound)
				}
				if to != slow {
					mu.Lock()
					if others++; others == len(cs)-1 {
						close(allOthers)
					}
					mu.Unlock()
					return nil
				}
				select {
				case <-allOthers:
					return tc.answer
				case <-time.After(10 * time.Second):
					return errors.New("tarpit gave up: the page waited for this send before sending the rest")
				}
			}
			rep, err := f.w.RunPage(ctx, f.job(), "w/1")
			if err != nil {
				t.Fatal(err)
			}
			if rep.Sent+rep.Deferred+rep.Failed != len(cs) || !rep.Done || rep.Class != "" {
				t.Fatalf("report %+v; want all %d with an outcome and the range done", rep, len(cs))
			}
			for _, c := range cs {
				want := 1
				if c.Email == slow && tc.answer != nil {
					want = 0
				}
				if n := tr.accepted[c.Email]; n != want {
					t.Errorf("%s received %d copies, want %d", c.Email, n, want)
				}
				row, err := st.GetSend(ctx, f.b.ID, c.ID)
				wantStatus := store.SendSent
				if c.Email == slow {
					wantStatus = tc.want
				}
				if err != nil || row.Status != wantStatus {
					t.Errorf("%s: row %+v (%v), want %s", c.Email, row, err, wantStatus)
				}
			}
			if held := len(f.w.late); held != 0 {
				t.Errorf("%d straggler tokens still held after the page", held)
			}
		})
	}
}
