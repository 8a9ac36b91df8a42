package api

import (
	"context"
	"encoding/base64"
	"errors"
	"strconv"
	"strings"

	"github.com/oklog/ulid/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rangecast/rangecast/internal/address"
	"github.com/rangecast/rangecast/internal/store"
	pb "github.com/rangecast/rangecast/proto/rangecast/v1"
)

// maxErase bounds the addresses of one EraseContacts call; the CLI sends a
// longer file in chunks.
const maxErase = 10_000

// CatalogAPI serves rangecast.v1.CatalogService.
type CatalogAPI struct {
	pb.UnimplementedCatalogServiceServer
	cfg      Config
	audience *AudienceAPI // for its segment lookup
}

// NewCatalogAPI returns the gRPC catalog service backed by cfg's store.
func NewCatalogAPI(cfg Config) *CatalogAPI {
	return &CatalogAPI{cfg: cfg.withDefaults(), audience: NewAudienceAPI(cfg)}
}

// Page tokens of every list carry a prefix of their own, so a token given
// to the wrong list is refused, not misread (a contact's id read as a place
// among broadcasts, tester).
const (
	segmentToken   = "seg."
	templateToken  = "tpl."
	contactToken   = "ct."
	broadcastToken = "bc."
)

func pageSize(size int32) (int, error) {
	switch {
	case size < 0 || size > maxPageSize:
		return 0, invalid("page_size %d: use 1 to %d, or 0 for %d", size, maxPageSize, defaultPageSize)
	case size == 0:
		return defaultPageSize, nil
	}
	return int(size), nil
}

func badToken(token string) error {
	return invalid("page_token %q is not one this list gave; start again without it", token)
}

func (api *CatalogAPI) ListContacts(ctx context.Context, req *pb.ListContactsRequest) (*pb.ListContactsResponse, error) {
	limit, after, err := listPage(req.GetPageSize(), req.GetPageToken(), contactToken)
	if err != nil {
		return nil, err
	}
	var segment int64
	if name := req.GetSegment(); name != "" {
		if segment, err = api.audience.segment(ctx, name); err != nil {
			return nil, err
		}
	}
	// One more than asked tells a last page from a full one.
	cs, err := api.cfg.Store.ContactPage(ctx, segment, after, limit+1)
	if err != nil {
		return nil, Error(err)
	}
	resp := &pb.ListContactsResponse{}
	for _, c := range cs[:min(len(cs), limit)] {
		resp.Contacts = append(resp.Contacts, contactPB(c))
	}
	if len(cs) > limit {
		resp.NextPageToken = pageToken(contactToken, cs[limit-1].ID)
	}
	return resp, nil
}

func (api *CatalogAPI) EraseContacts(ctx context.Context, req *pb.EraseContactsRequest) (*pb.EraseContactsResponse, error) {
	emails := req.GetEmails()
	switch {
	case len(emails) == 0:
		return nil, invalid("name at least one email to erase")
	case len(emails) > maxErase:
		return nil, invalid("%d emails; at most %d per call (the CLI sends a longer --file in parts)", len(emails), maxErase)
	}
	clean := make([]string, len(emails))
	for i, e := range emails {
		e = strings.TrimSpace(e)
		if e == "" {
			return nil, invalid("email %d of %d is empty", i+1, len(emails))
		}
		if len(e) > maxEmailLen {
			return nil, invalid("email %d of %d is %d bytes; no address is longer than %d", i+1, len(emails), len(e), maxEmailLen)
		}
		if !strings.Contains(e, "@") {
			return nil, invalid("%q (email %d of %d) is not an email address; erase by the address the contact was imported with", shown(e), i+1, len(emails))
		}
		// An invisible character (a BOM a file kept, a zero-width space
		// pasted with the address) makes a key no contact has: the erase
		// would report "no such contact" and leave the person in place
		// (tester). No address with one was ever imported, so refuse it.
		var ae *address.Error
		if _, err := address.Canonical(e); errors.As(err, &ae) && (ae.Reason == address.ReasonControl || ae.Reason == address.ReasonEncoding) {
			return nil, invalid("email %d of %d (%q): %s; no contact was erased (remove the character and try again)", i+1, len(emails), shown(e), ae.Detail)
		}
		clean[i] = e
	}
	res, err := api.cfg.Store.Erase(ctx, clean, api.cfg.Clock.Now())
	if err != nil {
		return nil, Error(err)
	}
	resp := &pb.EraseContactsResponse{}
	for _, r := range res {
		e := &pb.ErasedContact{Email: r.Email, Sends: r.Sends, Events: r.Events, Transactional: r.Receipts}
		if r.Contact != (ulid.ULID{}) {
			e.ContactId = r.Contact.String()
		}
		resp.Erased = append(resp.Erased, e)
	}
	api.cfg.Log.Info("contacts erased", "count", len(resp.Erased))
	return resp, nil
}

func segmentSummaryPB(g store.SegmentInfo) *pb.SegmentSummary {
	return &pb.SegmentSummary{
		Segment: &pb.Segment{Id: g.ID, Name: g.Name, CreatedAt: timestamp(g.CreatedAt)},
		Members: g.Members, Broadcasts: g.Broadcasts,
	}
}

func (api *CatalogAPI) ListSegments(ctx context.Context, req *pb.ListSegmentsRequest) (*pb.ListSegmentsResponse, error) {
	limit, err := pageSize(req.GetPageSize())
	if err != nil {
		return nil, err
	}
	var after int64
	if t := req.GetPageToken(); t != "" {
		n, err := strconv.ParseInt(strings.TrimPrefix(t, segmentToken), 10, 64)
		if !strings.HasPrefix(t, segmentToken) || err != nil || n < 0 {
			return nil, badToken(t)
		}
		after = n
	}
	gs, err := api.cfg.Store.SegmentPage(ctx, after, limit+1)
	if err != nil {
		return nil, Error(err)
	}
	resp := &pb.ListSegmentsResponse{}
	for _, g := range gs[:min(len(gs), limit)] {
		resp.Segments = append(resp.Segments, segmentSummaryPB(g))
	}
	if len(gs) > limit {
		resp.NextPageToken = segmentToken + strconv.FormatInt(gs[limit-1].ID, 10)
	}
	return resp, nil
}

func (api *CatalogAPI) DeleteSegment(ctx context.Context, req *pb.DeleteSegmentRequest) (*pb.DeleteSegmentResponse, error) {
	name := req.GetName()
	if name == "" {
		return nil, invalid("name the segment to delete")
	}
	g, err := api.cfg.Store.DeleteSegment(ctx, name)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, status.Errorf(codes.NotFound, "no segment named %q (segment names are case-sensitive; see rangecast segments list)", name)
	case errors.Is(err, store.ErrConflict):
		return nil, status.Errorf(codes.FailedPrecondition,
			"segment %q is the audience of %d broadcast(s), which keep their segment; it can be deleted only when no broadcast names it", name, g.Broadcasts)
	case err != nil:
		return nil, Error(err)
	}
	return &pb.DeleteSegmentResponse{Segment: segmentSummaryPB(g)}, nil
}

func templatePB(t store.Template) *pb.TransactionalTemplate {
	return &pb.TransactionalTemplate{
		Name: t.Name, FromAddress: t.FromAddress, FromName: t.FromName, Subject: t.Subject, Text: t.Text, Html: t.HTML,
		Version: int32(t.Version), UpdatedAt: timestamp(t.UpdatedAt),
	}
}

func (api *CatalogAPI) ListTemplates(ctx context.Context, req *pb.ListTemplatesRequest) (*pb.ListTemplatesResponse, error) {
	limit, err := pageSize(req.GetPageSize())
	if err != nil {
		return nil, err
	}
	var after string
	if t := req.GetPageToken(); t != "" {
		b, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(t, templateToken))
		if !strings.HasPrefix(t, templateToken) || err != nil || len(b) == 0 {
			return nil, badToken(t)
		}
		after = string(b)
	}
	ts, err := api.cfg.Store.TemplatePage(ctx, after, limit+1)
	if err != nil {
		return nil, Error(err)
	}
	resp := &pb.ListTemplatesResponse{}
	for _, t := range ts[:min(len(ts), limit)] {
		resp.Templates = append(resp.Templates, templatePB(t))
	}
	if len(ts) > limit {
		resp.NextPageToken = templateToken + base64.RawURLEncoding.EncodeToString([]byte(ts[limit-1].Name))
	}
	return resp, nil
}

func (api *CatalogAPI) DeleteTemplate(ctx context.Context, req *pb.DeleteTemplateRequest) (*pb.DeleteTemplateResponse, error) {
	name := req.GetName()
	if name == "" {
		return nil, invalid("name the template to delete")
	}
	t, err := api.cfg.Store.DeleteTemplate(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		return nil, status.Errorf(codes.NotFound, "no template named %q (see rangecast send template list)", name)
	}
	if err != nil {
		return nil, Error(err)
	}
	return &pb.DeleteTemplateResponse{Template: templatePB(t)}, nil
}
