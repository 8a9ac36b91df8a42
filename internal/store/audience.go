package store

import (
	"context"
	"fmt"
	"time"

	"github.com/oklog/ulid/v2"
)

// MaxAttributes is the most attributes a contact may have, a merge of
// imports included.
const MaxAttributes = 64

// Contacts are the audience: the import, one contact with its history, and
// suppression.
type Contacts interface {
	// ImportContacts inserts or updates contacts by case-insensitive email:
	// the name is replaced by a non-empty one and attributes merged; do-not-contact and
	// suppressed only ever turn on, and an unsubscribe is never undone. An
	// existing contact keeps its id. Returns the ids in input order. Emails
	// must be unique within one call. An implementation may load a large
	// batch in bulk (Postgres uses COPY) with exactly the same semantics.
	// A row whose attributes, merged with the stored contact's, would be
	// more than MaxAttributes changes nothing, and its id is the zero ULID:
	// the caller reports the row as not imported (re-imports with new keys
	// each time grew contacts without bound). Each written contact joins
	// its Segments in the same transaction; a segment that is not there
	// (deleted while an import ran) fails the call with ErrConflict, and
	// nothing of it is written.
	ImportContacts(ctx context.Context, cs []Contact, now time.Time) ([]ulid.ULID, error)
	// GetContact returns one contact, or ErrNotFound.
	GetContact(ctx context.Context, id ulid.ULID) (ContactDetail, error)
	// ContactByEmail returns the contact with this email (case-insensitive),
	// or ErrNotFound.
	ContactByEmail(ctx context.Context, email string) (ContactDetail, error)
	// ContactIDs returns the id of each email's contact (case-insensitive),
	// in input order; the zero ULID where there is none.
	ContactIDs(ctx context.Context, emails []string) ([]ulid.ULID, error)
	// ContactHistory returns up to limit of the contact's ledger rows, one
	// per broadcast, the latest claim first.
	ContactHistory(ctx context.Context, contact ulid.ULID, limit int) ([]ContactSend, error)
	// Suppress marks the contact suppressed with a reason (replacing an
	// earlier reason); ErrNotFound if there is no such contact.
	Suppress(ctx context.Context, contact ulid.ULID, reason string, now time.Time) (ContactDetail, error)
	// Unsuppress lifts the contact's suppression if it is suppressed still
	// with reason was (what the caller read, so a suppression that changed
	// meanwhile, a new bounce, is never lifted unseen): ErrConflict when it
	// is not, ErrNotFound if there is no such contact. An address erased
	// before (in the erased addresses, whatever the reason says) is never
	// lifted: ErrConflict.
	Unsuppress(ctx context.Context, contact ulid.ULID, was string, now time.Time) (ContactDetail, error)
}

// Segments are named lists of contacts and their membership.
type Segments interface {
	// EnsureSegment returns the id of the named segment, creating it.
	EnsureSegment(ctx context.Context, name string, now time.Time) (int64, error)
	// SegmentID returns the id of the named segment, or ErrNotFound.
	SegmentID(ctx context.Context, name string) (int64, error)
	// CreateSegment creates an empty segment; ErrConflict if the name is
	// taken.
	CreateSegment(ctx context.Context, name string, now time.Time) (Segment, error)
	// AddMembers adds existing contacts to the segment. Ids that name no
	// contact are returned in Missing and change nothing.
	AddMembers(ctx context.Context, segment int64, contacts []ulid.ULID) (MemberChange, error)
	// RemoveMembers removes contacts from the segment, reporting the same
	// way as AddMembers.
	RemoveMembers(ctx context.Context, segment int64, contacts []ulid.ULID) (MemberChange, error)
	// PreviewAudience counts the contacts of a segment (0: every contact)
	// and those of them the suppression gate passes: the count
	// AcceptBroadcast would snapshot now, from the same gate.
	PreviewAudience(ctx context.Context, segment int64) (AudiencePreview, error)
}

// ContactDetail is a contact as GetContact shows it.
type ContactDetail struct {
	Contact
	// SuppressedReason and SuppressedAt are those of the latest Suppress;
	// empty and zero for a contact suppressed otherwise (an import) or not
	// at all.
	SuppressedReason string
	SuppressedAt     time.Time
	// Eligible: the suppression gate passes the contact (without a
	// segment's membership test).
	Eligible bool
	// Segments are the names of the segments the contact is in, sorted.
	Segments             []string
	CreatedAt, UpdatedAt time.Time
}

// ContactSend is one ledger row of a contact, with its broadcast.
type ContactSend struct {
	Send
	BroadcastName  string
	BroadcastState State
}

// Segment is a named list of contacts.
type Segment struct {
	ID        int64
	Name      string
	CreatedAt time.Time
}

// MemberChange is the result of AddMembers or RemoveMembers: how many
// contacts changed membership, how many were already as asked, and the ids
// that name no contact.
type MemberChange struct {
	Changed, Unchanged int64
	Missing            []ulid.ULID
}

// AudiencePreview is what a broadcast started now would reach.
type AudiencePreview struct {
	Matched  int64 // contacts in the audience, eligible or not
	Eligible int64 // of those, the ones the suppression gate passes
}

// NotLifted is Unsuppress's error for a contact (d, as it is now) whose
// suppression it did not lift: not suppressed, its address erased before
// (erased, read from the erased addresses, never from the reason text an
// operator can write), or suppressed for another reason than was.
func NotLifted(d ContactDetail, was string, erased bool) error {
	switch {
	case erased:
		return fmt.Errorf("contact %s: its address was erased before (GDPR Art. 17), and that suppression is for good: %w", d.ID, ErrConflict)
	case !d.Suppressed:
		return fmt.Errorf("contact %s is not suppressed: %w", d.ID, ErrConflict)
	}
	return fmt.Errorf("contact %s: its suppression changed while it was being lifted (now %q, was %q); look at it again: %w", d.ID, d.SuppressedReason, was, ErrConflict)
}

// SegmentGone is ImportContacts' error when a segment its rows join is not
// there: deleted while the import ran.
func SegmentGone() error {
	return fmt.Errorf("%w: a segment the rows join was deleted while the import ran; nothing of this batch was written", ErrConflict)
}
