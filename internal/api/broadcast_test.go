package api_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/oklog/ulid/v2"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	"github.com/rangecast/rangecast/internal/ranges"
	"github.com/rangecast/rangecast/internal/store"
	"github.com/rangecast/rangecast/internal/testenv"
	pb "github.com/rangecast/rangecast/proto/rangecast/v1"
)

// newAPIStack is a stack without workers (nothing is ever sent) whose
// coordinator has finished starting up, so a test that ends quickly does not
// cancel the coordinator's startup.
func newAPIStack(t *testing.T) (*stack, pb.AudienceServiceClient) {
	t.Helper()
	s := newStack(t, stackOptions{workers: 0})
	// The coordinator is past its startup once its report consumer has a
	// pull request waiting.
	var err error
	if !testenv.Poll(10*time.Second, func() bool {
		var info *jetstream.ConsumerInfo
		info, err = s.bus.Reports.Info(context.Background())
		return err == nil && info.NumWaiting > 0
	}) {
		t.Fatalf("coordinator did not start consuming reports within 10s (last error: %v)", err)
	}
	return s, pb.NewAudienceServiceClient(s.conn)
}

// wantStatus fails unless err is a gRPC status with code and a message
// containing every one of parts.
func wantStatus(t *testing.T, what string, err error, code codes.Code, parts ...string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: succeeded, want %s", what, code)
		return
	}
	st, ok := status.FromError(err)
	if !ok {
		t.Errorf("%s: error %v is not a gRPC status", what, err)
		return
	}
	if st.Code() != code {
		t.Errorf("%s: code %s (%q), want %s", what, st.Code(), st.Message(), code)
		return
	}
	for _, p := range parts {
		if !strings.Contains(st.Message(), p) {
			t.Errorf("%s: message %q does not mention %q", what, st.Message(), p)
		}
	}
}

// validRequest is a create request that passes every check.
func validRequest() *pb.CreateBroadcastRequest {
	return &pb.CreateBroadcastRequest{
		Name: "November news",
		Content: &pb.BroadcastContent{
			FromName: "Rangecast News", FromAddress: "news@rangecast.test",
			Subject: "Hello {{.Name}}", Html: "<p>Hi {{.Name}}</p><a href=\"{{.UnsubscribeURL}}\">Unsubscribe</a>",
		},
	}
}

func (s *stack) list() []*pb.Broadcast {
	s.t.Helper()
	resp, err := s.client.ListBroadcasts(context.Background(), &pb.ListBroadcastsRequest{})
	if err != nil {
		s.t.Fatalf("list broadcasts: %v", err)
	}
	return resp.GetBroadcasts()
}

// contacts returns every contact that passes the suppression gate, by
// lowercased email.
func (s *stack) contacts() map[string]store.Contact {
	s.t.Helper()
	var last ulid.ULID
	for i := range last {
		last[i] = 0xff
	}
	cs, err := s.store.EligiblePage(context.Background(), store.Broadcast{}, ulid.ULID{}, last, 10000)
	if err != nil {
		s.t.Fatalf("eligible page: %v", err)
	}
	out := map[string]store.Contact{}
	for _, c := range cs {
		out[strings.ToLower(c.Email)] = c
	}
	return out
}

func TestCreateBroadcastRejectsInvalidRequests(t *testing.T) {
	t.Parallel()
	s, _ := newAPIStack(t)
	ctx := context.Background()
	// A segment that exists, so only the unknown one is rejected.
	if _, err := s.store.EnsureSegment(ctx, "newsletter", time.Now()); err != nil {
		t.Fatal(err)
	}
	with := func(change func(*pb.CreateBroadcastRequest)) *pb.CreateBroadcastRequest {
		r := validRequest()
		change(r)
		return r
	}
	cases := []struct {
		name string
		req  *pb.CreateBroadcastRequest
		want []string
	}{
		{"empty name", with(func(r *pb.CreateBroadcastRequest) { r.Name = "" }), []string{"name is required"}},
		{"line break in name", with(func(r *pb.CreateBroadcastRequest) { r.Name = "News\r\nBcc: x@y" }), []string{"name", "line break"}},
		{"missing content", with(func(r *pb.CreateBroadcastRequest) { r.Content = nil }), []string{"content is required"}},
		{"CRLF in subject", with(func(r *pb.CreateBroadcastRequest) { r.Content.Subject = "Hi\r\nBcc: x@y" }), []string{"subject", "line break"}},
		{"LF in subject", with(func(r *pb.CreateBroadcastRequest) { r.Content.Subject = "Hi\nBcc: x@y" }), []string{"subject", "line break"}},
		{"empty subject", with(func(r *pb.CreateBroadcastRequest) { r.Content.Subject = " " }), []string{"subject", "empty"}},
		{"CRLF in from name", with(func(r *pb.CreateBroadcastRequest) { r.Content.FromName = "News\r\nBcc: x@y" }), []string{"from_name", "line break"}},
		{"from address without @", with(func(r *pb.CreateBroadcastRequest) { r.Content.FromAddress = "not-an-address" }), []string{"from_address", `"not-an-address"`}},
		{"from address without domain", with(func(r *pb.CreateBroadcastRequest) { r.Content.FromAddress = "a@" }), []string{"from_address", `"a@"`}},
		{"from address with display name", with(func(r *pb.CreateBroadcastRequest) { r.Content.FromAddress = "News <news@rangecast.test>" }), []string{"from_address", "from_name"}},
		{"empty from address", with(func(r *pb.CreateBroadcastRequest) { r.Content.FromAddress = "" }), []string{"from_address", "empty"}},
		{"field typo in subject", with(func(r *pb.CreateBroadcastRequest) { r.Content.Subject = "Hello {{.Nmae}}" }), []string{"subject", ".Nmae", ".Name"}},
		{"field typo in html", with(func(r *pb.CreateBroadcastRequest) { r.Content.Html = "<p>Hi {{.Nmae}}</p>" }), []string{"html", ".Nmae", ".Name"}},
		{"field typo in text", with(func(r *pb.CreateBroadcastRequest) { r.Content.Text = "Hi {{.Nmae}}" }), []string{"text", ".Nmae"}},
		{"field typo in an untaken branch", with(func(r *pb.CreateBroadcastRequest) {
			r.Content.Html = `<p>{{if eq .Name "nobody"}}{{.Nmae}}{{end}}</p>`
		}), []string{"html", ".Nmae"}},
		{"unparseable subject", with(func(r *pb.CreateBroadcastRequest) { r.Content.Subject = "Hello {{" }), []string{"subject", "unclosed action"}},
		{"unparseable html", with(func(r *pb.CreateBroadcastRequest) { r.Content.Html = "<p>{{</p>" }), []string{"html"}},
		{"empty html", with(func(r *pb.CreateBroadcastRequest) { r.Content.Html = "" }), []string{"html", "empty"}},
		{"negative throttle", with(func(r *pb.CreateBroadcastRequest) { r.ThrottlePerHour = -5 }), []string{"throttle_per_hour", "-5"}},
		{"request_id too long", with(func(r *pb.CreateBroadcastRequest) { r.RequestId = strings.Repeat("r", 257) }), []string{"request_id", "257", "256"}},
		{"unknown segment", with(func(r *pb.CreateBroadcastRequest) { r.Segment = "no-such-segment" }), []string{`segment "no-such-segment" does not exist`}},
		// Control characters reach every mail client (subject, from name)
		// or a terminal (name); a name is printed in full by list.
		{"escape in subject", with(func(r *pb.CreateBroadcastRequest) { r.Content.Subject = "\x1b[31mHi" }), []string{"subject", "U+001B"}},
		{"C1 control in from name", with(func(r *pb.CreateBroadcastRequest) { r.Content.FromName = "News\u0085" }), []string{"from_name", "U+0085"}},
		{"bell in name", with(func(r *pb.CreateBroadcastRequest) { r.Name = "News\a" }), []string{"name", "U+0007"}},
		{"name too long", with(func(r *pb.CreateBroadcastRequest) { r.Name = strings.Repeat("n", 257) }), []string{"name is 257 characters; at most 256"}},
	}
	for _, tc := range cases {
		_, err := s.client.CreateBroadcast(ctx, tc.req)
		wantStatus(t, tc.name, err, codes.InvalidArgument, tc.want...)
	}
	if bs := s.list(); len(bs) != 0 {
		t.Fatalf("after %d rejected creates, %d broadcasts exist: %v", len(cases), len(bs), bs)
	}
	// Asking for an unknown segment does not create it.
	if _, err := s.store.SegmentID(ctx, "no-such-segment"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("segment lookup after a rejected create: %v, want not found", err)
	}
	// The same request with the problem removed is accepted: the checks above
	// rejected the problem, not the request.
	ok := validRequest()
	ok.Segment = "newsletter"
	ok.RequestId = strings.Repeat("r", 256)
	ok.Name = strings.Repeat("n", 255) + "é"
	ok.Content.Subject = "Tab\tand emoji 🎉 {{.Name}}"
	if _, err := s.client.CreateBroadcast(ctx, ok); err != nil {
		t.Fatalf("valid request with a 256-character request_id: %v", err)
	}
	if bs := s.list(); len(bs) != 1 {
		t.Fatalf("%d broadcasts after one valid create, want 1", len(bs))
	}
}

func TestCreateBroadcastIdempotent(t *testing.T) {
	t.Parallel()
	s, _ := newAPIStack(t)
	ctx := context.Background()
	req := validRequest()
	req.RequestId = "nov-2025-news"
	first, err := s.client.CreateBroadcast(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	id := first.GetBroadcast().GetId()
	if first.GetBroadcast().GetState() != pb.BroadcastState_BROADCAST_STATE_DRAFT {
		t.Errorf("new broadcast is %s, want draft", first.GetBroadcast().GetState())
	}
	again, err := s.client.CreateBroadcast(ctx, validRequestWithID("nov-2025-news"))
	if err != nil {
		t.Fatalf("repeat with the same request_id and definition: %v", err)
	}
	if again.GetBroadcast().GetId() != id {
		t.Errorf("repeat returned broadcast %s, want the first one %s", again.GetBroadcast().GetId(), id)
	}
	if bs := s.list(); len(bs) != 1 {
		t.Fatalf("%d broadcasts after a repeated create, want 1", len(bs))
	}

	changed := validRequestWithID("nov-2025-news")
	changed.Content.Subject = "Something else"
	_, err = s.client.CreateBroadcast(ctx, changed)
	wantStatus(t, "same request_id, different subject", err, codes.AlreadyExists, "nov-2025-news", id, "different definition")
	for _, change := range []func(*pb.CreateBroadcastRequest){
		func(r *pb.CreateBroadcastRequest) { r.Name = "Other name" },
		func(r *pb.CreateBroadcastRequest) { r.ThrottlePerHour = 100 },
		func(r *pb.CreateBroadcastRequest) { r.Content.Text = "plain {{.UnsubscribeURL}}" },
		func(r *pb.CreateBroadcastRequest) { r.NoUnsubscribeLink = true },
	} {
		r := validRequestWithID("nov-2025-news")
		change(r)
		_, err := s.client.CreateBroadcast(ctx, r)
		wantStatus(t, "same request_id, different definition", err, codes.AlreadyExists, "nov-2025-news")
	}
	bs := s.list()
	if len(bs) != 1 || bs[0].GetContent().GetSubject() != req.GetContent().GetSubject() {
		t.Fatalf("after conflicting creates: %v, want only the first draft unchanged", bs)
	}

	// A different request id is a different broadcast, and so is every
	// create without one.
	for _, rid := range []string{"other", "", ""} {
		if _, err := s.client.CreateBroadcast(ctx, validRequestWithID(rid)); err != nil {
			t.Fatal(err)
		}
	}
	if bs := s.list(); len(bs) != 4 {
		t.Fatalf("%d broadcasts, want 4", len(bs))
	}
}

func validRequestWithID(rid string) *pb.CreateBroadcastRequest {
	r := validRequest()
	r.RequestId = rid
	return r
}

func TestBroadcastLifecycleErrors(t *testing.T) {
	t.Parallel()
	s, _ := newAPIStack(t)
	ctx := context.Background()
	s.seed(40)
	type call struct {
		name string
		do   func(id string) error
	}
	calls := []call{
		{"start", func(id string) error {
			_, err := s.client.StartBroadcast(ctx, &pb.StartBroadcastRequest{Id: id})
			return err
		}},
		{"pause", func(id string) error {
			_, err := s.client.PauseBroadcast(ctx, &pb.PauseBroadcastRequest{Id: id})
			return err
		}},
		{"resume", func(id string) error {
			_, err := s.client.ResumeBroadcast(ctx, &pb.ResumeBroadcastRequest{Id: id})
			return err
		}},
		{"cancel", func(id string) error {
			_, err := s.client.CancelBroadcast(ctx, &pb.CancelBroadcastRequest{Id: id})
			return err
		}},
		{"get", func(id string) error {
			_, err := s.client.GetBroadcast(ctx, &pb.GetBroadcastRequest{Id: id})
			return err
		}},
		{"watch", func(id string) error {
			stream, err := s.client.WatchBroadcast(ctx, &pb.WatchBroadcastRequest{Id: id})
			if err != nil {
				return err
			}
			_, err = stream.Recv()
			return err
		}},
	}
	byName := func(name string) func(string) error {
		for _, c := range calls {
			if c.name == name {
				return c.do
			}
		}
		panic(name)
	}
	unknown := ulid.Make().String()
	for _, c := range calls {
		wantStatus(t, c.name+" with no id", c.do(""), codes.InvalidArgument, "id is required")
		wantStatus(t, c.name+" with a malformed id", c.do("not-a-ulid"), codes.InvalidArgument, `"not-a-ulid"`, "ULID")
		wantStatus(t, c.name+" with a 27-character id", c.do(unknown+"0"), codes.InvalidArgument, "ULID")
		wantStatus(t, c.name+" of an unknown broadcast", c.do(unknown), codes.NotFound, unknown)
	}

	state := func(id string) pb.BroadcastState { return s.status(id).GetState() }
	id := s.create("", 0)
	wantStatus(t, "pause a draft", byName("pause")(id), codes.FailedPrecondition, id, "draft")
	wantStatus(t, "resume a draft", byName("resume")(id), codes.FailedPrecondition, id, "draft")
	if st := state(id); st != pb.BroadcastState_BROADCAST_STATE_DRAFT {
		t.Fatalf("after rejected pause/resume the draft is %s", st)
	}
	if err := byName("start")(id); err != nil {
		t.Fatal(err)
	}
	before := s.status(id)
	wantStatus(t, "start twice", byName("start")(id), codes.FailedPrecondition, id, "running", "only a draft broadcast can be started")
	if after := s.status(id); after.GetState() != pb.BroadcastState_BROADCAST_STATE_RUNNING ||
		!after.GetStartedAt().AsTime().Equal(before.GetStartedAt().AsTime()) || after.GetSnapshotTotal() != before.GetSnapshotTotal() {
		t.Fatalf("a rejected second start changed the broadcast: %v → %v", before, after)
	}
	wantStatus(t, "resume a running broadcast", byName("resume")(id), codes.FailedPrecondition, id, "running")
	if err := byName("pause")(id); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, "pause a paused broadcast", byName("pause")(id), codes.FailedPrecondition, id, "paused")
	wantStatus(t, "start a paused broadcast", byName("start")(id), codes.FailedPrecondition, id, "paused")
	if err := byName("resume")(id); err != nil {
		t.Fatal(err)
	}
	if err := byName("cancel")(id); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"cancel", "pause", "resume", "start"} {
		wantStatus(t, name+" a cancelled broadcast", byName(name)(id), codes.FailedPrecondition, id, "cancelled")
	}
	b := s.status(id)
	if b.GetState() != pb.BroadcastState_BROADCAST_STATE_CANCELLED || b.GetReason() != "cancelled by operator" || b.GetFinishedAt() == nil {
		t.Fatalf("after cancel: state %s reason %q finished %v", b.GetState(), b.GetReason(), b.GetFinishedAt())
	}

	// A draft can be cancelled and then never started.
	draft := s.create("", 0)
	if err := byName("cancel")(draft); err != nil {
		t.Fatalf("cancel a draft: %v", err)
	}
	wantStatus(t, "start a cancelled draft", byName("start")(draft), codes.FailedPrecondition, "cancelled")

	// A failed broadcast can be cancelled rather than resumed, and keeps
	// why it failed.
	failed := s.create("", 0)
	if err := byName("start")(failed); err != nil {
		t.Fatal(err)
	}
	fid, _ := ulid.ParseStrict(failed)
	if _, err := s.store.SetState(ctx, fid, []store.State{store.StateRunning, store.StateCompleted}, store.StateFailed, "the relay refused everyone", time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := byName("cancel")(failed); err != nil {
		t.Fatalf("cancel a failed broadcast: %v", err)
	}
	if b := s.status(failed); b.GetState() != pb.BroadcastState_BROADCAST_STATE_CANCELLED || b.GetReason() != "cancelled by operator after it failed: the relay refused everyone" {
		t.Fatalf("after cancelling a failed broadcast: state %s reason %q", b.GetState(), b.GetReason())
	}
	wantStatus(t, "resume a cancelled broadcast that had failed", byName("resume")(failed), codes.FailedPrecondition, "cancelled")
}

func TestStartEmptyAudienceCompletes(t *testing.T) {
	t.Parallel()
	s, _ := newAPIStack(t)
	ctx := context.Background()
	check := func(what, id string) {
		t.Helper()
		if _, err := s.client.StartBroadcast(ctx, &pb.StartBroadcastRequest{Id: id}); err != nil {
			t.Fatalf("%s: start: %v", what, err)
		}
		b := s.waitState(id, pb.BroadcastState_BROADCAST_STATE_COMPLETED, 10*time.Second)
		p := b.GetProgress()
		if b.GetSnapshotTotal() != 0 || p.GetRangesTotal() != 0 || len(p.GetRanges()) != 0 || p.GetSent() != 0 {
			t.Errorf("%s: snapshot %d, ranges %d (%d listed), sent %d; want all 0",
				what, b.GetSnapshotTotal(), p.GetRangesTotal(), len(p.GetRanges()), p.GetSent())
		}
		if b.GetFinishedAt() == nil || b.GetStartedAt() == nil {
			t.Errorf("%s: started %v finished %v, want both set", what, b.GetStartedAt(), b.GetFinishedAt())
		}
	}
	check("no contacts at all", s.create("", 0))

	// Contacts exist, but none is in the segment.
	s.seed(10)
	if _, err := s.store.EnsureSegment(ctx, "empty", time.Now()); err != nil {
		t.Fatal(err)
	}
	check("empty segment", s.create("empty", 0))
}

func TestGetBroadcastOfStartedBroadcast(t *testing.T) {
	t.Parallel()
	s, _ := newAPIStack(t)
	ctx := context.Background()
	a := s.seed(300)
	var eligible []ulid.ULID
	for _, c := range a.contacts {
		if c.Subscribed && !c.DoNotContact {
			eligible = append(eligible, c.ID)
		}
	}
	slices.SortFunc(eligible, ulid.ULID.Compare)
	id := s.create("", 0)
	started, err := s.client.StartBroadcast(ctx, &pb.StartBroadcastRequest{Id: id})
	if err != nil {
		t.Fatal(err)
	}
	for what, b := range map[string]*pb.Broadcast{"start response": started.GetBroadcast(), "get": s.status(id)} {
		if b.GetState() != pb.BroadcastState_BROADCAST_STATE_RUNNING {
			t.Errorf("%s: state %s, want running", what, b.GetState())
		}
		if b.GetSnapshotTotal() != int64(len(eligible)) {
			t.Errorf("%s: snapshot total %d, want %d eligible contacts", what, b.GetSnapshotTotal(), len(eligible))
		}
		if b.GetStartedAt() == nil || b.GetFinishedAt() != nil {
			t.Errorf("%s: started %v finished %v", what, b.GetStartedAt(), b.GetFinishedAt())
		}
		p := b.GetProgress()
		if p.GetRangesTotal() != ranges.Count || len(p.GetRanges()) != ranges.Count || p.GetRangesDone() != 0 {
			t.Fatalf("%s: ranges %d/%d done, %d listed; want 0/%d", what, p.GetRangesDone(), p.GetRangesTotal(), len(p.GetRanges()), ranges.Count)
		}
		if p.GetSent() != 0 || p.GetFailed() != 0 || p.GetInDoubt() != 0 || p.GetDeferred() != 0 {
			t.Errorf("%s: sent %d failed %d in doubt %d deferred %d with no workers", what, p.GetSent(), p.GetFailed(), p.GetInDoubt(), p.GetDeferred())
		}
		var prevEnd ulid.ULID
		for i, r := range p.GetRanges() {
			start, err1 := ulid.ParseStrict(r.GetStart())
			end, err2 := ulid.ParseStrict(r.GetEnd())
			next, err3 := ulid.ParseStrict(r.GetNext())
			if err := errors.Join(err1, err2, err3); err != nil {
				t.Fatalf("%s: range %d start %q end %q next %q: %v", what, i, r.GetStart(), r.GetEnd(), r.GetNext(), err)
			}
			if int(r.GetIndex()) != i || r.GetDone() || r.GetPosition() != 0 || next != start || start.Compare(end) > 0 {
				t.Errorf("%s: range %d = %v; want index %d, not done, position 0, next = start <= end", what, i, r, i)
			}
			if i == 0 && start != eligible[0] {
				t.Errorf("%s: first range starts at %s, want the first eligible id %s", what, start, eligible[0])
			}
			if i > 0 {
				if want, _ := ranges.Next(prevEnd); start != want {
					t.Errorf("%s: range %d starts at %s, want %s right after range %d", what, i, start, want, i-1)
				}
			}
			if i == ranges.Count-1 && end != eligible[len(eligible)-1] {
				t.Errorf("%s: last range ends at %s, want the last eligible id %s", what, end, eligible[len(eligible)-1])
			}
			prevEnd = end
		}
	}
}

func TestWatchBroadcastEndsWhenFinished(t *testing.T) {
	t.Parallel()
	s, _ := newAPIStack(t)
	s.seed(40)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	id := s.create("", 0)
	if _, err := s.client.StartBroadcast(ctx, &pb.StartBroadcastRequest{Id: id}); err != nil {
		t.Fatal(err)
	}
	stream, err := s.client.WatchBroadcast(ctx, &pb.WatchBroadcastRequest{Id: id})
	if err != nil {
		t.Fatal(err)
	}
	first, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if first.GetBroadcast().GetId() != id || first.GetBroadcast().GetState() != pb.BroadcastState_BROADCAST_STATE_RUNNING {
		t.Fatalf("first status: %s %s, want %s running", first.GetBroadcast().GetId(), first.GetBroadcast().GetState(), id)
	}
	if first.GetBroadcast().GetProgress().GetRangesTotal() != ranges.Count {
		t.Errorf("watched status has %d ranges, want %d", first.GetBroadcast().GetProgress().GetRangesTotal(), ranges.Count)
	}
	if _, err := s.client.CancelBroadcast(ctx, &pb.CancelBroadcastRequest{Id: id}); err != nil {
		t.Fatal(err)
	}
	last, n := first, 1
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("after %d statuses: %v (the stream should end by itself once the broadcast is finished)", n, err)
		}
		last, n = resp, n+1
	}
	if last.GetBroadcast().GetState() != pb.BroadcastState_BROADCAST_STATE_CANCELLED {
		t.Fatalf("stream ended after %d statuses with state %s, want cancelled", n, last.GetBroadcast().GetState())
	}

	// Watching a finished broadcast yields its status once and ends.
	stream, err = s.client.WatchBroadcast(ctx, &pb.WatchBroadcastRequest{Id: id})
	if err != nil {
		t.Fatal(err)
	}
	var got []pb.BroadcastState
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, resp.GetBroadcast().GetState())
	}
	if len(got) != 1 || got[0] != pb.BroadcastState_BROADCAST_STATE_CANCELLED {
		t.Fatalf("watching a cancelled broadcast: %v, want one cancelled status", got)
	}
}

// importRows streams rows to ImportContacts, in messages of the given sizes
// (the rest in a last message).
func importRows(t *testing.T, ac pb.AudienceServiceClient, rows []*pb.ContactRow, sizes ...int) *pb.ImportContactsResponse {
	t.Helper()
	stream, err := ac.ImportContacts(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range sizes {
		if err := stream.Send(&pb.ImportContactsRequest{Rows: rows[:n]}); err != nil {
			t.Fatal(err)
		}
		rows = rows[n:]
	}
	if len(rows) > 0 {
		if err := stream.Send(&pb.ImportContactsRequest{Rows: rows}); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := stream.CloseAndRecv()
	if err != nil {
		t.Fatalf("import: %v", err)
	}
	return resp
}

func TestImportContacts(t *testing.T) {
	t.Parallel()
	s, ac := newAPIStack(t)
	ctx := context.Background()
	rows := []*pb.ContactRow{
		/* 1 */ {Email: "ann@example.org", Name: "Ann", Attributes: map[string]string{"plan": "pro"}, Segments: []string{"vip"}},
		/* 2 */ {Email: "not-an-email", Name: "Nobody"},
		/* 3 */ {Email: "bob@example.org", Name: "Bob"},
		/* 4 */ {Email: "ANN@example.org", Name: "Ann again", Segments: []string{"ghost-dup"}},
		// second message: row numbers continue across the stream
		/* 5 */ {Email: "cat@example.org", Name: strings.Repeat("x", 300), Segments: []string{"ghost"}},
		/* 6 */ {Email: "dan@example.org", Name: "Dan\r\nBcc: x@y"},
		/* 7 */ {Email: "eve@example.org", Name: "Eve", Segments: []string{"vip"}},
		/* 8 */ {Email: "a@", Name: "No domain"},
		/* 9 */ {Email: "Bob@Example.org", Name: "Bob twice"},
		/* 10 */ {Email: "  fay@example.org ", Name: "Fay"},
		/* 11 */ {Email: "", Name: "No email"},
		/* 12 */ {Email: "Gus@Example.org", Name: "Gus", Segments: []string{"vip", "staff"}},
		/* 13 */ {Email: "x@example.org\r\nBcc: y@example.org", Name: "Header injection"},
		/* 14 */ {Email: "hal@example.org", Name: "Hal", Unsubscribed: true},
		// 200 characters (400 bytes): within the 256-character limit.
		/* 15 */ {Email: "ida@example.org", Name: strings.Repeat("é", 200)},
		/* 16 */ {Email: "jon@example.org", Name: strings.Repeat("é", 257)},
		/* 17 */ {Email: "kim@example.org", Name: "Kim \u202egnp.exe"},
		/* 18 */ {Email: "lou@example.org", Name: "Lou\a"},
	}
	resp := importRows(t, ac, rows, 4)
	if resp.GetImported() != 7 {
		t.Errorf("imported %d, want 7 (rows 1, 3, 7, 10, 12, 14, 15)", resp.GetImported())
	}
	want := map[int64][]string{
		2:  {"not-an-email", "not a valid email address"},
		4:  {"duplicate of row 1"}, // the CLI rewrites this wording as a file line
		5:  {"name is 300 characters", "256"},
		6:  {"name", "line break"},
		8:  {`"a@"`},
		9:  {"duplicate of row 3"},
		11: {"email is empty"},
		13: {"email", "line break"},
		16: {"name is 257 characters", "256"},
		17: {"name", "bidirectional override U+202E"},
		18: {"name", "control character U+0007"},
	}
	got := map[int64]*pb.RowError{}
	for _, e := range resp.GetErrors() {
		if _, dup := got[e.GetRow()]; dup {
			t.Errorf("row %d reported twice", e.GetRow())
		}
		got[e.GetRow()] = e
	}
	for row, parts := range want {
		e, ok := got[row]
		if !ok {
			t.Errorf("row %d (%s) not reported; errors: %v", row, rows[row-1].GetEmail(), resp.GetErrors())
			continue
		}
		for _, p := range parts {
			if !strings.Contains(e.GetError(), p) {
				t.Errorf("row %d error %q does not mention %q", row, e.GetError(), p)
			}
		}
		if e.GetEmail() != strings.TrimSpace(rows[row-1].GetEmail()) {
			t.Errorf("row %d reported with email %q, want %q", row, e.GetEmail(), rows[row-1].GetEmail())
		}
	}
	for row := range got {
		if _, ok := want[row]; !ok {
			t.Errorf("row %d rejected: %q", row, got[row].GetError())
		}
	}
	if int(resp.GetImported())+len(resp.GetErrors()) != len(rows) {
		t.Errorf("imported %d + rejected %d != %d rows", resp.GetImported(), len(resp.GetErrors()), len(rows))
	}

	cs := s.contacts()
	// hal is imported but unsubscribed, so not eligible.
	wantEligible := []string{"ann@example.org", "bob@example.org", "eve@example.org", "fay@example.org", "gus@example.org", "ida@example.org"}
	if len(cs) != len(wantEligible) {
		t.Errorf("eligible contacts after import: %v, want %v", keys(cs), wantEligible)
	}
	for _, e := range wantEligible {
		if _, ok := cs[e]; !ok {
			t.Errorf("%s not stored", e)
		}
	}
	if c := cs["ann@example.org"]; c.Name != "Ann" || c.Attributes["plan"] != "pro" {
		t.Errorf("ann stored as %q %v; the rejected duplicate must not change her", c.Name, c.Attributes)
	}
	if c := cs["fay@example.org"]; c.Email != "fay@example.org" {
		t.Errorf("fay stored with email %q, want it trimmed", c.Email)
	}
	// Rows that were rejected wrote nothing, not even their segments.
	for _, seg := range []string{"ghost", "ghost-dup"} {
		if _, err := s.store.SegmentID(ctx, seg); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("segment %q of a rejected row: %v, want not found", seg, err)
		}
	}

	// Re-import with a different case: the same contact is updated.
	annID := cs["ann@example.org"].ID
	resp = importRows(t, ac, []*pb.ContactRow{{Email: "ANN@EXAMPLE.ORG", Name: "Ann Updated", Attributes: map[string]string{"city": "Oslo"}}})
	if resp.GetImported() != 1 || len(resp.GetErrors()) != 0 {
		t.Fatalf("re-import: imported %d, errors %v", resp.GetImported(), resp.GetErrors())
	}
	cs = s.contacts()
	if len(cs) != len(wantEligible) {
		t.Fatalf("re-import with another case created a contact: %v", keys(cs))
	}
	if c := cs["ann@example.org"]; c.ID != annID || c.Name != "Ann Updated" || c.Attributes["plan"] != "pro" || c.Attributes["city"] != "Oslo" {
		t.Errorf("after re-import ann is %s %q %v; want id %s kept, name replaced, attributes merged", c.ID, c.Name, c.Attributes, annID)
	}
	// An import never re-subscribes someone.
	importRows(t, ac, []*pb.ContactRow{{Email: "hal@example.org", Name: "Hal"}})
	if _, ok := s.contacts()["hal@example.org"]; ok {
		t.Error("re-importing an unsubscribed contact subscribed them again")
	}

	// Segments named in rows exist with their members: a broadcast to one
	// is accepted and its snapshot counts exactly them.
	for seg, n := range map[string]int64{"vip": 3, "staff": 1} {
		req := validRequest()
		req.Segment = seg
		created, err := s.client.CreateBroadcast(ctx, req)
		if err != nil {
			t.Fatalf("create broadcast for imported segment %q: %v", seg, err)
		}
		started, err := s.client.StartBroadcast(ctx, &pb.StartBroadcastRequest{Id: created.GetBroadcast().GetId()})
		if err != nil {
			t.Fatal(err)
		}
		if b := started.GetBroadcast(); b.GetSegment() != seg || b.GetSnapshotTotal() != n {
			t.Errorf("broadcast to %q: segment %q, snapshot %d, want %d", seg, b.GetSegment(), b.GetSnapshotTotal(), n)
		}
	}
}

func TestImportContactsEmptyAndAllRejected(t *testing.T) {
	t.Parallel()
	s, ac := newAPIStack(t)
	resp := importRows(t, ac, nil)
	if resp.GetImported() != 0 || len(resp.GetErrors()) != 0 {
		t.Errorf("empty import: %v", resp)
	}
	resp = importRows(t, ac, []*pb.ContactRow{{Email: "x"}, {Email: "y@"}})
	if resp.GetImported() != 0 || len(resp.GetErrors()) != 2 || resp.GetErrors()[0].GetRow() != 1 || resp.GetErrors()[1].GetRow() != 2 {
		t.Errorf("all rows invalid: %v", resp)
	}
	if cs := s.contacts(); len(cs) != 0 {
		t.Errorf("contacts after an import with no valid row: %v", keys(cs))
	}
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func TestHealthAndReflection(t *testing.T) {
	t.Parallel()
	s, _ := newAPIStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	hc := healthpb.NewHealthClient(s.conn)
	for _, svc := range []string{"", pb.BroadcastService_ServiceDesc.ServiceName} {
		resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
		if err != nil {
			t.Fatalf("health check %q: %v", svc, err)
		}
		if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health of %q: %s, want SERVING", svc, resp.GetStatus())
		}
	}

	rc := reflectionpb.NewServerReflectionClient(s.conn)
	stream, err := rc.ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{
		MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{ListServices: ""},
	}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatalf("reflection: %v", err)
	}
	var names []string
	for _, svc := range resp.GetListServicesResponse().GetService() {
		names = append(names, svc.GetName())
	}
	for _, want := range []string{"rangecast.v1.BroadcastService", "rangecast.v1.AudienceService", "grpc.health.v1.Health"} {
		if !slices.Contains(names, want) {
			t.Errorf("reflection lists %v, missing %s", names, want)
		}
	}
	// The descriptors themselves are served too, which is what grpcurl needs.
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{
		MessageRequest: &reflectionpb.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: "rangecast.v1.BroadcastService"},
	}); err != nil {
		t.Fatal(err)
	}
	resp, err = stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetFileDescriptorResponse().GetFileDescriptorProto()) == 0 {
		t.Errorf("no file descriptor for rangecast.v1.BroadcastService: %v", resp.GetErrorResponse())
	}
	stream.CloseSend() //nolint:errcheck
}

// TestImportMergePastTheAttributeLimit: a re-import whose new keys would
// take a contact past 64 attributes is reported as a rejected row with its
// number, writes nothing of the row (nor its segments), and the rest of the
// stream is imported; imports with new keys each time grew a contact
// without bound before (found by an input tester).
func TestImportMergePastTheAttributeLimit(t *testing.T) {
	t.Parallel()
	s, ac := newAPIStack(t)
	attrs := func(prefix string, n int) map[string]string {
		m := map[string]string{}
		for i := range n {
			m[fmt.Sprintf("%s%02d", prefix, i)] = "v"
		}
		return m
	}
	if resp := importRows(t, ac, []*pb.ContactRow{{Email: "ann@example.org", Attributes: attrs("a", 40)}}); resp.GetImported() != 1 {
		t.Fatalf("first import: %v", resp)
	}
	resp := importRows(t, ac, []*pb.ContactRow{
		{Email: "bob@example.org"},
		{Email: "ANN@example.org", Attributes: attrs("b", 30), Segments: []string{"grown"}},
		{Email: "x"},
		{Email: "cat@example.org", Segments: []string{"grown"}},
	})
	if resp.GetImported() != 2 || resp.GetRejected() != 2 || len(resp.GetErrors()) != 2 {
		t.Fatalf("import with a merge past the limit: %v; want 2 imported, rows 2 and 3 rejected", resp)
	}
	if e := resp.GetErrors()[0]; e.GetRow() != 2 || !strings.EqualFold(e.GetEmail(), "ann@example.org") || !strings.Contains(e.GetError(), "more than 64") {
		t.Errorf("the refused merge's row error: %v", e)
	}
	if e := resp.GetErrors()[1]; e.GetRow() != 3 {
		t.Errorf("errors not in row order: %v", resp.GetErrors())
	}
	ann, err := s.store.ContactByEmail(context.Background(), "ann@example.org")
	if err != nil || len(ann.Attributes) != 40 || len(ann.Segments) != 0 {
		t.Errorf("ann after the refused merge: %d attributes, segments %v (%v); want 40 and none", len(ann.Attributes), ann.Segments, err)
	}
	if cat, err := s.store.ContactByEmail(context.Background(), "cat@example.org"); err != nil || !slices.Equal(cat.Segments, []string{"grown"}) {
		t.Errorf("cat, imported beside it: %+v, %v", cat, err)
	}
}

// TestStatusShowsThePolicyInForce: a broadcast that named no in-doubt
// policy shows the coordinator's default in its status, not
// IN_DOUBT_POLICY_UNSPECIFIED (tester); one that named its own shows it.
func TestStatusShowsThePolicyInForce(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{sqlite: true, workers: 1})
	ctx := context.Background()
	id := s.create("", 0)
	b, err := s.client.GetBroadcast(ctx, &pb.GetBroadcastRequest{Id: id})
	if err != nil || b.GetBroadcast().GetInDoubtPolicy() != pb.InDoubtPolicy_IN_DOUBT_POLICY_SKIP {
		t.Errorf("status of a broadcast with no policy of its own: %v, %v; want the default, skip", b.GetBroadcast().GetInDoubtPolicy(), err)
	}
	r, err := s.client.CreateBroadcast(ctx, &pb.CreateBroadcastRequest{Name: "resend", InDoubtPolicy: pb.InDoubtPolicy_IN_DOUBT_POLICY_RESEND,
		Content: &pb.BroadcastContent{FromAddress: "news@example.com", Subject: "Hi", Html: `<a href="{{.UnsubscribeURL}}">unsubscribe</a>`}})
	if err != nil {
		t.Fatal(err)
	}
	if b, err = s.client.GetBroadcast(ctx, &pb.GetBroadcastRequest{Id: r.GetBroadcast().GetId()}); err != nil ||
		b.GetBroadcast().GetInDoubtPolicy() != pb.InDoubtPolicy_IN_DOUBT_POLICY_RESEND {
		t.Errorf("status of a broadcast created with resend: %v, %v", b.GetBroadcast().GetInDoubtPolicy(), err)
	}
	list, err := s.client.ListBroadcasts(ctx, &pb.ListBroadcastsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]pb.InDoubtPolicy{id: pb.InDoubtPolicy_IN_DOUBT_POLICY_SKIP, r.GetBroadcast().GetId(): pb.InDoubtPolicy_IN_DOUBT_POLICY_RESEND}
	for _, lb := range list.GetBroadcasts() {
		if got := lb.GetInDoubtPolicy(); got != want[lb.GetId()] {
			t.Errorf("list shows %s with %v, want %v (the policy in force)", lb.GetId(), got, want[lb.GetId()])
		}
	}
}
