// Package sqlite is the SQLite implementation of store.Store (modernc.org/sqlite, no cgo) for rangecast dev and small single-node installs.
package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/oklog/ulid/v2"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/rangecast/rangecast/internal/address"
	"github.com/rangecast/rangecast/internal/ranges"
	"github.com/rangecast/rangecast/internal/store"
)

// Store implements store.Store on one SQLite database file.
//
// SQLite lets one connection write at a time. The store keeps two pools on
// the file: w, a single connection that every write goes through, whose
// transactions begin IMMEDIATE (the write lock is taken up front, so a
// transaction never has to upgrade a read lock and fail with SQLITE_BUSY), and
// r, a few query_only connections for reads, which in WAL mode do not wait
// for the writer. Writers in this process queue for w; a writer in another
// process (a CLI beside `rangecast dev`) is waited for up to busy_timeout.
type Store struct {
	w, r *sql.DB
	// erasureKey keys store.ErasureHash (migration 016), read once at Open.
	erasureKey []byte
}

var _ store.Store = (*Store)(nil)

// busyTimeout is how long a connection waits for another process's lock.
const busyTimeout = 10 * time.Second

// readers is the size of the read pool.
const readers = 4

// Open opens the database file at path, creating it if missing, and applies
// migrations. path ":memory:" is a private in-memory database (one
// connection, gone when the store is closed), for tests.
func Open(ctx context.Context, path string) (*Store, error) {
	if path == "" {
		return nil, errors.New("sqlite: empty database path")
	}
	memory := path == ":memory:"
	pragmas := fmt.Sprintf("_pragma=busy_timeout(%d)&_pragma=foreign_keys(1)", busyTimeout.Milliseconds())
	// synchronous=NORMAL in WAL mode: a commit is atomic and consistent
	// but the last ones may be lost on power failure (not on a crash of
	// the process); the file is never corrupted.
	w, err := openPool(ctx, path, pragmas+"&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_txlock=immediate", 1)
	if err != nil {
		return nil, err
	}
	if !memory {
		var mode string
		if err := w.QueryRowContext(ctx, `PRAGMA journal_mode`).Scan(&mode); err != nil {
			w.Close()
			return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
		}
		if !strings.EqualFold(mode, "wal") {
			w.Close()
			return nil, fmt.Errorf("sqlite: open %s: journal mode is %s, not wal (does the file system support shared memory?)", path, mode)
		}
	}
	if err := migrate(ctx, w); err != nil {
		w.Close()
		return nil, err
	}
	r := w // an in-memory database exists only on its one connection
	if !memory {
		if r, err = openPool(ctx, path, pragmas+"&_pragma=query_only(1)", readers); err != nil {
			w.Close()
			return nil, err
		}
	}
	var key []byte
	if err := w.QueryRowContext(ctx, `SELECT key FROM erasure_key WHERE id = 1`).Scan(&key); err != nil {
		w.Close()
		if r != w {
			r.Close()
		}
		return nil, fmt.Errorf("sqlite: open %s: erasure key: %w", path, err)
	}
	return &Store{w: w, r: r, erasureKey: key}, nil
}

func openPool(ctx context.Context, path, params string, conns int) (*sql.DB, error) {
	// A URI filename, so that the path is percent-encoded and a '?' or '#'
	// in it is not taken for the query.
	dsn := "file:" + (&url.URL{Path: path}).EscapedPath() + "?" + params
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	db.SetMaxOpenConns(conns)
	db.SetMaxIdleConns(conns)
	db.SetConnMaxLifetime(0)
	db.SetConnMaxIdleTime(0)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	return db, nil
}

// Close closes the store. The last connection to close checkpoints the WAL
// into the database file.
func (s *Store) Ping(ctx context.Context) error { return s.r.PingContext(ctx) }

func (s *Store) Close() {
	// Refresh the planner's statistics where they have drifted (cheap; what
	// SQLite recommends before closing a connection).
	s.w.Exec(`PRAGMA optimize`) //nolint:errcheck
	if s.r != s.w {
		s.r.Close()
	}
	s.w.Close()
}

// mapErr is the one place driver errors become store errors.
func mapErr(op string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("%s: %w", op, store.ErrNotFound)
	}
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() {
		case sqlite3.SQLITE_CONSTRAINT_UNIQUE, sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY:
			return fmt.Errorf("%s: %w", op, store.ErrConflict)
		}
	}
	return fmt.Errorf("%s: %w", op, err)
}

// write runs fn in one transaction on the write connection (BEGIN
// IMMEDIATE) and commits it if fn returns nil. Errors from fn are mapped
// here.
func (s *Store) write(ctx context.Context, op string, fn func(tx *sql.Tx) error) error {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return mapErr(op, err)
	}
	if err := fn(tx); err != nil {
		tx.Rollback() //nolint:errcheck
		return mapErr(op, err)
	}
	return mapErr(op, tx.Commit())
}

// execCount runs one statement in a write transaction and returns how many
// rows it changed.
func (s *Store) execCount(ctx context.Context, op, query string, args ...any) (int64, error) {
	var n int64
	err := s.write(ctx, op, func(tx *sql.Tx) error {
		r, err := tx.ExecContext(ctx, query, args...)
		if err != nil {
			return err
		}
		n, err = r.RowsAffected()
		return err
	})
	return n, err
}

// querier is what *sql.DB and *sql.Tx have in common.
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// id returns the BLOB form of a ULID.
func id(u ulid.ULID) []byte { return u[:] }

// fromBlob reads an id column; NULL is the zero ULID.
func fromBlob(b []byte) (ulid.ULID, error) {
	switch len(b) {
	case 0:
		return ulid.ULID{}, nil
	case len(ulid.ULID{}):
		return ulid.ULID(b), nil
	}
	return ulid.ULID{}, fmt.Errorf("id of %d bytes, want 16", len(b))
}

// nullBlob binds b, or NULL when b is empty.
func nullBlob(b []byte) any {
	if len(b) == 0 {
		return nil
	}
	return b
}

// ts is the stored form of a time: microseconds since the Unix epoch (the
// precision of Postgres timestamptz; the zero time.Time fits).
func ts(t time.Time) int64 { return t.UnixMicro() }

func fromTS(us int64) time.Time { return time.UnixMicro(us).UTC() }

// nullTS reads a nullable time column; NULL is the zero time.
func nullTS(v sql.NullInt64) time.Time {
	if !v.Valid {
		return time.Time{}
	}
	return fromTS(v.Int64)
}

// emailKey is the identity of an address (address.Key), kept in
// contacts.email_key under a unique index. SQLite's lower() folds ASCII
// only, which is why the key is computed in Go and not by an index.
func emailKey(email string) string { return address.Key(email) }

const (
	findContact = `SELECT id, attributes FROM contacts WHERE email_key = ?`
	// An existing contact keeps its id and address. An import may
	// unsubscribe, flag or suppress a contact, never undo an unsubscribe, a
	// do-not-contact flag or a suppression. An import without names (a
	// list of addresses to add to a segment) leaves the names it does not
	// give, as it leaves attributes.
	updateContact = `
UPDATE contacts SET
    name = CASE WHEN ?2 <> '' THEN ?2 ELSE name END,
    attributes = ?3,
    subscribed = subscribed AND ?4,
    do_not_contact = do_not_contact OR ?5,
    suppressed = suppressed OR ?6 OR EXISTS (SELECT 1 FROM erased_addresses WHERE hash = ?8),
    erasure_hash = ?8,
    updated_at = ?7
WHERE id = ?1`
	// An address erased before comes back suppressed (?11 is
	// store.ErasedReason).
	insertContact = `
INSERT INTO contacts (id, email, email_key, name, attributes, subscribed, do_not_contact, suppressed, suppressed_reason, erasure_hash, created_at, updated_at)
SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8 OR e.erased, CASE WHEN e.erased THEN ?11 ELSE '' END, ?10, ?9, ?9
FROM (SELECT EXISTS (SELECT 1 FROM erased_addresses WHERE hash = ?10) AS erased) e`
)

// upsert is ImportContacts: one IMMEDIATE transaction per batch.
func (s *Store) upsert(ctx context.Context, cs []store.Contact, now time.Time) ([]ulid.ULID, error) {
	if err := store.CheckContacts(cs); err != nil {
		return nil, fmt.Errorf("upsert contacts: %w", err)
	}
	if len(cs) == 0 {
		return nil, nil
	}
	keys := make([]string, len(cs))
	attrs := make([]map[string]json.RawMessage, len(cs))
	seen := make(map[string]int, len(cs))
	for i, c := range cs {
		keys[i] = emailKey(c.Email)
		if j, dup := seen[keys[i]]; dup {
			// Postgres refuses such a batch too (ON CONFLICT DO UPDATE
			// cannot affect a row twice).
			return nil, fmt.Errorf("upsert contacts: %q (row %d) and %q (row %d) are one address; emails must be unique within one call",
				cs[j].Email, j, c.Email, i)
		}
		seen[keys[i]] = i
		attrs[i] = make(map[string]json.RawMessage, len(c.Attributes))
		for k, v := range c.Attributes {
			raw, err := json.Marshal(v)
			if err != nil {
				return nil, fmt.Errorf("upsert contacts: %s: attribute %q: %w", c.Email, k, err)
			}
			attrs[i][k] = raw
		}
	}
	out := make([]ulid.ULID, len(cs))
	err := s.write(ctx, "upsert contacts", func(tx *sql.Tx) error {
		find, err := tx.PrepareContext(ctx, findContact)
		if err != nil {
			return err
		}
		defer find.Close()
		update, err := tx.PrepareContext(ctx, updateContact)
		if err != nil {
			return err
		}
		defer update.Close()
		insert, err := tx.PrepareContext(ctx, insertContact)
		if err != nil {
			return err
		}
		defer insert.Close()
		join, err := tx.PrepareContext(ctx, `INSERT INTO segment_members (segment_id, contact_id) VALUES (?, ?) ON CONFLICT DO NOTHING`)
		if err != nil {
			return err
		}
		defer join.Close()
		// joinSegments writes contact i's memberships, in this transaction.
		joinSegments := func(i int) error {
			for _, seg := range cs[i].Segments {
				if _, err := join.ExecContext(ctx, seg, id(out[i])); err != nil {
					var se *sqlite.Error
					if errors.As(err, &se) && se.Code() == sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY {
						return store.SegmentGone()
					}
					return err
				}
			}
			return nil
		}
		for i, c := range cs {
			var existing []byte
			var old string
			err := find.QueryRowContext(ctx, keys[i]).Scan(&existing, &old)
			if errors.Is(err, sql.ErrNoRows) {
				a, err := json.Marshal(attrs[i])
				if err != nil {
					return err
				}
				if _, err := insert.ExecContext(ctx, id(c.ID), c.Email, keys[i], c.Name, string(a),
					c.Subscribed, c.DoNotContact, c.Suppressed, ts(now), store.ErasureHash(s.erasureKey, c.Email), store.ErasedReason); err != nil {
					return err
				}
				out[i] = c.ID
				if err := joinSegments(i); err != nil {
					return err
				}
				continue
			}
			if err != nil {
				return err
			}
			merged, n, had, err := mergeAttributes(old, attrs[i])
			if err != nil {
				return fmt.Errorf("%s: %w", c.Email, err)
			}
			if n > store.MaxAttributes && n > had {
				// Refused, its id staying the zero ULID: it grows the
				// contact past the limit (one that already has more is
				// still unsubscribed or flagged by a row adding no key).
				continue
			}
			if out[i], err = fromBlob(existing); err != nil {
				return err
			}
			if _, err := update.ExecContext(ctx, existing, c.Name, merged, c.Subscribed, c.DoNotContact, c.Suppressed, ts(now),
				store.ErasureHash(s.erasureKey, c.Email)); err != nil {
				return err
			}
			if err := joinSegments(i); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// mergeAttributes is Postgres's jsonb `old || new` for two objects: new's
// keys replace old's, one level deep; a null value is kept as null. (SQLite's
// json_patch is RFC 7396: it merges nested objects and deletes keys whose
// new value is null, so it is not used.) Values are carried as raw JSON, so
// what was stored comes back byte for byte.
// It also returns how many attributes the merge has, and how many the
// stored ones had.
func mergeAttributes(old string, add map[string]json.RawMessage) (string, int, int, error) {
	merged := map[string]json.RawMessage{}
	if err := json.Unmarshal([]byte(old), &merged); err != nil {
		return "", 0, 0, fmt.Errorf("stored attributes: %w", err)
	}
	had := len(merged)
	for k, v := range add {
		merged[k] = v
	}
	b, err := json.Marshal(merged)
	return string(b), len(merged), had, err
}

func (s *Store) EnsureSegment(ctx context.Context, name string, now time.Time) (int64, error) {
	var segment int64
	err := s.w.QueryRowContext(ctx, `
INSERT INTO segments (name, created_at) VALUES (?, ?)
ON CONFLICT (name) DO UPDATE SET name = excluded.name
RETURNING id`, name, ts(now)).Scan(&segment)
	return segment, mapErr("ensure segment", err)
}

func (s *Store) SegmentID(ctx context.Context, name string) (int64, error) {
	var segment int64
	err := s.r.QueryRowContext(ctx, `SELECT id FROM segments WHERE name = ?`, name).Scan(&segment)
	return segment, mapErr("segment "+name, err)
}

const broadcastColumns = `b.id, b.name, coalesce(b.request_id, ''), b.from_name, b.from_address, b.subject, b.html, b.text_body,
coalesce(b.segment_id, 0), coalesce(s.name, ''), b.throttle_per_hour, b.in_doubt_policy, b.state, b.reason, b.snapshot_total, b.min_id, b.max_id,
b.created_at, b.started_at, b.finished_at, b.no_unsubscribe_link, b.scheduled_at, b.range_starts, b.content_revision`

const selectBroadcast = `SELECT ` + broadcastColumns + ` FROM broadcasts b LEFT JOIN segments s ON s.id = b.segment_id `

// selectBroadcastList is selectBroadcast without the bodies.
var selectBroadcastList = strings.Replace(selectBroadcast, "b.html, b.text_body", "'', ''", 1)

func (s *Store) BroadcastPage(ctx context.Context, before ulid.ULID, limit int) ([]store.Broadcast, error) {
	if before == (ulid.ULID{}) {
		before = ulid.MustParse("7ZZZZZZZZZZZZZZZZZZZZZZZZZ")
	}
	rows, err := s.r.QueryContext(ctx, selectBroadcastList+`WHERE b.id < ? ORDER BY b.id DESC LIMIT ?`, id(before), limit)
	if err != nil {
		return nil, mapErr("list broadcasts", err)
	}
	defer rows.Close()
	var out []store.Broadcast
	for rows.Next() {
		b, err := scanBroadcast(rows)
		if err != nil {
			return nil, mapErr("list broadcasts", err)
		}
		out = append(out, b)
	}
	return out, mapErr("list broadcasts", rows.Err())
}

func scanBroadcast(row interface{ Scan(...any) error }) (store.Broadcast, error) {
	var b store.Broadcast
	var bid, minID, maxID, starts []byte
	var created int64
	var started, finished, scheduled sql.NullInt64
	var state string
	err := row.Scan(&bid, &b.Name, &b.RequestID, &b.Content.FromName, &b.Content.FromAddress, &b.Content.Subject,
		&b.Content.HTML, &b.Content.Text, &b.SegmentID, &b.Segment, &b.ThrottlePerHour, &b.InDoubtPolicy, &state, &b.Reason,
		&b.SnapshotTotal, &minID, &maxID, &created, &started, &finished, &b.NoUnsubscribeLink, &scheduled, &starts, &b.ContentRevision)
	if err != nil {
		return b, err
	}
	if len(starts)%len(ulid.ULID{}) != 0 {
		return b, fmt.Errorf("range starts of %d bytes, want a multiple of 16", len(starts))
	}
	for ; len(starts) > 0; starts = starts[len(ulid.ULID{}):] {
		b.RangeStarts = append(b.RangeStarts, ulid.ULID(starts))
	}
	if b.ID, err = fromBlob(bid); err != nil {
		return b, err
	}
	if b.MinID, err = fromBlob(minID); err != nil {
		return b, err
	}
	if b.MaxID, err = fromBlob(maxID); err != nil {
		return b, err
	}
	b.State = store.State(state)
	b.CreatedAt, b.StartedAt, b.FinishedAt, b.ScheduledAt = fromTS(created), nullTS(started), nullTS(finished), nullTS(scheduled)
	return b, nil
}

func getBroadcast(ctx context.Context, q querier, bid ulid.ULID) (store.Broadcast, error) {
	return scanBroadcast(q.QueryRowContext(ctx, selectBroadcast+`WHERE b.id = ?`, id(bid)))
}

func (s *Store) CreateBroadcast(ctx context.Context, b store.Broadcast) (store.Broadcast, bool, error) {
	if err := store.CheckBroadcast(b); err != nil {
		return store.Broadcast{}, false, fmt.Errorf("create broadcast: %w", err)
	}
	var requestID, segment any
	if b.RequestID != "" {
		requestID = b.RequestID
	}
	if b.SegmentID != 0 {
		segment = b.SegmentID
	}
	var out store.Broadcast
	var created bool
	err := s.write(ctx, "create broadcast", func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `
INSERT INTO broadcasts (id, name, request_id, from_name, from_address, subject, html, text_body, segment_id,
                        throttle_per_hour, in_doubt_policy, no_unsubscribe_link, state, created_at, updated_at)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?12, ?13, 'draft', ?11, ?11)
ON CONFLICT (request_id) DO NOTHING`,
			id(b.ID), b.Name, requestID, b.Content.FromName, b.Content.FromAddress, b.Content.Subject, b.Content.HTML,
			b.Content.Text, segment, b.ThrottlePerHour, ts(b.CreatedAt), b.InDoubtPolicy, b.NoUnsubscribeLink)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return err
		}
		if created = n == 1; created {
			out, err = getBroadcast(ctx, tx, b.ID)
		} else {
			out, err = scanBroadcast(tx.QueryRowContext(ctx, selectBroadcast+`WHERE b.request_id = ?`, b.RequestID))
		}
		return err
	})
	if err != nil {
		return store.Broadcast{}, false, err
	}
	return out, created, nil
}

func (s *Store) GetBroadcast(ctx context.Context, bid ulid.ULID) (store.Broadcast, error) {
	b, err := getBroadcast(ctx, s.r, bid)
	return b, mapErr("broadcast "+bid.String(), err)
}

func (s *Store) ContentRevision(ctx context.Context, bid ulid.ULID) (int, error) {
	var n int
	err := s.r.QueryRowContext(ctx, `SELECT content_revision FROM broadcasts WHERE id = ?`, id(bid)).Scan(&n)
	return n, mapErr("broadcast "+bid.String(), err)
}

func (s *Store) ListBroadcasts(ctx context.Context) ([]store.Broadcast, error) {
	rows, err := s.r.QueryContext(ctx, selectBroadcast+`ORDER BY b.created_at DESC, b.id DESC`)
	if err != nil {
		return nil, mapErr("list broadcasts", err)
	}
	defer rows.Close()
	var out []store.Broadcast
	for rows.Next() {
		b, err := scanBroadcast(rows)
		if err != nil {
			return nil, mapErr("list broadcasts", err)
		}
		out = append(out, b)
	}
	return out, mapErr("list broadcasts", rows.Err())
}

// gate is the suppression gate, the one definition of who may receive a
// broadcast, shared by the accept-time snapshot and every page. With a
// segment, the query binds it as :segment.
func gate(segment int64) string {
	// An import suppresses an erased address already; the hash is tested
	// as well (Postgres's gate says why).
	g := `c.subscribed AND NOT c.do_not_contact AND NOT c.suppressed AND c.email <> ''
 AND NOT EXISTS (SELECT 1 FROM erased_addresses e WHERE e.hash = c.erasure_hash)`
	if segment != 0 {
		g += ` AND EXISTS (SELECT 1 FROM segment_members m WHERE m.segment_id = :segment AND m.contact_id = c.id)`
	}
	return g
}

// gateArgs binds :segment when the gate has one.
func gateArgs(segment int64, args ...any) []any {
	if segment != 0 {
		args = append(args, sql.Named("segment", segment))
	}
	return args
}

// snapshotQuery reads count and id bounds of the eligible audience in one
// pass; SQLite's min and max compare BLOBs with memcmp, which is ULID order.
func snapshotQuery(segment int64) string {
	return `SELECT count(*), min(c.id), max(c.id) FROM contacts c WHERE ` + gate(segment)
}

func pageQuery(segment int64) string {
	return `SELECT c.id, c.email, c.name, c.attributes FROM contacts c
WHERE c.id >= :from AND c.id <= :until AND ` + gate(segment) + `
ORDER BY c.id LIMIT :limit`
}

// quantileQuery reads the eligible ids at the 0-based ranks in the JSON
// array :ranks, in one walk of the primary key. The Postgres store samples
// pages instead; SQLite serves small installs, where the exact walk costs
// about what the count did.
func quantileQuery(segment int64) string {
	return `SELECT id FROM (SELECT c.id, row_number() OVER (ORDER BY c.id) - 1 AS rn FROM contacts c WHERE ` + gate(segment) + `)
WHERE rn IN (SELECT value FROM json_each(:ranks)) ORDER BY id`
}

// quantileStarts are the range starts (one id after another, the column's
// form) that ranges.AudienceCuts gives for the whole audience, each just
// after the id before one of ranges.AudienceRanks: what the Postgres store
// cuts when it reads every id, so both stores cut a small audience the
// same way.
func quantileStarts(ctx context.Context, tx *sql.Tx, segment, count int64) ([]byte, error) {
	starts := ranges.AudienceRanks(int(count))
	if len(starts) == 0 {
		return nil, nil
	}
	ranks := make([]int, 0, len(starts))
	for _, k := range starts {
		ranks = append(ranks, k-1)
	}
	js, err := json.Marshal(ranks)
	if err != nil {
		return nil, err
	}
	rows, err := tx.QueryContext(ctx, quantileQuery(segment), gateArgs(segment, sql.Named("ranks", string(js)))...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []byte
	for rows.Next() {
		var b []byte
		if err := rows.Scan(&b); err != nil {
			return nil, err
		}
		id, err := fromBlob(b)
		if err != nil {
			return nil, err
		}
		if next, ok := ranges.Next(id); ok {
			out = append(out, next[:]...)
		}
	}
	return out, rows.Err()
}

func (s *Store) AcceptBroadcast(ctx context.Context, bid ulid.ULID, now time.Time) (store.Broadcast, error) {
	var out store.Broadcast
	err := s.write(ctx, "accept broadcast "+bid.String(), func(tx *sql.Tx) error {
		var state string
		var segment int64
		err := tx.QueryRowContext(ctx, `SELECT state, coalesce(segment_id, 0) FROM broadcasts WHERE id = ?`, id(bid)).Scan(&state, &segment)
		if err != nil {
			return err
		}
		if store.State(state) != store.StateDraft {
			return fmt.Errorf("it is %s, only a draft can be started: %w", state, store.ErrConflict)
		}
		var count int64
		var minID, maxID []byte
		if err := tx.QueryRowContext(ctx, snapshotQuery(segment), gateArgs(segment)...).Scan(&count, &minID, &maxID); err != nil {
			return fmt.Errorf("snapshot audience: %w", err)
		}
		var starts []byte
		if count > 0 {
			if starts, err = quantileStarts(ctx, tx, segment, count); err != nil {
				return fmt.Errorf("cut ranges: %w", err)
			}
		}
		_, err = tx.ExecContext(ctx, `
UPDATE broadcasts SET state = 'running', reason = '', snapshot_total = ?2, min_id = ?3, max_id = ?4,
       started_at = ?5, updated_at = ?5, range_starts = ?6
WHERE id = ?1`, id(bid), count, nullBlob(minID), nullBlob(maxID), ts(now), nullBlob(starts))
		if err != nil {
			return err
		}
		out, err = getBroadcast(ctx, tx, bid)
		return err
	})
	if err != nil {
		return store.Broadcast{}, err
	}
	return out, nil
}

func (s *Store) SetState(ctx context.Context, bid ulid.ULID, from []store.State, to store.State, reason string, now time.Time) (store.Broadcast, error) {
	froms, err := json.Marshal(append([]store.State{}, from...))
	if err != nil {
		return store.Broadcast{}, err
	}
	var out store.Broadcast
	var moved bool
	err = s.write(ctx, "broadcast "+bid.String(), func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `
UPDATE broadcasts SET state = ?2, reason = ?3, updated_at = ?4,
       finished_at = CASE WHEN ?2 IN ('completed', 'cancelled', 'failed') THEN ?4 WHEN ?2 = 'running' THEN NULL ELSE finished_at END
WHERE id = ?1 AND state IN (SELECT value FROM json_each(?5))
  AND NOT (?2 = 'completed' AND EXISTS (SELECT 1 FROM broadcast_sends
      WHERE broadcast_id = ?1 AND status IN ('claimed', 'deferred') AND NOT accepted))`, id(bid), string(to), reason, ts(now), string(froms))
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return err
		}
		moved = n == 1
		out, err = getBroadcast(ctx, tx, bid)
		return err
	})
	if err != nil {
		return out, err
	}
	if !moved {
		if out.State == store.StateRunning && to == store.StateCompleted && slices.Contains(from, store.StateRunning) {
			return out, fmt.Errorf("broadcast %s cannot complete: claims or deferred messages are left: %w", bid, store.ErrConflict)
		}
		return out, fmt.Errorf("broadcast %s is %s, cannot become %s: %w", bid, out.State, to, store.ErrConflict)
	}
	return out, nil
}

func (s *Store) EligiblePage(ctx context.Context, b store.Broadcast, from, until ulid.ULID, limit int) ([]store.Contact, error) {
	if limit < 0 {
		// SQLite reads a negative LIMIT as none; Postgres refuses it.
		return nil, fmt.Errorf("eligible page: negative limit %d", limit)
	}
	return s.contacts(ctx, "eligible page", limit, pageQuery(b.SegmentID),
		gateArgs(b.SegmentID, sql.Named("from", id(from)), sql.Named("until", id(until)), sql.Named("limit", limit))...)
}

// lastQuery is pageQuery's last contact at or below :until.
func lastQuery(segment int64) string {
	return `SELECT c.id, c.email, c.name, c.attributes FROM contacts c
WHERE c.id <= :until AND ` + gate(segment) + `
ORDER BY c.id DESC LIMIT 1`
}

func (s *Store) LastEligible(ctx context.Context, b store.Broadcast, until ulid.ULID) (store.Contact, bool, error) {
	cs, err := s.contacts(ctx, "last eligible contact", 1, lastQuery(b.SegmentID), gateArgs(b.SegmentID, sql.Named("until", id(until)))...)
	if err != nil || len(cs) == 0 {
		return store.Contact{}, false, err
	}
	return cs[0], true, nil
}

// contacts reads up to limit contacts by a query of pageQuery's shape.
func (s *Store) contacts(ctx context.Context, what string, limit int, query string, args ...any) ([]store.Contact, error) {
	rows, err := s.r.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, mapErr(what, err)
	}
	defer rows.Close()
	out := make([]store.Contact, 0, min(limit, 1024))
	for rows.Next() {
		var cid []byte
		var attrs string
		c := store.Contact{Subscribed: true}
		if err := rows.Scan(&cid, &c.Email, &c.Name, &attrs); err != nil {
			return nil, mapErr(what, err)
		}
		if c.ID, err = fromBlob(cid); err != nil {
			return nil, mapErr(what, err)
		}
		if err := json.Unmarshal([]byte(attrs), &c.Attributes); err != nil {
			return nil, mapErr(what, fmt.Errorf("contact %s: attributes: %w", c.ID, err))
		}
		out = append(out, c)
	}
	return out, mapErr(what, rows.Err())
}

// claimChunk bounds the rows of one claim INSERT (3 variables each, well
// under SQLite's 32766).
const claimChunk = 1000

// claimQuery inserts n claims; ?1 is the broadcast, ?2 the time, ?3 the
// owner, then contact id, address and Message-ID of each claim. A row that
// exists already is returned only when ?3 holds it still (the same run
// retrying after an ambiguous commit); the no-op update is what makes
// RETURNING report it.
func claimQuery(n int) string {
	var b strings.Builder
	b.WriteString(`WITH v AS (VALUES `)
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "(?%d, ?%d, ?%d)", 4+3*i, 5+3*i, 6+3*i)
	}
	// A contact erased since its page was read is not claimed (so not
	// sent); erasure and claims are write transactions, one at a time.
	// (The WHERE also keeps ON CONFLICT from parsing as a join's ON.)
	b.WriteString(`)
INSERT INTO broadcast_sends (broadcast_id, contact_id, email, status, message_id, claimed_at, updated_at, owner)
SELECT ?1, v.column1, v.column2, 'claimed', v.column3, ?2, ?2, ?3 FROM v
WHERE EXISTS (SELECT 1 FROM contacts c WHERE c.id = v.column1) ON CONFLICT (broadcast_id, contact_id) DO UPDATE SET owner = excluded.owner
WHERE broadcast_sends.owner = excluded.owner AND broadcast_sends.status = 'claimed' RETURNING contact_id`)
	return b.String()
}

func (s *Store) Claim(ctx context.Context, broadcast ulid.ULID, owner string, claims []store.Claim, now time.Time) ([]ulid.ULID, error) {
	if len(claims) == 0 {
		return nil, nil
	}
	var out []ulid.ULID
	var refused error
	err := s.write(ctx, "claim", func(tx *sql.Tx) error {
		var err error
		out, refused, err = claimTx(ctx, tx, broadcast, owner, claims, now)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, refused
}

// ownClaim is claimTx's test for a row this owner holds still, of a
// contact not erased since (claimQuery's own test, so a retry returns the
// same rows whatever the state).
const ownClaim = `SELECT 1 FROM broadcast_sends WHERE broadcast_id = ?1 AND contact_id = ?2 AND owner = ?3 AND status = 'claimed'
  AND EXISTS (SELECT 1 FROM contacts c WHERE c.id = ?2)`

// claimTx inserts claims in tx and returns the contacts it inserted. When
// the broadcast is not running it inserts none and returns the rows owner
// holds already, or, when there are none, a *store.NotRunningError as
// refused: the transaction still commits what else it wrote (outcomes).
// Write transactions run one at a time, so the state read here is the
// state until this one commits (SetState is one too).
func claimTx(ctx context.Context, tx *sql.Tx, broadcast ulid.ULID, owner string, claims []store.Claim, now time.Time) (_ []ulid.ULID, refused, _ error) {
	// In contact id order, like Postgres (where it avoids deadlocks): the
	// same rows in the same order whatever order the caller had.
	claims = slices.SortedFunc(slices.Values(claims), func(a, b store.Claim) int { return a.ContactID.Compare(b.ContactID) })
	var state string
	switch err := tx.QueryRowContext(ctx, `SELECT state FROM broadcasts WHERE id = ?`, id(broadcast)).Scan(&state); {
	case errors.Is(err, sql.ErrNoRows):
		state = ""
	case err != nil:
		return nil, nil, err
	}
	if store.State(state) != store.StateRunning {
		var own []ulid.ULID
		for _, c := range claims {
			var one int
			err := tx.QueryRowContext(ctx, ownClaim, id(broadcast), id(c.ContactID), owner).Scan(&one)
			if errors.Is(err, sql.ErrNoRows) {
				continue
			}
			if err != nil {
				return nil, nil, err
			}
			own = append(own, c.ContactID)
		}
		if len(own) == 0 {
			return nil, &store.NotRunningError{State: store.State(state)}, nil
		}
		return own, nil, nil
	}
	var out []ulid.ULID
	for chunk := range slices.Chunk(claims, claimChunk) {
		args := make([]any, 0, 3+3*len(chunk))
		args = append(args, id(broadcast), ts(now), owner)
		for _, c := range chunk {
			args = append(args, id(c.ContactID), c.Email, c.MessageID)
		}
		rows, err := tx.QueryContext(ctx, claimQuery(len(chunk)), args...)
		if err != nil {
			return nil, nil, err
		}
		for rows.Next() {
			var cid []byte
			if err := rows.Scan(&cid); err != nil {
				rows.Close()
				return nil, nil, err
			}
			u, err := fromBlob(cid)
			if err != nil {
				rows.Close()
				return nil, nil, err
			}
			out = append(out, u)
		}
		if err := rows.Close(); err != nil {
			return nil, nil, err
		}
		if err := rows.Err(); err != nil {
			return nil, nil, err
		}
	}
	return out, nil, nil
}

// Outcome writes and releases touch only rows still claimed: a row never
// gets a second outcome, and a row with an outcome is never deleted. Both
// find their row by the primary key, not the partial index on claimed rows
// (TestOutcomeWritesUsePrimaryKey pins the plan, with and without ANALYZE).
const (
	recordOutcome = `
UPDATE broadcast_sends SET status = ?3, error = CASE WHEN ?4 NOT IN ('', ` + inDoubtResent + `, ` + erasedBeforeSend + `) AND email LIKE ` + erasedLike + ` THEN ` + withheldReply + ` ELSE ?4 END, updated_at = ?5, retry_at = ?6, accepted = (?3 = 'sent'), in_doubt = (in_doubt OR ?4 = ` + inDoubtResent + `),
    owner = CASE WHEN ?3 = 'claimed' THEN '' ELSE owner END, attempt = attempt - ?8
WHERE broadcast_id = ?1 AND contact_id = ?2 AND status = 'claimed' AND owner = ?7`
	releaseClaim = `
DELETE FROM broadcast_sends
WHERE broadcast_id = ?1 AND contact_id = ?2 AND status = 'claimed' AND owner = ?3`
)

func (s *Store) RecordOutcomes(ctx context.Context, broadcast ulid.ULID, owner string, outcomes []store.Outcome, now time.Time) error {
	if len(outcomes) == 0 {
		return nil
	}
	return s.write(ctx, "record outcomes", func(tx *sql.Tx) error {
		return recordOutcomesTx(ctx, tx, broadcast, owner, outcomes, now)
	})
}

func (s *Store) RecordAndClaim(ctx context.Context, broadcast ulid.ULID, owner string, outcomes []store.Outcome, next []store.Claim, now time.Time) ([]ulid.ULID, error) {
	var claimed []ulid.ULID
	var refused error
	err := s.write(ctx, "record outcomes and claim", func(tx *sql.Tx) error {
		if err := recordOutcomesTx(ctx, tx, broadcast, owner, outcomes, now); err != nil {
			return err
		}
		if len(next) == 0 {
			return nil
		}
		var err error
		claimed, refused, err = claimTx(ctx, tx, broadcast, owner, next, now)
		return err
	})
	if err != nil {
		return nil, err
	}
	return claimed, refused
}

func recordOutcomesTx(ctx context.Context, tx *sql.Tx, broadcast ulid.ULID, owner string, outcomes []store.Outcome, now time.Time) error {
	if len(outcomes) == 0 {
		return nil
	}
	stmt, err := tx.PrepareContext(ctx, recordOutcome)
	if err != nil {
		return err
	}
	defer stmt.Close()
	// A claimed row is neither accepted nor delivered (an event that marks
	// a row accepted also moves it off claimed, and only claimed rows get
	// an outcome), so each row written adds what its outcome is worth to
	// the reputation sums.
	var d store.Reputation
	for _, o := range outcomes {
		r, err := stmt.ExecContext(ctx, id(broadcast), id(o.ContactID), string(o.Status), o.Error, ts(now), retryAt(o), owner, notAttempted(o))
		if err != nil {
			return err
		}
		n, err := r.RowsAffected()
		if err != nil {
			return err
		}
		if n == 0 {
			continue // another run's row, or one with an outcome already
		}
		d = d.Plus(store.ReputationOf(o.Status, o.Status == store.SendSent))
		if o.HardBounce && o.Status == store.SendFailed {
			// The address refused for good (store.Outcome.HardBounce):
			// the contact is suppressed, as after a bounce a webhook
			// reports. An erased contact has no row.
			if _, err := tx.ExecContext(ctx, suppressContact, id(o.ContactID), ts(now), store.HardBouncePrefix+o.Error); err != nil {
				return err
			}
			d.Refused++
		}
	}
	return addReputation(ctx, tx, broadcast, d)
}

func (s *Store) Release(ctx context.Context, broadcast ulid.ULID, owner string, contacts []ulid.ULID) error {
	if len(contacts) == 0 {
		return nil
	}
	return s.write(ctx, "release claims", func(tx *sql.Tx) error {
		stmt, err := tx.PrepareContext(ctx, releaseClaim)
		if err != nil {
			return err
		}
		defer stmt.Close()
		for _, c := range contacts {
			if _, err := stmt.ExecContext(ctx, id(broadcast), id(c), owner); err != nil {
				return err
			}
		}
		return nil
	})
}

// countSends groups a broadcast's ledger rows as store.Counts.Add takes
// them.
const countSends = `SELECT status, accepted, in_doubt, count(*) FROM broadcast_sends WHERE broadcast_id = ? GROUP BY status, accepted, in_doubt`

func (s *Store) Counts(ctx context.Context, broadcast ulid.ULID) (store.Counts, error) {
	rows, err := s.r.QueryContext(ctx, countSends, id(broadcast))
	if err != nil {
		return store.Counts{}, mapErr("count sends", err)
	}
	defer rows.Close()
	var c store.Counts
	for rows.Next() {
		var status string
		var accepted, inDoubt bool
		var n int64
		if err := rows.Scan(&status, &accepted, &inDoubt, &n); err != nil {
			return store.Counts{}, mapErr("count sends", err)
		}
		c.Add(store.SendStatus(status), accepted, inDoubt, n)
	}
	return c, mapErr("count sends", rows.Err())
}

const sendColumns = `contact_id, email, status, attempt, message_id, error, claimed_at, updated_at, owner, in_doubt`

func scanSend(row interface{ Scan(...any) error }, broadcast ulid.ULID) (store.Send, error) {
	out := store.Send{BroadcastID: broadcast}
	var cid []byte
	var status string
	var claimed, updated int64
	if err := row.Scan(&cid, &out.Email, &status, &out.Attempt, &out.MessageID, &out.Error, &claimed, &updated, &out.Owner, &out.InDoubt); err != nil {
		return store.Send{}, err
	}
	var err error
	if out.ContactID, err = fromBlob(cid); err != nil {
		return store.Send{}, err
	}
	out.Status = store.SendStatus(status)
	out.ClaimedAt, out.UpdatedAt = fromTS(claimed), fromTS(updated)
	return out, nil
}

func (s *Store) GetSend(ctx context.Context, broadcast, contact ulid.ULID) (store.Send, error) {
	out, err := scanSend(s.r.QueryRowContext(ctx, `SELECT `+sendColumns+`
FROM broadcast_sends WHERE broadcast_id = ? AND contact_id = ?`, id(broadcast), id(contact)), broadcast)
	return out, mapErr("ledger row", err)
}

func (s *Store) ClaimOwners(ctx context.Context, broadcast ulid.ULID) ([]string, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT DISTINCT owner FROM broadcast_sends WHERE broadcast_id = ? AND status = 'claimed'`, id(broadcast))
	if err != nil {
		return nil, mapErr("claim owners", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var o string
		if err := rows.Scan(&o); err != nil {
			return nil, mapErr("claim owners", err)
		}
		out = append(out, o)
	}
	return out, mapErr("claim owners", rows.Err())
}

func (s *Store) InDoubt(ctx context.Context, broadcast ulid.ULID, owner string, limit int) ([]store.Send, error) {
	return s.sends(ctx, "in-doubt claims", broadcast, limit, `
WHERE broadcast_id = ? AND status = 'claimed' AND owner = ?
ORDER BY contact_id LIMIT ?`, id(broadcast), owner, limit)
}

func (s *Store) Failures(ctx context.Context, broadcast ulid.ULID, limit int) ([]store.Send, error) {
	return s.sends(ctx, "failures", broadcast, limit, `
WHERE broadcast_id = ? AND status = 'failed'
ORDER BY updated_at DESC, contact_id LIMIT ?`, id(broadcast), limit)
}

// sends reads ledger rows of one broadcast selected by where.
func (s *Store) sends(ctx context.Context, op string, broadcast ulid.ULID, limit int, where string, args ...any) ([]store.Send, error) {
	if limit < 0 {
		return nil, fmt.Errorf("%s: negative limit %d", op, limit)
	}
	rows, err := s.r.QueryContext(ctx, `SELECT `+sendColumns+`
FROM broadcast_sends`+where, args...)
	if err != nil {
		return nil, mapErr(op, err)
	}
	defer rows.Close()
	var out []store.Send
	for rows.Next() {
		r, err := scanSend(rows, broadcast)
		if err != nil {
			return nil, mapErr(op, err)
		}
		out = append(out, r)
	}
	return out, mapErr(op, rows.Err())
}
