package pageworker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/rangecast/rangecast/internal/bus"
	"github.com/rangecast/rangecast/internal/clock"
	"github.com/rangecast/rangecast/internal/message"
	"github.com/rangecast/rangecast/internal/store"
	"github.com/rangecast/rangecast/internal/testenv"
	"github.com/rangecast/rangecast/internal/transport"
)

// bothStores opens a store of each kind the page walk runs on.
var bothStores = map[string]func(testing.TB) store.Store{
	"sqlite":   func(t testing.TB) store.Store { return testenv.SQLite(t) },
	"postgres": func(t testing.TB) store.Store { return testenv.Postgres(t) },
}

// running is a StateSource for which every broadcast runs.
type running struct{}

func (running) Get(context.Context, string) (store.State, error)   { return store.StateRunning, nil }
func (running) Fresh(context.Context, string) (store.State, error) { return store.StateRunning, nil }

// scripted is a transport whose answer per recipient a test decides; it
// counts what it accepted.
type scripted struct {
	mu       sync.Mutex
	accepted map[string]int
	answer   func(to string) error
}

func (s *scripted) Send(_ context.Context, m message.Rendered) (string, error) {
	if err := s.answer(m.To); err != nil {
		return "", err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.accepted[m.To]++
	return "250 ok", nil
}

func (s *scripted) Close() error { return nil }

// copiesFixture is a running broadcast of n contacts on st and a worker
// sending through tr, with no NATS: the page walk alone.
type copiesFixture struct {
	st       store.Store
	b        store.Broadcast
	contacts []store.Contact
	w        *Worker
	clk      *clock.Fake
}

func newCopiesFixture(t *testing.T, st store.Store, n int, tr transport.Transport) *copiesFixture {
	t.Helper()
	emails := make([]string, n)
	for i := range emails {
		emails[i] = fmt.Sprintf("p%02d@example.org", i)
	}
	return newCopiesFixtureOf(t, st, emails, tr)
}

// newCopiesFixtureOf is newCopiesFixture with a contact for each of emails.
func newCopiesFixtureOf(t *testing.T, st store.Store, emails []string, tr transport.Transport) *copiesFixture {
	t.Helper()
	ctx := t.Context()
	clk := clock.NewFake(time.Date(2031, 3, 14, 9, 0, 0, 0, time.UTC))
	cs := make([]store.Contact, len(emails))
	for i, e := range emails {
		cs[i] = store.Contact{ID: ulid.Make(), Email: e, Name: "P", Subscribed: true}
	}
	ids, err := st.ImportContacts(ctx, cs, clk.Now())
	if err != nil {
		t.Fatal(err)
	}
	for i := range cs {
		cs[i].ID = ids[i]
	}
	b, _, err := st.CreateBroadcast(ctx, store.Broadcast{ID: ulid.Make(), Name: "copies", CreatedAt: clk.Now(),
		Content: store.Content{FromAddress: "news@example.com", Subject: "Hi", HTML: "<p>Hi</p>"}})
	if err != nil {
		t.Fatal(err)
	}
	if b, err = st.AcceptBroadcast(ctx, b.ID, clk.Now()); err != nil {
		t.Fatal(err)
	}
	w := New(Config{Store: st, Transport: tr, Clock: clk, Log: slog.New(slog.DiscardHandler), Concurrency: 4,
		States: running{}, ID: "w"})
	return &copiesFixture{st: st, b: b, contacts: cs, w: w, clk: clk}
}

// deferredDue claims every contact as a run that then deferred them all
// (451), due now: what a sweep finds.
func (f *copiesFixture) deferredDue(t *testing.T) {
	t.Helper()
	f.deferredAt(t, func(store.Contact) time.Duration { return 0 })
}

// deferredAt is deferredDue with each contact due after(c) from now.
func (f *copiesFixture) deferredAt(t *testing.T, after func(store.Contact) time.Duration) {
	t.Helper()
	now := f.clk.Now()
	claims := make([]store.Claim, len(f.contacts))
	outcomes := make([]store.Outcome, len(f.contacts))
	for i, c := range f.contacts {
		claims[i] = store.Claim{ContactID: c.ID, Email: c.Email, MessageID: "<" + c.ID.String() + "@example.com>"}
		outcomes[i] = store.Outcome{ContactID: c.ID, Status: store.SendDeferred, RetryAt: now.Add(after(c)), Error: "451 4.3.0 try again later"}
	}
	if _, err := f.st.Claim(t.Context(), f.b.ID, "w/A", claims, now); err != nil {
		t.Fatal(err)
	}
	if err := f.st.RecordOutcomes(t.Context(), f.b.ID, "w/A", outcomes, now); err != nil {
		t.Fatal(err)
	}
}

func (f *copiesFixture) job() bus.PageJob {
	return bus.PageJob{Broadcast: f.b.ID.String(), Range: 0, From: f.b.MinID.String(), Until: f.b.MaxID.String(), Limit: 200}
}

// TestTwoCopiesOfAPageLoseNobody is hole 1 of the reliability issue: copy A
// holds the claim on a window and one of its sends gets a 451; meanwhile
// copy B finds that window claimed, walks past it and reports the range
// done. The cursor only moves forward, so a claim A released would be a
// contact nobody ever mails. The refused contact must stay in the ledger
// (deferred) and go out once through the sweep.
func TestTwoCopiesOfAPageLoseNobody(t *testing.T) {
	t.Parallel()
	for name, open := range bothStores {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			st := open(t)
			inSend, releaseA := make(chan struct{}), make(chan struct{})
			var refuse sync.Once
			tr := &scripted{accepted: map[string]int{}}
			f := newCopiesFixture(t, st, 41, tr)
			victim := f.contacts[1].Email
			tr.answer = func(to string) error {
				if to != victim {
					return nil
				}
				var err error
				refuse.Do(func() {
					close(inSend)
					<-releaseA
					err = &transport.SendError{Code: 451, Enhanced: "4.3.0", Text: "try again later", Stage: transport.StageRcpt}
				})
				return err
			}
			ctx := t.Context()
			var repA bus.Report
			var errA error
			done := make(chan struct{})
			go func() {
				defer close(done)
				repA, errA = f.w.RunPage(ctx, f.job(), "w/A")
			}()
			<-inSend
			repB, errB := f.w.RunPage(ctx, f.job(), "w/B")
			if errB != nil || !repB.Done {
				t.Fatalf("copy B: %+v, %v; want the range walked to its end", repB, errB)
			}
			close(releaseA)
			<-done
			if errA != nil {
				t.Fatalf("copy A: %+v, %v", repA, errA)
			}
			row, err := st.GetSend(ctx, f.b.ID, f.contacts[1].ID)
			if err != nil {
				t.Fatalf("the refused contact has no ledger row (%v): the cursor is past it, so it would never be mailed", err)
			}
			if row.Status != store.SendDeferred {
				t.Fatalf("refused contact's row = %+v, want deferred for a retry", row)
			}

			// The sweep sends it once its retry time has come.
			f.clk.Advance(time.Minute)
			sweep := bus.PageJob{Broadcast: f.b.ID.String(), Range: bus.SweepRange, Limit: 100, Sweep: true}
			if rep, err := f.w.RunPage(ctx, sweep, "w/S"); err != nil || rep.Sent != 1 {
				t.Fatalf("sweep: %+v, %v; want the deferred contact sent", rep, err)
			}
			c, err := st.Counts(ctx, f.b.ID)
			if err != nil {
				t.Fatal(err)
			}
			if c != (store.Counts{Sent: 41}) {
				t.Errorf("ledger = %+v, want all 41 sent", c)
			}
			for _, ct := range f.contacts {
				if n := tr.accepted[ct.Email]; n != 1 {
					t.Errorf("%s received %d copies, want 1", ct.Email, n)
				}
			}
		})
	}
}

// flakyStore fails the next failures outcome writes; with commitFirst the
// write commits before the error (an ambiguous COMMIT: the client never
// hears the answer).
type flakyStore struct {
	store.Store
	mu          sync.Mutex
	failures    int
	commitFirst bool
}

func (s *flakyStore) fail() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failures == 0 {
		return false
	}
	s.failures--
	return true
}

func (s *flakyStore) RecordAndClaim(ctx context.Context, b ulid.ULID, owner string, outcomes []store.Outcome, next []store.Claim, now time.Time) ([]ulid.ULID, error) {
	if !s.fail() {
		return s.Store.RecordAndClaim(ctx, b, owner, outcomes, next, now)
	}
	if s.commitFirst {
		if _, err := s.Store.RecordAndClaim(ctx, b, owner, outcomes, next, now); err != nil {
			return nil, err
		}
	}
	return nil, errors.New("conn closed: unexpected EOF")
}

// TestFailedOutcomeWritesKeepWhatIsKnown is hole 4: a failover, a dropped
// connection or an ambiguous COMMIT on the write that records a window's
// outcomes (and claims the next) must not leave contacts known sent, or
// known unsent, as claims the reconciler can only call unknown. The write is
// retried; an ambiguous commit is resolved by the retry itself (fenced
// outcomes change nothing twice; the owner's claims come back).
func TestFailedOutcomeWritesKeepWhatIsKnown(t *testing.T) {
	t.Parallel()
	for _, ambiguous := range []bool{false, true} {
		for name, open := range bothStores {
			t.Run(fmt.Sprintf("%s/ambiguous=%v", name, ambiguous), func(t *testing.T) {
				t.Parallel()
				flaky := &flakyStore{Store: open(t), failures: 3, commitFirst: ambiguous}
				tr := &scripted{accepted: map[string]int{}, answer: func(string) error { return nil }}
				f := newCopiesFixture(t, flaky, 20, tr)
				f.w.cfg.Clock = clock.Real{} // the retries' backoff runs on real time
				ctx := t.Context()
				rep, err := f.w.RunPage(ctx, f.job(), "w/1")
				if err != nil || !rep.Done || rep.Class != bus.ClassNone || rep.Sent != 20 {
					t.Fatalf("page: %+v, %v; want all 20 sent and the range done", rep, err)
				}
				c, err := flaky.Counts(ctx, f.b.ID)
				if err != nil {
					t.Fatal(err)
				}
				if c != (store.Counts{Sent: 20}) {
					t.Errorf("ledger = %+v; want 20 sent, nothing left claimed or unknown", c)
				}
				for _, ct := range f.contacts {
					if n := tr.accepted[ct.Email]; n != 1 {
						t.Errorf("%s received %d copies, want 1", ct.Email, n)
					}
				}
			})
		}
	}
}

// erasingStore commits the first claim that names contacts (by Claim, or by
// RecordAndClaim when viaRecord), then erases the first of them and loses
// the answer: the retry finds that contact gone.
type erasingStore struct {
	store.Store
	viaRecord bool
	// wholeWindow erases every contact the claim names and pauses the
	// broadcast before the answer is lost: the retry holds nothing that
	// exists and is refused.
	wholeWindow bool
	b           ulid.ULID
	mu          sync.Mutex
	done        bool
	erased      string
}

func (s *erasingStore) claimThenErase(ctx context.Context, next []store.Claim, now time.Time, claim func() ([]ulid.ULID, error)) ([]ulid.ULID, error) {
	s.mu.Lock()
	first := !s.done && len(next) > 0
	s.done = s.done || first
	s.mu.Unlock()
	got, err := claim()
	if !first || err != nil {
		return got, err
	}
	emails := []string{next[0].Email}
	if s.wholeWindow {
		emails = emails[:0]
		for _, c := range next {
			emails = append(emails, c.Email)
		}
		if _, err := s.Store.SetState(ctx, s.b, []store.State{store.StateRunning}, store.StatePaused, "operator", now); err != nil {
			return nil, err
		}
	}
	if _, err := s.Store.Erase(ctx, emails, now); err != nil {
		return nil, err
	}
	s.erased = next[0].Email
	return nil, errors.New("conn closed: unexpected EOF")
}

func (s *erasingStore) Claim(ctx context.Context, b ulid.ULID, owner string, claims []store.Claim, now time.Time) ([]ulid.ULID, error) {
	if s.viaRecord {
		return s.Store.Claim(ctx, b, owner, claims, now)
	}
	return s.claimThenErase(ctx, claims, now, func() ([]ulid.ULID, error) { return s.Store.Claim(ctx, b, owner, claims, now) })
}

func (s *erasingStore) RecordAndClaim(ctx context.Context, b ulid.ULID, owner string, outcomes []store.Outcome, next []store.Claim, now time.Time) ([]ulid.ULID, error) {
	if !s.viaRecord {
		return s.Store.RecordAndClaim(ctx, b, owner, outcomes, next, now)
	}
	return s.claimThenErase(ctx, next, now, func() ([]ulid.ULID, error) {
		return s.Store.RecordAndClaim(ctx, b, owner, outcomes, next, now)
	})
}

// TestClaimRetriedAfterErasure: a claim commits, its answer is lost, and one
// of its contacts is erased before the retry. The retry claims only
// contacts that still exist, so the erased one's row is this run's but
// never comes back: it must be recorded failed, never sent
// (store.ErasedBeforeSend), not left claimed for the reconciler to call
// unknown when the run ends (the simulation's seeds 4608, 9631, 9856).
func TestClaimRetriedAfterErasure(t *testing.T) {
	t.Parallel()
	for _, viaRecord := range []bool{false, true} {
		for name, open := range bothStores {
			t.Run(fmt.Sprintf("%s/recordAndClaim=%v", name, viaRecord), func(t *testing.T) {
				t.Parallel()
				st := &erasingStore{Store: open(t), viaRecord: viaRecord}
				tr := &scripted{accepted: map[string]int{}, answer: func(string) error { return nil }}
				f := newCopiesFixture(t, st, 20, tr)
				f.w.cfg.Clock = clock.Real{} // the retry's backoff runs on real time
				ctx := t.Context()
				rep, err := f.w.RunPage(ctx, f.job(), "w/1")
				if err != nil || !rep.Done || rep.Sent != 19 {
					t.Fatalf("page: %+v, %v; want 19 sent and the range done", rep, err)
				}
				if st.erased == "" {
					t.Fatal("no claim was erased under")
				}
				c, err := st.Counts(ctx, f.b.ID)
				if err != nil {
					t.Fatal(err)
				}
				if c != (store.Counts{Sent: 19, Failed: 1}) {
					t.Errorf("ledger = %+v; want 19 sent and the erased contact failed, nothing claimed or unknown", c)
				}
				for _, ct := range f.contacts {
					want := 1
					if ct.Email == st.erased {
						want = 0
						row, err := st.GetSend(ctx, f.b.ID, ct.ID)
						if err != nil || row.Status != store.SendFailed || row.Error != store.ErasedBeforeSend {
							t.Errorf("erased contact's row: %+v, %v; want failed %q", row, err, store.ErasedBeforeSend)
						}
					}
					if n := tr.accepted[ct.Email]; n != want {
						t.Errorf("%s received %d copies, want %d", ct.Email, n, want)
					}
				}
			})
		}
	}
}

// TestClaimRetriedAfterErasureAndPause is TestClaimRetriedAfterErasure when
// every contact of the window is erased and the broadcast paused before the
// retry (simulation seed 1501249): the retry holds nothing that exists and
// is refused, and the rows the first try claimed must still be recorded
// failed, never sent, not left claimed for the reconciler to call unknown.
func TestClaimRetriedAfterErasureAndPause(t *testing.T) {
	t.Parallel()
	for _, viaRecord := range []bool{false, true} {
		for name, open := range bothStores {
			t.Run(fmt.Sprintf("%s/recordAndClaim=%v", name, viaRecord), func(t *testing.T) {
				t.Parallel()
				st := &erasingStore{Store: open(t), viaRecord: viaRecord, wholeWindow: true}
				tr := &scripted{accepted: map[string]int{}, answer: func(string) error { return nil }}
				f := newCopiesFixture(t, st, 20, tr)
				st.b = f.b.ID
				f.w.cfg.Clock = clock.Real{} // the retry's backoff runs on real time
				ctx := t.Context()
				rep, err := f.w.RunPage(ctx, f.job(), "w/1")
				// Claim: window 0 is the one erased, so nothing is sent.
				// RecordAndClaim: window 2's claim is, after windows 0
				// and 1 were claimed; those two go out.
				wantSent := 0
				if viaRecord {
					wantSent = 8
				}
				if err != nil || rep.Class != bus.ClassPaused || rep.Sent != wantSent {
					t.Fatalf("page: %+v, %v; want paused after %d sent", rep, err, wantSent)
				}
				c, err := st.Counts(ctx, f.b.ID)
				if err != nil {
					t.Fatal(err)
				}
				if want := (store.Counts{Sent: int64(wantSent), Failed: 4}); c != want {
					t.Errorf("ledger = %+v; want %+v: the erased window failed, nothing claimed or unknown", c, want)
				}
				for _, ct := range f.contacts[wantSent : wantSent+4] {
					row, err := st.GetSend(ctx, f.b.ID, ct.ID)
					if err != nil || row.Status != store.SendFailed || row.Error != store.ErasedBeforeSend {
						t.Errorf("erased contact's row: %+v, %v; want failed %q", row, err, store.ErasedBeforeSend)
					}
				}
				for email, n := range tr.accepted {
					if n != 1 {
						t.Errorf("%s received %d copies, want 1", email, n)
					}
				}
			})
		}
	}
}
