package coordinator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/mail"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/oklog/ulid/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rangecast/rangecast/internal/message"
	"github.com/rangecast/rangecast/internal/store"
	pb "github.com/rangecast/rangecast/proto/rangecast/v1"
)

// Field limits for imported contacts: longer values are reported, not cut.
const (
	maxEmailLen = 254 // RFC 5321 path limit
	maxNameLen  = 256
	importBatch = 1000
)

// AudienceAPI serves rangecast.v1.AudienceService.
type AudienceAPI struct {
	pb.UnimplementedAudienceServiceServer
	c   *Coordinator
	ids *idSource
}

// NewAudienceAPI returns the gRPC audience service backed by c's store.
func NewAudienceAPI(c *Coordinator) *AudienceAPI { return &AudienceAPI{c: c, ids: newIDSource()} }

// ValidateEmail accepts a bare addr-spec with a domain: what a contact's
// address must be before it may be stored.
func ValidateEmail(email string) error {
	if email == "" {
		return errors.New("email is empty")
	}
	if len(email) > maxEmailLen {
		return fmt.Errorf("email is %d characters; at most %d are allowed", len(email), maxEmailLen)
	}
	if err := message.ValidateHeaderValue("email", email); err != nil {
		return err
	}
	a, err := mail.ParseAddress(email)
	if err != nil || a.Address != email || a.Name != "" {
		return fmt.Errorf("%q is not a valid email address", email)
	}
	at := strings.LastIndexByte(email, '@')
	if at <= 0 || !strings.Contains(email[at+1:], ".") {
		return fmt.Errorf("%q has no domain", email)
	}
	return nil
}

// ImportContacts upserts the streamed rows in batches. Every row that is not
// imported is reported with its row number; valid rows are committed.
func (api *AudienceAPI) ImportContacts(stream pb.AudienceService_ImportContactsServer) error {
	ctx := stream.Context()
	st := api.c.cfg.Store
	resp := &pb.ImportContactsResponse{}
	seen := map[string]int64{} // lowercased email → first row
	segments := map[string]int64{}
	var batch []store.Contact
	var batchSegments [][]string
	var row int64

	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		now := api.c.cfg.Clock.Now()
		ids, err := st.UpsertContacts(ctx, batch, now)
		if err != nil {
			return storeError(err)
		}
		members := map[int64][]ulid.ULID{}
		for i, names := range batchSegments {
			for _, name := range names {
				seg, ok := segments[name]
				if !ok {
					if seg, err = st.EnsureSegment(ctx, name, now); err != nil {
						return storeError(err)
					}
					segments[name] = seg
				}
				members[seg] = append(members[seg], ids[i])
			}
		}
		for seg, ids := range members {
			if err := st.AddSegmentMembers(ctx, seg, ids); err != nil {
				return storeError(err)
			}
		}
		resp.Imported += int64(len(batch))
		batch, batchSegments = batch[:0], batchSegments[:0]
		return nil
	}

	for {
		req, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		for _, r := range req.GetRows() {
			row++
			email := strings.TrimSpace(r.GetEmail())
			reject := func(format string, args ...any) {
				resp.Errors = append(resp.Errors, &pb.RowError{Row: row, Email: email, Error: fmt.Sprintf(format, args...)})
			}
			if err := ValidateEmail(email); err != nil {
				reject("%v", err)
				continue
			}
			if first, dup := seen[strings.ToLower(email)]; dup {
				reject("duplicate of row %d", first)
				continue
			}
			if n := utf8.RuneCountInString(r.GetName()); n > maxNameLen {
				reject("name is %d characters; at most %d are allowed", n, maxNameLen)
				continue
			}
			if err := message.ValidateHeaderValue("name", r.GetName()); err != nil {
				reject("%v", err)
				continue
			}
			if slices.ContainsFunc(r.GetSegments(), func(s string) bool { return strings.TrimSpace(s) == "" }) {
				reject("a segment name is empty")
				continue
			}
			seen[strings.ToLower(email)] = row
			attrs := make(map[string]any, len(r.GetAttributes()))
			for k, v := range r.GetAttributes() {
				attrs[k] = v
			}
			batch = append(batch, store.Contact{
				ID: api.ids.make(api.c.cfg.Clock.Now()), Email: email, Name: r.GetName(), Attributes: attrs,
				Subscribed: !r.GetUnsubscribed(), DoNotContact: r.GetDoNotContact(),
			})
			batchSegments = append(batchSegments, r.GetSegments())
			if len(batch) >= importBatch {
				if err := flush(); err != nil {
					return err
				}
			}
		}
	}
	if err := flush(); err != nil {
		return err
	}
	return stream.SendAndClose(resp)
}

func (api *AudienceAPI) UnsubscribeContact(ctx context.Context, req *pb.UnsubscribeContactRequest) (*pb.UnsubscribeContactResponse, error) {
	if req.GetEmail() == "" {
		return nil, status.Error(codes.InvalidArgument, "email is required")
	}
	if err := api.c.cfg.Store.Unsubscribe(ctx, req.GetEmail(), api.c.cfg.Clock.Now()); err != nil {
		return nil, storeError(err)
	}
	return &pb.UnsubscribeContactResponse{}, nil
}
