package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/rangecast/rangecast/internal/store"
)

var (
	_ store.Contacts = (*Store)(nil)
	_ store.Segments = (*Store)(nil)
)

// ImportContacts is upsert: one IMMEDIATE transaction per batch
// with prepared statements is already SQLite's bulk path (there is no COPY,
// and the cost is in the b-trees, not in the statements).
func (s *Store) ImportContacts(ctx context.Context, cs []store.Contact, now time.Time) ([]ulid.ULID, error) {
	return s.upsert(ctx, cs, now)
}

// contactDetailColumns reads a contact (alias c) for GetContact; eligible
// is the suppression gate itself, so it cannot disagree with the sender.
// The segments are found by probing each segment's primary key: segments
// are few, and imports do not pay for an index on contact_id.
var contactDetailColumns = `c.id, c.email, c.name, c.attributes, c.subscribed, c.do_not_contact, c.suppressed,
c.suppressed_reason, c.suppressed_at, c.created_at, c.updated_at, (` + gate(0) + `),
(SELECT json_group_array(name) FROM (
    SELECT s.name FROM segments s
    WHERE EXISTS (SELECT 1 FROM segment_members m WHERE m.segment_id = s.id AND m.contact_id = c.id)
    ORDER BY s.name))`

func scanContactDetail(row interface{ Scan(...any) error }) (store.ContactDetail, error) {
	var d store.ContactDetail
	var cid []byte
	var attrs, segments string
	var suppressedAt sql.NullInt64
	var created, updated int64
	err := row.Scan(&cid, &d.Email, &d.Name, &attrs, &d.Subscribed, &d.DoNotContact, &d.Suppressed,
		&d.SuppressedReason, &suppressedAt, &created, &updated, &d.Eligible, &segments)
	if err != nil {
		return d, err
	}
	if d.ID, err = fromBlob(cid); err != nil {
		return d, err
	}
	if err := json.Unmarshal([]byte(attrs), &d.Attributes); err != nil {
		return d, fmt.Errorf("contact %s: attributes: %w", d.ID, err)
	}
	if err := json.Unmarshal([]byte(segments), &d.Segments); err != nil {
		return d, fmt.Errorf("contact %s: segments: %w", d.ID, err)
	}
	d.SuppressedAt, d.CreatedAt, d.UpdatedAt = nullTS(suppressedAt), fromTS(created), fromTS(updated)
	return d, nil
}

func (s *Store) GetContact(ctx context.Context, cid ulid.ULID) (store.ContactDetail, error) {
	d, err := scanContactDetail(s.r.QueryRowContext(ctx, `SELECT `+contactDetailColumns+` FROM contacts c WHERE c.id = ?`, id(cid)))
	return d, mapErr("contact "+cid.String(), err)
}

func (s *Store) ContactByEmail(ctx context.Context, email string) (store.ContactDetail, error) {
	d, err := scanContactDetail(s.r.QueryRowContext(ctx, `SELECT `+contactDetailColumns+` FROM contacts c WHERE c.email_key = ?`, emailKey(email)))
	return d, mapErr("contact "+email, err)
}

func (s *Store) ContactIDs(ctx context.Context, emails []string) ([]ulid.ULID, error) {
	out := make([]ulid.ULID, len(emails))
	if len(emails) == 0 {
		return out, nil
	}
	keys := make([]string, len(emails))
	for i, e := range emails {
		keys[i] = emailKey(e)
	}
	arg, err := json.Marshal(keys)
	if err != nil {
		return nil, err
	}
	// json_each's key is the array index.
	rows, err := s.r.QueryContext(ctx, `
SELECT j.key, c.id FROM json_each(?) j JOIN contacts c ON c.email_key = j.value`, string(arg))
	if err != nil {
		return nil, mapErr("contact ids", err)
	}
	defer rows.Close()
	for rows.Next() {
		var i int
		var cid []byte
		if err := rows.Scan(&i, &cid); err != nil {
			return nil, mapErr("contact ids", err)
		}
		if out[i], err = fromBlob(cid); err != nil {
			return nil, mapErr("contact ids", err)
		}
	}
	return out, mapErr("contact ids", rows.Err())
}

func (s *Store) ContactHistory(ctx context.Context, contact ulid.ULID, limit int) ([]store.ContactSend, error) {
	if limit < 0 {
		return nil, fmt.Errorf("contact history: negative limit %d", limit)
	}
	rows, err := s.r.QueryContext(ctx, `
SELECT s.broadcast_id, b.name, b.state, s.email, s.status, s.attempt, s.message_id, s.error, s.claimed_at, s.updated_at
FROM broadcast_sends s JOIN broadcasts b ON b.id = s.broadcast_id
WHERE s.contact_id = ?
ORDER BY s.claimed_at DESC, s.broadcast_id DESC
LIMIT ?`, id(contact), limit)
	if err != nil {
		return nil, mapErr("contact history", err)
	}
	defer rows.Close()
	var out []store.ContactSend
	for rows.Next() {
		r := store.ContactSend{}
		r.ContactID = contact
		var bid []byte
		var state, status string
		var claimed, updated int64
		if err := rows.Scan(&bid, &r.BroadcastName, &state, &r.Email, &status, &r.Attempt, &r.MessageID, &r.Error, &claimed, &updated); err != nil {
			return nil, mapErr("contact history", err)
		}
		if r.BroadcastID, err = fromBlob(bid); err != nil {
			return nil, mapErr("contact history", err)
		}
		r.BroadcastState, r.Status = store.State(state), store.SendStatus(status)
		r.ClaimedAt, r.UpdatedAt = fromTS(claimed), fromTS(updated)
		out = append(out, r)
	}
	return out, mapErr("contact history", rows.Err())
}

func (s *Store) Suppress(ctx context.Context, contact ulid.ULID, reason string, now time.Time) (store.ContactDetail, error) {
	res, err := s.w.ExecContext(ctx, `
UPDATE contacts SET suppressed = 1, suppressed_reason = ?2, suppressed_at = ?3, updated_at = ?3
WHERE id = ?1`, id(contact), reason, ts(now))
	if err != nil {
		return store.ContactDetail{}, mapErr("suppress contact", err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return store.ContactDetail{}, mapErr("suppress contact", err)
	} else if n == 0 {
		return store.ContactDetail{}, fmt.Errorf("suppress contact %s: %w", contact, store.ErrNotFound)
	}
	// Read back on the writer: a reader could lag behind in WAL mode only
	// by a transaction, but there is no reason to risk it.
	d, err := scanContactDetail(s.w.QueryRowContext(ctx, `SELECT `+contactDetailColumns+` FROM contacts c WHERE c.id = ?`, id(contact)))
	return d, mapErr("contact "+contact.String(), err)
}

func (s *Store) Unsuppress(ctx context.Context, contact ulid.ULID, was string, now time.Time) (store.ContactDetail, error) {
	res, err := s.w.ExecContext(ctx, `
UPDATE contacts SET suppressed = 0, suppressed_reason = '', suppressed_at = NULL, updated_at = ?3
WHERE id = ?1 AND suppressed AND suppressed_reason = ?2
  AND NOT EXISTS (SELECT 1 FROM erased_addresses x WHERE x.hash = contacts.erasure_hash)`, id(contact), was, ts(now))
	if err != nil {
		return store.ContactDetail{}, mapErr("unsuppress contact", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return store.ContactDetail{}, mapErr("unsuppress contact", err)
	}
	d, err := scanContactDetail(s.w.QueryRowContext(ctx, `SELECT `+contactDetailColumns+` FROM contacts c WHERE c.id = ?`, id(contact)))
	if err != nil {
		return d, mapErr("contact "+contact.String(), err)
	}
	if n == 1 {
		return d, nil
	}
	erased, err := s.Erased(ctx, d.Email)
	if err != nil {
		return d, err
	}
	return d, store.NotLifted(d, was, erased)
}

func (s *Store) CreateSegment(ctx context.Context, name string, now time.Time) (store.Segment, error) {
	if err := store.CheckText("segment name", name); err != nil {
		return store.Segment{}, fmt.Errorf("create segment: %w", err)
	}
	seg := store.Segment{Name: name}
	var created int64
	err := s.w.QueryRowContext(ctx, `
INSERT INTO segments (name, created_at) VALUES (?, ?)
ON CONFLICT (name) DO NOTHING
RETURNING id, created_at`, name, ts(now)).Scan(&seg.ID, &created)
	if errors.Is(err, sql.ErrNoRows) {
		return seg, fmt.Errorf("segment %q exists already: %w", name, store.ErrConflict)
	}
	seg.CreatedAt = fromTS(created)
	return seg, mapErr("create segment", err)
}

// changeMembers applies stmt (segment, contact) to each distinct contact
// that exists, in one write transaction, counting the rows it changed.
func (s *Store) changeMembers(ctx context.Context, op, stmt string, segment int64, contacts []ulid.ULID) (store.MemberChange, error) {
	var ch store.MemberChange
	if len(contacts) == 0 {
		return ch, nil
	}
	err := s.write(ctx, op, func(tx *sql.Tx) error {
		exists, err := tx.PrepareContext(ctx, `SELECT EXISTS (SELECT 1 FROM contacts WHERE id = ?)`)
		if err != nil {
			return err
		}
		defer exists.Close()
		change, err := tx.PrepareContext(ctx, stmt)
		if err != nil {
			return err
		}
		defer change.Close()
		seen := make(map[ulid.ULID]bool, len(contacts))
		for _, c := range contacts {
			if seen[c] {
				continue
			}
			seen[c] = true
			var ok bool
			if err := exists.QueryRowContext(ctx, id(c)).Scan(&ok); err != nil {
				return err
			}
			if !ok {
				ch.Missing = append(ch.Missing, c)
				continue
			}
			res, err := change.ExecContext(ctx, segment, id(c))
			if err != nil {
				return err
			}
			n, err := res.RowsAffected()
			if err != nil {
				return err
			}
			if n > 0 {
				ch.Changed++
			} else {
				ch.Unchanged++
			}
		}
		return nil
	})
	if err != nil {
		return store.MemberChange{}, err
	}
	return ch, nil
}

func (s *Store) AddMembers(ctx context.Context, segment int64, contacts []ulid.ULID) (store.MemberChange, error) {
	return s.changeMembers(ctx, "add segment members",
		`INSERT INTO segment_members (segment_id, contact_id) VALUES (?, ?) ON CONFLICT DO NOTHING`, segment, contacts)
}

func (s *Store) RemoveMembers(ctx context.Context, segment int64, contacts []ulid.ULID) (store.MemberChange, error) {
	return s.changeMembers(ctx, "remove segment members",
		`DELETE FROM segment_members WHERE segment_id = ? AND contact_id = ?`, segment, contacts)
}

func (s *Store) PreviewAudience(ctx context.Context, segment int64) (store.AudiencePreview, error) {
	var p store.AudiencePreview
	// One statement, so both numbers describe the same snapshot. Eligible
	// is counted through gate, the very fragment AcceptBroadcast's snapshot
	// and every page use. Members are counted from segment_members: its
	// foreign key (ON DELETE CASCADE) means each member is a contact.
	matched := `(SELECT count(*) FROM contacts)`
	if segment != 0 {
		matched = `(SELECT count(*) FROM segment_members WHERE segment_id = :segment)`
	}
	err := s.r.QueryRowContext(ctx, `SELECT `+matched+`, (SELECT count(*) FROM contacts c WHERE `+gate(segment)+`)`,
		gateArgs(segment)...).Scan(&p.Matched, &p.Eligible)
	return p, mapErr("preview audience", err)
}
