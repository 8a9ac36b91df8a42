package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/oklog/ulid/v2"

	"github.com/rangecast/rangecast/internal/store"
)

var _ store.Catalog = (*Store)(nil)

// contactPageColumns are a contact as a list shows it (alias c), with the
// gate's verdict; segments are left out (one probe per segment per row).
func (s *Store) ContactPage(ctx context.Context, segment int64, after ulid.ULID, limit int) ([]store.ContactDetail, error) {
	// With each contact's segments, as GetContact's: a list in JSON said
	// "segments": [] of every contact (tester).
	var rows pgx.Rows
	var err error
	if segment == 0 {
		rows, err = s.pool.Query(ctx, `SELECT `+contactDetailColumns+` FROM contacts c WHERE c.id > $1 ORDER BY c.id LIMIT $2`, uid(after), limit)
	} else {
		// The members' primary key (segment_id, contact_id) walks the
		// segment in id order.
		rows, err = s.pool.Query(ctx, `SELECT `+contactDetailColumns+` FROM segment_members m JOIN contacts c ON c.id = m.contact_id
WHERE m.segment_id = $3 AND m.contact_id > $1 ORDER BY m.contact_id LIMIT $2`, uid(after), limit, segment)
	}
	if err != nil {
		return nil, mapErr("contact page", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.ContactDetail, error) { return scanContactDetail(row) })
	return out, mapErr("contact page", err)
}

const segmentInfoColumns = `s.id, s.name, s.created_at,
(SELECT count(*) FROM segment_members m WHERE m.segment_id = s.id),
(SELECT count(*) FROM broadcasts b WHERE b.segment_id = s.id)`

func scanSegmentInfo(row pgx.Row) (store.SegmentInfo, error) {
	var g store.SegmentInfo
	err := row.Scan(&g.ID, &g.Name, &g.CreatedAt, &g.Members, &g.Broadcasts)
	return g, err
}

func (s *Store) SegmentPage(ctx context.Context, after int64, limit int) ([]store.SegmentInfo, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+segmentInfoColumns+` FROM segments s WHERE s.id > $1 ORDER BY s.id LIMIT $2`, after, limit)
	if err != nil {
		return nil, mapErr("segment page", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.SegmentInfo, error) { return scanSegmentInfo(r) })
	return out, mapErr("segment page", err)
}

func (s *Store) DeleteSegment(ctx context.Context, name string) (store.SegmentInfo, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return store.SegmentInfo{}, mapErr("delete segment", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	// FOR UPDATE: a broadcast created meanwhile waits (its foreign key
	// locks the row) and then fails on it, rather than lose its audience.
	g, err := scanSegmentInfo(tx.QueryRow(ctx, `SELECT `+segmentInfoColumns+` FROM segments s WHERE s.name = $1 FOR UPDATE`, name))
	if errors.Is(err, pgx.ErrNoRows) {
		return g, fmt.Errorf("segment %q: %w", name, store.ErrNotFound)
	}
	if err != nil {
		return g, mapErr("delete segment", err)
	}
	if g.Broadcasts > 0 {
		return g, fmt.Errorf("segment %q is the audience of %d %s; a broadcast keeps its segment, so it cannot be deleted: %w",
			name, g.Broadcasts, store.Plural(g.Broadcasts, "broadcast", "broadcasts"), store.ErrConflict)
	}
	if _, err := tx.Exec(ctx, `DELETE FROM segments WHERE id = $1`, g.ID); err != nil {
		return g, mapErr("delete segment", err)
	}
	return g, mapErr("delete segment", tx.Commit(ctx))
}

func (s *Store) TemplatePage(ctx context.Context, after string, limit int) ([]store.Template, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+templateColumns+` FROM transactional_templates WHERE name > $1 ORDER BY name LIMIT $2`, after, limit)
	if err != nil {
		return nil, mapErr("template page", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.Template, error) { return scanTemplate(r) })
	return out, mapErr("template page", err)
}

func (s *Store) DeleteTemplate(ctx context.Context, name string) (store.Template, error) {
	t, err := scanTemplate(s.pool.QueryRow(ctx, `DELETE FROM transactional_templates WHERE name = $1 RETURNING `+templateColumns, name))
	if errors.Is(err, pgx.ErrNoRows) {
		return t, fmt.Errorf("template %q: %w", name, store.ErrNotFound)
	}
	return t, mapErr("delete template", err)
}
