// Package postgres is the Postgres implementation of store.Store (pgx/v5).
// pgx appears nowhere else in rangecast.
package postgres

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/oklog/ulid/v2"

	"github.com/rangecast/rangecast/internal/address"
	"github.com/rangecast/rangecast/internal/store"
)

// Store implements store.Store on a pgx pool.
type Store struct {
	pool *pgxpool.Pool
	// erasureKey keys store.ErasureHash (migration 016), read once at Open.
	erasureKey []byte
}

var _ store.Store = (*Store)(nil)

// Open connects to url and applies migrations. search_path in the url (or
// options=-c search_path=...) selects the schema.
func Open(ctx context.Context, url string) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("postgres: parse database url: %w", err)
	}
	// pgx prepares and caches every statement; after five runs Postgres
	// may switch a prepared statement to a generic plan chosen once, and on
	// a new install that moment comes while broadcast_sends is nearly
	// empty, where a scan looks cheapest. The plan then stays for the
	// connection's life while the ledger grows: make bench measured 4,769
	// rows read per message on a first broadcast of 10,000 (6.5 with
	// custom plans). Planning each run costs far less. A url that sets
	// plan_cache_mode itself wins, except for the window statements, which
	// have one possible plan and run on their generic one (genericPlan).
	if _, set := cfg.ConnConfig.RuntimeParams["plan_cache_mode"]; !set {
		cfg.ConnConfig.RuntimeParams["plan_cache_mode"] = "force_custom_plan"
	}
	// The store's statements are lookups by key and short index scans,
	// whose cost estimates on a ledger without statistics can still pass
	// jit_above_cost; compiling one cost more than running it many times
	// over (genericPlan). A url that sets jit wins, except for the window
	// statements, which always run without it.
	if _, set := cfg.ConnConfig.RuntimeParams["jit"]; !set {
		cfg.ConnConfig.RuntimeParams["jit"] = "off"
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: connect: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		// mapErr: a server not reachable (yet) is store.ErrUnavailable,
		// which a process starting with its database waits out.
		return nil, fmt.Errorf("postgres: connect: %w", mapErr("ping", err))
	}
	if err := Migrate(ctx, pool); err != nil {
		pool.Close()
		return nil, err
	}
	var key []byte
	if err := pool.QueryRow(ctx, `SELECT key FROM erasure_key WHERE id = 1`).Scan(&key); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres: erasure key: %w", err)
	}
	return &Store{pool: pool, erasureKey: key}, nil
}

func (s *Store) Close() { s.pool.Close() }

func (s *Store) Ping(ctx context.Context) error { return mapErr("ping", s.pool.Ping(ctx)) }

// mapErr is the one place driver errors become store errors.
func mapErr(op string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%s: %w", op, store.ErrNotFound)
	}
	var pgErr *pgconn.PgError
	// The sentinel says what a caller can act on; the driver's own words
	// (which quote the row) stay out of errors that reach clients.
	if errors.As(err, &pgErr) && pgErr.Code == "23505" {
		return fmt.Errorf("%s: %w", op, store.ErrConflict)
	}
	// A value the database cannot hold (class 22, data exception: a NUL
	// or invalid UTF-8 in text, a number out of range). The stores refuse
	// text before writing (store.CheckText); this is the net under that.
	if errors.As(err, &pgErr) && strings.HasPrefix(pgErr.Code, "22") {
		return fmt.Errorf("%s: %w: a value the database cannot store (SQLSTATE %s)", op, store.ErrInvalid, pgErr.Code)
	}
	if unreachable(err) {
		return fmt.Errorf("%s: %w: %v", op, store.ErrUnavailable, err)
	}
	return fmt.Errorf("%s: %w", op, err)
}

// unreachable reports whether err says the database could not be reached
// or the connection broke, rather than anything about the statement. A
// caller's own cancellation or deadline is not that.
func unreachable(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	// A server that refused who we are or what we asked for (a wrong
	// password, a role or database that does not exist: SQLSTATE class 28,
	// 3D000) was reached: waiting would loop for ever on a configuration
	// error. A server starting, shutting down or full (57P0x, 53300) is
	// one to wait for.
	var pe *pgconn.PgError
	if errors.As(err, &pe) && (strings.HasPrefix(pe.Code, "28") || pe.Code == "3D000") {
		return false
	}
	if errors.As(err, &pe) && (strings.HasPrefix(pe.Code, "57P") || pe.Code == "53300" || strings.HasPrefix(pe.Code, "08")) {
		// A backend terminated (pg_terminate_backend, a restart) or a
		// connection refused: it surfaced as an internal error and
		// failed a pause and status calls at once (tester).
		return true
	}
	var ce *pgconn.ConnectError
	var ne net.Error
	return errors.As(err, &ce) || errors.As(err, &ne) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF)
}

func uid(id ulid.ULID) [16]byte { return [16]byte(id) }

func uids(ids []ulid.ULID) [][16]byte {
	out := make([][16]byte, len(ids))
	for i, id := range ids {
		out[i] = [16]byte(id)
	}
	return out
}

// keys is address.Key of each email: the stored identity every lookup and
// conflict target compares.
func keys(emails []string) []string {
	out := make([]string, len(emails))
	for i, e := range emails {
		out[i] = address.Key(e)
	}
	return out
}

const upsertContacts = `
INSERT INTO contacts AS c (id, email, email_key, name, attributes, subscribed, do_not_contact, suppressed, suppressed_reason, erasure_hash, created_at, updated_at)
SELECT u.id, u.email, u.email_key, u.name, u.attributes, u.subscribed, u.dnc, u.suppressed OR e.hash IS NOT NULL,
       CASE WHEN e.hash IS NOT NULL THEN $11 ELSE '' END, u.erasure_hash, $7, $7
FROM unnest($1::uuid[], $2::text[], $3::text[], $4::jsonb[], $5::bool[], $6::bool[], $8::bool[], $9::text[], $10::text[])
     AS u(id, email, name, attributes, subscribed, dnc, suppressed, email_key, erasure_hash)
LEFT JOIN erased_addresses e ON e.hash = u.erasure_hash
` + mergeContact + `
RETURNING id, email_key`

// mergeContact is how an upsert changes an existing contact (alias c), for
// the small and the bulk (COPY) paths of ImportContacts alike.
const mergeContact = `ON CONFLICT (email_key) DO UPDATE SET
    -- An import without names (a list of addresses to add to a segment)
    -- leaves the names it does not give, as it leaves attributes.
    name = CASE WHEN EXCLUDED.name <> '' THEN EXCLUDED.name ELSE c.name END,
    attributes = c.attributes || EXCLUDED.attributes,
    -- An import may unsubscribe, flag or suppress a contact, never undo an
    -- unsubscribe, a do-not-contact flag or a suppression.
    subscribed = c.subscribed AND EXCLUDED.subscribed,
    do_not_contact = c.do_not_contact OR EXCLUDED.do_not_contact,
    suppressed = c.suppressed OR EXCLUDED.suppressed,
    erasure_hash = EXCLUDED.erasure_hash,
    updated_at = EXCLUDED.updated_at
-- A merge that grows a contact past store.MaxAttributes changes nothing
-- and returns no row. One that adds no key is written, so a contact that
-- has more already (grown before the limit was kept) can still be
-- unsubscribed or flagged by an import.
WHERE (SELECT count(*) FROM jsonb_object_keys(c.attributes || EXCLUDED.attributes))
      <= greatest(` + maxAttributes + `, (SELECT count(*) FROM jsonb_object_keys(c.attributes)))`

// maxAttributes is store.MaxAttributes in SQL (TestMaxAttributesInSQL).
const maxAttributes = "64"

// upsert is ImportContacts for a small batch: one statement, in tx.
func (s *Store) upsert(ctx context.Context, tx pgx.Tx, cs []store.Contact, now time.Time) ([]ulid.ULID, error) {
	ids := make([][16]byte, len(cs))
	emails := make([]string, len(cs))
	names := make([]string, len(cs))
	attrs := make([]map[string]any, len(cs))
	subscribed := make([]bool, len(cs))
	dnc := make([]bool, len(cs))
	suppressed := make([]bool, len(cs))
	for i, c := range cs {
		ids[i], emails[i], names[i], subscribed[i], dnc[i] = uid(c.ID), c.Email, c.Name, c.Subscribed, c.DoNotContact
		suppressed[i] = c.Suppressed
		attrs[i] = c.Attributes
		if attrs[i] == nil {
			attrs[i] = map[string]any{}
		}
	}
	rows, err := tx.Query(ctx, upsertContacts, ids, emails, names, attrs, subscribed, dnc, now, suppressed, keys(emails),
		s.erasureHashes(emails), store.ErasedReason)
	if err != nil {
		return nil, mapErr("upsert contacts", err)
	}
	byEmail := make(map[string]ulid.ULID, len(cs))
	var id [16]byte
	var email string
	_, err = pgx.ForEachRow(rows, []any{&id, &email}, func() error {
		byEmail[email] = ulid.ULID(id)
		return nil
	})
	if err != nil {
		return nil, mapErr("upsert contacts", err)
	}
	out := make([]ulid.ULID, len(cs))
	for i, c := range cs {
		out[i] = byEmail[address.Key(c.Email)]
	}
	return out, nil
}

func (s *Store) EnsureSegment(ctx context.Context, name string, now time.Time) (int64, error) {
	var id int64
	err := s.pool.QueryRow(ctx, `
INSERT INTO segments (name, created_at) VALUES ($1, $2)
ON CONFLICT (name) DO UPDATE SET name = EXCLUDED.name
RETURNING id`, name, now).Scan(&id)
	return id, mapErr("ensure segment", err)
}

func (s *Store) SegmentID(ctx context.Context, name string) (int64, error) {
	var id int64
	err := s.pool.QueryRow(ctx, `SELECT id FROM segments WHERE name = $1`, name).Scan(&id)
	return id, mapErr("segment "+name, err)
}

const broadcastColumns = `b.id, b.name, coalesce(b.request_id, ''), b.from_name, b.from_address, b.subject, b.html, b.text_body,
coalesce(b.segment_id, 0), coalesce(s.name, ''), b.throttle_per_hour, b.in_doubt_policy, b.state, b.reason, b.snapshot_total, b.min_id, b.max_id,
b.created_at, b.started_at, b.finished_at, b.no_unsubscribe_link, b.scheduled_at, b.range_starts, b.content_revision`

const broadcastFrom = ` FROM broadcasts b LEFT JOIN segments s ON s.id = b.segment_id `

// broadcastListColumns are broadcastColumns without the bodies.
var broadcastListColumns = strings.Replace(broadcastColumns, "b.html, b.text_body", "'', ''", 1)

func (s *Store) BroadcastPage(ctx context.Context, before ulid.ULID, limit int) ([]store.Broadcast, error) {
	if before == (ulid.ULID{}) {
		before = ulid.MustParse("7ZZZZZZZZZZZZZZZZZZZZZZZZZ")
	}
	rows, err := s.pool.Query(ctx, `SELECT `+broadcastListColumns+broadcastFrom+`WHERE b.id < $1 ORDER BY b.id DESC LIMIT $2`, uid(before), limit)
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

func scanBroadcast(row pgx.Row) (store.Broadcast, error) {
	var b store.Broadcast
	var id [16]byte
	var minID, maxID pgtype.UUID
	var started, finished, scheduled pgtype.Timestamptz
	var state string
	var starts [][16]byte
	err := row.Scan(&id, &b.Name, &b.RequestID, &b.Content.FromName, &b.Content.FromAddress, &b.Content.Subject,
		&b.Content.HTML, &b.Content.Text, &b.SegmentID, &b.Segment, &b.ThrottlePerHour, &b.InDoubtPolicy, &state, &b.Reason,
		&b.SnapshotTotal, &minID, &maxID, &b.CreatedAt, &started, &finished, &b.NoUnsubscribeLink, &scheduled, &starts, &b.ContentRevision)
	if err != nil {
		return b, err
	}
	for _, s := range starts {
		b.RangeStarts = append(b.RangeStarts, ulid.ULID(s))
	}
	b.ID = ulid.ULID(id)
	b.State = store.State(state)
	if minID.Valid {
		b.MinID = ulid.ULID(minID.Bytes)
	}
	if maxID.Valid {
		b.MaxID = ulid.ULID(maxID.Bytes)
	}
	b.StartedAt, b.FinishedAt, b.ScheduledAt = started.Time, finished.Time, scheduled.Time
	return b, nil
}

func (s *Store) CreateBroadcast(ctx context.Context, b store.Broadcast) (store.Broadcast, bool, error) {
	if err := store.CheckBroadcast(b); err != nil {
		return store.Broadcast{}, false, fmt.Errorf("create broadcast: %w", err)
	}
	var requestID *string
	if b.RequestID != "" {
		requestID = &b.RequestID
	}
	var segment *int64
	if b.SegmentID != 0 {
		segment = &b.SegmentID
	}
	tag, err := s.pool.Exec(ctx, `
INSERT INTO broadcasts (id, name, request_id, from_name, from_address, subject, html, text_body, segment_id,
                        throttle_per_hour, in_doubt_policy, no_unsubscribe_link, state, created_at, updated_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $12, $13, 'draft', $11, $11)
ON CONFLICT (request_id) DO NOTHING`,
		uid(b.ID), b.Name, requestID, b.Content.FromName, b.Content.FromAddress, b.Content.Subject, b.Content.HTML,
		b.Content.Text, segment, b.ThrottlePerHour, b.CreatedAt, b.InDoubtPolicy, b.NoUnsubscribeLink)
	if err != nil {
		return store.Broadcast{}, false, mapErr("create broadcast", err)
	}
	if tag.RowsAffected() == 1 {
		out, err := s.GetBroadcast(ctx, b.ID)
		return out, true, err
	}
	out, err := scanBroadcast(s.pool.QueryRow(ctx, `SELECT `+broadcastColumns+broadcastFrom+`WHERE b.request_id = $1`, b.RequestID))
	return out, false, mapErr("create broadcast", err)
}

func (s *Store) GetBroadcast(ctx context.Context, id ulid.ULID) (store.Broadcast, error) {
	b, err := scanBroadcast(s.pool.QueryRow(ctx, `SELECT `+broadcastColumns+broadcastFrom+`WHERE b.id = $1`, uid(id)))
	return b, mapErr("broadcast "+id.String(), err)
}

func (s *Store) ContentRevision(ctx context.Context, id ulid.ULID) (int, error) {
	var n int
	err := s.pool.QueryRow(ctx, `SELECT content_revision FROM broadcasts WHERE id = $1`, uid(id)).Scan(&n)
	return n, mapErr("broadcast "+id.String(), err)
}

func (s *Store) ListBroadcasts(ctx context.Context) ([]store.Broadcast, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+broadcastColumns+broadcastFrom+`ORDER BY b.created_at DESC, b.id DESC`)
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
// broadcast, shared by the accept-time snapshot and every page. segmentParam
// is the placeholder of the segment id, or "" for every contact. An import
// suppresses an erased address already; the gate tests the hash as well, so
// an import racing the erasure of the same address cannot mail it.
func gate(segmentParam string) string {
	return gateColumns(segmentParam) + `
 AND NOT EXISTS (SELECT 1 FROM erased_addresses e WHERE e.hash = c.erasure_hash)`
}

// gateColumns is gate without its erasure test: the same contacts where no
// address was ever erased (snapshotQuery).
func gateColumns(segmentParam string) string {
	g := `c.subscribed AND NOT c.do_not_contact AND NOT c.suppressed AND c.email <> ''`
	if segmentParam != "" {
		g += ` AND EXISTS (SELECT 1 FROM segment_members m WHERE m.segment_id = ` + segmentParam + ` AND m.contact_id = c.id)`
	}
	return g
}

// segmentParam returns placeholder p when the broadcast has a segment.
func segmentParam(segment int64, p string) string {
	if segment == 0 {
		return ""
	}
	return p
}

func pageQuery(segment int64) string {
	return `SELECT c.id, c.email, c.name, c.attributes FROM contacts c
WHERE c.id >= $1 AND c.id <= $2 AND ` + gate(segmentParam(segment, "$4")) + `
ORDER BY c.id LIMIT $3`
}

func (s *Store) AcceptBroadcast(ctx context.Context, id ulid.ULID, now time.Time) (store.Broadcast, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return store.Broadcast{}, mapErr("accept broadcast", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	var state string
	var segment int64
	err = tx.QueryRow(ctx, `SELECT state, coalesce(segment_id, 0) FROM broadcasts WHERE id = $1 FOR UPDATE`, uid(id)).Scan(&state, &segment)
	if err != nil {
		return store.Broadcast{}, mapErr("accept broadcast "+id.String(), err)
	}
	if store.State(state) != store.StateDraft {
		return store.Broadcast{}, fmt.Errorf("accept broadcast %s: it is %s, only a draft can be started: %w", id, state, store.ErrConflict)
	}
	count, minID, maxID, starts, err := snapshotAudience(ctx, s.pool, tx, segment)
	if err != nil {
		return store.Broadcast{}, mapErr("accept broadcast", err)
	}
	_, err = tx.Exec(ctx, `
UPDATE broadcasts SET state = 'running', reason = '', snapshot_total = $2, min_id = $3, max_id = $4,
       started_at = $5, updated_at = $5, range_starts = $6
WHERE id = $1`, uid(id), count, minID, maxID, now, starts)
	if err != nil {
		return store.Broadcast{}, mapErr("accept broadcast", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return store.Broadcast{}, mapErr("accept broadcast", err)
	}
	// No ANALYZE here: the per-row statements (claim, outcome, release)
	// stay on the primary key with or without statistics
	// (TestOutcomeWriteUsesPrimaryKey), connections plan each run for its
	// arguments (Open), and at 1M ledger rows ANALYZE alone took 138 ms,
	// more than the audience query itself (docs/benchmarks.md).
	return s.GetBroadcast(ctx, id)
}

// setState moves the broadcast; $6 true holds it running while any row is
// claimed or deferred (completion), read through their partial indexes
// (pendingQuery) under openRowScans.
const setState = `
UPDATE broadcasts SET state = $2, reason = $3, updated_at = $4,
       finished_at = CASE WHEN $2 IN ('completed', 'cancelled', 'failed') THEN $4 WHEN $2 = 'running' THEN NULL ELSE finished_at END
WHERE id = $1 AND state = ANY($5::text[])
  AND NOT ($6 AND EXISTS (SELECT 1 FROM broadcast_sends WHERE broadcast_id = $1 AND status = 'claimed' AND NOT accepted))
  AND NOT ($6 AND EXISTS (SELECT 1 FROM broadcast_sends WHERE broadcast_id = $1 AND status = 'deferred' AND NOT accepted))`

// SetState holds the broadcast's state lock (claimGate) exclusively while
// it moves it: claims that read the old state commit first, and their rows
// are in what the completion guard reads (TestCompletionWaitsForClaim).
func (s *Store) SetState(ctx context.Context, id ulid.ULID, from []store.State, to store.State, reason string, now time.Time) (store.Broadcast, error) {
	froms := make([]string, len(from))
	for i, f := range from {
		froms[i] = string(f)
	}
	// One batch outside any transaction block: one implicit transaction
	// that commits at the batch's Sync, so the exclusive lock is never held
	// while the server waits for this process (an explicit transaction left
	// open by a frozen coordinator between the batch and COMMIT blocked
	// every claim of the broadcast until its connection died).
	batch := &pgx.Batch{}
	batch.Queue(stateLock, stateLockKeys(id)...)
	batch.Queue(openRowScans)
	batch.Queue(setState, uid(id), string(to), reason, now, froms, to == store.StateCompleted)
	results := s.pool.SendBatch(ctx, batch)
	_, err1 := results.Exec()
	_, err2 := results.Exec()
	tag, err3 := results.Exec()
	if err := errors.Join(err1, err2, err3, results.Close()); err != nil {
		return store.Broadcast{}, mapErr("set broadcast state", err)
	}
	b, err := s.GetBroadcast(ctx, id)
	if err != nil {
		return b, err
	}
	if tag.RowsAffected() == 0 {
		if b.State == store.StateRunning && to == store.StateCompleted && slices.Contains(from, store.StateRunning) {
			return b, fmt.Errorf("broadcast %s cannot complete: claims or deferred messages are left: %w", id, store.ErrConflict)
		}
		return b, fmt.Errorf("broadcast %s is %s, cannot become %s: %w", id, b.State, to, store.ErrConflict)
	}
	return b, nil
}

// pageInIDOrder leaves the page query one plan: walk an index on id from
// the page's start and stop after limit eligible contacts, with every
// other test (segment, erasure) an index lookup per contact. On contacts
// without planner statistics (a bulk import autovacuum has not analyzed
// yet) the planner takes the range (from, until] for a few rows and reads
// all of it by bitmap, then sorts: every page read the rest of its range
// again (50 rows read per message over a 20k-contact broadcast, growing
// with the range). The settings are local to the batch's implicit
// transaction. With the plan's shape fixed so, a generic plan is as good as
// a custom one, and the page query is planned once per connection instead
// of on every run (genericPlan).
const pageInIDOrder = `SELECT set_config('enable_seqscan', 'off', true), set_config('enable_bitmapscan', 'off', true),
       set_config('enable_sort', 'off', true), set_config('enable_hashjoin', 'off', true),
       set_config('enable_mergejoin', 'off', true), ` + genericPlan

// genericPlan lets the statements that follow in the transaction use their
// cached generic plan, overriding the store's force_custom_plan (Open). It
// is set only beside enable_* settings that leave the planner one shape of
// plan whatever the statistics say, the condition under which a plan made
// once (possibly on a nearly empty table) stays right as the table grows.
// Planning every window's statements was a third of Postgres' CPU per
// message in make bench (62 µs against 42–45 µs with generic plans). A
// cached plan is still made again after DDL or new statistics on its
// tables, and then under the same settings.
//
// JIT compilation is turned off with it. A generic plan is costed without
// its parameters' values: the outcome write's lookups by row comparison
// (atKey) were estimated at 730 rows each, 152,030 for a window at 1M
// ledger rows, past jit_above_cost (100,000), and Postgres then compiled
// the statement on every run, 15 ms of an 18 ms write (make bench at 1M:
// 637 µs of Postgres CPU per message, 2,371 msg/s). The plan is one
// index lookup per key; there is nothing for JIT to win.
const genericPlan = `set_config('plan_cache_mode', 'force_generic_plan', true), set_config('jit', 'off', true)`

func (s *Store) EligiblePage(ctx context.Context, b store.Broadcast, from, until ulid.ULID, limit int) ([]store.Contact, error) {
	args := []any{uid(from), uid(until), limit}
	if b.SegmentID != 0 {
		args = append(args, b.SegmentID)
	}
	return s.inIDOrder(ctx, "eligible page", limit, pageQuery(b.SegmentID), args...)
}

// lastQuery is pageQuery's last contact at or below $1. $2 segment.
func lastQuery(segment int64) string {
	return `SELECT c.id, c.email, c.name, c.attributes FROM contacts c
WHERE c.id <= $1 AND ` + gate(segmentParam(segment, "$2")) + `
ORDER BY c.id DESC LIMIT 1`
}

func (s *Store) LastEligible(ctx context.Context, b store.Broadcast, until ulid.ULID) (store.Contact, bool, error) {
	args := []any{uid(until)}
	if b.SegmentID != 0 {
		args = append(args, b.SegmentID)
	}
	cs, err := s.inIDOrder(ctx, "last eligible contact", 1, lastQuery(b.SegmentID), args...)
	if err != nil || len(cs) == 0 {
		return store.Contact{}, false, err
	}
	return cs[0], true, nil
}

// after sends settings (set_config(…, true) calls) and query as one batch,
// so one implicit transaction: the settings hold for query alone. The
// results are at query's; the caller closes them.
func (s *Store) after(ctx context.Context, settings, query string, args ...any) (pgx.BatchResults, error) {
	batch := &pgx.Batch{}
	batch.Queue(settings)
	batch.Queue(query, args...)
	results := s.pool.SendBatch(ctx, batch)
	if _, err := results.Exec(); err != nil {
		results.Close()
		return nil, err
	}
	return results, nil
}

// inIDOrder reads up to limit contacts by a query of pageQuery's shape,
// under pageInIDOrder's settings.
func (s *Store) inIDOrder(ctx context.Context, what string, limit int, query string, args ...any) ([]store.Contact, error) {
	results, err := s.after(ctx, pageInIDOrder, query, args...)
	if err != nil {
		return nil, mapErr(what, err)
	}
	defer results.Close()
	rows, err := results.Query()
	if err != nil {
		return nil, mapErr(what, err)
	}
	out := make([]store.Contact, 0, min(limit, 1000))
	var c store.Contact
	var id [16]byte
	_, err = pgx.ForEachRow(rows, []any{&id, &c.Email, &c.Name, &c.Attributes}, func() error {
		c.ID, c.Subscribed = ulid.ULID(id), true
		out = append(out, c)
		c.Attributes = nil
		return nil
	})
	return out, mapErr(what, err)
}

// claimQuery inserts claims held by $6 while the broadcast is running. A
// row that exists already is returned only when $6 holds it still (the same
// run retrying after an ambiguous commit); the no-op update is what makes
// RETURNING report it. When the broadcast is not running (or is gone) it
// inserts nothing, still returns this run's own claims, and adds one row
// with no contact and the state ("" when gone): the page must stop, not
// take the missing claims for another run's and walk past them. The state
// is read in the statement's snapshot, taken after claimGate's lock, so
// SetState, which takes that lock exclusively, is either seen or waited
// for. A contact erased since its page was read is not claimed (so not
// sent): the statement's snapshot is taken after its lock on
// broadcast_sends, which an erasure holds until it commits (Erase). The
// contact test is a lookup per claimed key (OFFSET 0 keeps it from
// becoming a join the planner could turn into a walk of contacts), so the
// statement has one plan however contacts grow after it was made
// (genericPlan). The own-claim test runs only when the broadcast is not
// running (OR stops at its first true operand).
const claimQuery = `
WITH b AS (SELECT state FROM broadcasts WHERE id = $1), ins AS (
INSERT INTO broadcast_sends AS s (broadcast_id, contact_id, email, status, message_id, claimed_at, updated_at, owner)
SELECT $1, u.id, u.email, 'claimed', u.message_id, $5, $5, $6
FROM unnest($2::uuid[], $3::text[], $4::text[]) AS u(id, email, message_id)
WHERE EXISTS (SELECT 1 FROM contacts c WHERE c.id = u.id OFFSET 0)
  AND (EXISTS (SELECT 1 FROM b WHERE state = 'running')
       OR EXISTS (SELECT 1 FROM broadcast_sends o WHERE o.contact_id = u.id AND o.broadcast_id = $1
                  AND o.owner = $6 AND o.` + stillClaimed + ` OFFSET 0))
ON CONFLICT (broadcast_id, contact_id) DO UPDATE SET owner = excluded.owner
WHERE s.owner = excluded.owner AND s.status = 'claimed'
RETURNING contact_id)
SELECT contact_id, NULL::text FROM ins
UNION ALL
SELECT NULL, coalesce((SELECT state FROM b), '') WHERE NOT EXISTS (SELECT 1 FROM b WHERE state = 'running')`

// claimGate orders a window's claim against SetState: held shared until
// the window write commits, so SetState's exclusive hold waits for claims
// already reading the broadcast's state and claims after it wait for it
// and then read the new state. An advisory lock is an entry in Postgres's
// lock table: no row is written for it, as a FOR SHARE of the broadcast
// would be on every window.
const claimGate = `SELECT pg_advisory_xact_lock_shared($1, $2)`

// stateLock is claimGate's lock, held exclusively by SetState.
const stateLock = `SELECT pg_advisory_xact_lock($1, $2)`

// stateLockClass is the first key of claimGate's lock, so it names no lock
// another application on the database takes ("RcSt"). The second is taken
// from the broadcast id's random bits; two broadcasts that share it only
// wait on each other's state changes.
const stateLockClass int32 = 0x52635374

func stateLockKeys(broadcast ulid.ULID) []any {
	return []any{stateLockClass, int32(binary.BigEndian.Uint32(broadcast[12:]))}
}

// Claim is a window write without outcomes: forceKeyLookups and the claim
// in one implicit transaction, so the claim is planned as in RecordAndClaim.
func (s *Store) Claim(ctx context.Context, broadcast ulid.ULID, owner string, claims []store.Claim, now time.Time) ([]ulid.ULID, error) {
	out, err := s.recordAndClaim(ctx, broadcast, owner, nil, claims, now)
	return out, mapErr("claim", err)
}

// claimArgs are claimQuery's arguments, the claims in contact id order: two
// concurrent claims of overlapping sets in different orders would otherwise
// deadlock, each waiting on a row the other has inserted.
func claimArgs(broadcast ulid.ULID, owner string, claims []store.Claim, now time.Time) []any {
	claims = slices.SortedFunc(slices.Values(claims), func(a, b store.Claim) int { return a.ContactID.Compare(b.ContactID) })
	ids := make([][16]byte, len(claims))
	emails := make([]string, len(claims))
	mids := make([]string, len(claims))
	for i, c := range claims {
		ids[i], emails[i], mids[i] = uid(c.ContactID), c.Email, c.MessageID
	}
	return []any{uid(broadcast), ids, emails, mids, now, owner}
}

// claimedIDs reads claimQuery's result: the contacts this call holds, or
// a *store.NotRunningError when it holds none because the broadcast is not
// running.
func claimedIDs(rows pgx.Rows) ([]ulid.ULID, error) {
	var out []ulid.ULID
	var id *[16]byte
	var state *string
	_, err := pgx.ForEachRow(rows, []any{&id, &state}, func() error {
		if id != nil {
			out = append(out, ulid.ULID(*id))
		}
		return nil
	})
	if err == nil && len(out) == 0 && state != nil {
		return nil, &store.NotRunningError{State: store.State(*state)}
	}
	return out, err
}

// stillClaimed is the guard "status = 'claimed'" for statements that find
// their rows by primary key. It is written so that the planner cannot match
// it to the partial index broadcast_sends_pending (WHERE status = 'claimed'):
// with the plain equality and no planner statistics (a new or freshly grown
// table), Postgres reads that index by broadcast_id alone and filters every
// claim of the broadcast for each row (23 ms per row at 100k claims; a
// 120k-row walk fell to ~540 rows/s). The index also keeps entries for rows
// that have left 'claimed' until vacuum. TestOutcomeWriteUsesPrimaryKey pins
// the plan.
const stillClaimed = `status || '' = 'claimed'`

// atKey is the join of broadcast_sends s to a window's keys u: the row whose
// (contact_id, broadcast_id) is (u.id, u.bid), written as the two row
// comparisons that bound it, in the column order of broadcast_sends_contact.
// A plain equality of each column would give the planner a second plan:
// for a ledger it believes small (a plan made while it held 50 rows) it
// walks the whole table and probes the window's keys, and a generic plan
// (genericPlan) made so kept walking it as the table grew
// (TestCachedPlansSurviveGrowth: 100,148 rows read for a window of 8 at
// 100k rows). Row comparisons are not equalities the planner can order the
// table by, so the only plan is a loop over the keys with an index lookup
// each, starting at the key. Btree stops such a scan only where the first
// column passes its bound, so the order matters: on the primary key
// (broadcast first) each lookup walked the rest of the broadcast's index
// entries (make bench: 1,233 µs of Postgres CPU per message); on the
// contact index it walks the contact's rows in later broadcasts, usually
// none. A row another transaction updates meanwhile is followed to its
// newest version, whose key and guards are checked again, as with any key
// lookup (TestOutcomeFollowsConcurrentUpdate).
const atKey = `(s.contact_id, s.broadcast_id) >= (u.id, u.bid) AND (s.contact_id, s.broadcast_id) <= (u.id, u.bid)`

// retryAborted runs tx, a whole transaction, again when Postgres aborted
// it to break a deadlock (40P01) or for a serialization failure (40001),
// up to five times: an aborted transaction left nothing behind, and the
// deadlock's other side has gone on by the next try. The page workers'
// writes need none of this: persist retries every failed write.
func retryAborted(tx func() error) error {
	for attempt := 0; ; attempt++ {
		err := tx()
		var pgErr *pgconn.PgError
		if attempt < 5 && errors.As(err, &pgErr) && (pgErr.Code == "40P01" || pgErr.Code == "40001") {
			continue
		}
		return err
	}
}

// recordOutcomes writes a window's outcomes in one statement, joined on
// the key (atKey): $1 owner, $2 now, then one array per column in contact
// id order, the broadcast id repeated in each row ($3). It returns the new
// status of every row it moved (a row another run holds, or one no longer
// claimed, is left alone). Rows are locked in the keys' order, contact id
// order: two writes of overlapping sets in different orders could
// deadlock. TestOutcomeWriteUsesPrimaryKey pins its plan on a
// never-analyzed ledger and on one analyzed before the broadcast grew, and
// TestCachedPlansSurviveGrowth on one that grew after its plan was made.
const recordOutcomes = `UPDATE broadcast_sends AS s SET status = u.status,
    error = CASE WHEN u.error NOT IN ('', ` + inDoubtResent + `, ` + erasedBeforeSend + `) AND s.email LIKE ` + erasedLike + ` THEN ` + withheldReply + ` ELSE u.error END,
    updated_at = $2, retry_at = u.retry_at,
    accepted = (u.status = 'sent'), in_doubt = s.in_doubt OR u.error = ` + inDoubtResent + `, owner = CASE WHEN u.status = 'claimed' THEN '' ELSE s.owner END,
    attempt = s.attempt - u.not_attempted
FROM unnest($3::uuid[], $4::uuid[], $5::text[], $6::text[], $7::timestamptz[], $8::int[], $9::bool[]) AS u(bid, id, status, error, retry_at, not_attempted, hard)
WHERE ` + atKey + ` AND s.` + stillClaimed + ` AND s.owner = $1
RETURNING s.status, s.contact_id, u.hard, s.error`

// forceKeyLookups leaves the planner, for the rest of the transaction, only
// index lookups and plain nested loops (a memo cache is no use on unique
// keys): the enable_* settings make every other
// path cost more than any real plan, so the choice no longer rests on
// statistics a new ledger does not have, and the writes it governs can use
// their generic plans (genericPlan). One statement, pipelined with the
// writes it governs.
const forceKeyLookups = `SELECT set_config('enable_seqscan', 'off', true), set_config('enable_hashjoin', 'off', true),
       set_config('enable_mergejoin', 'off', true), set_config('enable_bitmapscan', 'off', true),
       set_config('enable_memoize', 'off', true), ` + genericPlan

// outcomeArgs are recordOutcomes' arguments, the outcomes in contact id
// order (the order rows are locked in: two writes of overlapping sets in
// different orders could deadlock).
func outcomeArgs(broadcast ulid.ULID, owner string, outcomes []store.Outcome, now time.Time) []any {
	outcomes = slices.SortedFunc(slices.Values(outcomes), func(a, b store.Outcome) int { return a.ContactID.Compare(b.ContactID) })
	bids := make([][16]byte, len(outcomes))
	ids := make([][16]byte, len(outcomes))
	statuses := make([]string, len(outcomes))
	errs := make([]string, len(outcomes))
	retries := make([]*time.Time, len(outcomes))
	skipped := make([]int32, len(outcomes))
	hard := make([]bool, len(outcomes))
	for i, o := range outcomes {
		bids[i], ids[i], statuses[i], errs[i], skipped[i] = uid(broadcast), uid(o.ContactID), string(o.Status), o.Error, int32(notAttempted(o))
		hard[i] = o.HardBounce && o.Status == store.SendFailed
		if t, ok := retryAt(o).(time.Time); ok {
			retries[i] = &t
		}
	}
	return []any{owner, now, bids, ids, statuses, errs, retries, skipped, hard}
}

// releaseClaims deletes claims that $1 still holds, by key (atKey):
// the broadcast id repeated per row ($2) for the reason recordOutcomes gives.
const releaseClaims = `
DELETE FROM broadcast_sends AS s USING unnest($2::uuid[], $3::uuid[]) AS u(bid, id)
WHERE ` + atKey + ` AND s.` + stillClaimed + ` AND s.owner = $1`

// hardBounceReason is store.HardBounceReason of the moved row's reply (m).
const hardBounceReason = `'` + store.HardBouncePrefix + `' || m.error`

// recordOutcomesAndReputation is recordOutcomes with the reputation delta
// of the rows it moved ($10 the broadcast), in the same statement, and the
// suppression of the contacts whose address the server refused for good
// (store.Outcome.HardBounce). Only rows this write moved are suppressed,
// and an erased contact has no row. The reputation stays the sum of
// store.ReputationOf over the rows (a failed row is worth nothing), so a
// send-time hard bounce is not among its bounces. A claimed
// row is neither accepted nor delivered (an event that marks a row accepted
// also moves it off claimed, and only claimed rows get an outcome), so each
// row adds what its new status is worth: store.ReputationOf in SQL, summed,
// the accepted flag being status = 'sent' (what recordOutcomes sets). A
// window that moves no sum (failures, deferrals) inserts no delta.
// TestOutcomeReputationIsReputationOf pins it to store.ReputationOf for
// every status.
const recordOutcomesAndReputation = `
WITH moved AS (` + recordOutcomes + `), d AS (
    SELECT count(*) FILTER (WHERE status = 'sent') AS accepted,
           count(*) FILTER (WHERE status IN ('delivered', 'opened', 'clicked', 'complained')) AS delivered,
           count(*) FILTER (WHERE status = 'bounced') AS bounced,
           count(*) FILTER (WHERE status = 'complained') AS complained,
           count(*) FILTER (WHERE hard) AS refused
    FROM moved
), suppressed AS (
    UPDATE contacts c SET suppressed = true, updated_at = $2,
        suppressed_reason = CASE WHEN c.suppressed AND c.suppressed_reason <> '' THEN c.suppressed_reason ELSE ` + hardBounceReason + ` END,
        suppressed_at = CASE WHEN c.suppressed AND c.suppressed_at IS NOT NULL THEN c.suppressed_at ELSE $2 END
    FROM moved m WHERE m.hard AND c.id = m.contact_id
)
INSERT INTO broadcast_reputation_deltas (broadcast_id, accepted, delivered, bounced, complained, refused)
SELECT $10, accepted, delivered, bounced, complained, refused FROM d
WHERE accepted + delivered + bounced + complained + refused > 0`

func (s *Store) RecordOutcomes(ctx context.Context, broadcast ulid.ULID, owner string, outcomes []store.Outcome, now time.Time) error {
	if len(outcomes) == 0 {
		return nil
	}
	_, err := s.recordAndClaim(ctx, broadcast, owner, outcomes, nil, now)
	return mapErr("record outcomes", err)
}

func (s *Store) RecordAndClaim(ctx context.Context, broadcast ulid.ULID, owner string, outcomes []store.Outcome, next []store.Claim, now time.Time) ([]ulid.ULID, error) {
	claimed, err := s.recordAndClaim(ctx, broadcast, owner, outcomes, next, now)
	return claimed, mapErr("record outcomes and claim", err)
}

// recordAndClaim writes outcomes (with their reputation delta) and inserts
// the next claims in one round trip and one commit (one WAL flush).
func (s *Store) recordAndClaim(ctx context.Context, broadcast ulid.ULID, owner string, outcomes []store.Outcome, next []store.Claim, now time.Time) ([]ulid.ULID, error) {
	w := newWindowWrite(broadcast, owner, outcomes, next, now)
	results := s.pool.SendBatch(ctx, w.batch)
	claimed, err := w.read(results)
	// The commit's error wins over a refused claim: ErrNotRunning tells the
	// caller its outcomes are recorded, and only the commit makes that
	// true. Hidden, a failed commit let the page move its cursor past
	// outcomes never written (found by review: the rows stayed claimed and
	// ended unknown).
	if cerr := results.Close(); cerr != nil && (err == nil || errors.Is(err, store.ErrNotRunning)) {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	return claimed, nil
}

// windowWrite is the one batch of recordAndClaim. It is sent outside any
// transaction block, so Postgres runs it in an implicit transaction (the
// extended protocol's statements up to one Sync): its statements commit
// together at the Sync, or, from the first error on, the server skips the
// rest and rolls the whole batch back, and the connection is idle again
// either way (never left in a transaction). forceKeyLookups' set_config(…,
// true) holds until that transaction ends, so it governs the outcome write
// planned after it, and no later use of the connection.
// TestWindowWriteIsOneTransaction pins both.
type windowWrite struct {
	batch            *pgx.Batch
	outcomes, claims bool
}

func newWindowWrite(broadcast ulid.ULID, owner string, outcomes []store.Outcome, next []store.Claim, now time.Time) windowWrite {
	w := windowWrite{batch: &pgx.Batch{}, outcomes: len(outcomes) > 0, claims: len(next) > 0}
	if w.outcomes || w.claims {
		w.batch.Queue(forceKeyLookups)
	}
	if w.outcomes {
		w.batch.Queue(recordOutcomesAndReputation, append(outcomeArgs(broadcast, owner, outcomes, now), uid(broadcast))...)
	}
	if w.claims {
		w.batch.Queue(claimGate, stateLockKeys(broadcast)...)
		w.batch.Queue(claimQuery, claimArgs(broadcast, owner, next, now)...)
	}
	return w
}

// read reads w's results from results and returns the contacts claimed.
// They are claimed only once results.Close has returned no error: the
// commit is at the end of the batch.
func (w windowWrite) read(results pgx.BatchResults) ([]ulid.ULID, error) {
	if w.outcomes || w.claims {
		if _, err := results.Exec(); err != nil { // forceKeyLookups
			return nil, err
		}
	}
	if w.outcomes {
		if _, err := results.Exec(); err != nil {
			return nil, err
		}
	}
	if !w.claims {
		return nil, nil
	}
	if _, err := results.Exec(); err != nil { // claimGate
		return nil, err
	}
	rows, err := results.Query()
	if err != nil {
		return nil, err
	}
	return claimedIDs(rows)
}

// Release deletes the claims in one round trip, forceKeyLookups and the
// delete in one implicit transaction as in windowWrite.
func (s *Store) Release(ctx context.Context, broadcast ulid.ULID, owner string, contacts []ulid.ULID) error {
	if len(contacts) == 0 {
		return nil
	}
	bids := make([][16]byte, len(contacts))
	for i := range bids {
		bids[i] = uid(broadcast)
	}
	batch := &pgx.Batch{}
	batch.Queue(forceKeyLookups)
	batch.Queue(releaseClaims, owner, bids, uids(contacts))
	return mapErr("release claims", s.pool.SendBatch(ctx, batch).Close())
}

// countSends groups a broadcast's ledger rows as store.Counts.Add takes
// them.
const countSends = `SELECT status, accepted, in_doubt, count(*) FROM broadcast_sends WHERE broadcast_id = $1 GROUP BY status, accepted, in_doubt`

func (s *Store) Counts(ctx context.Context, broadcast ulid.ULID) (store.Counts, error) {
	rows, err := s.pool.Query(ctx, countSends, uid(broadcast))
	if err != nil {
		return store.Counts{}, mapErr("count sends", err)
	}
	var c store.Counts
	var status string
	var accepted, inDoubt bool
	var n int64
	_, err = pgx.ForEachRow(rows, []any{&status, &accepted, &inDoubt, &n}, func() error {
		c.Add(store.SendStatus(status), accepted, inDoubt, n)
		return nil
	})
	return c, mapErr("count sends", err)
}

func (s *Store) GetSend(ctx context.Context, broadcast, contact ulid.ULID) (store.Send, error) {
	out := store.Send{BroadcastID: broadcast, ContactID: contact}
	var status string
	err := s.pool.QueryRow(ctx, `
SELECT email, status, attempt, message_id, error, claimed_at, updated_at, owner, in_doubt
FROM broadcast_sends WHERE broadcast_id = $1 AND contact_id = $2`, uid(broadcast), uid(contact)).
		Scan(&out.Email, &status, &out.Attempt, &out.MessageID, &out.Error, &out.ClaimedAt, &out.UpdatedAt, &out.Owner, &out.InDoubt)
	out.Status = store.SendStatus(status)
	return out, mapErr("ledger row", err)
}

// claimOwners reads the partial index of claimed rows (under
// openRowScans).
const claimOwners = `SELECT DISTINCT owner FROM broadcast_sends WHERE broadcast_id = $1 AND status = 'claimed'`

// openRowScans has the reads of the open-state partial indexes
// (claimOwners, pendingQuery) walk them by index scan, for the rest of the
// transaction. Every row that leaves 'claimed' leaves a dead entry in
// broadcast_sends_pending until vacuum. A bitmap scan, the planner's
// choice for a few expected rows once the ledger has some 80k rows, visits
// the heap page of every dead entry since the last vacuum on every call;
// an index scan marks an entry dead the first time it finds its row gone
// for every snapshot, and later scans skip it. So the reconciler's call
// (every 10 s per broadcast) costs the claims that moved on since the last
// call, not since the last vacuum, which on a large ledger (autovacuum
// waits for a fifth of its rows to be dead) is millions. In psql, after
// 80,000 claims moved on: the bitmap read 2,491 pages on every call, the
// index scan 2,555 once and 67 on the next. In make bench at 1M (8k msg/s,
// autovacuum frequent) both took 60–280 ms a call: 80k entries a call.
const openRowScans = `SELECT set_config('enable_seqscan', 'off', true), set_config('enable_bitmapscan', 'off', true)`

func (s *Store) ClaimOwners(ctx context.Context, broadcast ulid.ULID) ([]string, error) {
	results, err := s.after(ctx, openRowScans, claimOwners, uid(broadcast))
	if err != nil {
		return nil, mapErr("claim owners", err)
	}
	defer results.Close()
	rows, err := results.Query()
	if err != nil {
		return nil, mapErr("claim owners", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	return out, mapErr("claim owners", err)
}

func (s *Store) InDoubt(ctx context.Context, broadcast ulid.ULID, owner string, limit int) ([]store.Send, error) {
	return s.sends(ctx, "in-doubt claims", broadcast, `
WHERE broadcast_id = $1 AND status = 'claimed' AND owner = $2
ORDER BY contact_id LIMIT $3`, uid(broadcast), owner, limit)
}

func (s *Store) Failures(ctx context.Context, broadcast ulid.ULID, limit int) ([]store.Send, error) {
	return s.sends(ctx, "failures", broadcast, `
WHERE broadcast_id = $1 AND status = 'failed'
ORDER BY updated_at DESC, contact_id LIMIT $2`, uid(broadcast), limit)
}

// sends reads ledger rows of one broadcast selected by where.
func (s *Store) sends(ctx context.Context, op string, broadcast ulid.ULID, where string, args ...any) ([]store.Send, error) {
	rows, err := s.pool.Query(ctx, `
SELECT contact_id, email, status, attempt, message_id, error, claimed_at, updated_at, owner, in_doubt
FROM broadcast_sends`+where, args...)
	if err != nil {
		return nil, mapErr(op, err)
	}
	var out []store.Send
	var id [16]byte
	var status string
	r := store.Send{BroadcastID: broadcast}
	_, err = pgx.ForEachRow(rows, []any{&id, &r.Email, &status, &r.Attempt, &r.MessageID, &r.Error, &r.ClaimedAt, &r.UpdatedAt, &r.Owner, &r.InDoubt}, func() error {
		r.ContactID, r.Status = ulid.ULID(id), store.SendStatus(status)
		out = append(out, r)
		return nil
	})
	return out, mapErr(op, err)
}
