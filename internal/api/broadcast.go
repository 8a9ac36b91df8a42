package api

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/oklog/ulid/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rangecast/rangecast/internal/coordinator"
	"github.com/rangecast/rangecast/internal/message"
	"github.com/rangecast/rangecast/internal/store"
	pb "github.com/rangecast/rangecast/proto/rangecast/v1"
)

// maxRequestID bounds client idempotency keys.
const maxRequestID = 256

// maxBroadcastName bounds a broadcast's name, which lists and reports
// print in full (a 100 KB name was accepted).
const maxBroadcastName = 256

// validateBroadcastName is the rule for a broadcast's name, at create and
// at update: one line, no control characters, at most maxBroadcastName.
func validateBroadcastName(name string) error {
	if n := utf8.RuneCountInString(name); n > maxBroadcastName {
		return fmt.Errorf("name is %d characters; at most %d are allowed", n, maxBroadcastName)
	}
	// Not ValidateHeaderValue's words: the name is no header, and "header
	// values must be a single line" misled (tester).
	if i := strings.IndexAny(name, "\r\n"); i >= 0 {
		return fmt.Errorf("name contains a line break at byte %d; a broadcast's name is one line", i)
	}
	return message.CheckControl("name", name)
}

// BroadcastAPI serves rangecast.v1.BroadcastService.
type BroadcastAPI struct {
	pb.UnimplementedBroadcastServiceServer
	cfg Config
	ids *idSource
	// WatchInterval is how often WatchBroadcast re-sends the status.
	WatchInterval time.Duration
}

// NewBroadcastAPI returns the gRPC service backed by cfg's engine and store.
func NewBroadcastAPI(cfg Config) *BroadcastAPI {
	return &BroadcastAPI{cfg: cfg.withDefaults(), ids: newIDSource(), WatchInterval: time.Second}
}

func (api *BroadcastAPI) CreateBroadcast(ctx context.Context, req *pb.CreateBroadcastRequest) (*pb.CreateBroadcastResponse, error) {
	if req.GetName() == "" {
		return nil, invalid("name is required")
	}
	if err := validateBroadcastName(req.GetName()); err != nil {
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
		id, err := api.cfg.Store.SegmentID(ctx, req.GetSegment())
		if errors.Is(err, store.ErrNotFound) {
			return nil, invalid("segment %q does not exist; import contacts into it first", req.GetSegment())
		}
		if err != nil {
			return nil, Error(err)
		}
		segment = id
	}
	policy, ok := policyNames[req.GetInDoubtPolicy()]
	if !ok {
		return nil, invalid("in_doubt_policy %v is not one of skip or resend", req.GetInDoubtPolicy())
	}
	if err := api.cfg.Engine.Preflight(ctx, store.Broadcast{Content: content, SegmentID: segment, NoUnsubscribeLink: req.GetNoUnsubscribeLink()}); err != nil {
		if coordinator.KindOf(err) == coordinator.PreflightFailed {
			return nil, status.Error(codes.InvalidArgument, err.Error()) // at create, the request is what is wrong
		}
		return nil, Error(err)
	}
	now := api.cfg.Clock.Now()
	b := store.Broadcast{
		ID: api.ids.make(now), Name: req.GetName(), RequestID: req.GetRequestId(), Content: content,
		SegmentID: segment, Segment: req.GetSegment(), ThrottlePerHour: req.GetThrottlePerHour(),
		InDoubtPolicy: policy, NoUnsubscribeLink: req.GetNoUnsubscribeLink(), State: store.StateDraft, CreatedAt: now,
	}
	out, created, err := api.cfg.Store.CreateBroadcast(ctx, b)
	if err != nil {
		return nil, Error(err)
	}
	if !created && (out.Name != b.Name || out.Content != b.Content || out.SegmentID != b.SegmentID || out.ThrottlePerHour != b.ThrottlePerHour || out.InDoubtPolicy != b.InDoubtPolicy || out.NoUnsubscribeLink != b.NoUnsubscribeLink) {
		return nil, status.Errorf(codes.AlreadyExists, "request_id %q was already used for broadcast %s with a different definition", b.RequestID, out.ID)
	}
	return &pb.CreateBroadcastResponse{Broadcast: broadcastPB(out, nil)}, nil
}

// change runs one of the engine's state changes on the broadcast a request
// names.
func (api *BroadcastAPI) change(ctx context.Context, rawID string, do func(*coordinator.Coordinator, context.Context, ulid.ULID) (coordinator.BroadcastStatus, error)) (*pb.Broadcast, error) {
	id, err := parseID(rawID)
	if err != nil {
		return nil, err
	}
	s, err := do(api.cfg.Engine, ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		// The store's words ("accept broadcast ID: not found") name its
		// own step, not what the person asked for (tester).
		return nil, status.Errorf(codes.NotFound, "no broadcast has id %s (rangecast broadcasts list shows them)", id)
	}
	if err != nil {
		return nil, Error(err)
	}
	return statusPB(s), nil
}

func (api *BroadcastAPI) StartBroadcast(ctx context.Context, req *pb.StartBroadcastRequest) (*pb.StartBroadcastResponse, error) {
	b, err := api.change(ctx, req.GetId(), (*coordinator.Coordinator).Start)
	if err != nil {
		return nil, err
	}
	return &pb.StartBroadcastResponse{Broadcast: b}, nil
}

func (api *BroadcastAPI) PauseBroadcast(ctx context.Context, req *pb.PauseBroadcastRequest) (*pb.PauseBroadcastResponse, error) {
	b, err := api.change(ctx, req.GetId(), (*coordinator.Coordinator).Pause)
	if err != nil {
		return nil, err
	}
	return &pb.PauseBroadcastResponse{Broadcast: b}, nil
}

func (api *BroadcastAPI) ResumeBroadcast(ctx context.Context, req *pb.ResumeBroadcastRequest) (*pb.ResumeBroadcastResponse, error) {
	var failed, unknown int64
	if req.GetFailRefused() {
		id, err := parseID(req.GetId())
		if err != nil {
			return nil, err
		}
		// Failed while paused, before the resume: no sweep claims them
		// meanwhile. A resume that fails after this (another caller
		// resumed it in between, NATS away) leaves them failed; the
		// broadcast stays as it is, and a repeated call resumes it.
		if failed, unknown, err = api.cfg.Engine.FailRefused(ctx, id); err != nil {
			return nil, Error(err)
		}
	}
	b, err := api.change(ctx, req.GetId(), (*coordinator.Coordinator).Resume)
	if err != nil {
		return nil, err
	}
	return &pb.ResumeBroadcastResponse{Broadcast: b, FailedRefused: failed, UnknownRefused: unknown}, nil
}

func (api *BroadcastAPI) CancelBroadcast(ctx context.Context, req *pb.CancelBroadcastRequest) (*pb.CancelBroadcastResponse, error) {
	b, err := api.change(ctx, req.GetId(), (*coordinator.Coordinator).Cancel)
	if err != nil {
		return nil, err
	}
	return &pb.CancelBroadcastResponse{Broadcast: b}, nil
}

func (api *BroadcastAPI) GetBroadcast(ctx context.Context, req *pb.GetBroadcastRequest) (*pb.GetBroadcastResponse, error) {
	b, err := api.change(ctx, req.GetId(), (*coordinator.Coordinator).Status)
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
		s, err := api.cfg.Engine.Status(ctx, id)
		if err != nil {
			return Error(err)
		}
		if err := stream.Send(&pb.WatchBroadcastResponse{Broadcast: statusPB(s)}); err != nil {
			return err
		}
		if s.Broadcast.State.Finished() {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-api.cfg.Clock.After(api.WatchInterval):
		}
	}
}

func (api *BroadcastAPI) ListBroadcasts(ctx context.Context, req *pb.ListBroadcastsRequest) (*pb.ListBroadcastsResponse, error) {
	size, before, err := listPage(req.GetPageSize(), req.GetPageToken(), broadcastToken)
	if err != nil {
		return nil, err
	}
	bs, err := api.cfg.Store.BroadcastPage(ctx, before, size+1)
	if err != nil {
		return nil, Error(err)
	}
	out := &pb.ListBroadcastsResponse{}
	if len(bs) > size {
		bs = bs[:size]
		out.NextPageToken = pageToken(broadcastToken, bs[size-1].ID)
	}
	for _, b := range bs {
		lb := broadcastPB(b, nil)
		lb.InDoubtPolicy = policyValue(string(api.cfg.Engine.PolicyOf(b))) // in force, as status shows it
		out.Broadcasts = append(out.Broadcasts, lb)
	}
	return out, nil
}
