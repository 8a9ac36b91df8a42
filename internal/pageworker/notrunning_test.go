package pageworker

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/rangecast/rangecast/internal/bus"
	"github.com/rangecast/rangecast/internal/store"
)

// stallingStore holds the first Claim until released, as a worker stalled
// between reading its page and claiming (or a claim retried through a
// store outage) would.
type stallingStore struct {
	store.Store
	once             sync.Once
	stalled, release chan struct{}
}

func (s *stallingStore) Claim(ctx context.Context, b ulid.ULID, owner string, claims []store.Claim, now time.Time) ([]ulid.ULID, error) {
	s.once.Do(func() {
		close(s.stalled)
		<-s.release
	})
	return s.Store.Claim(ctx, b, owner, claims, now)
}

// TestStalledCopyClaimsNothingAfterCompletion is simulation seed 102394: a
// copy of a page reads its contacts while the broadcast runs, then stalls
// before its claim. Meanwhile one of them unsubscribes, another copy walks
// the range (without them), and the broadcast completes. The stalled copy
// must not claim, let alone send to, the person who unsubscribed, though
// its view of the state (here always "running") is stale, and must not
// report the range walked.
func TestStalledCopyClaimsNothingAfterCompletion(t *testing.T) {
	t.Parallel()
	for name, open := range bothStores {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			tr := &scripted{accepted: map[string]int{}, answer: func(string) error { return nil }}
			f := newCopiesFixture(t, open(t), 10, tr)
			st := &stallingStore{Store: f.st, stalled: make(chan struct{}), release: make(chan struct{})}
			stalledWorker := New(Config{Store: st, Transport: tr, Clock: f.clk, Log: f.w.cfg.Log, Concurrency: 4, States: running{}, ID: "w"})

			var rep bus.Report
			var err error
			done := make(chan struct{})
			go func() {
				defer close(done)
				rep, err = stalledWorker.RunPage(ctx, f.job(), "w/A")
			}()
			<-st.stalled
			gone := f.contacts[3]
			if err := f.st.UnsubscribeContact(ctx, gone.ID, ulid.ULID{}, f.clk.Now()); err != nil {
				t.Fatal(err)
			}
			if repB, err := f.w.RunPage(ctx, f.job(), "w/B"); err != nil || !repB.Done || repB.Sent != 9 {
				t.Fatalf("copy B: %+v, %v; want the range walked, 9 sent", repB, err)
			}
			if _, err := f.st.SetState(ctx, f.b.ID, []store.State{store.StateRunning}, store.StateCompleted, "", f.clk.Now()); err != nil {
				t.Fatal(err)
			}
			close(st.release)
			<-done
			if err != nil || rep.Done || rep.Next != rep.From || rep.Class != bus.ClassCancelled || rep.Sent != 0 {
				t.Fatalf("stalled copy: %+v, %v; want nothing walked, class cancelled", rep, err)
			}
			if n := tr.accepted[gone.Email]; n != 0 {
				t.Errorf("%s unsubscribed before the claim and received %d messages", gone.Email, n)
			}
			if row, err := f.st.GetSend(ctx, f.b.ID, gone.ID); err == nil {
				t.Errorf("ledger row for the unsubscribed contact in a completed broadcast: %+v", row)
			}
		})
	}
}

// TestPauseSeenByTheClaim: the worker's view of the state says running
// throughout, and the broadcast is paused in the store while the page's
// first window sends. The page stops where the store refused its claim:
// every contact below the reported cursor is sent, none at or above it has
// a ledger row, and the page resumed from that cursor sends the rest, each
// contact once.
func TestPauseSeenByTheClaim(t *testing.T) {
	t.Parallel()
	for name, open := range bothStores {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			tr := &scripted{accepted: map[string]int{}}
			f := newCopiesFixture(t, open(t), 24, tr)
			// The send that pauses waits for the pause's commit (tens of
			// ms on Postgres): left behind as a straggler, the page would
			// claim on before the pause is there to be seen.
			f.w.cfg.StragglerAfter = -1
			var pause sync.Once
			tr.answer = func(to string) error {
				if to == f.contacts[0].Email {
					pause.Do(func() {
						if _, err := f.st.SetState(ctx, f.b.ID, []store.State{store.StateRunning}, store.StatePaused, "", f.clk.Now()); err != nil {
							t.Error(err)
						}
					})
				}
				return nil
			}
			rep, err := f.w.RunPage(ctx, f.job(), "w/A")
			if err != nil || rep.Done || rep.Class != bus.ClassPaused {
				t.Fatalf("page: %+v, %v; want it stopped, class paused", rep, err)
			}
			next, err := ulid.ParseStrict(rep.Next)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range f.contacts {
				row, err := f.st.GetSend(ctx, f.b.ID, c.ID)
				if c.ID.Compare(next) < 0 && (err != nil || row.Status != store.SendSent) {
					t.Errorf("%s is below the cursor %s: row %+v, %v; want sent", c.Email, rep.Next, row, err)
				}
				if c.ID.Compare(next) >= 0 && err == nil {
					t.Errorf("%s is at or above the cursor %s and has a ledger row %+v", c.Email, rep.Next, row)
				}
			}
			if rep.Sent == 0 || rep.Sent >= len(f.contacts) {
				t.Errorf("sent %d before the pause, want some and not all", rep.Sent)
			}

			if _, err := f.st.SetState(ctx, f.b.ID, []store.State{store.StatePaused}, store.StateRunning, "", f.clk.Now()); err != nil {
				t.Fatal(err)
			}
			job := f.job()
			job.From = rep.Next
			if rep2, err := f.w.RunPage(ctx, job, "w/B"); err != nil || !rep2.Done || rep.Sent+rep2.Sent != len(f.contacts) {
				t.Fatalf("resumed page: %+v, %v; want the other %d sent", rep2, err, len(f.contacts)-rep.Sent)
			}
			for _, c := range f.contacts {
				if n := tr.accepted[c.Email]; n != 1 {
					t.Errorf("%s received %d copies, want 1", c.Email, n)
				}
			}
		})
	}
}
