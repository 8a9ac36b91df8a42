package store

import (
	"context"

	"github.com/oklog/ulid/v2"
)

// Catalog is what an operator browses, one page at a time so that lists
// of any size work (keyset pages: each starts after the last row of the
// one before, by index), and the deletion of segments and templates.
type Catalog interface {
	// ContactPage returns up to limit contacts with ids above after, in id
	// order; with segment not 0, only its members. Segments is left empty.
	ContactPage(ctx context.Context, segment int64, after ulid.ULID, limit int) ([]ContactDetail, error)
	// SegmentPage returns up to limit segments with ids above after, in id
	// order, with their member counts.
	SegmentPage(ctx context.Context, after int64, limit int) ([]SegmentInfo, error)
	// DeleteSegment deletes the named segment and its memberships (not
	// the contacts). ErrNotFound if there is none; ErrConflict while a
	// broadcast has it as its audience: a broadcast keeps its segment.
	DeleteSegment(ctx context.Context, name string) (SegmentInfo, error)
	// TemplatePage returns up to limit transactional templates named after
	// after, in name order.
	TemplatePage(ctx context.Context, after string, limit int) ([]Template, error)
	// DeleteTemplate deletes the named template; ErrNotFound if there is
	// none. Messages already accepted were rendered when they were sent for,
	// so they do not need it.
	DeleteTemplate(ctx context.Context, name string) (Template, error)
}

// SegmentInfo is a segment with its member count.
type SegmentInfo struct {
	Segment
	Members int64
	// Broadcasts counts the broadcasts whose audience it is (DeleteSegment's
	// conflict).
	Broadcasts int64
}
