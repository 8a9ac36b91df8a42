package coordinator

import (
	"context"
	"crypto/rand"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rangecast/rangecast/internal/bus"
	"github.com/rangecast/rangecast/internal/message"
	"github.com/rangecast/rangecast/internal/ranges"
	"github.com/rangecast/rangecast/internal/store"
	pb "github.com/rangecast/rangecast/proto/rangecast/v1"
)

// maxRequestID bounds client idempotency keys.
const maxRequestID = 256

// BroadcastAPI serves rangecast.v1.BroadcastService.
type BroadcastAPI struct {
	pb.UnimplementedBroadcastServiceServer
	c   *Coordinator
	ids *idSource
	// WatchInterval is how often WatchBroadcast re-sends the status.
	WatchInterval time.Duration
}

// NewBroadcastAPI returns the gRPC service backed by c.
func NewBroadcastAPI(c *Coordinator) *BroadcastAPI {
	return &BroadcastAPI{c: c, ids: newIDSource(), WatchInterval: time.Second}
}

// idSource makes ULIDs from the injected clock; monotonic within a
// millisecond so ids made together keep their order.
type idSource struct {
	mu      sync.Mutex
	entropy *ulid.MonotonicEntropy
}

func newIDSource() *idSource { return &idSource{entropy: ulid.Monotonic(rand.Reader, 0)} }

func (s *idSource) make(now time.Time) ulid.ULID {
	s.mu.Lock()
	defer s.mu.Unlock()
	return ulid.MustNew(ulid.Timestamp(now), s.entropy)
}

func invalid(format string, args ...any) error {
	return status.Errorf(codes.InvalidArgument, format, args...)
}

// storeError maps a store error to a gRPC status with a message a person can act on.
func storeError(err error) error {
	// The sentinel's own words ("not found", "conflict") are what the code
	// says already; the message keeps only what a person can act on.
	msg := strings.TrimSuffix(strings.TrimSuffix(err.Error(), ": "+store.ErrConflict.Error()), ": "+store.ErrNotFound.Error())
	switch {
	case errors.Is(err, store.ErrNotFound):
		return status.Error(codes.NotFound, err.Error())
	case errors.Is(err, store.ErrConflict):
		return status.Error(codes.FailedPrecondition, msg)
	case errors.Is(err, store.ErrInvalid):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return status.FromContextError(err).Err()
	default:
		return status.Error(codes.Internal, err.Error())
	}
}

func parseID(id string) (ulid.ULID, error) {
	if id == "" {
		return ulid.ULID{}, invalid("id is required")
	}
	u, err := ulid.ParseStrict(id)
	if err != nil {
		return ulid.ULID{}, invalid("id %q is not a broadcast id: ids are 26-character ULIDs such as 01J9Z3K8M2T4V6X8Y0A2B4C6D8 (see rangecast broadcasts list)", id)
	}
	return u, nil
}

func (api *BroadcastAPI) CreateBroadcast(ctx context.Context, req *pb.CreateBroadcastRequest) (*pb.CreateBroadcastResponse, error) {
	if req.GetName() == "" {
		return nil, invalid("name is required")
	}
	if err := message.ValidateHeaderValue("name", req.GetName()); err != nil {
		return nil, invalid("%v", err)
	}
	if len(req.GetRequestId()) > maxRequestID {
		return nil, invalid("request_id is %d characters; at most %d are allowed", len(req.GetRequestId()), maxRequestID)
	}
	if req.GetThrottlePerHour() < 0 {
		return nil, invalid("throttle_per_hour must be 0 (no throttle) or positive, not %d", req.GetThrottlePerHour())
	}
	c := req.GetContent()
	if c == nil {
		return nil, invalid("content is required (from_address, subject, html)")
	}
	content := store.Content{FromName: c.GetFromName(), FromAddress: c.GetFromAddress(), Subject: c.GetSubject(), HTML: c.GetHtml(), Text: c.GetText()}
	// Rendering against a sample contact now catches template mistakes before
	// anyone is sent a broken message, and a body without a visible
	// unsubscribe link before it reaches anyone.
	if err := message.CheckBroadcast(message.Template(content), req.GetNoUnsubscribeLink()); err != nil {
		return nil, invalid("content: %v", err)
	}
	var segment int64
	if req.GetSegment() != "" {
		id, err := api.c.cfg.Store.SegmentID(ctx, req.GetSegment())
		if errors.Is(err, store.ErrNotFound) {
			return nil, invalid("segment %q does not exist; import contacts into it first", req.GetSegment())
		}
		if err != nil {
			return nil, storeError(err)
		}
		segment = id
	}
	policy, ok := policyNames[req.GetInDoubtPolicy()]
	if !ok {
		return nil, invalid("in_doubt_policy %v is not one of skip or resend", req.GetInDoubtPolicy())
	}
	if err := api.c.preflightDraft(ctx, store.Broadcast{Content: content, SegmentID: segment}, codes.InvalidArgument); err != nil {
		return nil, err
	}
	now := api.c.cfg.Clock.Now()
	b := store.Broadcast{
		ID: api.ids.make(now), Name: req.GetName(), RequestID: req.GetRequestId(), Content: content,
		SegmentID: segment, Segment: req.GetSegment(), ThrottlePerHour: req.GetThrottlePerHour(),
		InDoubtPolicy: policy, NoUnsubscribeLink: req.GetNoUnsubscribeLink(), State: store.StateDraft, CreatedAt: now,
	}
	out, created, err := api.c.cfg.Store.CreateBroadcast(ctx, b)
	if err != nil {
		return nil, storeError(err)
	}
	if !created && (out.Name != b.Name || out.Content != b.Content || out.SegmentID != b.SegmentID || out.ThrottlePerHour != b.ThrottlePerHour || out.InDoubtPolicy != b.InDoubtPolicy || out.NoUnsubscribeLink != b.NoUnsubscribeLink) {
		return nil, status.Errorf(codes.AlreadyExists, "request_id %q was already used for broadcast %s with a different definition", b.RequestID, out.ID)
	}
	return &pb.CreateBroadcastResponse{Broadcast: toProto(out, nil)}, nil
}

func (api *BroadcastAPI) StartBroadcast(ctx context.Context, req *pb.StartBroadcastRequest) (*pb.StartBroadcastResponse, error) {
	b, err := api.c.Start(ctx, req.GetId())
	if err != nil {
		return nil, err
	}
	return &pb.StartBroadcastResponse{Broadcast: b}, nil
}

func (api *BroadcastAPI) PauseBroadcast(ctx context.Context, req *pb.PauseBroadcastRequest) (*pb.PauseBroadcastResponse, error) {
	b, err := api.c.transition(ctx, req.GetId(), "paused", []store.State{store.StateRunning}, store.StatePaused, "paused by operator")
	if err != nil {
		return nil, err
	}
	return &pb.PauseBroadcastResponse{Broadcast: b}, nil
}

func (api *BroadcastAPI) ResumeBroadcast(ctx context.Context, req *pb.ResumeBroadcastRequest) (*pb.ResumeBroadcastResponse, error) {
	b, err := api.c.transition(ctx, req.GetId(), "resumed", []store.State{store.StatePaused}, store.StateRunning, "")
	if err != nil {
		return nil, err
	}
	return &pb.ResumeBroadcastResponse{Broadcast: b}, nil
}

func (api *BroadcastAPI) CancelBroadcast(ctx context.Context, req *pb.CancelBroadcastRequest) (*pb.CancelBroadcastResponse, error) {
	b, err := api.c.transition(ctx, req.GetId(), "cancelled", []store.State{store.StateDraft, store.StateRunning, store.StatePaused}, store.StateCancelled, "cancelled by operator")
	if err != nil {
		return nil, err
	}
	return &pb.CancelBroadcastResponse{Broadcast: b}, nil
}

func (api *BroadcastAPI) GetBroadcast(ctx context.Context, req *pb.GetBroadcastRequest) (*pb.GetBroadcastResponse, error) {
	id, err := parseID(req.GetId())
	if err != nil {
		return nil, err
	}
	b, err := api.c.Status(ctx, id)
	if err != nil {
		return nil, err
	}
	return &pb.GetBroadcastResponse{Broadcast: b}, nil
}

func (api *BroadcastAPI) WatchBroadcast(req *pb.WatchBroadcastRequest, stream pb.BroadcastService_WatchBroadcastServer) error {
	id, err := parseID(req.GetId())
	if err != nil {
		return err
	}
	ctx := stream.Context()
	for {
		b, err := api.c.Status(ctx, id)
		if err != nil {
			return err
		}
		if err := stream.Send(&pb.WatchBroadcastResponse{Broadcast: b}); err != nil {
			return err
		}
		if store.State(stateName(b.GetState())).Finished() {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-api.c.cfg.Clock.After(api.WatchInterval):
		}
	}
}

func (api *BroadcastAPI) ListBroadcasts(ctx context.Context, req *pb.ListBroadcastsRequest) (*pb.ListBroadcastsResponse, error) {
	size, before, err := listPage(req.GetPageSize(), req.GetPageToken())
	if err != nil {
		return nil, err
	}
	bs, err := api.c.cfg.Store.BroadcastPage(ctx, before, size+1)
	if err != nil {
		return nil, storeError(err)
	}
	out := &pb.ListBroadcastsResponse{}
	if len(bs) > size {
		bs = bs[:size]
		out.NextPageToken = bs[size-1].ID.String()
	}
	for _, b := range bs {
		out.Broadcasts = append(out.Broadcasts, toProto(b, nil))
	}
	return out, nil
}

// Start accepts a draft: snapshot, ranges, state running, actor.
func (c *Coordinator) Start(ctx context.Context, rawID string) (*pb.Broadcast, error) {
	id, err := parseID(rawID)
	if err != nil {
		return nil, err
	}
	if err := c.preflightStart(ctx, id); err != nil {
		return nil, err
	}
	b, err := c.cfg.Store.AcceptBroadcast(ctx, id, c.cfg.Clock.Now())
	if errors.Is(err, store.ErrConflict) {
		// Perhaps the retry of a Start whose KV writes failed: finish them
		// (both are idempotent) before saying it was started already.
		if err := c.completeStart(ctx, id); err != nil {
			return nil, status.Error(codes.Unavailable, err.Error())
		}
	}
	if err != nil {
		return nil, storeError(err)
	}
	// The store says running; KV catches up here. If this process dies in
	// between, the actor started on restart re-creates missing ranges.
	if err := c.writeRanges(ctx, b); err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	if err := c.putState(ctx, b); err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	if err := c.kick(ctx, b); err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	return c.Status(ctx, id)
}

// completeStart writes what Start writes after the store (range records,
// the state in KV) for a broadcast the store already has running or paused,
// and hands it to its actor: a Start that stopped half-way is whole again.
func (c *Coordinator) completeStart(ctx context.Context, id ulid.ULID) error {
	b, err := c.cfg.Store.GetBroadcast(ctx, id)
	if err != nil || (b.State != store.StateRunning && b.State != store.StatePaused) {
		return nil // a draft that failed to start, or finished: nothing to complete
	}
	if err := c.writeRanges(ctx, b); err != nil {
		return err
	}
	if b, err = c.mirrorState(ctx, id); err != nil {
		return err
	}
	return c.kick(ctx, b)
}

func (c *Coordinator) transition(ctx context.Context, rawID, verb string, from []store.State, to store.State, reason string) (*pb.Broadcast, error) {
	id, err := parseID(rawID)
	if err != nil {
		return nil, err
	}
	b, err := c.cfg.Store.SetState(ctx, id, from, to, reason, c.cfg.Clock.Now())
	if errors.Is(err, store.ErrConflict) && b.State == to {
		// Most likely a retry of a transition whose KV write failed: the
		// store has it, KV may not, and workers follow KV. Bring KV level
		// before saying there was nothing to do.
		if _, err := c.mirrorState(ctx, id); err != nil {
			return nil, status.Error(codes.Unavailable, err.Error())
		}
	}
	if errors.Is(err, store.ErrConflict) {
		names := make([]string, len(from))
		for i, f := range from {
			names[i] = string(f)
		}
		return nil, status.Errorf(codes.FailedPrecondition, "broadcast %s is %s; only a %s broadcast can be %s", id, b.State, strings.Join(names, " or "), verb)
	}
	if err != nil {
		return nil, storeError(err)
	}
	if err := c.putState(ctx, b); err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	if err := c.kick(ctx, b); err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	return c.Status(ctx, id)
}

// Status assembles what "progress" means without a total: state and reason,
// each range's cursor, sums, and what sending waits for.
func (c *Coordinator) Status(ctx context.Context, id ulid.ULID) (*pb.Broadcast, error) {
	b, err := c.cfg.Store.GetBroadcast(ctx, id)
	if err != nil {
		return nil, storeError(err)
	}
	p := &pb.Progress{}
	if b.State != store.StateDraft {
		recs, _, err := c.rangeRecords(ctx, b)
		if err != nil {
			return nil, status.Error(codes.Unavailable, err.Error())
		}
		p.RangesTotal = int32(len(recs))
		for _, r := range recs {
			rp := &pb.RangeProgress{Index: int32(r.Index), Start: r.Start, End: r.End, Next: r.Next, Done: r.Done, Sent: r.Sent, Failed: r.Failed}
			rp.Position = position(r)
			if r.Done {
				p.RangesDone++
			}
			p.PagesDispatched += r.Dispatched
			p.Sent += r.Sent
			p.Failed += r.Failed
			p.Ranges = append(p.Ranges, rp)
		}
		counts, err := c.cfg.Store.Counts(ctx, id)
		if err != nil {
			return nil, storeError(err)
		}
		// The ledger is the truth; the KV sums can lag behind it by the
		// pages in flight.
		p.Sent, p.Failed, p.Deferred, p.InDoubt, p.Unknown = counts.Sent, counts.Failed, counts.Deferred, counts.Claimed, counts.Unknown
	}
	c.mu.Lock()
	a := c.actors[id]
	c.mu.Unlock()
	if a != nil {
		p.WaitingFor = a.waiting()
	} else if b.State == store.StateRunning {
		// A follower runs no actor; what the governor waits for is in KV.
		p.WaitingFor = c.governorWaiting(ctx, b)
	}
	return toProto(b, p), nil
}

// governorWaiting is what the sending domain's governor waits for, as the
// leader last wrote it: for a follower's answer, which has no actor.
func (c *Coordinator) governorWaiting(ctx context.Context, b store.Broadcast) string {
	if c.cfg.Governor == nil {
		return ""
	}
	addr := b.Content.FromAddress
	domain := strings.ToLower(addr[strings.LastIndexByte(addr, '@')+1:])
	s, err := NewGovernorAPI(c).offline(ctx, domain, false)
	if err != nil {
		return "" // no state yet, or KV unreachable: nothing known to wait for
	}
	return s.GetWaiting()
}

// position is how far a range's cursor has moved through it, 0..1. ULIDs
// are time-ordered, so this is a fair proxy for the share of the range done.
func position(r bus.RangeRecord) float64 {
	if r.Done {
		return 1
	}
	start, err1 := ulid.ParseStrict(r.Start)
	end, err2 := ulid.ParseStrict(r.End)
	next, err3 := ulid.ParseStrict(r.Next)
	if errors.Join(err1, err2, err3) != nil {
		return 0
	}
	return ranges.Position(ranges.Range{Index: r.Index, Start: start, End: end}, next)
}

func stateName(s pb.BroadcastState) string {
	for st, v := range stateValues {
		if v == s {
			return string(st)
		}
	}
	return ""
}

var stateValues = map[store.State]pb.BroadcastState{
	store.StateDraft:     pb.BroadcastState_BROADCAST_STATE_DRAFT,
	store.StateRunning:   pb.BroadcastState_BROADCAST_STATE_RUNNING,
	store.StatePaused:    pb.BroadcastState_BROADCAST_STATE_PAUSED,
	store.StateCompleted: pb.BroadcastState_BROADCAST_STATE_COMPLETED,
	store.StateCancelled: pb.BroadcastState_BROADCAST_STATE_CANCELLED,
	store.StateFailed:    pb.BroadcastState_BROADCAST_STATE_FAILED,
}

var policyNames = map[pb.InDoubtPolicy]string{
	pb.InDoubtPolicy_IN_DOUBT_POLICY_UNSPECIFIED: "",
	pb.InDoubtPolicy_IN_DOUBT_POLICY_SKIP:        string(InDoubtSkip),
	pb.InDoubtPolicy_IN_DOUBT_POLICY_RESEND:      string(InDoubtResend),
}

func policyValue(name string) pb.InDoubtPolicy {
	for v, n := range policyNames {
		if n == name {
			return v
		}
	}
	return pb.InDoubtPolicy_IN_DOUBT_POLICY_UNSPECIFIED
}

func timestamp(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

func toProto(b store.Broadcast, p *pb.Progress) *pb.Broadcast {
	c := b.Content
	return &pb.Broadcast{
		Id: b.ID.String(), Name: b.Name, State: stateValues[b.State], Reason: b.Reason, Segment: b.Segment,
		ThrottlePerHour: b.ThrottlePerHour,
		Content:         &pb.BroadcastContent{FromName: c.FromName, FromAddress: c.FromAddress, Subject: c.Subject, Html: c.HTML, Text: c.Text},
		SnapshotTotal:   b.SnapshotTotal,
		CreatedAt:       timestamp(b.CreatedAt), StartedAt: timestamp(b.StartedAt), FinishedAt: timestamp(b.FinishedAt),
		Progress: p, InDoubtPolicy: policyValue(b.InDoubtPolicy), NoUnsubscribeLink: b.NoUnsubscribeLink,
	}
}
