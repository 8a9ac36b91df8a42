package api

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/oklog/ulid/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rangecast/rangecast/internal/address"
	"github.com/rangecast/rangecast/internal/message"
	"github.com/rangecast/rangecast/internal/store"
	pb "github.com/rangecast/rangecast/proto/rangecast/v1"
)

// Field limits for contacts: longer values are reported, never cut.
const (
	maxEmailLen       = 254 // RFC 5321 path limit
	maxNameLen        = 256
	maxAttributes     = store.MaxAttributes
	maxAttrKeyLen     = 128
	maxAttrValueLen   = 2048
	maxSegmentNameLen = 128
	maxRowSegments    = 64
	maxReasonLen      = 500
)

const (
	// importBatch is how many rows go to the store at a time: large enough
	// for Postgres's COPY path to pay off, small enough that a failure
	// loses little work and memory stays flat.
	importBatch = 5000
	// maxRowErrors bounds the rejected rows listed in one response (each
	// is counted regardless), and maxRowError each one's reason, so the
	// response stays far below gRPC's 4 MB (1,000 × ~1 KB).
	maxRowErrors = 1_000
	maxRowError  = 400
	// maxMembers bounds the contacts named in one membership call; the CLI
	// sends larger files in chunks.
	maxMembers = 10_000
	// defaultHistory and maxHistory bound GetContact's history.
	defaultHistory = 500
	maxHistory     = 10_000
)

// AudienceAPI serves rangecast.v1.AudienceService.
type AudienceAPI struct {
	pb.UnimplementedAudienceServiceServer
	cfg Config
	ids *idSource
}

// NewAudienceAPI returns the gRPC audience service backed by cfg's store.
func NewAudienceAPI(cfg Config) *AudienceAPI {
	return &AudienceAPI{cfg: cfg.withDefaults(), ids: newIDSource()}
}

// ValidateEmail accepts an address that can be delivered: what a contact's
// address must be before it may be stored (address.Canonical's rules).
func ValidateEmail(email string) error {
	_, err := address.Canonical(email)
	return err
}

// ValidateSegmentName is the rule for a segment's name, wherever it is
// given: created, or named by an import (which creates it when missing).
func ValidateSegmentName(name string) error {
	if strings.TrimSpace(name) == "" {
		return errors.New("a segment name is empty")
	}
	if strings.TrimSpace(name) != name {
		return fmt.Errorf("segment name %q starts or ends with white space", name)
	}
	if n := utf8.RuneCountInString(name); n > maxSegmentNameLen {
		return fmt.Errorf("segment name is %d characters; at most %d are allowed", n, maxSegmentNameLen)
	}
	if strings.ContainsAny(name, "\r\n\x00") {
		return fmt.Errorf("segment name %q contains a line break or NUL", name)
	}
	if err := message.CheckControl("segment name", name); err != nil {
		return err
	}
	return nil
}

// validateRow returns why a row cannot be imported, or "" if it can.
func validateRow(email string, r *pb.ContactRow) string {
	if err := ValidateEmail(email); err != nil {
		return err.Error()
	}
	if err := store.CheckRowText(r.GetName(), r.GetAttributes(), r.GetSegments()); err != nil {
		return err.Error()
	}
	if n := utf8.RuneCountInString(r.GetName()); n > maxNameLen {
		return fmt.Sprintf("name is %d characters; at most %d are allowed", n, maxNameLen)
	}
	if err := message.ValidateHeaderValue("name", r.GetName()); err != nil {
		return err.Error()
	}
	// The name goes into every message's To: a control character or a
	// bidirectional override reaches the recipient's mail client, as the
	// from name's would (refused there too).
	if err := message.CheckControl("name", r.GetName()); err != nil {
		return err.Error()
	}
	if n := len(r.GetAttributes()); n > maxAttributes {
		return fmt.Sprintf("%d attributes; at most %d are allowed", n, maxAttributes)
	}
	for k, v := range r.GetAttributes() {
		if k == "" {
			return "an attribute name is empty"
		}
		if n := utf8.RuneCountInString(k); n > maxAttrKeyLen {
			return fmt.Sprintf("attribute name %.40q… is %d characters; at most %d are allowed", k, n, maxAttrKeyLen)
		}
		if n := utf8.RuneCountInString(v); n > maxAttrValueLen {
			return fmt.Sprintf("attribute %q is %d characters; at most %d are allowed", k, n, maxAttrValueLen)
		}
	}
	if n := len(r.GetSegments()); n > maxRowSegments {
		return fmt.Sprintf("%d segments; at most %d are allowed per row", n, maxRowSegments)
	}
	for _, s := range r.GetSegments() {
		if err := ValidateSegmentName(s); err != nil {
			return err.Error()
		}
	}
	return ""
}

// shown is how a rejected row's email is echoed: as given, or cut when it
// is the over-long field being reported.
func shown(email string) string {
	if len(email) <= maxEmailLen {
		return email
	}
	cut := email[:maxEmailLen]
	for !utf8.ValidString(cut) {
		cut = cut[:len(cut)-1]
	}
	return cut + "…"
}

// clip cuts s to at most n bytes, on a rune boundary, marking the cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := s[:n]
	for !utf8.ValidString(cut) {
		cut = cut[:len(cut)-1]
	}
	return cut + "…"
}

// emailSet remembers the addresses of an import stream, case-insensitively,
// as 128-bit hashes (16 bytes per row, whatever the address's length), so
// the memory of a long import stays small. A false "duplicate" needs a
// 128-bit collision: at a billion rows, odds of about 1 in 10^20.
type emailSet struct {
	s1, s2 maphash.Seed
	rows   map[[2]uint64]int64
}

func newEmailSet() *emailSet {
	return &emailSet{s1: maphash.MakeSeed(), s2: maphash.MakeSeed(), rows: map[[2]uint64]int64{}}
}

// add records email at row, or returns the row that had it first.
func (e *emailSet) add(email string, row int64) (first int64, dup bool) {
	key := address.Key(email)
	h := [2]uint64{maphash.String(e.s1, key), maphash.String(e.s2, key)}
	if first, dup := e.rows[h]; dup {
		return first, true
	}
	e.rows[h] = row
	return 0, false
}

// batch is rows ready for the store, with the segments each joins.
type batch struct {
	contacts []store.Contact
	segments [][]string
	rows     []int64 // each contact's row number in the stream
}

// refusedRow is a row the store did not write: its merge with the stored
// contact had too many attributes (store.ImportContacts).
type refusedRow struct {
	row   int64
	email string
}

// ImportContacts validates the streamed rows and upserts the valid ones in
// batches. Receiving and validating overlap with writing: one goroutine
// writes batch n while the stream delivers batch n+1. Every row that is not
// imported is reported with its row number; valid rows are committed.
func (api *AudienceAPI) ImportContacts(stream pb.AudienceService_ImportContactsServer) error {
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	start := api.cfg.Clock.Now()
	resp := &pb.ImportContactsResponse{}
	seen := newEmailSet()

	batches := make(chan batch, 1)
	var imported, updated, erased int64 // written by the writer; read after it is done
	var refused []refusedRow            // likewise
	written := make(chan error, 1)
	go func() {
		err := api.writeBatches(ctx, batches, &imported, &updated, &erased, &refused)
		if err != nil {
			cancel() // stops the reader at its next batch
		}
		written <- err
	}()
	// finish closes the pipeline and returns the writer's error, if any.
	finish := func() error {
		close(batches)
		return <-written
	}

	var row int64
	cur := batch{}
	push := func() error {
		if len(cur.contacts) == 0 {
			return nil
		}
		select {
		case batches <- cur:
			cur = batch{}
			return nil
		case <-ctx.Done():
			// The writer failed (and cancelled ctx), or the client went away.
			return ctx.Err()
		}
	}
	fail := func(err error) error {
		cancel()
		// The writer's own failure is the cause; its "canceled" is only
		// the echo of this one.
		if werr := finish(); werr != nil && !errors.Is(werr, context.Canceled) {
			err = werr
		}
		return api.importFailed(err, row, imported)
	}
	for {
		req, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fail(err)
		}
		now := api.cfg.Clock.Now()
		for _, r := range req.GetRows() {
			row++
			given := strings.TrimSpace(r.GetEmail())
			email := given
			reason := validateRow(email, r)
			if reason == "" {
				email, _ = address.Canonical(email)
			}
			if reason == "" {
				if first, dup := seen.add(email, row); dup {
					reason = fmt.Sprintf("duplicate of row %d", first)
				}
			}
			if reason != "" {
				resp.Rejected++
				if len(resp.Errors) < maxRowErrors {
					resp.Errors = append(resp.Errors, &pb.RowError{Row: row, Email: shown(given), Error: clip(reason, maxRowError)})
				}
				continue
			}
			var attrs map[string]any
			if len(r.GetAttributes()) > 0 {
				attrs = make(map[string]any, len(r.GetAttributes()))
				for k, v := range r.GetAttributes() {
					attrs[k] = v
				}
			}
			cur.contacts = append(cur.contacts, store.Contact{
				ID: api.ids.make(now), Email: email, Name: r.GetName(), Attributes: attrs,
				Subscribed: !r.GetUnsubscribed(), DoNotContact: r.GetDoNotContact(),
			})
			cur.segments = append(cur.segments, r.GetSegments())
			cur.rows = append(cur.rows, row)
			if len(cur.contacts) >= importBatch {
				if err := push(); err != nil {
					return fail(err)
				}
			}
		}
	}
	if err := push(); err != nil {
		return fail(err)
	}
	if err := finish(); err != nil {
		return api.importFailed(err, row, imported)
	}
	for _, r := range refused {
		resp.Rejected++
		if len(resp.Errors) < maxRowErrors {
			resp.Errors = append(resp.Errors, &pb.RowError{Row: r.row, Email: shown(r.email), Error: fmt.Sprintf(
				"merged with the attributes the contact has, it would have more than %d; nothing of the row was written (import it with fewer new keys)", store.MaxAttributes)})
		}
	}
	// The store's refusals come after the rows validation refused.
	slices.SortFunc(resp.Errors, func(a, b *pb.RowError) int { return cmp.Compare(a.GetRow(), b.GetRow()) })
	resp.Imported, resp.Updated, resp.Erased = imported, updated, erased
	api.cfg.Log.Info("contacts imported", "rows", row, "imported", imported, "updated", updated, "erased_before", erased, "rejected", resp.Rejected,
		"seconds", api.cfg.Clock.Now().Sub(start).Seconds())
	return stream.SendAndClose(resp)
}

// importFailed describes a stream that stopped: which rows were committed,
// so that the person can fix the cause and import the file again (an
// import is an upsert, so repeating the committed rows changes nothing).
func (api *AudienceAPI) importFailed(err error, row, imported int64) error {
	api.cfg.Log.Warn("contact import stopped", "row", row, "imported", imported, "err", err)
	if s, ok := status.FromError(err); ok && s.Code() != codes.Unknown {
		return status.Errorf(s.Code(), "import stopped after row %d with at least %d rows committed: %s", row, imported, s.Message())
	}
	s := status.Convert(Error(err))
	return status.Errorf(s.Code(), "import stopped after row %d with at least %d rows committed (importing the file again is safe): %s", row, imported, s.Message())
}

// writeBatches writes each batch: its contacts with the segment memberships
// their rows asked for, in one transaction (store.ImportContacts), so an
// import stopped anywhere leaves no contact written without its segments.
// Segments are created when missing, before the batch that first names
// them. It returns at the first error; ImportContacts then cancels the
// stream.
func (api *AudienceAPI) writeBatches(ctx context.Context, batches <-chan batch, imported, updated, erased *int64, refused *[]refusedRow) error {
	st := api.cfg.Store
	segments := map[string]int64{}
	for b := range batches {
		now := api.cfg.Clock.Now()
		for i, names := range b.segments {
			for _, name := range names {
				seg, ok := segments[name]
				if !ok {
					var err error
					if seg, err = st.EnsureSegment(ctx, name, now); err != nil {
						return err
					}
					segments[name] = seg
				}
				b.contacts[i].Segments = append(b.contacts[i].Segments, seg)
			}
		}
		ids, err := st.ImportContacts(ctx, b.contacts, now)
		if err != nil {
			return err
		}
		written := len(b.contacts)
		emails := make([]string, 0, len(ids))
		for i, id := range ids {
			switch {
			case id == (ulid.ULID{}):
				*refused = append(*refused, refusedRow{row: b.rows[i], email: b.contacts[i].Email})
				written--
				continue
			case id != b.contacts[i].ID:
				*updated++ // the address's contact keeps its id
			}
			emails = append(emails, b.contacts[i].Email)
		}
		*imported += int64(written)
		// Written, and suppressed for good: the import said "imported"
		// and nothing of them (tester).
		n, err := st.ErasedAmong(ctx, emails)
		if err != nil {
			return err
		}
		*erased += n
	}
	return nil
}

// contact finds the contact a request names by exactly one of id and email.
func (api *AudienceAPI) contact(ctx context.Context, id, email string) (store.ContactDetail, error) {
	return findContact(ctx, api.cfg.Store, id, email)
}

// contactFinder is the store's part findContact needs.
type contactFinder interface {
	GetContact(ctx context.Context, id ulid.ULID) (store.ContactDetail, error)
	ContactByEmail(ctx context.Context, email string) (store.ContactDetail, error)
}

// findContact finds the contact named by exactly one of id and email, with
// the same codes and words wherever a request names one: InvalidArgument
// for what cannot name a contact, NotFound for a contact that is not there.
func findContact(ctx context.Context, st contactFinder, id, email string) (store.ContactDetail, error) {
	id, email = strings.TrimSpace(id), strings.TrimSpace(email)
	switch {
	case id != "" && email != "":
		return store.ContactDetail{}, invalid("name the contact by id or by email, not both")
	case id != "":
		u, err := ulid.ParseStrict(id)
		if err != nil {
			return store.ContactDetail{}, invalid("id %q is not a contact id: ids are 26-character ULIDs such as 01J9Z3K8M2T4V6X8Y0A2B4C6D8 (or give the email)", id)
		}
		d, err := st.GetContact(ctx, u)
		if errors.Is(err, store.ErrNotFound) {
			return d, status.Errorf(codes.NotFound, "no contact has id %s", id)
		}
		return d, errorOrNil(err)
	case email != "":
		if _, err := address.Canonical(email); err != nil {
			// No contact can have it (imports store only valid addresses):
			// say what it is not, rather than "no contact has the email".
			return store.ContactDetail{}, invalid("%q is neither an email address (%v) nor a contact id (a 26-character ULID such as 01J9Z3K8M2T4V6X8Y0A2B4C6D8)", email, err)
		}
		d, err := st.ContactByEmail(ctx, email)
		if errors.Is(err, store.ErrNotFound) {
			return d, status.Errorf(codes.NotFound, "no contact has the email %s (emails match case-insensitively)", email)
		}
		return d, errorOrNil(err)
	}
	return store.ContactDetail{}, invalid("name the contact by id or by email")
}

func errorOrNil(err error) error {
	if err == nil {
		return nil
	}
	return Error(err)
}

func (api *AudienceAPI) GetContact(ctx context.Context, req *pb.GetContactRequest) (*pb.GetContactResponse, error) {
	limit := int(req.GetHistoryLimit())
	switch {
	case limit < 0 || limit > maxHistory:
		return nil, invalid("history_limit %d: use 1 to %d, or 0 for %d", limit, maxHistory, defaultHistory)
	case limit == 0:
		limit = defaultHistory
	}
	d, err := api.contact(ctx, req.GetId(), req.GetEmail())
	if err != nil {
		return nil, err
	}
	// One more than asked, to tell a full page from a truncated history.
	h, err := api.cfg.Store.ContactHistory(ctx, d.ID, limit+1)
	if err != nil {
		return nil, Error(err)
	}
	resp := &pb.GetContactResponse{Contact: contactPB(d), HistoryTruncated: len(h) > limit}
	for _, s := range h[:min(len(h), limit)] {
		resp.History = append(resp.History, &pb.ContactSend{
			BroadcastId: s.BroadcastID.String(), BroadcastName: s.BroadcastName, BroadcastState: stateValues[s.BroadcastState],
			Status: SendStatusPB(s.Status), Reply: s.Error, Attempt: int32(s.Attempt), MessageId: s.MessageID, Email: s.Email,
			ClaimedAt: timestamp(s.ClaimedAt), UpdatedAt: timestamp(s.UpdatedAt),
		})
	}
	return resp, nil
}

func (api *AudienceAPI) UnsubscribeContact(ctx context.Context, req *pb.UnsubscribeContactRequest) (*pb.UnsubscribeContactResponse, error) {
	d, err := api.contact(ctx, req.GetId(), req.GetEmail())
	if err != nil {
		return nil, err
	}
	// The ledger's unsubscribe also marks the contact's rows that are
	// deferred or claimed but unsent, so no broadcast sends them later.
	if err := api.cfg.Store.UnsubscribeContact(ctx, d.ID, ulid.ULID{}, api.cfg.Clock.Now()); err != nil {
		return nil, Error(err)
	}
	return &pb.UnsubscribeContactResponse{}, nil
}

// operatorReason checks the reason an operator gives for a change to a
// contact; missing says what it must say when it is empty.
func operatorReason(reason, missing string) (string, error) {
	reason = strings.TrimSpace(reason)
	if reason == "" {
		return "", invalid("a reason is required: %s", missing)
	}
	if n := utf8.RuneCountInString(reason); n > maxReasonLen {
		return "", invalid("reason is %d characters; at most %d are allowed", n, maxReasonLen)
	}
	if err := message.CheckControl("reason", reason); err != nil {
		return "", invalid("%v", err)
	}
	return reason, nil
}

func (api *AudienceAPI) SuppressContact(ctx context.Context, req *pb.SuppressContactRequest) (*pb.SuppressContactResponse, error) {
	reason, err := operatorReason(req.GetReason(), "say why this contact must not be mailed (it is shown with the contact)")
	if err != nil {
		return nil, err
	}
	d, err := api.contact(ctx, req.GetId(), req.GetEmail())
	if err != nil {
		return nil, err
	}
	d, err = api.cfg.Store.Suppress(ctx, d.ID, reason, api.cfg.Clock.Now())
	if err != nil {
		return nil, Error(err)
	}
	return &pb.SuppressContactResponse{Contact: contactPB(d)}, nil
}

// UnsuppressContact lifts the suppression it read, never one that changed
// meanwhile (a bounce recorded in between stays), and logs who was lifted,
// from what, and why: the contact keeps no record of it.
func (api *AudienceAPI) UnsuppressContact(ctx context.Context, req *pb.UnsuppressContactRequest) (*pb.UnsuppressContactResponse, error) {
	reason, err := operatorReason(req.GetReason(), "say why this contact may be mailed again (it is logged)")
	if err != nil {
		return nil, err
	}
	d, err := api.contact(ctx, req.GetId(), req.GetEmail())
	if err != nil {
		return nil, err
	}
	was := d.SuppressedReason
	// Erasure is read from the erased addresses, not from the reason,
	// which an operator's suppress can write or replace (found by a
	// tester: a faked reason was refused as erased, a replaced one lifted).
	erased, err := api.cfg.Store.Erased(ctx, d.Email)
	if err != nil {
		return nil, Error(err)
	}
	if erased {
		return nil, status.Errorf(codes.FailedPrecondition, "%s: its address was erased before (GDPR Art. 17), and that suppression is for good; nothing was changed", contactName(d))
	}
	if !d.Suppressed {
		return nil, status.Errorf(codes.FailedPrecondition, "%s is not suppressed", contactName(d))
	}
	d, err = api.cfg.Store.Unsuppress(ctx, d.ID, was, api.cfg.Clock.Now())
	if err != nil {
		return nil, Error(err)
	}
	api.cfg.Log.Info("suppression lifted", "contact", d.ID.String(), "was", was, "reason", reason)
	return &pb.UnsuppressContactResponse{Contact: contactPB(d), Was: was}, nil
}

func (api *AudienceAPI) CreateSegment(ctx context.Context, req *pb.CreateSegmentRequest) (*pb.CreateSegmentResponse, error) {
	name := req.GetName()
	if err := ValidateSegmentName(name); err != nil {
		return nil, invalid("%v", err)
	}
	seg, err := api.cfg.Store.CreateSegment(ctx, name, api.cfg.Clock.Now())
	if errors.Is(err, store.ErrConflict) {
		return nil, status.Errorf(codes.AlreadyExists, "segment %q exists already", name)
	}
	if err != nil {
		return nil, Error(err)
	}
	return &pb.CreateSegmentResponse{Segment: &pb.Segment{Id: seg.ID, Name: seg.Name, CreatedAt: timestamp(seg.CreatedAt)}}, nil
}

// segment resolves a segment name; NotFound says how to create it.
func (api *AudienceAPI) segment(ctx context.Context, name string) (int64, error) {
	if name == "" {
		return 0, invalid("segment is required")
	}
	id, err := api.cfg.Store.SegmentID(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		return 0, status.Errorf(codes.NotFound, "no segment named %q (segment names are case-sensitive; create one with `rangecast segments create`)", name)
	}
	return id, errorOrNil(err)
}

// members resolves the contacts a membership request names: their ids, and
// the ids and emails given that name no contact. Malformed input fails the
// whole request, before anything changes.
func (api *AudienceAPI) members(ctx context.Context, ids, emails []string) ([]ulid.ULID, []string, error) {
	if n := len(ids) + len(emails); n == 0 {
		return nil, nil, invalid("name at least one contact (contact_ids or emails)")
	} else if n > maxMembers {
		return nil, nil, invalid("%d contacts in one call; at most %d are allowed (send the rest in further calls)", n, maxMembers)
	}
	out := make([]ulid.ULID, 0, len(ids)+len(emails))
	for _, id := range ids {
		u, err := ulid.ParseStrict(strings.TrimSpace(id))
		if err != nil {
			return nil, nil, invalid("contact id %q is not a ULID (26 characters, such as 01J9Z3K8M2T4V6X8Y0A2B4C6D8)", id)
		}
		out = append(out, u)
	}
	trimmed := make([]string, len(emails))
	for i, e := range emails {
		if trimmed[i] = strings.TrimSpace(e); trimmed[i] == "" {
			return nil, nil, invalid("email %d of %d is empty", i+1, len(emails))
		}
	}
	found, err := api.cfg.Store.ContactIDs(ctx, trimmed)
	if err != nil {
		return nil, nil, Error(err)
	}
	var notFound []string
	missing := make(map[string]bool)
	for i, id := range found {
		if id == (ulid.ULID{}) {
			if k := address.Key(trimmed[i]); !missing[k] {
				missing[k] = true
				notFound = append(notFound, trimmed[i])
			}
			continue
		}
		out = append(out, id)
	}
	return distinctIDs(out), notFound, nil
}

// distinctIDs drops repeats, keeping the first of each: a contact named
// twice (a repeated line, its id and its email, two spellings of one
// address) is one change, not counted once changed and once unchanged.
func distinctIDs(ids []ulid.ULID) []ulid.ULID {
	seen := make(map[ulid.ULID]bool, len(ids))
	out := ids[:0]
	for _, id := range ids {
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}

// changeMembers is AddSegmentMembers and RemoveSegmentMembers.
func (api *AudienceAPI) changeMembers(ctx context.Context, segment string, ids, emails []string,
	change func(context.Context, int64, []ulid.ULID) (store.MemberChange, error)) (changed, unchanged int64, notFound []string, err error) {
	seg, err := api.segment(ctx, segment)
	if err != nil {
		return 0, 0, nil, err
	}
	contacts, notFound, err := api.members(ctx, ids, emails)
	if err != nil {
		return 0, 0, nil, err
	}
	ch, err := change(ctx, seg, contacts)
	if err != nil {
		return 0, 0, nil, Error(err)
	}
	for _, id := range ch.Missing {
		notFound = append(notFound, id.String())
	}
	return ch.Changed, ch.Unchanged, notFound, nil
}

func (api *AudienceAPI) AddSegmentMembers(ctx context.Context, req *pb.AddSegmentMembersRequest) (*pb.AddSegmentMembersResponse, error) {
	changed, unchanged, notFound, err := api.changeMembers(ctx, req.GetSegment(), req.GetContactIds(), req.GetEmails(), api.cfg.Store.AddMembers)
	if err != nil {
		return nil, err
	}
	return &pb.AddSegmentMembersResponse{Changed: changed, Unchanged: unchanged, NotFound: notFound}, nil
}

func (api *AudienceAPI) RemoveSegmentMembers(ctx context.Context, req *pb.RemoveSegmentMembersRequest) (*pb.RemoveSegmentMembersResponse, error) {
	changed, unchanged, notFound, err := api.changeMembers(ctx, req.GetSegment(), req.GetContactIds(), req.GetEmails(), api.cfg.Store.RemoveMembers)
	if err != nil {
		return nil, err
	}
	return &pb.RemoveSegmentMembersResponse{Changed: changed, Unchanged: unchanged, NotFound: notFound}, nil
}

func (api *AudienceAPI) PreviewAudience(ctx context.Context, req *pb.PreviewAudienceRequest) (*pb.PreviewAudienceResponse, error) {
	var seg int64
	if req.GetSegment() != "" {
		var err error
		if seg, err = api.segment(ctx, req.GetSegment()); err != nil {
			return nil, err
		}
	}
	p, err := api.cfg.Store.PreviewAudience(ctx, seg)
	if err != nil {
		return nil, Error(err)
	}
	return &pb.PreviewAudienceResponse{Matched: p.Matched, Eligible: p.Eligible}, nil
}

// contactName names a contact in a message: its id, and its address when
// it has one.
func contactName(d store.ContactDetail) string {
	if d.Email == "" {
		return "contact " + d.ID.String()
	}
	return fmt.Sprintf("contact %s (%s)", d.ID, d.Email)
}
