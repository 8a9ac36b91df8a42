package transactional

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/oklog/ulid/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rangecast/rangecast/internal/bus"
	"github.com/rangecast/rangecast/internal/clock"
	"github.com/rangecast/rangecast/internal/message"
	"github.com/rangecast/rangecast/internal/store"
	pb "github.com/rangecast/rangecast/proto/rangecast/v1"
)

// MaxWait bounds SendRequest.wait: a client that wants to know more later
// calls Get.
const MaxWait = 30 * time.Second

// ServiceConfig wires the gRPC service (in the coordinator process).
type ServiceConfig struct {
	Store store.Store
	JS    jetstream.JetStream
	Clock clock.Clock
	Log   *slog.Logger
	// PollEvery is how often a waiting Send re-reads the receipt in case an
	// outcome announcement was missed (default 500 ms).
	PollEvery time.Duration
}

// Service implements pb.TransactionalServiceServer.
type Service struct {
	pb.UnimplementedTransactionalServiceServer
	cfg ServiceConfig

	mu      sync.Mutex
	entropy *ulid.MonotonicEntropy
}

// NewService returns the service; register it with
// pb.RegisterTransactionalServiceServer.
func NewService(cfg ServiceConfig) *Service {
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.PollEvery == 0 {
		cfg.PollEvery = 500 * time.Millisecond
	}
	return &Service{cfg: cfg, entropy: ulid.Monotonic(rand.Reader, 0)}
}

func (s *Service) newID(now time.Time) ulid.ULID {
	s.mu.Lock()
	defer s.mu.Unlock()
	return ulid.MustNew(ulid.Timestamp(now), s.entropy)
}

func validateKey(k string) error {
	switch {
	case strings.TrimSpace(k) == "":
		return status.Error(codes.InvalidArgument, "idempotency_key is required: pass a key that is the same every time you retry this message (e.g. password-reset:<user>:<request>)")
	case len([]rune(k)) > MaxKeyLength:
		return status.Errorf(codes.InvalidArgument, "idempotency_key is %d characters; at most %d", len([]rune(k)), MaxKeyLength)
	case strings.IndexFunc(k, unicode.IsControl) >= 0:
		return status.Error(codes.InvalidArgument, "idempotency_key contains a control character")
	}
	return nil
}

// Send stores the message under its key (or finds the one stored before)
// and queues it. See the proto for the contract.
func (s *Service) Send(ctx context.Context, req *pb.SendRequest) (*pb.SendResponse, error) {
	if err := validateKey(req.GetIdempotencyKey()); err != nil {
		return nil, err
	}
	p := payloadOf(req)
	hash := p.hash() // of the request as given, before any template renders
	if err := s.render(ctx, &p, req); err != nil {
		// A retry of a message accepted before gets that message back,
		// even when its template has changed since so that the original
		// data no longer renders.
		if r, ok := s.accepted(ctx, req, p, hash); ok {
			m, derr := s.describe(ctx, r)
			if derr != nil {
				return nil, derr
			}
			requests.WithLabelValues("replayed").Inc()
			return &pb.SendResponse{Message: m, Replayed: true}, nil
		}
		return nil, err
	}
	msg := p.message()
	if err := msg.Validate(); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	var wait time.Duration
	if req.GetWait() != nil {
		if err := req.GetWait().CheckValid(); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "wait: %v", err)
		}
		wait = req.GetWait().AsDuration()
		if wait < 0 || wait > MaxWait {
			return nil, status.Errorf(codes.InvalidArgument, "wait is %s; give at most %s (or none, and call Get later)", wait, MaxWait)
		}
	}

	// Subscribe before the job can run, so the first outcome cannot be
	// announced before anyone listens.
	now := s.cfg.Clock.Now()
	id := s.newID(now)
	var events chan *nats.Msg
	if wait > 0 {
		events = make(chan *nats.Msg, 8)
		sub, err := s.cfg.JS.Conn().ChanSubscribe(bus.TxEventSubject(id.String()), events)
		if err == nil {
			defer sub.Unsubscribe() //nolint:errcheck
		} else {
			s.cfg.Log.Warn("cannot subscribe to outcome announcements; polling", "err", err)
		}
	}

	r, created, err := s.cfg.Store.CreateReceipt(ctx, store.Receipt{
		ID: id, Kind: Kind, Key: req.GetIdempotencyKey(), Email: p.To,
		PayloadHash: hash, Payload: p.encode(),
		MessageID:     message.TransactionalMessageID(id.String(), msg.SendingDomain()),
		NextAttemptAt: now, CreatedAt: now,
	})
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "store the message: %v", err)
	}
	if !created {
		// An erased recipient's receipt compares as before the erasure
		// (store.MatchErased): the same content is a replay, other
		// content under the key is refused.
		if r.PayloadHash != hash {
			requests.WithLabelValues("conflict").Inc()
			field := "payload"
			if old, err := decodePayload(r.Payload); err == nil {
				if f := old.differs(p); f != "" {
					field = f
				}
			}
			to := r.Email
			if strings.HasPrefix(to, store.ErasedToken) {
				to = "a recipient since erased"
			}
			return nil, status.Errorf(codes.FailedPrecondition,
				"idempotency_key %q was already used for message %s to %s with other content (its %s); send a new message under a new key, or repeat the original request to get its status",
				req.GetIdempotencyKey(), r.ID, to, differs(field))
		}
		requests.WithLabelValues("replayed").Inc()
		if r.ID != id && wait > 0 {
			// The waiter listens for the stored message, not the id this
			// call would have made.
			events = make(chan *nats.Msg, 8)
			if sub, err := s.cfg.JS.Conn().ChanSubscribe(bus.TxEventSubject(r.ID.String()), events); err == nil {
				defer sub.Unsubscribe() //nolint:errcheck
			}
		}
	} else {
		requests.WithLabelValues("created").Inc()
	}
	if r.Status == store.ReceiptQueued {
		// A replay re-queues a job that was lost (e.g. the first call
		// failed right here); PublishTx does nothing while one is waiting.
		dedupe := ""
		if !created {
			dedupe = fmt.Sprintf("replay:%d", r.Attempts)
		}
		if err := bus.PublishTx(ctx, s.cfg.JS, r.ID.String(), dedupe); err != nil {
			return nil, status.Errorf(codes.Unavailable, "message %s is stored but could not be queued (%v); repeat the request with the same idempotency_key", r.ID, err)
		}
	}
	if wait > 0 && !firstOutcome(r) {
		if r, err = s.await(ctx, r.ID, events, wait); err != nil {
			return nil, err
		}
	}
	m, err := s.describe(ctx, r)
	if err != nil {
		return nil, err
	}
	return &pb.SendResponse{Message: m, Replayed: !created}, nil
}

// firstOutcome: the message has been tried at least once (or is finished).
func firstOutcome(r store.Receipt) bool {
	return r.Status.Finished() || (r.Status == store.ReceiptQueued && r.Attempts > 0)
}

// await re-reads the receipt on every announcement (and every PollEvery)
// until its first attempt has an outcome or wait has passed; either way it
// returns the latest receipt.
func (s *Service) await(ctx context.Context, id ulid.ULID, events <-chan *nats.Msg, wait time.Duration) (store.Receipt, error) {
	deadline := s.cfg.Clock.After(wait)
	for {
		select {
		case <-ctx.Done():
			return store.Receipt{}, status.FromContextError(ctx.Err()).Err()
		case <-deadline:
			return s.get(ctx, id)
		case <-events:
		case <-s.cfg.Clock.After(s.cfg.PollEvery):
		}
		r, err := s.get(ctx, id)
		if err != nil || firstOutcome(r) {
			return r, err
		}
	}
}

func (s *Service) get(ctx context.Context, id ulid.ULID) (store.Receipt, error) {
	r, err := s.cfg.Store.GetReceipt(ctx, id)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return store.Receipt{}, status.Errorf(codes.NotFound, "no transactional message with id %s", id)
	case err != nil:
		return store.Receipt{}, status.Errorf(codes.Unavailable, "read message %s: %v", id, err)
	}
	return r, nil
}

// Get returns the message's status and every attempt.
func (s *Service) Get(ctx context.Context, req *pb.GetRequest) (*pb.GetResponse, error) {
	id, err := ulid.ParseStrict(strings.TrimSpace(req.GetId()))
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "id %q is not a message id (26 characters, as Send returned)", req.GetId())
	}
	r, err := s.get(ctx, id)
	if err != nil {
		return nil, err
	}
	m, err := s.describe(ctx, r)
	if err != nil {
		return nil, err
	}
	return &pb.GetResponse{Message: m}, nil
}

var statusToPB = map[store.ReceiptStatus]pb.TransactionalStatus{
	store.ReceiptQueued:  pb.TransactionalStatus_TRANSACTIONAL_STATUS_QUEUED,
	store.ReceiptSending: pb.TransactionalStatus_TRANSACTIONAL_STATUS_SENDING,
	store.ReceiptSent:    pb.TransactionalStatus_TRANSACTIONAL_STATUS_SENT,
	store.ReceiptFailed:  pb.TransactionalStatus_TRANSACTIONAL_STATUS_FAILED,
	store.ReceiptUnknown: pb.TransactionalStatus_TRANSACTIONAL_STATUS_UNKNOWN,
}

func ts(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

func (s *Service) describe(ctx context.Context, r store.Receipt) (*pb.TransactionalMessage, error) {
	as, err := s.cfg.Store.ReceiptAttempts(ctx, r.ID)
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "read attempts of %s: %v", r.ID, err)
	}
	m := &pb.TransactionalMessage{
		Id: r.ID.String(), IdempotencyKey: r.Key, To: r.Email, Status: statusToPB[r.Status],
		MessageId: r.MessageID, AttemptCount: int32(r.Attempts), CreatedAt: ts(r.CreatedAt), UpdatedAt: ts(r.UpdatedAt),
	}
	if p, err := decodePayload(r.Payload); err == nil {
		m.FromAddress, m.Subject = p.FromAddress, p.Subject
		m.Template, m.TemplateVersion = p.Template, int32(p.TemplateVersion)
	}
	if r.Status != store.ReceiptSent {
		// Why it failed, is unknown, or is waiting to retry; a sent
		// message needs no reason.
		m.Reason = r.Error
	}
	if r.Status == store.ReceiptQueued {
		m.NextAttemptAt = ts(r.NextAttemptAt)
	}
	for _, a := range as {
		m.Attempts = append(m.Attempts, &pb.TransactionalAttempt{
			Number: int32(a.N), StartedAt: ts(a.StartedAt), FinishedAt: ts(a.FinishedAt), Result: a.Result, Reply: a.Reply,
		})
	}
	return m, nil
}

// render fills p's subject and bodies from the stored template the request
// names, with its data; without a template it only checks that no data was
// given for nothing.
func (s *Service) render(ctx context.Context, p *payload, req *pb.SendRequest) error {
	if p.Template == "" {
		if req.GetData() != nil {
			return status.Error(codes.InvalidArgument, "data is only used with template; give template, or drop data")
		}
		return nil
	}
	if p.Subject != "" || p.Text != "" || p.HTML != "" {
		return status.Error(codes.InvalidArgument, "give either template (with data) or subject and text/html, not both")
	}
	t, err := s.cfg.Store.GetTemplate(ctx, p.Template)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return status.Errorf(codes.NotFound, "no template named %q; store it first with rangecast send template put (PutTemplate in the API)", p.Template)
	case err != nil:
		return status.Errorf(codes.Unavailable, "read template %q: %v", p.Template, err)
	}
	c, err := message.CompileTransactional(message.TransactionalTemplate{Subject: t.Subject, Text: t.Text, HTML: t.HTML})
	if err != nil {
		return status.Errorf(codes.FailedPrecondition, "stored template %q version %d no longer compiles (%v); store a fixed version", t.Name, t.Version, err)
	}
	var data map[string]any
	if req.GetData() != nil {
		data = req.GetData().AsMap()
	}
	if p.Subject, p.Text, p.HTML, err = c.Execute(data); err != nil {
		return status.Errorf(codes.InvalidArgument, "template %q version %d: %v", t.Name, t.Version, err)
	}
	if p.FromAddress == "" {
		p.FromAddress = t.FromAddress
	}
	if p.FromName == "" {
		p.FromName = t.FromName
	}
	p.TemplateVersion = t.Version
	return nil
}

// MaxTemplateName bounds a template's name.
const MaxTemplateName = 128

// PutTemplate validates and stores a named template.
func (s *Service) PutTemplate(ctx context.Context, req *pb.PutTemplateRequest) (*pb.PutTemplateResponse, error) {
	in := req.GetTemplate()
	name := in.GetName()
	switch {
	case strings.TrimSpace(name) == "":
		return nil, status.Error(codes.InvalidArgument, "template name is required")
	case len(name) > MaxTemplateName || strings.IndexFunc(name, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0:
		return nil, status.Errorf(codes.InvalidArgument, "template name %q: use at most %d characters without spaces, e.g. password-reset", name, MaxTemplateName)
	}
	if in.GetFromAddress() != "" {
		if err := message.ValidateFromAddress(in.GetFromAddress()); err != nil {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
	}
	if err := message.ValidateHeaderValue("from_name", in.GetFromName()); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if _, err := message.CompileTransactional(message.TransactionalTemplate{Subject: in.GetSubject(), Text: in.GetText(), HTML: in.GetHtml()}); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	t, err := s.cfg.Store.PutTemplate(ctx, store.Template{
		Name: name, FromAddress: in.GetFromAddress(), FromName: in.GetFromName(),
		Subject: in.GetSubject(), Text: in.GetText(), HTML: in.GetHtml(),
	}, s.cfg.Clock.Now())
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "store template %q: %v", name, err)
	}
	return &pb.PutTemplateResponse{Template: templateToPB(t)}, nil
}

// GetTemplate returns a stored template.
func (s *Service) GetTemplate(ctx context.Context, req *pb.GetTemplateRequest) (*pb.GetTemplateResponse, error) {
	t, err := s.cfg.Store.GetTemplate(ctx, req.GetName())
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, status.Errorf(codes.NotFound, "no template named %q", req.GetName())
	case err != nil:
		return nil, status.Errorf(codes.Unavailable, "read template %q: %v", req.GetName(), err)
	}
	return &pb.GetTemplateResponse{Template: templateToPB(t)}, nil
}

func templateToPB(t store.Template) *pb.TransactionalTemplate {
	return &pb.TransactionalTemplate{
		Name: t.Name, FromAddress: t.FromAddress, FromName: t.FromName, Subject: t.Subject, Text: t.Text, Html: t.HTML,
		Version: int32(t.Version), UpdatedAt: ts(t.UpdatedAt),
	}
}

// accepted finds the message a templated request already stored under its
// key, if it was the same request.
func (s *Service) accepted(ctx context.Context, req *pb.SendRequest, p payload, hash string) (store.Receipt, bool) {
	if p.Template == "" {
		return store.Receipt{}, false
	}
	r, err := s.cfg.Store.FindReceipt(ctx, Kind, req.GetIdempotencyKey(), p.To)
	if err != nil || r.PayloadHash != hash {
		return store.Receipt{}, false
	}
	return r, true
}

// differs is "subject differs", "headers differ".
func differs(field string) string {
	if field == "headers" {
		return field + " differ"
	}
	return field + " differs"
}
