package bench

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/rangecast/rangecast/internal/child"
	"github.com/rangecast/rangecast/internal/store/postgres"
)

// Application names mark the sessions of rangecast's processes, so their
// Postgres backends (and only theirs) are found in pg_stat_activity.
const (
	appCoordinator = "rangecast_bench_coordinator"
	appWorker      = "rangecast_bench_worker"
)

// database creates the bench's own database. Everything the harness asks
// Postgres about the run (pg_stat_activity, pg_stat_database) it asks from
// the server's original database, so its own queries do not count.
func (h *harness) database(ctx context.Context) error {
	u, err := url.Parse(child.DatabaseURL(h.cfg.DatabaseURL))
	if err != nil {
		return fmt.Errorf("database url: %w", err)
	}
	q := u.Query()
	q.Del("search_path")
	q.Set("application_name", "rangecast_bench_harness")
	u.RawQuery = q.Encode()
	h.adminURL = u.String()
	pool, err := pgxpool.New(ctx, h.adminURL)
	if err == nil {
		err = pool.Ping(ctx)
	}
	if err != nil {
		return fmt.Errorf("postgres at %s: %w", u.Redacted(), err)
	}
	h.admin = pool
	h.dbName = "rangecast_bench_" + h.runID
	if _, err := pool.Exec(ctx, "CREATE DATABASE "+h.dbName); err != nil {
		return fmt.Errorf("create database: %w", err)
	}
	u.Path = "/" + h.dbName
	h.benchURL = u.String()
	return pool.QueryRow(ctx, "SELECT version()").Scan(&h.pgVersion)
}

// dropDatabase removes the bench database, ending any session left on it.
func (h *harness) dropDatabase() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if h.admin == nil || h.dbName == "" {
		return
	}
	if _, err := h.admin.Exec(ctx, "DROP DATABASE IF EXISTS "+h.dbName+" WITH (FORCE)"); err != nil {
		h.logf("could not drop database %s: %v", h.dbName, err)
	}
	h.admin.Close()
}

// processURL is what the coordinator or a worker (app) connects with.
func (h *harness) processURL(schema, app string) string {
	u, _ := url.Parse(h.benchURL)
	q := u.Query()
	q.Set("search_path", schema)
	q.Set("application_name", app)
	u.RawQuery = q.Encode()
	return u.String()
}

// connectSchema is the harness's own session on the bench database.
func (h *harness) connectSchema(ctx context.Context, schema string) (*pgx.Conn, error) {
	u, _ := url.Parse(h.benchURL)
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return pgx.Connect(ctx, u.String())
}

// contactsSQL loads n contacts in one statement. Ids are ULIDs written as
// uuid: 48 bits of milliseconds (one per contact, so id order is load
// order, as with real ULIDs minted over time) and 80 bits from md5 of the
// row number standing in for ULID entropy; email_key is the address's
// address.Key, which for these lowercase ASCII addresses is the address
// (migration 011). Every 20th contact is
// unsubscribed, so the suppression gate has something to filter.
const contactsSQL = `
INSERT INTO contacts (id, email, email_key, name, attributes, subscribed, created_at, updated_at)
SELECT (lpad(to_hex($1::bigint + i), 12, '0') || substr(md5(i::text), 1, 20))::uuid,
       'c' || i || '@bench.example', 'c' || i || '@bench.example', 'Contact ' || i, jsonb_build_object('city', 'Oslo'),
       i % 20 <> 0, now(), now()
FROM generate_series(1, $2::bigint) AS i`

// audience makes (once per size) a schema holding n contacts, migrated by
// the store itself, and returns its name and the eligible count.
func (h *harness) audience(ctx context.Context, n int) (schema string, eligible int64, err error) {
	if a, ok := h.audiences[n]; ok {
		return a.schema, a.eligible, nil
	}
	schema = fmt.Sprintf("aud_%d", n)
	began := time.Now()
	conn, err := h.connectSchema(ctx, "public")
	if err != nil {
		return "", 0, err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		return "", 0, err
	}
	st, err := postgres.Open(ctx, h.processURL(schema, "rangecast_bench_harness")) // applies the migrations
	if err != nil {
		return "", 0, err
	}
	st.Close()
	if _, err := conn.Exec(ctx, "SET search_path = "+schema); err != nil {
		return "", 0, err
	}
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
	if _, err := conn.Exec(ctx, contactsSQL, base, n); err != nil {
		return "", 0, fmt.Errorf("load %d contacts: %w", n, err)
	}
	if _, err := conn.Exec(ctx, "VACUUM ANALYZE contacts"); err != nil {
		return "", 0, err
	}
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM contacts WHERE subscribed").Scan(&eligible); err != nil {
		return "", 0, err
	}
	h.audiences[n] = audience{schema: schema, eligible: eligible}
	h.logf("loaded %d contacts (%d eligible) into schema %s in %s", n, eligible, schema, time.Since(began).Round(10*time.Millisecond))
	return schema, eligible, nil
}

type audience struct {
	schema   string
	eligible int64
}

// historyBroadcast is the id of an earlier, completed broadcast to the whole
// audience whose ledger rows every run starts with.
const historyBroadcast = "00000000-0000-0000-0000-00000000b15e"

// resetLedger puts the ledger back to one state before every run. With
// history, it holds an earlier broadcast's rows (one per eligible contact,
// sent) with planner statistics: the steady state of a system that has sent
// before. Without, it is empty: the first broadcast of a new install.
// It returns how long ANALYZE of the ledger took (shown beside
// StartBroadcast, which ran one until it proved too dear).
func (h *harness) resetLedger(ctx context.Context, schema string, history bool) (time.Duration, error) {
	conn, err := h.connectSchema(ctx, schema)
	if err != nil {
		return 0, err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "TRUNCATE broadcast_sends"); err != nil {
		return 0, err
	}
	if history {
		if err := seedHistory(ctx, conn); err != nil {
			return 0, err
		}
	}
	began := time.Now()
	if _, err = conn.Exec(ctx, "ANALYZE broadcast_sends"); err != nil {
		return 0, err
	}
	took := time.Since(began)
	// The history was written in one statement a moment ago, leaving the
	// shared buffers full of dirty pages, which a system that sent before
	// wrote out long since (checkpoint_timeout is 5 min). Left there, they
	// fall on whatever runs next: an index scan writes one out for each
	// page it reads, while the bare query, a table scan through a buffer
	// ring of its own, does not see them.
	if _, err = conn.Exec(ctx, "CHECKPOINT"); err != nil {
		h.logf("CHECKPOINT after the ledger reset: %v (StartBroadcast may pay for the reset's dirty pages)", err)
	}
	return took, nil
}

func seedHistory(ctx context.Context, conn *pgx.Conn) error {
	if _, err := conn.Exec(ctx, `
INSERT INTO broadcasts (id, name, from_address, subject, html, state, created_at, updated_at)
VALUES ($1, 'history', 'news@bench.example', 's', 'h', 'completed', now(), now())
ON CONFLICT DO NOTHING`, historyBroadcast); err != nil {
		return err
	}
	if _, err := conn.Exec(ctx, `
INSERT INTO broadcast_sends (broadcast_id, contact_id, email, status, message_id, claimed_at, updated_at, accepted)
SELECT $1, c.id, c.email, 'sent', c.id::text, now(), now(), true FROM contacts c WHERE c.subscribed`, historyBroadcast); err != nil {
		return err
	}
	return nil
}

// snapshotSQL is the accept-time audience query (count, first and last
// eligible id by the primary key) as the Postgres store runs it for a
// broadcast without a segment: the bare cost StartBroadcast is compared
// with.
const snapshotSQL = `SELECT (SELECT count(*) FROM contacts c WHERE c.subscribed AND NOT c.do_not_contact AND NOT c.suppressed AND c.email <> ''),
       (SELECT c.id FROM contacts c WHERE c.subscribed AND NOT c.do_not_contact AND NOT c.suppressed AND c.email <> '' ORDER BY c.id LIMIT 1),
       (SELECT c.id FROM contacts c WHERE c.subscribed AND NOT c.do_not_contact AND NOT c.suppressed AND c.email <> '' ORDER BY c.id DESC LIMIT 1)`

// bareSnapshot times snapshotSQL: the median of 3, after one warm-up.
func (h *harness) bareSnapshot(ctx context.Context, schema string) (time.Duration, error) {
	conn, err := h.connectSchema(ctx, schema)
	if err != nil {
		return 0, err
	}
	defer conn.Close(ctx)
	var times []time.Duration
	for i := range 4 {
		var n int64
		var lo, hi [16]byte
		began := time.Now()
		if err := conn.QueryRow(ctx, snapshotSQL).Scan(&n, &lo, &hi); err != nil {
			return 0, err
		}
		if i > 0 {
			times = append(times, time.Since(began))
		}
	}
	return median(times), nil
}

// dbStats are the bench database's counters in pg_stat_database.
type dbStats struct {
	xacts int64 // committed + rolled back transactions
	rows  int64 // rows inserted, updated and deleted
}

func (h *harness) dbStats(ctx context.Context) (dbStats, error) {
	var s dbStats
	err := h.admin.QueryRow(ctx, `SELECT xact_commit + xact_rollback, tup_inserted + tup_updated + tup_deleted
FROM pg_stat_database WHERE datname = $1`, h.dbName).Scan(&s.xacts, &s.rows)
	return s, err
}

// backendPIDs lists the Postgres backends serving rangecast's processes.
func (h *harness) backendPIDs(ctx context.Context) ([]int, error) {
	rows, err := h.admin.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE datname = $1 AND application_name IN ($2, $3)`, h.dbName, appCoordinator, appWorker)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[int])
}

// waitBackendsGone waits until no session is left on the bench database
// (rangecast's processes and the harness's own): a backend flushes its
// statistics when it exits, so pg_stat_database is complete only then.
func (h *harness) waitBackendsGone(ctx context.Context) {
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		var n int
		err := h.admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = $1`, h.dbName).Scan(&n)
		if err == nil && n == 0 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Exiting backends report their statistics as they go; give the last
	// one a moment after it left pg_stat_activity.
	time.Sleep(200 * time.Millisecond)
}

// activity is one sample of what rangecast's Postgres sessions were doing.
type activity struct {
	app, state, wait, query string
}

// sessionActivity samples pg_stat_activity for rangecast's sessions.
func (h *harness) sessionActivity(ctx context.Context) ([]activity, error) {
	rows, err := h.admin.Query(ctx, `SELECT application_name, state, coalesce(wait_event_type || ':' || wait_event, ''), left(query, 60)
FROM pg_stat_activity WHERE datname = $1 AND application_name IN ($2, $3)`, h.dbName, appCoordinator, appWorker)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (activity, error) {
		var a activity
		err := r.Scan(&a.app, &a.state, &a.wait, &a.query)
		return a, err
	})
}

// statementKind names a rangecast statement by its opening words.
func statementKind(q string) string {
	q = strings.Join(strings.Fields(q), " ")
	for _, k := range []struct{ prefix, name string }{
		{"INSERT INTO broadcast_sends", "claim (INSERT … ON CONFLICT)"},
		{"UPDATE broadcast_sends SET status", "outcome (UPDATE by key)"},
		{"SELECT c.id, c.email", "eligible page (SELECT)"},
		{"SELECT status, count(*)", "ledger counts (SELECT count by status)"},
		{"SELECT count(*), min(retry_at)", "next deferral due (SELECT count, min)"},
		{"DELETE FROM broadcast_sends", "release (DELETE)"},
		{"INSERT INTO broadcast_reputation_deltas", "reputation delta (INSERT)"},
		{"WITH gone AS ( DELETE FROM broadcast_reputation_deltas", "reputation fold (alarm read)"},
		{"begin", "BEGIN"},
		{"commit", "COMMIT"},
	} {
		if strings.HasPrefix(strings.ToLower(q), strings.ToLower(k.prefix)) {
			return k.name
		}
	}
	if len(q) > 40 {
		q = q[:40] + "…"
	}
	return q
}

// tableReads are a table's read counters in pg_stat_user_tables.
type tableReads struct {
	seqScans, seqRows, idxScans, idxRows int64
}

// readCounters returns the read counters of every table of schema.
func (h *harness) readCounters(ctx context.Context, schema string) (map[string]tableReads, error) {
	conn, err := h.connectSchema(ctx, schema)
	if err != nil {
		return nil, err
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT relname, seq_scan, seq_tup_read, coalesce(idx_scan, 0), coalesce(idx_tup_fetch, 0)
FROM pg_stat_user_tables WHERE schemaname = $1`, schema)
	if err != nil {
		return nil, err
	}
	out := map[string]tableReads{}
	var name string
	var t tableReads
	_, err = pgx.ForEachRow(rows, []any{&name, &t.seqScans, &t.seqRows, &t.idxScans, &t.idxRows}, func() error {
		out[name] = t
		return nil
	})
	return out, err
}
