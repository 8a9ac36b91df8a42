package pageworker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/oklog/ulid/v2"
	"github.com/rangecast/rangecast/internal/clock"

	"github.com/rangecast/rangecast/internal/bus"
	"github.com/rangecast/rangecast/internal/message"
	"github.com/rangecast/rangecast/internal/store"
)

// revised is a StateSource for which every broadcast runs, at a content
// revision the test sets (as the KV watch reports it).
type revised struct {
	running
	mu   sync.Mutex
	revs []int // the answers to come, the last one kept
}

func (r *revised) Revision(string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.revs) == 0 {
		return 0
	}
	rev := r.revs[0]
	if len(r.revs) > 1 {
		r.revs = r.revs[1:]
	}
	return rev
}

func (r *revised) set(revs ...int) { r.mu.Lock(); defer r.mu.Unlock(); r.revs = revs }

// subjects is a transport that keeps the subject line each recipient got.
type subjects struct {
	mu  sync.Mutex
	got map[string][]byte
}

func (s *subjects) Send(_ context.Context, m message.Rendered) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := bytes.Index(m.Bytes, []byte("Subject: "))
	line, _, _ := bytes.Cut(m.Bytes[i:], []byte("\r\n"))
	s.got[m.To] = line
	return "250 ok", nil
}

func (s *subjects) Close() error { return nil }

// TestStaleJobSendsTheEditedContent: a worker holding a broadcast's content
// runs a page job made before an edit of it (a job queued through the
// pause, or redelivered), with the edit's revision in KV: the page is sent
// the new content, not the content the worker held and the job names.
// The same for a page whose content is edited between two of its windows:
// it stops, and the range's next page reads the new content.
func TestStaleJobSendsTheEditedContent(t *testing.T) {
	t.Parallel()
	for name, open := range bothStores {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			st := open(t)
			tr := &subjects{got: map[string][]byte{}}
			f := newCopiesFixture(t, st, 16, tr)
			states := &revised{}
			f.w.states = states
			// The worker reads revision 0 (and keeps it) on a first page,
			// then the broadcast is paused, edited, resumed.
			rep, c := firstPageThenEdit(t, f, st)
			states.set(1)
			// A job from before the edit: no revision of its own.
			stale := f.job()
			stale.From, stale.Limit = rep.Next, 4
			rep, err := f.w.RunPage(ctx, stale, "w/2")
			if err != nil || rep.Sent != 4 {
				t.Fatalf("stale page: %+v, %v", rep, err)
			}
			// KV ahead of the store (a database restored under a KV that
			// kept its records): the store is the truth, and the page is
			// sent what it holds, not stopped before every window for ever.
			states.set(2)
			ahead := f.job()
			ahead.From, ahead.Limit = rep.Next, 4
			rep, err = f.w.RunPage(ctx, ahead, "w/3")
			if err != nil || rep.Sent != 4 || rep.Class != bus.ClassNone {
				t.Fatalf("page with KV's revision ahead of the store's: %+v, %v; want it sent", rep, err)
			}
			wantEditedAfter(t, tr, f.contacts[:12], 4)
			// A page whose content is older than the watched revision
			// stops before its next window: the page reads revision 2,
			// then the watch says 3.
			if _, err := st.SetState(ctx, f.b.ID, []store.State{store.StateRunning}, store.StatePaused, "", f.clk.Now()); err != nil {
				t.Fatal(err)
			}
			c.Subject = "Edited again"
			if _, _, err := st.EditPaused(ctx, f.b.ID, c, f.clk.Now()); err != nil {
				t.Fatal(err)
			}
			if _, err := st.SetState(ctx, f.b.ID, []store.State{store.StatePaused}, store.StateRunning, "", f.clk.Now()); err != nil {
				t.Fatal(err)
			}
			states.set(2, 3)
			last := f.job()
			last.From = rep.Next
			rep, err = f.w.RunPage(ctx, last, "w/4")
			if err != nil || rep.Class != bus.ClassNone || rep.Done || rep.Sent != 0 || rep.Next != last.From {
				t.Errorf("page whose content is older than KV's: %+v, %v; want it stopped before its first window", rep, err)
			}
			// The copy read for revision 2 when the store had 1 is read
			// again after anomalyTTL: the edit since has revision 2, which
			// KV's record already said.
			f.clk.Advance(anomalyTTL)
			states.set(2)
			rep, err = f.w.RunPage(ctx, last, "w/5")
			if err != nil || rep.Sent != 4 {
				t.Fatalf("last page: %+v, %v", rep, err)
			}
			for _, c := range f.contacts[12:] {
				if got := string(tr.got[c.Email]); got != "Subject: Edited again" {
					t.Errorf("%s got %q after the anomaly's copy expired; want the newest content", c.Email, got)
				}
			}
		})
	}
}

// TestLaggingWatchSendsTheEditedContent: a worker whose KV watch never saw
// the pause, the edit or the resume (revision 0 throughout, state running)
// runs a job made before the edit: the store's revision, read once the
// page holds its claims, is what it sends. The claim checks only the
// state, so without that read the old content went out.
//
// With the revision's first reads failing (a store blip), the read is
// retried, and the new content still goes out.
func TestLaggingWatchSendsTheEditedContent(t *testing.T) {
	t.Parallel()
	for _, blip := range []int{0, 2} {
		for name, open := range bothStores {
			t.Run(fmt.Sprintf("%s/failed_reads=%d", name, blip), func(t *testing.T) {
				t.Parallel()
				laggingWatch(t, &revisionBlip{Store: open(t)}, blip)
			})
		}
	}
}

// revisionBlip fails the first failures ContentRevision reads.
type revisionBlip struct {
	store.Store
	mu       sync.Mutex
	failures int
}

func (s *revisionBlip) ContentRevision(ctx context.Context, id ulid.ULID) (int, error) {
	s.mu.Lock()
	fail := s.failures > 0
	s.failures--
	s.mu.Unlock()
	if fail {
		return 0, errors.New("connection reset by peer")
	}
	return s.Store.ContentRevision(ctx, id)
}

func laggingWatch(t *testing.T, st *revisionBlip, blip int) {
	ctx := t.Context()
	tr := &subjects{got: map[string][]byte{}}
	f := newCopiesFixture(t, st, 16, tr)
	f.w.cfg.Clock = clock.Real{} // a failed read's retry backs off in real time
	f.w.states = &revised{}      // running, revision 0, whatever happens
	rep, _ := firstPageThenEdit(t, f, st)
	st.mu.Lock()
	st.failures = blip // the stale page's reads
	st.mu.Unlock()
	stale := f.job() // Content 0, as the watch says
	stale.From, stale.Limit = rep.Next, 8
	if rep, err := f.w.RunPage(ctx, stale, "w/2"); err != nil || rep.Sent != 8 {
		t.Fatalf("stale page: %+v, %v", rep, err)
	}
	wantEditedAfter(t, tr, f.contacts[:12], 4)
}

// firstPageThenEdit sends f's first 4 contacts a page (the worker reads the
// content, revision 0), then pauses the broadcast, edits its subject to
// "Edited" and resumes it, as an operator does. It returns the page's
// report and the edited content.
func firstPageThenEdit(t *testing.T, f *copiesFixture, st store.Store) (bus.Report, store.Content) {
	t.Helper()
	ctx := t.Context()
	first := f.job()
	first.Limit = 4
	rep, err := f.w.RunPage(ctx, first, "w/1")
	if err != nil || rep.Sent != 4 {
		t.Fatalf("first page: %+v, %v", rep, err)
	}
	if _, err := st.SetState(ctx, f.b.ID, []store.State{store.StateRunning}, store.StatePaused, "", f.clk.Now()); err != nil {
		t.Fatal(err)
	}
	c := f.b.Content
	c.Subject = "Edited"
	if _, _, err := st.EditPaused(ctx, f.b.ID, c, f.clk.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := st.SetState(ctx, f.b.ID, []store.State{store.StatePaused}, store.StateRunning, "", f.clk.Now()); err != nil {
		t.Fatal(err)
	}
	return rep, c
}

// wantEditedAfter checks the subject each of contacts got: the first n the
// content before the edit ("Hi"), the rest the edited one.
func wantEditedAfter(t *testing.T, tr *subjects, contacts []store.Contact, n int) {
	t.Helper()
	for i, c := range contacts {
		want := "Subject: Hi"
		if i >= n {
			want = "Subject: Edited"
		}
		if got := string(tr.got[c.Email]); got != want {
			t.Errorf("contact %d got %q; want %q", i, got, want)
		}
	}
}
