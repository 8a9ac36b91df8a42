package api

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"mime/quotedprintable"
	"net/mail"
	"net/textproto"
	"strings"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/rangecast/rangecast/internal/address"
	"github.com/rangecast/rangecast/internal/coordinator"
	"github.com/rangecast/rangecast/internal/message"
	"github.com/rangecast/rangecast/internal/pageworker"
	"github.com/rangecast/rangecast/internal/preflight"
	"github.com/rangecast/rangecast/internal/store"
	"github.com/rangecast/rangecast/internal/transport"
	pb "github.com/rangecast/rangecast/proto/rangecast/v1"
)

// Mail is what the coordinator needs to render and send as a page worker
// does, for previews and test copies: the same unsubscribe links, DKIM
// keys and SMTP relay the workers are configured with.
type Mail struct {
	// Unsubscribe signs the one-click links; nil: the coordinator was not
	// told the public URL and key, and cannot render what a worker sends.
	Unsubscribe *message.Unsubscribe
	// DKIM signs with the From domain's keys; nil signs nothing.
	DKIM *message.DKIM
	// Transport sends test copies; nil: no SMTP relay configured.
	Transport transport.Transport
	// Usage, when set, is told the outcome of every test copy, so the
	// sending domain's governor counts it toward the day and the hourly
	// limit as it counts transactional mail (transactional.HeldProviders).
	Usage Usage
}

// Usage counts mail sent outside pages in the governors.
type Usage interface {
	Observe(sendingDomain, recipient string, sendErr error, now time.Time)
}

// Limits of the operator's calls.
const (
	maxTestRecipients = 20
	defaultGroups     = 20
	maxGroups         = 1000
	// exportPage is how many ledger rows one store read and one stream
	// message carry: about 200 kB, far below gRPC's 4 MB.
	exportPage = 1000
	// testTimeout bounds a test send to all its addresses.
	testTimeout = time.Minute
)

// BroadcastOpsAPI serves rangecast.v1.BroadcastOpsService.
type BroadcastOpsAPI struct {
	pb.UnimplementedBroadcastOpsServiceServer
	cfg Config
	ids *idSource
}

// NewBroadcastOpsAPI returns the gRPC service backed by cfg.
func NewBroadcastOpsAPI(cfg Config) *BroadcastOpsAPI {
	return &BroadcastOpsAPI{cfg: cfg.withDefaults(), ids: newIDSource()}
}

// broadcast reads the broadcast a request names.
func (api *BroadcastOpsAPI) broadcast(ctx context.Context, rawID string) (store.Broadcast, error) {
	id, err := parseID(rawID)
	if err != nil {
		return store.Broadcast{}, err
	}
	b, err := api.cfg.Store.GetBroadcast(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return b, status.Errorf(codes.NotFound, "no broadcast %s (rangecast broadcasts list shows them)", id)
	}
	if err != nil {
		return b, Error(err)
	}
	return b, nil
}

// notDraft refuses a change only a draft allows, with what can be done
// instead of it in b's state.
func notDraft(b store.Broadcast, verb string) error {
	var instead string
	switch {
	case verb == "deleted" && b.State.Finished():
		instead = "; a started broadcast is kept as the record of who was sent what"
	case verb == "deleted":
		instead = " (a started broadcast's ledger is the record of who was sent what); cancel it instead"
	case verb == "edited" && b.State == store.StateRunning:
		instead = " or a paused one (its content only); pause it first (a running broadcast's throttle can change: give it alone)"
	case verb == "edited" && b.State == store.StateFailed:
		instead = " or a paused one (its content only); resume it, pause it, then edit it"
	case verb == "edited":
		instead = "; create a new broadcast instead"
	case b.State == store.StateRunning || b.State == store.StatePaused:
		instead = " (it has started; pause or cancel it instead)"
	}
	return status.Errorf(codes.FailedPrecondition, "broadcast %s is %s; only a draft can be %s%s", b.ID, b.State, verb, instead)
}

func compile(b store.Broadcast) (*message.Compiled, error) {
	compiled, err := message.Compile(message.Template(b.Content))
	if err != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "broadcast %s's content does not compile: %v; update the draft", b.ID, err)
	}
	return compiled, nil
}

func (api *BroadcastOpsAPI) PreviewBroadcast(ctx context.Context, req *pb.PreviewBroadcastRequest) (*pb.PreviewBroadcastResponse, error) {
	b, err := api.broadcast(ctx, req.GetId())
	if err != nil {
		return nil, err
	}
	if (req.GetContactEmail() == "") == (req.GetContactId() == "") {
		return nil, invalid("name the contact by exactly one of contact_email and contact_id")
	}
	if api.cfg.Mail.Unsubscribe == nil {
		return nil, status.Error(codes.FailedPrecondition, "this coordinator cannot render what a page worker sends: give it the workers' --public-url (RANGECAST_PUBLIC_URL) and unsubscribe keys (RANGECAST_UNSUBSCRIBE_KEYS)")
	}
	d, err := api.contact(ctx, req.GetContactEmail(), req.GetContactId())
	if err != nil {
		return nil, err
	}
	compiled, err := compile(b)
	if err != nil {
		return nil, err
	}
	m, err := pageworker.Render(compiled, b, d.Contact, api.cfg.Clock.Now(), api.cfg.Mail.Unsubscribe, api.cfg.Mail.DKIM)
	if err != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "the message cannot be rendered for %s: %v (a page would fail this contact)", d.Email, err)
	}
	out, err := previewPB(m)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "read back the rendered message: %v", err)
	}
	out.Eligible = d.Eligible && (b.Segment == "" || contains(d.Segments, b.Segment))
	if s, err := api.cfg.Store.GetSend(ctx, b.ID, d.ID); err == nil {
		out.Status = SendStatusPB(s.Status)
	} else if !errors.Is(err, store.ErrNotFound) {
		return nil, Error(err)
	}
	return out, nil
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// contact finds a contact by email or id (findContact).
func (api *BroadcastOpsAPI) contact(ctx context.Context, email, rawID string) (store.ContactDetail, error) {
	return findContact(ctx, api.cfg.Store, rawID, email)
}

// previewPB reads a rendered message back into its parts.
func previewPB(m message.Rendered) (*pb.PreviewBroadcastResponse, error) {
	out := &pb.PreviewBroadcastResponse{MessageId: m.MessageID, EnvelopeFrom: m.From, EnvelopeTo: m.To, Raw: m.Bytes}
	msg, err := mail.ReadMessage(bytes.NewReader(m.Bytes))
	if err != nil {
		return nil, err
	}
	dec := new(mime.WordDecoder)
	// net/mail keeps fields in a map; the raw header block has the order.
	head, _, _ := bytes.Cut(m.Bytes, []byte("\r\n\r\n"))
	for _, line := range strings.Split(string(head), "\r\n") {
		if line == "" || line[0] == ' ' || line[0] == '\t' {
			continue // a folded continuation, read with its field below
		}
		name, _, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		if seenHeader(out.Headers, name) {
			continue
		}
		for _, v := range msg.Header[textproto.CanonicalMIMEHeaderKey(name)] {
			if d, err := dec.DecodeHeader(v); err == nil {
				v = d
			}
			out.Headers = append(out.Headers, &pb.MessageHeader{Name: name, Value: v})
		}
	}
	if s, err := dec.DecodeHeader(msg.Header.Get("Subject")); err == nil {
		out.Subject = s
	}
	if err := readBodies(out, msg.Header.Get("Content-Type"), msg.Header.Get("Content-Transfer-Encoding"), msg.Body); err != nil {
		return nil, err
	}
	return out, nil
}

func seenHeader(hs []*pb.MessageHeader, name string) bool {
	for _, h := range hs {
		if strings.EqualFold(h.Name, name) {
			return true
		}
	}
	return false
}

// readBodies fills the text and HTML parts of a message body.
func readBodies(out *pb.PreviewBroadcastResponse, contentType, encoding string, body io.Reader) error {
	mt, params, err := mime.ParseMediaType(contentType)
	if err != nil {
		return err
	}
	if strings.HasPrefix(mt, "multipart/") {
		r := multipart.NewReader(body, params["boundary"])
		for {
			p, err := r.NextRawPart()
			if err == io.EOF {
				return nil
			}
			if err != nil {
				return err
			}
			if err := readBodies(out, p.Header.Get("Content-Type"), p.Header.Get("Content-Transfer-Encoding"), p); err != nil {
				return err
			}
		}
	}
	if strings.EqualFold(encoding, "quoted-printable") {
		body = quotedprintable.NewReader(body)
	}
	raw, err := io.ReadAll(body)
	if err != nil {
		return err
	}
	switch mt {
	case "text/plain":
		out.Text = string(raw)
	case "text/html":
		out.Html = string(raw)
	}
	return nil
}

func (api *BroadcastOpsAPI) TestBroadcast(ctx context.Context, req *pb.TestBroadcastRequest) (*pb.TestBroadcastResponse, error) {
	b, err := api.broadcast(ctx, req.GetId())
	if err != nil {
		return nil, err
	}
	to := req.GetTo()
	if len(to) == 0 || len(to) > maxTestRecipients {
		return nil, invalid("to lists %d addresses; give 1 to %d", len(to), maxTestRecipients)
	}
	seen := make(map[string]bool, len(to))
	unique := to[:0:0]
	for _, addr := range to {
		if _, err := mail.ParseAddress(addr); err != nil || strings.ContainsAny(addr, "<> ") {
			return nil, invalid("to: %q is not an email address (give a bare address such as ann@example.com)", addr)
		}
		// One copy per mailbox: QA1@ and qa1@ are one address (a list
		// naming both sent two).
		if k := address.Key(addr); !seen[k] {
			seen[k] = true
			unique = append(unique, addr)
		}
	}
	to = unique
	mc := api.cfg.Mail
	if mc.Transport == nil || mc.Unsubscribe == nil {
		return nil, status.Error(codes.FailedPrecondition, "this coordinator has no SMTP relay or unsubscribe links to send test copies with: give it the workers' --smtp-url (RANGECAST_SMTP_URL), --public-url (RANGECAST_PUBLIC_URL) and unsubscribe keys (RANGECAST_UNSUBSCRIBE_KEYS)")
	}
	compiled, err := compile(b)
	if err != nil {
		return nil, err
	}
	var fixed *store.ContactDetail
	if req.GetContactEmail() != "" {
		d, err := api.contact(ctx, req.GetContactEmail(), "")
		if err != nil {
			return nil, err
		}
		fixed = &d
	}
	sample, err := api.sample(ctx, b)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, testTimeout)
	defer cancel()
	now := api.cfg.Clock.Now()
	out := &pb.TestBroadcastResponse{Results: make([]*pb.TestSendResult, len(to))}
	var wg sync.WaitGroup
	for i, addr := range to {
		c := sample
		if fixed != nil {
			c = fixed.Contact
		} else if d, err := api.cfg.Store.ContactByEmail(ctx, addr); err == nil {
			c = d.Contact
		}
		// A fresh id: the copy's Message-ID and unsubscribe link name no
		// ledger row and no contact, so a webhook about it or a click on
		// its link changes nobody's record.
		c.ID, c.Email = api.ids.make(now), addr
		res := &pb.TestSendResult{To: addr}
		out.Results[i] = res
		m, err := pageworker.Render(compiled, b, c, now, mc.Unsubscribe, mc.DKIM)
		if err != nil {
			res.Reply = fmt.Sprintf("render: %v", err)
			continue
		}
		res.MessageId = m.MessageID
		wg.Add(1)
		go func() {
			defer wg.Done()
			reply, err := mc.Transport.Send(ctx, m)
			if mc.Usage != nil {
				mc.Usage.Observe(compiled.SendingDomain(), addr, err, now)
			}
			if err != nil {
				res.Reply = err.Error()
				return
			}
			res.Accepted, res.Reply = true, reply
		}()
	}
	wg.Wait()
	api.cfg.Log.Info("test copies sent", "broadcast", b.ID, "to", len(to))
	return out, nil
}

// sample is the contact test copies are rendered with when the address is
// no contact: the audience's first eligible contact, so the attributes the
// template needs are there; an empty contact when the audience is empty.
func (api *BroadcastOpsAPI) sample(ctx context.Context, b store.Broadcast) (store.Contact, error) {
	var last ulid.ULID
	for i := range last {
		last[i] = 0xff
	}
	cs, err := api.cfg.Store.EligiblePage(ctx, b, ulid.ULID{}, last, 1)
	if err != nil {
		return store.Contact{}, Error(err)
	}
	if len(cs) == 0 {
		return store.Contact{Subscribed: true}, nil
	}
	return cs[0], nil
}

// maxScheduleAhead is the furthest ahead a broadcast can be scheduled:
// five years, far beyond any campaign's planning, near enough to refuse a
// mistyped year.
const maxScheduleAhead = 5 * 366 * 24 * time.Hour

func (api *BroadcastOpsAPI) ScheduleBroadcast(ctx context.Context, req *pb.ScheduleBroadcastRequest) (*pb.ScheduleBroadcastResponse, error) {
	b, err := api.broadcast(ctx, req.GetId())
	if err != nil {
		return nil, err
	}
	if req.GetAt() == nil {
		return nil, invalid("at is required: when the broadcast starts (RFC 3339, e.g. 2031-03-14T09:00:00Z)")
	}
	if err := req.GetAt().CheckValid(); err != nil {
		return nil, invalid("at: %v", err)
	}
	at, now := req.GetAt().AsTime(), api.cfg.Clock.Now()
	if !at.After(now) {
		return nil, invalid("at %s is not in the future (it is %s UTC now); to send now, use rangecast broadcasts start", at.UTC().Format(time.RFC3339), now.UTC().Format(time.DateTime))
	}
	if at.After(now.Add(maxScheduleAhead)) {
		// Most likely a typo in the year (9999, 2062 for 2026): a start
		// nobody would see come, with the list and the content by then
		// years out of date.
		return nil, invalid("at %s is more than five years away (it is %s UTC now); check the year", at.UTC().Format(time.RFC3339), now.UTC().Format(time.DateTime))
	}
	if b.State != store.StateDraft {
		return nil, notDraft(b, "scheduled")
	}
	// The content must start at its time: check it against the list now,
	// not when nobody is watching.
	if err := api.cfg.Engine.Preflight(ctx, b); err != nil {
		return nil, Error(err)
	}
	out, err := api.cfg.Store.ScheduleDraft(ctx, b.ID, at, now)
	if errors.Is(err, store.ErrConflict) {
		return nil, notDraft(out, "scheduled")
	}
	if err != nil {
		return nil, Error(err)
	}
	return &pb.ScheduleBroadcastResponse{Broadcast: broadcastPB(out, nil)}, nil
}

func (api *BroadcastOpsAPI) UnscheduleBroadcast(ctx context.Context, req *pb.UnscheduleBroadcastRequest) (*pb.UnscheduleBroadcastResponse, error) {
	b, err := api.broadcast(ctx, req.GetId())
	if err != nil {
		return nil, err
	}
	out, err := api.cfg.Store.ScheduleDraft(ctx, b.ID, time.Time{}, api.cfg.Clock.Now())
	if errors.Is(err, store.ErrConflict) {
		return nil, notDraft(out, "unscheduled")
	}
	if err != nil {
		return nil, Error(err)
	}
	return &pb.UnscheduleBroadcastResponse{Broadcast: broadcastPB(out, nil)}, nil
}

func (api *BroadcastOpsAPI) UpdateBroadcast(ctx context.Context, req *pb.UpdateBroadcastRequest) (*pb.UpdateBroadcastResponse, error) {
	b, err := api.broadcast(ctx, req.GetId())
	if err != nil {
		return nil, err
	}
	if (b.State == store.StateRunning || b.State == store.StatePaused || b.State == store.StateFailed) && throttleOnly(req) {
		return api.setThrottle(ctx, b, req.GetThrottlePerHour())
	}
	if b.State == store.StatePaused {
		return api.editPaused(ctx, b, req)
	}
	if b.State != store.StateDraft {
		return nil, notDraft(b, "edited")
	}
	d := store.Draft{Name: b.Name, Content: b.Content, SegmentID: b.SegmentID, ThrottlePerHour: b.ThrottlePerHour,
		InDoubtPolicy: b.InDoubtPolicy, NoUnsubscribeLink: b.NoUnsubscribeLink}
	set := func(dst *string, v *string) {
		if v != nil {
			*dst = *v
		}
	}
	set(&d.Name, req.Name)
	set(&d.Content.FromName, req.FromName)
	set(&d.Content.FromAddress, req.FromAddress)
	set(&d.Content.Subject, req.Subject)
	set(&d.Content.HTML, req.Html)
	set(&d.Content.Text, req.Text)
	if req.NoUnsubscribeLink != nil {
		d.NoUnsubscribeLink = *req.NoUnsubscribeLink
	}
	if req.ThrottlePerHour != nil {
		if *req.ThrottlePerHour < 0 {
			return nil, invalid("throttle_per_hour must be 0 (no throttle) or positive, not %d", *req.ThrottlePerHour)
		}
		d.ThrottlePerHour = *req.ThrottlePerHour
	}
	if req.InDoubtPolicy != nil {
		policy, ok := policyNames[*req.InDoubtPolicy]
		if !ok {
			return nil, invalid("in_doubt_policy %v is not one of skip or resend", *req.InDoubtPolicy)
		}
		d.InDoubtPolicy = policy
	}
	segment := b.Segment
	if req.Segment != nil {
		segment, d.SegmentID = *req.Segment, 0
		if segment != "" {
			id, err := api.cfg.Store.SegmentID(ctx, segment)
			if errors.Is(err, store.ErrNotFound) {
				return nil, invalid("segment %q does not exist; import contacts into it first", segment)
			}
			if err != nil {
				return nil, Error(err)
			}
			d.SegmentID = id
		}
	}
	// The same checks as create: a name fit for a header, content that
	// compiles, shows an unsubscribe link and renders for the audience.
	if d.Name == "" {
		return nil, invalid("name cannot be empty")
	}
	if err := validateBroadcastName(d.Name); err != nil {
		return nil, invalid("%v", err)
	}
	if err := message.CheckBroadcast(message.Template(d.Content), d.NoUnsubscribeLink); err != nil {
		return nil, invalid("content: %v", err)
	}
	if err := api.cfg.Engine.Preflight(ctx, store.Broadcast{Content: d.Content, SegmentID: d.SegmentID, NoUnsubscribeLink: d.NoUnsubscribeLink}); err != nil {
		if coordinator.KindOf(err) == coordinator.PreflightFailed {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
		return nil, Error(err)
	}
	out, err := api.cfg.Store.UpdateDraft(ctx, b.ID, d, api.cfg.Clock.Now())
	if errors.Is(err, store.ErrConflict) && out.State == store.StatePaused {
		// Started and paused while this edit was checked: a paused
		// broadcast's content can be edited, by the same call again.
		return nil, status.Errorf(codes.Aborted, "broadcast %s was started and paused while this edit was made; nothing was changed; a paused broadcast's content can be edited: send the edit again", b.ID)
	}
	if errors.Is(err, store.ErrConflict) {
		return nil, notDraft(out, "edited")
	}
	if err != nil {
		return nil, Error(err)
	}
	return &pb.UpdateBroadcastResponse{Broadcast: broadcastPB(out, nil)}, nil
}

// throttleOnly reports whether an update changes the throttle and nothing
// else: what a started broadcast allows besides a paused one's content.
func throttleOnly(req *pb.UpdateBroadcastRequest) bool {
	return req.ThrottlePerHour != nil && proto.Equal(req, &pb.UpdateBroadcastRequest{Id: req.GetId(), ThrottlePerHour: req.ThrottlePerHour})
}

// setThrottle changes a running, paused or failed broadcast's throttle: slowing a
// broadcast a provider complains about, or speeding up one that goes too
// slowly, without cancelling it (tester). The coordinator follows within a
// tick; pages already handed to workers finish at the old pace.
func (api *BroadcastOpsAPI) setThrottle(ctx context.Context, b store.Broadcast, perHour int64) (*pb.UpdateBroadcastResponse, error) {
	if perHour < 0 {
		return nil, invalid("throttle_per_hour must be 0 (no throttle) or positive, not %d", perHour)
	}
	out, err := api.cfg.Store.SetThrottle(ctx, b.ID, perHour, api.cfg.Clock.Now())
	if errors.Is(err, store.ErrConflict) {
		return nil, status.Errorf(codes.FailedPrecondition, "broadcast %s is %s; only a running, paused or failed broadcast's throttle can change (a draft's with the rest of it); nothing was changed", out.ID, out.State)
	}
	if err != nil {
		return nil, Error(err)
	}
	return &pb.UpdateBroadcastResponse{Broadcast: broadcastPB(out, nil)}, nil
}

// editPaused changes a paused broadcast's content: the way out of a
// template that fails for part of the list (the broadcast halts on it) or a
// typo found after the start. Only the content changes; its audience,
// settings and sending domain (the Message-IDs, DKIM key and governor the
// sent rows were counted under) stay. The messages claimed after the
// resume are rendered from the new content; those already sent are not
// sent again.
func (api *BroadcastOpsAPI) editPaused(ctx context.Context, b store.Broadcast, req *pb.UpdateBroadcastRequest) (*pb.UpdateBroadcastResponse, error) {
	var fixed []string
	for _, f := range []struct {
		name string
		set  bool
	}{{"name", req.Name != nil}, {"segment", req.Segment != nil}, {"throttle_per_hour", req.ThrottlePerHour != nil},
		{"in_doubt_policy", req.InDoubtPolicy != nil}, {"no_unsubscribe_link", req.NoUnsubscribeLink != nil}} {
		if f.set {
			fixed = append(fixed, f.name)
		}
	}
	if len(fixed) > 0 {
		return nil, status.Errorf(codes.FailedPrecondition,
			"broadcast %s is paused: only its content (from_name, from_address, subject, html, text) can change after it started, and its throttle_per_hour in a call of its own, not %s; nothing was changed",
			b.ID, strings.Join(fixed, ", "))
	}
	if req.FromName == nil && req.FromAddress == nil && req.Subject == nil && req.Html == nil && req.Text == nil {
		return nil, invalid("nothing to change: give at least one of from_name, from_address, subject, html, text")
	}
	c := b.Content
	set := func(dst *string, v *string) {
		if v != nil {
			*dst = *v
		}
	}
	set(&c.FromName, req.FromName)
	set(&c.FromAddress, req.FromAddress)
	set(&c.Subject, req.Subject)
	set(&c.HTML, req.Html)
	set(&c.Text, req.Text)
	if err := message.CheckBroadcast(message.Template(c), b.NoUnsubscribeLink); err != nil {
		// The hint to create the broadcast with --no-unsubscribe-link is
		// no way out of an edit: a started broadcast keeps its setting.
		msg, _, _ := strings.Cut(err.Error(), message.OrNoUnsubscribeLink)
		return nil, invalid("content: %s; nothing was changed", msg)
	}
	// Compiles: CheckBroadcast compiled it.
	compiled, err := message.Compile(message.Template(c))
	if err != nil {
		return nil, invalid("content: %v", err)
	}
	if was, now := sendingDomain(b.Content), compiled.SendingDomain(); was != now {
		return nil, status.Errorf(codes.FailedPrecondition,
			"broadcast %s is paused: from_address must stay at %s (its messages' ids, DKIM signature and sending limits are that domain's), not %s; nothing was changed",
			b.ID, was, now)
	}
	if err := api.cfg.Engine.Preflight(ctx, store.Broadcast{Content: c, SegmentID: b.SegmentID, NoUnsubscribeLink: b.NoUnsubscribeLink}); err != nil {
		if coordinator.KindOf(err) == coordinator.PreflightFailed {
			return nil, status.Error(codes.InvalidArgument, err.Error()+"; nothing was changed")
		}
		return nil, Error(err)
	}
	// The sample above is the create-time check's; the contacts that
	// paused the broadcast are the ones the edit is for. A still-broken
	// edit passed the sample (which had the attribute), was accepted, and
	// the resume paused again at once.
	held, err := api.cfg.Store.HeldByContent(ctx, b.ID, heldChecked)
	if err != nil {
		return nil, Error(err)
	}
	if f := preflight.CheckContacts(b, compiled, held, api.cfg.Clock.Now()); f != nil {
		return nil, status.Errorf(codes.InvalidArgument, "%v, one the old content held back; fix the template (or the contact), then try again; nothing was changed", f)
	}
	out, rerendered, err := api.cfg.Store.EditPaused(ctx, b.ID, c, api.cfg.Clock.Now())
	if errors.Is(err, store.ErrClaimsOut) {
		// Unavailable: it clears by itself, and a retry after a moment is
		// the remedy (gRPC's guidance for a transient condition). Marked
		// as the coordinator's own answer, so the CLI does not say it
		// cannot reach the coordinator.
		return nil, dependencyUnavailable(fmt.Errorf(
			"paused broadcast %s still has messages claimed without an outcome (a window finishing, which takes seconds, or a stopped worker's claims, which the reconciler settles about 15 s + --in-doubt-after + up to a minute later while paused), so its content cannot be edited yet: try again then; nothing was changed", b.ID))
	}
	if errors.Is(err, store.ErrConflict) {
		return nil, status.Errorf(codes.FailedPrecondition, "broadcast %s is %s; only a draft or a paused broadcast can be edited; nothing was changed", out.ID, out.State)
	}
	if err != nil {
		return nil, Error(err)
	}
	api.cfg.Log.Info("paused broadcast's content edited", "broadcast", b.ID, "revision", out.ContentRevision, "rerendered", rerendered)
	return &pb.UpdateBroadcastResponse{Broadcast: broadcastPB(out, nil), Rerendered: rerendered}, nil
}

// heldChecked is how many of the contacts the old content held back an edit
// renders its new content for before it is accepted: a template mistake
// halts within its first few dozen, so these are all of them or plenty.
const heldChecked = 200

// sendingDomain is the domain content sends from ("" when it does not
// compile).
func sendingDomain(c store.Content) string {
	compiled, err := message.Compile(message.Template(c))
	if err != nil {
		return ""
	}
	return compiled.SendingDomain()
}

func (api *BroadcastOpsAPI) DeleteBroadcast(ctx context.Context, req *pb.DeleteBroadcastRequest) (*pb.DeleteBroadcastResponse, error) {
	b, err := api.broadcast(ctx, req.GetId())
	if err != nil {
		return nil, err
	}
	out, err := api.cfg.Store.DeleteDraft(ctx, b.ID)
	if errors.Is(err, store.ErrConflict) {
		return nil, notDraft(out, "deleted")
	}
	if errors.Is(err, store.ErrNotFound) {
		return nil, status.Errorf(codes.NotFound, "no broadcast %s (deleted already?)", b.ID)
	}
	if err != nil {
		return nil, Error(err)
	}
	api.cfg.Log.Info("draft deleted", "broadcast", b.ID)
	return &pb.DeleteBroadcastResponse{Broadcast: broadcastPB(out, nil)}, nil
}

// reportStatuses are the ledger statuses a report lists, every one of
// them, in the ledger's order.
var reportStatuses = []store.SendStatus{store.SendClaimed, store.SendDeferred, store.SendSent, store.SendDelivered, store.SendOpened,
	store.SendClicked, store.SendBounced, store.SendComplained, store.SendUnsubscribed, store.SendFailed, store.SendUnknown}

func (api *BroadcastOpsAPI) ReportBroadcast(ctx context.Context, req *pb.ReportBroadcastRequest) (*pb.ReportBroadcastResponse, error) {
	groups := int(req.GetFailureGroups())
	switch {
	case groups < 0 || groups > maxGroups:
		return nil, invalid("failure_groups is %d; give 1 to %d, or 0 for %d", groups, maxGroups, defaultGroups)
	case groups == 0:
		groups = defaultGroups
	}
	b, err := api.broadcast(ctx, req.GetId())
	if err != nil {
		return nil, err
	}
	r, err := api.cfg.Store.Report(ctx, b.ID, groups)
	if err != nil {
		return nil, Error(err)
	}
	// The broadcast with its progress, as GetBroadcast shows it, from the
	// report's own counts; with NATS away (the range records are in KV)
	// its progress says the cursors are unknown.
	bpb := statusPB(api.cfg.Engine.StatusWith(ctx, b, r.Counts))
	st := r.Statuses
	out := &pb.ReportBroadcastResponse{
		LeftOut:   coordinator.LeftOut(b, r.Counts),
		Broadcast: bpb, Accepted: r.Reputation.Accepted, Delivered: r.Reputation.Delivered,
		Opened: st[store.SendOpened] + st[store.SendClicked], Clicked: st[store.SendClicked],
		Bounced: r.Reputation.Bounced, Complained: r.Reputation.Complained, Unsubscribed: st[store.SendUnsubscribed],
		Retryable: r.Retryable, RefusedAtSend: r.Reputation.Refused,
	}
	for _, s := range reportStatuses {
		out.Statuses = append(out.Statuses, &pb.StatusCount{Status: SendStatusPB(s), Count: st[s]})
	}
	for _, t := range store.EventTypes {
		out.Events = append(out.Events, &pb.EventCount{Type: string(t), Contacts: r.Events[t]})
	}
	if tried := out.Accepted + out.RefusedAtSend; tried > 0 {
		// What the bounce alarm reads (maintenance.AlarmConfig.Check).
		out.BounceRate = float64(out.Bounced+out.RefusedAtSend) / float64(tried)
	}
	if out.Delivered > 0 {
		out.ComplaintRate = float64(out.Complained) / float64(out.Delivered)
	}
	alarms := api.cfg.Engine.Alarms()
	out.BounceAlarm, out.ComplaintAlarm, out.AlarmMinSample = alarms.BounceRate, alarms.ComplaintRate, alarms.MinSample
	for _, g := range r.Failures {
		out.Failures = append(out.Failures, &pb.FailureGroup{Reply: g.Reply, Count: g.Count, Example: g.Example})
	}
	return out, nil
}

func (api *BroadcastOpsAPI) ExportBroadcast(req *pb.ExportBroadcastRequest, stream pb.BroadcastOpsService_ExportBroadcastServer) error {
	ctx := stream.Context()
	b, err := api.broadcast(ctx, req.GetId())
	if err != nil {
		return err
	}
	keep := map[pb.SendStatus]bool{}
	for _, st := range req.GetStatuses() {
		if _, known := pb.SendStatus_name[int32(st)]; !known || st == pb.SendStatus_SEND_STATUS_UNSPECIFIED {
			return invalid("statuses: %v is not a ledger status", st)
		}
		keep[st] = true
	}
	// One keyset page in memory at a time, whatever the broadcast's size.
	for after := (ulid.ULID{}); ; {
		rows, err := api.cfg.Store.ExportPage(ctx, b.ID, after, exportPage)
		if err != nil {
			return Error(err)
		}
		if len(rows) == 0 {
			return nil
		}
		msg := &pb.ExportBroadcastResponse{Rows: make([]*pb.LedgerRow, 0, len(rows))}
		for _, s := range rows {
			st := SendStatusPB(s.Status)
			if len(keep) > 0 && !keep[st] {
				continue // filtered here: the ledger is read in id order whatever the filter
			}
			if req.GetSentAgainInDoubt() && !(s.InDoubt && s.Status.Accepted()) {
				continue
			}
			msg.Rows = append(msg.Rows, &pb.LedgerRow{ContactId: s.ContactID.String(), Email: s.Email, Status: st,
				Attempts: int32(s.Attempt), Reply: s.Error, MessageId: s.MessageID, ClaimedAt: timestamp(s.ClaimedAt), UpdatedAt: timestamp(s.UpdatedAt),
				EarlierMaybeDelivered: s.InDoubt})
		}
		if len(msg.Rows) > 0 {
			if err := stream.Send(msg); err != nil {
				return err
			}
		}
		if len(rows) < exportPage {
			return nil
		}
		after = rows[len(rows)-1].ContactID
	}
}

func (api *BroadcastOpsAPI) RetryBroadcast(ctx context.Context, req *pb.RetryBroadcastRequest) (*pb.RetryBroadcastResponse, error) {
	b, err := api.broadcast(ctx, req.GetId())
	if err != nil {
		return nil, err
	}
	r, err := api.cfg.Engine.Retry(ctx, b.ID, req.GetIncludeUnknown())
	if err != nil {
		return nil, Error(err)
	}
	return &pb.RetryBroadcastResponse{Broadcast: statusPB(r.Status), Failed: r.Failed, Unknown: r.Unknown}, nil
}
