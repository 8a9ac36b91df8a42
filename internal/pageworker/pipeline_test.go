package pageworker

import (
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/rangecast/rangecast/internal/bus"
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
			st, tr, f, cs := newTarpitFixture(t)
			slow := cs[1].Email
			ctx := t.Context()
			tr.answer = tarpitOne(t, st, f.b.ID, "w/1", InDoubtWindows*f.w.cfg.Concurrency, slow, len(cs)-1, tc.answer)
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

// TestStragglersJudgedAsTheirWindow: a window's slow sends, left behind as
// stragglers, are judged as the whole window would have been: the same
// report and the same outcomes as a worker that waits for every window
// whole. Judged apart, the slow few looked like a window of their own (two
// late "550 5.7.1" halted the broadcast; one late 421 at connect backed the
// range off) and the fast part like a whole window (3 fast 451 among 4
// fast sends stopped the page). Found by a review.
func TestStragglersJudgedAsTheirWindow(t *testing.T) {
	t.Parallel()
	slowly := func(err error) func() error {
		return func() error { time.Sleep(200 * time.Millisecond); return err }
	}
	deferred := func() error {
		return &transport.SendError{Code: 451, Enhanced: "4.3.0", Text: "try again later", Stage: transport.StageRcpt}
	}
	refusedAtData := &transport.SendError{Code: 550, Enhanced: "5.7.1", Text: "message rejected by the recipient's filter", Stage: transport.StageData}
	for _, tc := range []struct {
		name    string
		answers map[int]func() error // by contact index, in id order; the rest accepted at once
		limit   int
	}{
		{"two late policy refusals", map[int]func() error{3: slowly(refusedAtData), 5: slowly(refusedAtData)}, 8},
		{"one late refusal at connect", map[int]func() error{6: slowly(&transport.SendError{Code: 421, Text: "service not available, closing channel", Stage: transport.StageConnect})}, 8},
		{"fast deferrals, slow accepts", map[int]func() error{
			1: deferred, 3: deferred, 5: deferred,
			2: slowly(nil), 4: slowly(nil), 6: slowly(nil), 7: slowly(nil),
		}, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			type result struct {
				class    bus.ErrorClass
				done     bool
				statuses []store.SendStatus
			}
			run := func(after time.Duration) result {
				st := testenv.SQLite(t)
				tr := &scripted{accepted: map[string]int{}}
				f := newCopiesFixture(t, st, 16, tr)
				f.w = New(Config{Store: st, Transport: tr, Clock: f.clk, Log: f.w.cfg.Log, Concurrency: 8, States: running{}, ID: "w", StragglerAfter: after})
				cs := slices.SortedFunc(slices.Values(f.contacts), func(a, b store.Contact) int { return a.ID.Compare(b.ID) })
				idx := map[string]int{}
				for i, c := range cs {
					idx[c.Email] = i
				}
				tr.answer = func(to string) error {
					if answer, ok := tc.answers[idx[to]]; ok {
						return answer()
					}
					return nil
				}
				job := f.job()
				job.Limit = tc.limit
				rep, err := f.w.RunPage(t.Context(), job, "w/1")
				if err != nil {
					t.Fatal(err)
				}
				r := result{class: rep.Class, done: rep.Done}
				for _, c := range cs[:8] {
					row, err := st.GetSend(t.Context(), f.b.ID, c.ID)
					if err != nil {
						t.Fatal(err)
					}
					r.statuses = append(r.statuses, row.Status)
				}
				return r
			}
			whole, late := run(-1), run(10*time.Millisecond)
			if late.class != whole.class || late.done != whole.done || !slices.Equal(late.statuses, whole.statuses) {
				t.Errorf("with stragglers: class %q, done %v, first window %v; waiting for the window whole: class %q, done %v, %v",
					late.class, late.done, late.statuses, whole.class, whole.done, whole.statuses)
			}
		})
	}
}

// newTarpitFixture is 24 contacts (six windows of 4, in id order) on
// SQLite, and a worker that leaves sends behind 20 ms after their window.
func newTarpitFixture(t *testing.T) (store.Store, *scripted, *copiesFixture, []store.Contact) {
	st := testenv.SQLite(t)
	tr := &scripted{accepted: map[string]int{}}
	f := newCopiesFixture(t, st, 24, tr)
	f.w.cfg.StragglerAfter = 20 * time.Millisecond
	return st, tr, f, slices.SortedFunc(slices.Values(f.contacts), func(a, b store.Contact) int { return a.ID.Compare(b.ID) })
}

// tarpitOne answers every recipient at once but slow, whose answer it holds
// until the others (n of them) have been sent, or gives up after 10 s (the
// run waited for it). At every send it checks that owner holds at most
// bound claims of broadcast b without an outcome.
func tarpitOne(t *testing.T, st store.Store, b ulid.ULID, owner string, bound int, slow string, n int, answer error) func(to string) error {
	var mu sync.Mutex
	others := 0
	allOthers := make(chan struct{})
	return func(to string) error {
		held, err := st.InDoubt(t.Context(), b, owner, 100)
		if err != nil || len(held) > bound {
			t.Errorf("sending %s: %d claims without an outcome (%v), want ≤ %d", to, len(held), err, bound)
		}
		if to != slow {
			mu.Lock()
			if others++; others == n {
				close(allOthers)
			}
			mu.Unlock()
			return nil
		}
		select {
		case <-allOthers:
			return answer
		case <-time.After(10 * time.Second):
			return errors.New("tarpit gave up: the run waited for this send before sending the rest")
		}
	}
}
