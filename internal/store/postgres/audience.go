package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/oklog/ulid/v2"

	"github.com/rangecast/rangecast/internal/address"
	"github.com/rangecast/rangecast/internal/store"
)

var (
	_ store.Contacts = (*Store)(nil)
	_ store.Segments = (*Store)(nil)
)

// copyThreshold is the batch size from which ImportContacts loads rows with
// COPY into a temporary table; below it, creating the table costs more than
// upsert's one statement.
const copyThreshold = 500

// importTable receives one batch by COPY; ON COMMIT DROP leaves nothing
// behind on the pooled connection.
const importTable = `
CREATE TEMPORARY TABLE contacts_import (
    i              integer NOT NULL,
    id             uuid NOT NULL,
    email          text NOT NULL,
    email_key      text NOT NULL,
    name           text NOT NULL,
    attributes     jsonb NOT NULL,
    subscribed     boolean NOT NULL,
    do_not_contact boolean NOT NULL,
    suppressed     boolean NOT NULL,
    erasure_hash   text NOT NULL
) ON COMMIT DROP`

var importColumns = []string{"i", "id", "email", "email_key", "name", "attributes", "subscribed", "do_not_contact", "suppressed", "erasure_hash"}

// importNew inserts the loaded rows whose address is new with a plain
// INSERT: without the speculative insertion every row of an ON CONFLICT
// statement pays, it takes half the time (100k new rows: 0.6 s against
// 1.1-1.3 s on the development machine), and a first import of a list is
// nearly all new rows. If another writer inserts one of these addresses
// meanwhile, the unique index fails the statement, and the batch falls back
// to importUpsert for every row. (email_key order, as in importUpsert:
// two imports inserting the same new addresses wait for each other in one
// order and cannot deadlock.)
//
// The existence tests here and in importUpsert are scalar subqueries, not
// NOT EXISTS, on purpose: Postgres turns NOT EXISTS into an anti-join, and
// with no statistics on the fresh staging table it hashes the whole
// contacts table for every batch (a million-row import took 49-72 s
// instead of ~20 s). A scalar subquery stays a per-row probe of the index.
const importNew = `
INSERT INTO contacts (id, email, email_key, name, attributes, subscribed, do_not_contact, suppressed, suppressed_reason, erasure_hash, created_at, updated_at)
SELECT u.id, u.email, u.email_key, u.name, u.attributes, u.subscribed, u.do_not_contact, ` + importSuppressed + `, $1, $1
FROM contacts_import u
WHERE (SELECT true FROM contacts c WHERE c.email_key = u.email_key) IS NULL
ORDER BY u.email_key`

// importUpsert upserts the loaded rows importNew did not insert, with
// upsert's merge rule (mergeContact), and maps each (i) to its contact's id,
// NULL for a row the merge refused (too many attributes). Rows
// go in in email_key order, so two imports touching the same contacts
// lock them in the same order and cannot deadlock. The id is matched by
// email_key (address.Key, computed in Go), which is what the unique index
// compares.
const importUpsert = `
WITH up AS (
    INSERT INTO contacts AS c (id, email, email_key, name, attributes, subscribed, do_not_contact, suppressed, suppressed_reason, erasure_hash, created_at, updated_at)
    SELECT u.id, u.email, u.email_key, u.name, u.attributes, u.subscribed, u.do_not_contact, ` + importSuppressed + `, $1, $1
    FROM contacts_import u
    WHERE (SELECT true FROM contacts n WHERE n.id = u.id) IS NULL
    ORDER BY u.email_key
    ` + mergeContact + `
    RETURNING c.id, c.email_key
)
SELECT u.i, up.id FROM contacts_import u LEFT JOIN up ON up.email_key = u.email_key
WHERE up.id IS NOT NULL OR (SELECT true FROM contacts n WHERE n.id = u.id) IS NULL`

// importSuppressed is the staged row's suppressed, suppressed_reason and
// erasure_hash: an address erased before comes back suppressed ($2 is
// store.ErasedReason).
const importSuppressed = `u.suppressed OR ` + erasedRow + `, CASE WHEN ` + erasedRow + ` THEN $2 ELSE '' END, u.erasure_hash`

// erasedRow tests the staged row u against the erased addresses.
const erasedRow = `EXISTS (SELECT 1 FROM erased_addresses x WHERE x.hash = u.erasure_hash)`

func (s *Store) ImportContacts(ctx context.Context, cs []store.Contact, now time.Time) ([]ulid.ULID, error) {
	if err := store.CheckContacts(cs); err != nil {
		return nil, fmt.Errorf("import contacts: %w", err)
	}
	if len(cs) == 0 {
		return nil, nil
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return nil, mapErr("import contacts", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	// An erasure in progress has recorded its addresses' hashes and
	// deleted their contacts, but not committed: an import reading the
	// erased addresses now would not see them, and its contact, committed
	// after the erasure's delete looked, would stay in clear text and
	// unsuppressed (tester). SHARE waits for that erasure's commit (it
	// holds them ROW EXCLUSIVE from its start), and an erasure waits for
	// this import's:
	// its delete then finds the contact. Imports wait for each other only
	// behind an erasure queued between them.
	if _, err := tx.Exec(ctx, `LOCK TABLE erased_addresses IN SHARE MODE`); err != nil {
		return nil, mapErr("import contacts", err)
	}
	var out []ulid.ULID
	if len(cs) < copyThreshold {
		out, err = s.upsert(ctx, tx, cs, now)
	} else {
		out, err = s.copyContacts(ctx, tx, cs, now)
	}
	if err != nil {
		return nil, err
	}
	if err := joinSegments(ctx, tx, cs, out); err != nil {
		return nil, err
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, mapErr("import contacts", err)
	}
	return out, nil
}

// joinSegments adds each written contact (out[i] not zero) to the segments
// its row names, in the import's transaction.
func joinSegments(ctx context.Context, tx pgx.Tx, cs []store.Contact, out []ulid.ULID) error {
	var segs []int64
	var ids [][16]byte
	for i, c := range cs {
		if out[i] == (ulid.ULID{}) {
			continue // not written: no membership either
		}
		for _, seg := range c.Segments {
			segs, ids = append(segs, seg), append(ids, uid(out[i]))
		}
	}
	if len(segs) == 0 {
		return nil
	}
	_, err := tx.Exec(ctx, `
INSERT INTO segment_members (segment_id, contact_id)
SELECT * FROM unnest($1::bigint[], $2::uuid[])
ON CONFLICT DO NOTHING`, segs, ids)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23503" {
		return fmt.Errorf("import contacts: %w", store.SegmentGone())
	}
	return mapErr("import contacts: segment members", err)
}

// copyContacts is ImportContacts for a large batch: COPY into a staging
// table, then one statement for the new rows and one for the others.
func (s *Store) copyContacts(ctx context.Context, tx pgx.Tx, cs []store.Contact, now time.Time) ([]ulid.ULID, error) {
	if _, err := tx.Exec(ctx, importTable); err != nil {
		return nil, mapErr("import contacts: staging table", err)
	}
	_, err := tx.CopyFrom(ctx, pgx.Identifier{"contacts_import"}, importColumns,
		pgx.CopyFromSlice(len(cs), func(i int) ([]any, error) {
			c := cs[i]
			attrs := c.Attributes
			if attrs == nil {
				attrs = map[string]any{}
			}
			return []any{int32(i), uid(c.ID), c.Email, address.Key(c.Email), c.Name, attrs, c.Subscribed, c.DoNotContact, c.Suppressed,
				store.ErasureHash(s.erasureKey, c.Email)}, nil
		}))
	if err != nil {
		return nil, mapErr("import contacts: copy", err)
	}
	// New rows keep their given id; importUpsert overwrites the others'.
	out := make([]ulid.ULID, len(cs))
	for i, c := range cs {
		out[i] = c.ID
	}
	var inserted int64
	sp, err := tx.Begin(ctx) // a savepoint, so a lost race undoes only the fast path
	if err != nil {
		return nil, mapErr("import contacts", err)
	}
	tag, err := sp.Exec(ctx, importNew, now, store.ErasedReason)
	var pgErr *pgconn.PgError
	switch {
	case err == nil:
		if err := sp.Commit(ctx); err != nil {
			return nil, mapErr("import contacts", err)
		}
		inserted = tag.RowsAffected()
	case errors.As(err, &pgErr) && pgErr.Code == "23505":
		if err := sp.Rollback(ctx); err != nil {
			return nil, mapErr("import contacts", err)
		}
	default:
		return nil, mapErr("import contacts: new rows", err)
	}
	if inserted < int64(len(cs)) {
		rows, err := tx.Query(ctx, importUpsert, now, store.ErasedReason)
		if err != nil {
			return nil, mapErr("import contacts", err)
		}
		var i int32
		var id *[16]byte
		n, err := pgx.ForEachRow(rows, []any{&i, &id}, func() error {
			out[i] = ulid.ULID{} // refused by the merge
			if id != nil {
				out[i] = ulid.ULID(*id)
			}
			return nil
		})
		if err != nil {
			return nil, mapErr("import contacts", err)
		}
		inserted += n.RowsAffected()
	}
	if inserted != int64(len(cs)) {
		return nil, fmt.Errorf("import contacts: %d of %d rows written; are the emails unique within the batch?", inserted, len(cs))
	}
	return out, nil
}

// contactDetailColumns reads a contact (alias c) for GetContact; eligible
// is the suppression gate itself, so it cannot disagree with the sender.
var contactDetailColumns = `c.id, c.email, c.name, c.attributes, c.subscribed, c.do_not_contact, c.suppressed,
c.suppressed_reason, c.suppressed_at, c.created_at, c.updated_at, (` + gate("") + `),
ARRAY(SELECT s.name FROM segments s
      WHERE EXISTS (SELECT 1 FROM segment_members m WHERE m.segment_id = s.id AND m.contact_id = c.id)
      ORDER BY s.name)`

// The segments of a contact are found by probing each segment's primary
// key (segment_id, contact_id) rather than by an index on contact_id:
// segments are few, and imports do not pay for another index.

func scanContactDetail(row pgx.Row) (store.ContactDetail, error) {
	var d store.ContactDetail
	var id [16]byte
	var suppressedAt pgtype.Timestamptz
	err := row.Scan(&id, &d.Email, &d.Name, &d.Attributes, &d.Subscribed, &d.DoNotContact, &d.Suppressed,
		&d.SuppressedReason, &suppressedAt, &d.CreatedAt, &d.UpdatedAt, &d.Eligible, &d.Segments)
	d.ID = ulid.ULID(id)
	d.SuppressedAt = suppressedAt.Time
	return d, err
}

func (s *Store) GetContact(ctx context.Context, id ulid.ULID) (store.ContactDetail, error) {
	d, err := scanContactDetail(s.pool.QueryRow(ctx, `SELECT `+contactDetailColumns+` FROM contacts c WHERE c.id = $1`, uid(id)))
	return d, mapErr("contact "+id.String(), err)
}

func (s *Store) ContactByEmail(ctx context.Context, email string) (store.ContactDetail, error) {
	d, err := scanContactDetail(s.pool.QueryRow(ctx, `SELECT `+contactDetailColumns+` FROM contacts c WHERE c.email_key = $1`, address.Key(email)))
	return d, mapErr("contact "+email, err)
}

func (s *Store) ContactIDs(ctx context.Context, emails []string) ([]ulid.ULID, error) {
	out := make([]ulid.ULID, len(emails))
	if len(emails) == 0 {
		return out, nil
	}
	rows, err := s.pool.Query(ctx, `
SELECT u.i, c.id FROM unnest($1::text[]) WITH ORDINALITY AS u(email, i)
JOIN contacts c ON c.email_key = u.email`, keys(emails))
	if err != nil {
		return nil, mapErr("contact ids", err)
	}
	var i int64
	var id [16]byte
	_, err = pgx.ForEachRow(rows, []any{&i, &id}, func() error {
		out[i-1] = ulid.ULID(id)
		return nil
	})
	return out, mapErr("contact ids", err)
}

func (s *Store) ContactHistory(ctx context.Context, contact ulid.ULID, limit int) ([]store.ContactSend, error) {
	rows, err := s.pool.Query(ctx, `
SELECT s.broadcast_id, b.name, b.state, s.email, s.status, s.attempt, s.message_id, s.error, s.claimed_at, s.updated_at
FROM broadcast_sends s JOIN broadcasts b ON b.id = s.broadcast_id
WHERE s.contact_id = $1
ORDER BY s.claimed_at DESC, s.broadcast_id DESC
LIMIT $2`, uid(contact), limit)
	if err != nil {
		return nil, mapErr("contact history", err)
	}
	var out []store.ContactSend
	var r store.ContactSend
	var bid [16]byte
	var state, status string
	r.ContactID = contact
	_, err = pgx.ForEachRow(rows, []any{&bid, &r.BroadcastName, &state, &r.Email, &status, &r.Attempt, &r.MessageID, &r.Error, &r.ClaimedAt, &r.UpdatedAt}, func() error {
		r.BroadcastID, r.BroadcastState, r.Status = ulid.ULID(bid), store.State(state), store.SendStatus(status)
		out = append(out, r)
		return nil
	})
	return out, mapErr("contact history", err)
}

func (s *Store) Suppress(ctx context.Context, contact ulid.ULID, reason string, now time.Time) (store.ContactDetail, error) {
	tag, err := s.pool.Exec(ctx, `
UPDATE contacts SET suppressed = true, suppressed_reason = $2, suppressed_at = $3, updated_at = $3
WHERE id = $1`, uid(contact), reason, now)
	if err != nil {
		return store.ContactDetail{}, mapErr("suppress contact", err)
	}
	if tag.RowsAffected() == 0 {
		return store.ContactDetail{}, fmt.Errorf("suppress contact %s: %w", contact, store.ErrNotFound)
	}
	return s.GetContact(ctx, contact)
}

func (s *Store) Unsuppress(ctx context.Context, contact ulid.ULID, was string, now time.Time) (store.ContactDetail, error) {
	tag, err := s.pool.Exec(ctx, `
UPDATE contacts c SET suppressed = false, suppressed_reason = '', suppressed_at = NULL, updated_at = $3
WHERE id = $1 AND suppressed AND suppressed_reason = $2
  AND NOT EXISTS (SELECT 1 FROM erased_addresses x WHERE x.hash = c.erasure_hash)`, uid(contact), was, now)
	if err != nil {
		return store.ContactDetail{}, mapErr("unsuppress contact", err)
	}
	d, err := s.GetContact(ctx, contact)
	if err != nil || tag.RowsAffected() == 1 {
		return d, err
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
	err := s.pool.QueryRow(ctx, `
INSERT INTO segments (name, created_at) VALUES ($1, $2)
ON CONFLICT (name) DO NOTHING
RETURNING id, created_at`, name, now).Scan(&seg.ID, &seg.CreatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return seg, fmt.Errorf("segment %q exists already: %w", name, store.ErrConflict)
	}
	return seg, mapErr("create segment", err)
}

// missingContacts lists the ids of $1 that name no contact.
const missingContacts = `
SELECT u.id FROM unnest($1::uuid[]) AS u(id)
WHERE NOT EXISTS (SELECT 1 FROM contacts c WHERE c.id = u.id)`

// changeMembers runs one membership statement (which returns the number of
// rows it changed) and lists the missing ids, in one transaction so the
// counts describe one state.
func (s *Store) changeMembers(ctx context.Context, op, stmt string, segment int64, contacts []ulid.ULID) (store.MemberChange, error) {
	var ch store.MemberChange
	if len(contacts) == 0 {
		return ch, nil
	}
	ids := uids(contacts)
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return ch, mapErr(op, err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	rows, err := tx.Query(ctx, missingContacts, ids)
	if err != nil {
		return ch, mapErr(op, err)
	}
	var id [16]byte
	if _, err := pgx.ForEachRow(rows, []any{&id}, func() error {
		ch.Missing = append(ch.Missing, ulid.ULID(id))
		return nil
	}); err != nil {
		return ch, mapErr(op, err)
	}
	if err := tx.QueryRow(ctx, stmt, segment, ids).Scan(&ch.Changed); err != nil {
		return ch, mapErr(op, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return ch, mapErr(op, err)
	}
	distinct := map[ulid.ULID]bool{}
	for _, c := range contacts {
		distinct[c] = true
	}
	ch.Unchanged = int64(len(distinct)-len(ch.Missing)) - ch.Changed
	return ch, nil
}

func (s *Store) AddMembers(ctx context.Context, segment int64, contacts []ulid.ULID) (store.MemberChange, error) {
	// Only ids that name a contact are inserted, so an unknown id is
	// reported instead of failing the batch on the foreign key.
	return s.changeMembers(ctx, "add segment members", `
WITH added AS (
    INSERT INTO segment_members (segment_id, contact_id)
    SELECT $1, c.id FROM contacts c WHERE c.id = ANY($2::uuid[])
    ON CONFLICT DO NOTHING
    RETURNING 1
)
SELECT count(*) FROM added`, segment, contacts)
}

func (s *Store) RemoveMembers(ctx context.Context, segment int64, contacts []ulid.ULID) (store.MemberChange, error) {
	return s.changeMembers(ctx, "remove segment members", `
WITH removed AS (
    DELETE FROM segment_members WHERE segment_id = $1 AND contact_id = ANY($2::uuid[])
    RETURNING 1
)
SELECT count(*) FROM removed`, segment, contacts)
}

func (s *Store) PreviewAudience(ctx context.Context, segment int64) (store.AudiencePreview, error) {
	var p store.AudiencePreview
	// One statement, so both numbers describe the same snapshot. Eligible
	// is counted through gate, the very fragment AcceptBroadcast's snapshot
	// and every page use. Members are counted from segment_members: its
	// foreign key (ON DELETE CASCADE) means each member is a contact.
	var err error
	if segment == 0 {
		err = s.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM contacts),
       (SELECT count(*) FROM contacts c WHERE `+gate("")+`)`).Scan(&p.Matched, &p.Eligible)
	} else {
		err = s.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM segment_members WHERE segment_id = $1),
       (SELECT count(*) FROM contacts c WHERE `+gate("$1")+`)`, segment).Scan(&p.Matched, &p.Eligible)
	}
	return p, mapErr("preview audience", err)
}
