package storetest

import (
	"fmt"
	"slices"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/rangecast/rangecast/internal/store"
)

var stateCases = []testCase{
	{"Transitions", testSetStateTransitions},
	{"FinishedAt", testSetStateFinishedAt},
	{"Unknown", testSetStateUnknown},
}

var broadcastCases = []testCase{
	{"RequestIDIdempotent", testCreateRequestID},
	{"WithoutRequestID", testCreateWithoutRequestID},
	{"ListNewestFirst", testListNewestFirst},
	{"PageWithoutBodies", testBroadcastPage},
	{"RoundTrip", testBroadcastRoundTrip},
	{"GetUnknown", testGetUnknown},
}

var unsubscribeCases = []testCase{
	{"Unknown", testUnsubscribeUnknown},
	{"CaseInsensitive", testUnsubscribeCaseInsensitive},
}

// SetState moves only from the listed states; a refusal is ErrConflict and
// returns the broadcast as it is.
func testSetStateTransitions(f *fixture) {
	b := f.running("states", 0)
	var (
		running   = []store.State{store.StateRunning}
		paused    = []store.State{store.StatePaused}
		unstopped = []store.State{store.StateRunning, store.StatePaused}
	)
	steps := []struct {
		name   string
		from   []store.State
		to     store.State
		reason string
		ok     bool
		want   store.State // state afterwards (also on refusal)
	}{
		{"pause a running broadcast", running, store.StatePaused, "smtp: 535 authentication failed", true, store.StatePaused},
		{"pause again", running, store.StatePaused, "", false, store.StatePaused},
		{"complete a paused one as if running", running, store.StateCompleted, "", false, store.StatePaused},
		{"no states listed", nil, store.StateRunning, "", false, store.StatePaused},
		{"resume", paused, store.StateRunning, "", true, store.StateRunning},
		{"cancel", unstopped, store.StateCancelled, "cancelled by operator", true, store.StateCancelled},
		{"resume a cancelled one", paused, store.StateRunning, "", false, store.StateCancelled},
		{"fail a cancelled one", unstopped, store.StateFailed, "", false, store.StateCancelled},
	}
	reason := ""
	for i, st := range steps {
		now := at(10 + i)
		got, err := f.s.SetState(f.ctx, b.ID, st.from, st.to, st.reason, now)
		if st.ok {
			f.must(err, "%s", st.name)
			reason = st.reason
		} else {
			f.wantErr(err, store.ErrConflict, "%s", st.name)
		}
		if got.ID != b.ID || got.State != st.want || got.Reason != reason {
			f.t.Errorf("%s: returned id %s state %s reason %q, want %s, %s, %q", st.name, got.ID, got.State, got.Reason, b.ID, st.want, reason)
		}
		stored, err := f.s.GetBroadcast(f.ctx, b.ID)
		f.must(err, "GetBroadcast")
		if stored.State != st.want || stored.Reason != reason {
			f.t.Errorf("%s: stored state %s reason %q, want %s, %q", st.name, stored.State, stored.Reason, st.want, reason)
		}
	}
	// The cancel (step 5, at(15)) set FinishedAt; refused transitions later did not move it.
	stored, err := f.s.GetBroadcast(f.ctx, b.ID)
	f.must(err, "GetBroadcast")
	if !stored.FinishedAt.Equal(at(15)) {
		f.t.Errorf("FinishedAt = %v, want the cancel's %v", stored.FinishedAt, at(15))
	}
	if !stored.StartedAt.Equal(at(1)) || stored.SnapshotTotal != b.SnapshotTotal {
		f.t.Errorf("SetState changed the snapshot or start: %+v", stored)
	}
}

// finished_at is set by the moves to completed, cancelled and failed only,
// and cleared by a move back to running.
func testSetStateFinishedAt(f *fixture) {
	cases := []struct {
		from     []store.State
		to       store.State
		finished bool
	}{
		{[]store.State{store.StateRunning}, store.StatePaused, false},
		{[]store.State{store.StateRunning}, store.StateCompleted, true},
		{[]store.State{store.StateRunning}, store.StateCancelled, true},
		{[]store.State{store.StateRunning}, store.StateFailed, true},
		{[]store.State{store.StateDraft}, store.StateCancelled, true},
	}
	for _, tc := range cases {
		var b store.Broadcast
		if slices.Contains(tc.from, store.StateDraft) {
			b = f.draft(string(tc.to), 0)
		} else {
			b = f.running(string(tc.to), 0)
		}
		got, err := f.s.SetState(f.ctx, b.ID, tc.from, tc.to, "why: "+string(tc.to), at(30))
		f.must(err, "%s -> %s", b.State, tc.to)
		want := time.Time{}
		if tc.finished {
			want = at(30)
		}
		if got.State != tc.to || got.Reason != "why: "+string(tc.to) || !got.FinishedAt.Equal(want) {
			f.t.Errorf("%s -> %s: state %s reason %q finished %v; want finished %v", b.State, tc.to, got.State, got.Reason, got.FinishedAt, want)
		}
		if tc.to.Finished() != tc.finished {
			f.t.Errorf("%s.Finished() = %v", tc.to, tc.to.Finished())
		}
	}

	// A failed broadcast resumed (Coordinator.Resume) runs again: it has
	// no finish time until it finishes again.
	b := f.running("resumed after failing", 0)
	_, err := f.s.SetState(f.ctx, b.ID, []store.State{store.StateRunning}, store.StateFailed, "no progress", at(30))
	f.must(err, "fail")
	got, err := f.s.SetState(f.ctx, b.ID, []store.State{store.StatePaused, store.StateFailed}, store.StateRunning, "", at(31))
	f.must(err, "failed -> running")
	if got.State != store.StateRunning || !got.FinishedAt.IsZero() {
		f.t.Errorf("failed -> running: state %s, finished %v; want running with no finish time", got.State, got.FinishedAt)
	}
}

func testSetStateUnknown(f *fixture) {
	_, err := f.s.SetState(f.ctx, f.ids.next(), []store.State{store.StateRunning}, store.StatePaused, "", at(0))
	f.wantErr(err, store.ErrNotFound, "SetState of an unknown broadcast")
}

// A retried create with the same request id returns the first broadcast.
func testCreateRequestID(f *fixture) {
	first := store.Broadcast{ID: f.ids.next(), Name: "first", RequestID: "req-1", Content: content, CreatedAt: at(0)}
	b1, created, err := f.s.CreateBroadcast(f.ctx, first)
	f.must(err, "CreateBroadcast")
	if !created || b1.ID != first.ID || b1.RequestID != "req-1" || b1.State != store.StateDraft {
		f.t.Fatalf("first create: created=%v %+v", created, b1)
	}
	retry := store.Broadcast{ID: f.ids.next(), Name: "retry", RequestID: "req-1", Content: content, CreatedAt: at(1)}
	b2, created, err := f.s.CreateBroadcast(f.ctx, retry)
	f.must(err, "CreateBroadcast retry")
	if created {
		f.t.Errorf("retry with the same request id: created=true")
	}
	if b2.ID != first.ID || b2.Name != "first" || !b2.CreatedAt.Equal(at(0)) {
		f.t.Errorf("retry returned id %s name %q created %v; want the first broadcast %s", b2.ID, b2.Name, b2.CreatedAt, first.ID)
	}
	_, err = f.s.GetBroadcast(f.ctx, retry.ID)
	f.wantErr(err, store.ErrNotFound, "GetBroadcast of the retry's id")
	other, created, err := f.s.CreateBroadcast(f.ctx, store.Broadcast{ID: f.ids.next(), Name: "other", RequestID: "req-2", Content: content, CreatedAt: at(2)})
	f.must(err, "CreateBroadcast req-2")
	if !created || other.ID == first.ID {
		f.t.Errorf("a different request id: created=%v id %s", created, other.ID)
	}
	list, err := f.s.ListBroadcasts(f.ctx)
	f.must(err, "ListBroadcasts")
	if len(list) != 2 {
		f.t.Errorf("ListBroadcasts: %d broadcasts, want 2", len(list))
	}
}

// Without a request id every create is a new broadcast.
func testCreateWithoutRequestID(f *fixture) {
	a := f.draft("same name", 0)
	b := f.draft("same name", 0)
	if a.ID == b.ID || a.RequestID != "" || b.RequestID != "" {
		f.t.Fatalf("two creates: %s %q, %s %q", a.ID, a.RequestID, b.ID, b.RequestID)
	}
	list, err := f.s.ListBroadcasts(f.ctx)
	f.must(err, "ListBroadcasts")
	if len(list) != 2 {
		f.t.Fatalf("ListBroadcasts: %d broadcasts, want 2", len(list))
	}
}

func testListNewestFirst(f *fixture) {
	var want []ulid.ULID
	for _, h := range []int{1, 3, 2} {
		b, _, err := f.s.CreateBroadcast(f.ctx, store.Broadcast{
			ID: f.ids.next(), Name: "h", Content: content, CreatedAt: t0.Add(time.Duration(h) * time.Hour),
		})
		f.must(err, "CreateBroadcast")
		want = append(want, b.ID)
	}
	want = []ulid.ULID{want[1], want[2], want[0]} // 3h, 2h, 1h
	list, err := f.s.ListBroadcasts(f.ctx)
	f.must(err, "ListBroadcasts")
	got := make([]ulid.ULID, len(list))
	for i, b := range list {
		got[i] = b.ID
	}
	if !slices.Equal(got, want) {
		f.t.Errorf("ListBroadcasts order %v, want newest first %v", got, want)
	}
}

// Every field given to CreateBroadcast comes back, and the segment by name.
func testBroadcastRoundTrip(f *fixture) {
	seg, err := f.s.EnsureSegment(f.ctx, "Spring readers", at(0))
	f.must(err, "EnsureSegment")
	in := store.Broadcast{
		ID: f.ids.next(), Name: "Spring", RequestID: "r-spring", Content: content,
		SegmentID: seg, ThrottlePerHour: 3600, InDoubtPolicy: "resend", NoUnsubscribeLink: true, CreatedAt: at(0),
	}
	out, created, err := f.s.CreateBroadcast(f.ctx, in)
	f.must(err, "CreateBroadcast")
	if !created {
		f.t.Fatal("created=false")
	}
	got, err := f.s.GetBroadcast(f.ctx, in.ID)
	f.must(err, "GetBroadcast")
	for _, b := range []store.Broadcast{out, got} {
		if b.ID != in.ID || b.Name != in.Name || b.RequestID != in.RequestID || b.Content != in.Content ||
			b.SegmentID != seg || b.Segment != "Spring readers" || b.ThrottlePerHour != 3600 || b.InDoubtPolicy != "resend" ||
			!b.NoUnsubscribeLink || b.State != store.StateDraft || b.Reason != "" || b.SnapshotTotal != 0 ||
			!b.CreatedAt.Equal(at(0)) || !b.StartedAt.IsZero() || !b.FinishedAt.IsZero() {
			f.t.Errorf("round trip: got %+v, want %+v with segment %q, state draft", b, in, "Spring readers")
		}
	}
	list, err := f.s.ListBroadcasts(f.ctx)
	f.must(err, "ListBroadcasts")
	if len(list) != 1 || list[0].Segment != "Spring readers" || list[0].SegmentID != seg {
		f.t.Errorf("ListBroadcasts = %+v", list)
	}
	whole := f.draft("everyone", 0)
	if whole.SegmentID != 0 || whole.Segment != "" || whole.NoUnsubscribeLink {
		f.t.Errorf("whole-audience broadcast has segment %d %q", whole.SegmentID, whole.Segment)
	}
}

func testGetUnknown(f *fixture) {
	_, err := f.s.GetBroadcast(f.ctx, f.ids.next())
	f.wantErr(err, store.ErrNotFound, "GetBroadcast of an unknown id")
}

func testUnsubscribeUnknown(f *fixture) {
	f.subscribers("known", 1)
	f.wantErr(f.unsubscribe("nobody@example.org", at(1)), store.ErrNotFound, "Unsubscribe(unknown)")
	if n := len(f.eligible()); n != 1 {
		f.t.Errorf("Unsubscribe(unknown) changed the audience: %d eligible, want 1", n)
	}
}

func testUnsubscribeCaseInsensitive(f *fixture) {
	ids := f.upsert([]store.Contact{f.contact("bob@example.com"), f.contact("Carol@Example.com")}, at(0))
	f.must(f.unsubscribe("BOB@Example.COM", at(1)), "Unsubscribe(BOB@Example.COM)")
	f.must(f.unsubscribe("carol@example.com", at(1)), "Unsubscribe(carol@example.com)")
	// Unsubscribing twice is not an error: the address is known.
	f.must(f.unsubscribe("bob@example.com", at(2)), "Unsubscribe(bob) again")
	eligible := f.eligible()
	for i, id := range ids {
		if _, ok := eligible[id]; ok {
			f.t.Errorf("contact %d still eligible after Unsubscribe", i)
		}
	}
}

// BroadcastPage walks every broadcast newest first, limit at a time, and
// carries no bodies: a list of a thousand broadcasts is not a thousand
// HTML documents.
func testBroadcastPage(f *fixture) {
	var want []ulid.ULID
	for i := range 7 {
		want = append(want, f.draft(fmt.Sprintf("b%d", i), 0).ID)
	}
	slices.Reverse(want)
	var got []ulid.ULID
	var before ulid.ULID
	for pages := 0; ; pages++ {
		page, err := f.s.BroadcastPage(f.ctx, before, 3)
		f.must(err, "BroadcastPage")
		for _, b := range page {
			if b.Content.HTML != "" || b.Content.Text != "" || b.Content.Subject != content.Subject || b.Name == "" {
				f.t.Errorf("listed broadcast %s: content %+v; want no bodies, the rest kept", b.ID, b.Content)
			}
			got = append(got, b.ID)
		}
		if len(page) < 3 {
			break
		}
		before = page[len(page)-1].ID
		if pages > 5 {
			f.t.Fatal("pagination does not end")
		}
	}
	if !slices.Equal(got, want) {
		f.t.Errorf("pages gave %v, want %v", got, want)
	}
}
