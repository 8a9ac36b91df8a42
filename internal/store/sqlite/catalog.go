package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/oklog/ulid/v2"

	"github.com/rangecast/rangecast/internal/store"
)

var _ store.Catalog = (*Store)(nil)

// contactPageColumns are a contact as a list shows it (alias c), with the
// gate's verdict and without segments.
func (s *Store) ContactPage(ctx context.Context, segment int64, after ulid.ULID, limit int) ([]store.ContactDetail, error) {
	// With each contact's segments, as GetContact's: a list in JSON said
	// "segments": [] of every contact (tester).
	var rows *sql.Rows
	var err error
	if segment == 0 {
		rows, err = s.r.QueryContext(ctx, `SELECT `+contactDetailColumns+` FROM contacts c WHERE c.id > ?1 ORDER BY c.id LIMIT ?2`, id(after), limit)
	} else {
		rows, err = s.r.QueryContext(ctx, `SELECT `+contactDetailColumns+` FROM segment_members m JOIN contacts c ON c.id = m.contact_id
WHERE m.segment_id = ?3 AND m.contact_id > ?1 ORDER BY m.contact_id LIMIT ?2`, id(after), limit, segment)
	}
	if err != nil {
		return nil, mapErr("contact page", err)
	}
	defer rows.Close()
	var out []store.ContactDetail
	for rows.Next() {
		d, err := scanContactDetail(rows)
		if err != nil {
			return nil, mapErr("contact page", err)
		}
		out = append(out, d)
	}
	return out, mapErr("contact page", rows.Err())
}

const segmentInfoColumns = `s.id, s.name, s.created_at,
(SELECT count(*) FROM segment_members m WHERE m.segment_id = s.id),
(SELECT count(*) FROM broadcasts b WHERE b.segment_id = s.id)`

func scanSegmentInfo(row interface{ Scan(...any) error }) (store.SegmentInfo, error) {
	var g store.SegmentInfo
	var created int64
	err := row.Scan(&g.ID, &g.Name, &created, &g.Members, &g.Broadcasts)
	g.CreatedAt = fromTS(created)
	return g, err
}

func (s *Store) SegmentPage(ctx context.Context, after int64, limit int) ([]store.SegmentInfo, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT `+segmentInfoColumns+` FROM segments s WHERE s.id > ?1 ORDER BY s.id LIMIT ?2`, after, limit)
	if err != nil {
		return nil, mapErr("segment page", err)
	}
	defer rows.Close()
	var out []store.SegmentInfo
	for rows.Next() {
		g, err := scanSegmentInfo(rows)
		if err != nil {
			return nil, mapErr("segment page", err)
		}
		out = append(out, g)
	}
	return out, mapErr("segment page", rows.Err())
}

func (s *Store) DeleteSegment(ctx context.Context, name string) (store.SegmentInfo, error) {
	var g store.SegmentInfo
	err := s.write(ctx, "delete segment", func(tx *sql.Tx) error {
		var err error
		g, err = scanSegmentInfo(tx.QueryRowContext(ctx, `SELECT `+segmentInfoColumns+` FROM segments s WHERE s.name = ?1`, name))
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("segment %q: %w", name, store.ErrNotFound)
		}
		if err != nil {
			return err
		}
		if g.Broadcasts > 0 {
			return fmt.Errorf("segment %q is the audience of %d %s; a broadcast keeps its segment, so it cannot be deleted: %w",
				name, g.Broadcasts, store.Plural(g.Broadcasts, "broadcast", "broadcasts"), store.ErrConflict)
		}
		_, err = tx.ExecContext(ctx, `DELETE FROM segments WHERE id = ?1`, g.ID)
		return err
	})
	return g, err
}

func (s *Store) TemplatePage(ctx context.Context, after string, limit int) ([]store.Template, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT `+templateColumns+` FROM transactional_templates WHERE name > ?1 ORDER BY name LIMIT ?2`, after, limit)
	if err != nil {
		return nil, mapErr("template page", err)
	}
	defer rows.Close()
	var out []store.Template
	for rows.Next() {
		t, err := scanTemplate(rows)
		if err != nil {
			return nil, mapErr("template page", err)
		}
		out = append(out, t)
	}
	return out, mapErr("template page", rows.Err())
}

func (s *Store) DeleteTemplate(ctx context.Context, name string) (store.Template, error) {
	var t store.Template
	err := s.write(ctx, "delete template", func(tx *sql.Tx) error {
		var err error
		t, err = scanTemplate(tx.QueryRowContext(ctx, `DELETE FROM transactional_templates WHERE name = ?1 RETURNING `+templateColumns, name))
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("template %q: %w", name, store.ErrNotFound)
		}
		return err
	})
	return t, err
}
