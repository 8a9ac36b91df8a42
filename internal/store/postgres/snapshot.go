package postgres

import (
	"context"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/oklog/ulid/v2"

	"github.com/rangecast/rangecast/internal/ranges"
)

// snapshotQuery reads count and id bounds of the eligible audience; the
// bounds come from the primary key (ORDER BY id LIMIT 1), as Postgres has no
// min(uuid). The gate's column tests match the partial index
// contacts_eligible (migration 017), which also holds the one other column
// the gate reads (erasure_hash): the count can be an index-only scan.
func snapshotQuery(segment int64) string {
	g := gate(segmentParam(segment, "$1"))
	return `SELECT (SELECT count(*) FROM contacts c WHERE ` + g + `),
       (SELECT c.id FROM contacts c WHERE ` + g + ` ORDER BY c.id LIMIT 1),
       (SELECT c.id FROM contacts c WHERE ` + g + ` ORDER BY c.id DESC LIMIT 1)`
}

// visibility is, without a scan, the share of contacts' pages the
// visibility map marks all-visible (as the last VACUUM or ANALYZE,
// autovacuum's included, left pg_class), and the table's size in pages now
// (from its file, as samplePercent reads it).
const visibility = `SELECT CASE WHEN relpages > 0 THEN least(1, relallvisible::float8 / relpages) ELSE 0 END,
       pg_relation_size(oid) / current_setting('block_size')::int
FROM pg_class WHERE oid = 'contacts'::regclass`

// minVisibleShare is the share from which the audience is read from the
// index alone. Below it (a bulk import autovacuum has not reached yet) an
// index-only scan would visit each row's page as well, so the planner's
// own choice (a scan of the table) is the cheaper read.
const minVisibleShare = 0.9

// indexOnly turns the planner, for the rest of the transaction, to the
// index: it costs each index page as a random read (random_page_cost 4), so
// it prefers a sequential read of the whole table, or (for a segment's
// merge join, in id order) the primary key and every row behind it, to an
// index-only scan of contacts_eligible, a fraction of the table's size,
// whose leaf pages a full scan reads nearly in order. The accept
// transaction sets it only when the visibility map covers the table
// (minVisibleShare).
const indexOnly = `SELECT set_config('enable_seqscan', 'off', true), set_config('enable_bitmapscan', 'off', true),
       set_config('random_page_cost', current_setting('seq_page_cost'), true)`

// planDefault undoes indexOnly for the rest of the transaction (the
// sample and the update that follow).
const planDefault = `SELECT set_config('enable_seqscan', 'on', true), set_config('enable_bitmapscan', 'on', true),
       set_config('random_page_cost', reset_val, true) FROM pg_settings WHERE name = 'random_page_cost'`

// exactSort holds exactQuery's sort and window of ids (a table of at most
// samplePages pages) in memory, for the rest of the transaction.
const exactSort = `SELECT set_config('work_mem', '16MB', true)`

// snapshotAudience reads the eligible audience's count and id bounds, and
// cuts its ranges, reading each eligible contact at most once:
//
//   - a table of at most samplePages pages (which the sample would read
//     whole): one pass gives the count and the audience's quantiles to cut
//     at (exactQuery);
//   - a larger table: the count, then a sample of samplePages pages
//     (sampleStarts), a small share of the rows.
//
// When the visibility map covers contacts, the pass is an index-only scan
// of contacts_eligible and reads no contact row. Right after a bulk
// import, before autovacuum has been by, it reads every row of the table
// as it did before that index.
func snapshotAudience(ctx context.Context, tx pgx.Tx, segment int64) (count int64, minID, maxID pgtype.UUID, starts [][16]byte, err error) {
	var share float64
	var pages int64
	if err = tx.QueryRow(ctx, visibility).Scan(&share, &pages); err != nil {
		return 0, minID, maxID, nil, fmt.Errorf("contacts' visibility: %w", err)
	}
	fromIndex := share >= minVisibleShare
	exact := pages <= samplePages
	if fromIndex {
		if _, err = tx.Exec(ctx, indexOnly); err != nil {
			return 0, minID, maxID, nil, err
		}
	}
	if exact {
		if _, err = tx.Exec(ctx, exactSort); err != nil {
			return 0, minID, maxID, nil, err
		}
		count, minID, maxID, starts, err = exactSnapshot(ctx, tx, segment)
	} else {
		var args []any
		if segment != 0 {
			args = append(args, segment)
		}
		err = tx.QueryRow(ctx, snapshotQuery(segment), args...).Scan(&count, &minID, &maxID)
	}
	if err != nil {
		return 0, minID, maxID, nil, fmt.Errorf("snapshot audience: %w", err)
	}
	if fromIndex {
		if _, err = tx.Exec(ctx, planDefault); err != nil {
			return 0, minID, maxID, nil, err
		}
	}
	if count > 0 && !exact {
		if starts, err = sampleStarts(ctx, tx, segment, minID.Bytes, maxID.Bytes); err != nil {
			return 0, minID, maxID, nil, fmt.Errorf("sample audience: %w", err)
		}
	}
	return count, minID, maxID, starts, nil
}

// exactQuery reads, in one pass over the eligible ids in id order, the
// count (cnt), the first and last id, and the ids ranges.Cuts picks from
// every id after the first: with L = cnt-1 of them, the ids at ranks
// floor(i·L/32), i = 1 … 31, of that list (none when L < 32, as Cuts cuts
// nothing from fewer). A row at rank j = n-2 is one of those iff
// i = ceil(32j/L) gives it back. Exactly what the sample made of the whole
// audience gave before, for any size: the ranges are cut at the audience's
// real quantiles. Postgres sorts uuids bytewise, which is ULID order.
func exactQuery(segment int64) string {
	k := strconv.Itoa(ranges.Count)
	// NULLIF: SQL does not promise to test cnt > 32 first.
	i := `((` + k + ` * (e.n - 2) + e.cnt - 2) / nullif(e.cnt - 1, 0))`
	return `SELECT e.n, e.id, e.cnt, e.pick FROM (
    SELECT e.*, (e.cnt > ` + k + ` AND e.n >= 2 AND ` + i + ` BETWEEN 1 AND ` + k + ` - 1
                 AND ` + i + ` * (e.cnt - 1) / ` + k + ` = e.n - 2) AS pick
    FROM (SELECT c.id, row_number() OVER (ORDER BY c.id) AS n, count(*) OVER () AS cnt
          FROM contacts c WHERE ` + gate(segmentParam(segment, "$1")) + `) e
) e
WHERE e.n = 1 OR e.n = e.cnt OR e.pick
ORDER BY e.n`
}

// exactSnapshot is snapshotQuery and the cut (exactQuery) in one scan.
func exactSnapshot(ctx context.Context, tx pgx.Tx, segment int64) (count int64, minID, maxID pgtype.UUID, starts [][16]byte, err error) {
	var args []any
	if segment != 0 {
		args = append(args, segment)
	}
	rows, err := tx.Query(ctx, exactQuery(segment), args...)
	if err != nil {
		return 0, minID, maxID, nil, err
	}
	var n int64
	var id [16]byte
	var pick bool
	_, err = pgx.ForEachRow(rows, []any{&n, &id, &count, &pick}, func() error {
		if n == 1 {
			minID = pgtype.UUID{Bytes: id, Valid: true}
		}
		if n == count {
			maxID = pgtype.UUID{Bytes: id, Valid: true}
		}
		if next, ok := ranges.Next(ulid.ULID(id)); pick && ok {
			starts = append(starts, uid(next))
		}
		return nil
	})
	return count, minID, maxID, starts, err
}

// samplePages is how many table pages the accept-time sample reads at
// most: each of the 32 ranges is cut from ~16 pages' worth of ids, and the
// sample is a small share of a larger table (about a fifth of the rows at
// 100k contacts, 2 % at 1M). A table this small or smaller is read whole,
// once, by exactQuery instead.
const samplePages = 512

// samplePercent is the TABLESAMPLE SYSTEM percentage that reads about
// samplePages pages of $1: the table's size comes from its file, not from
// planner statistics or a count.
const samplePercent = `SELECT least(100, 100.0 * $2 / greatest(1, pg_relation_size($1::regclass) / current_setting('block_size')::int))`

// sampleQuery reads the eligible ids in (min, max] on a sample of pages: of
// contacts, or of the segment's members (each sampled row then checked
// against the rest of the gate by key). $1 percent, $2 min, $3 max, $4
// segment.
func sampleQuery(segment int64) string {
	if segment == 0 {
		return `SELECT c.id FROM contacts c TABLESAMPLE SYSTEM ($1)
WHERE c.id > $2 AND c.id <= $3 AND ` + gate("")
	}
	return `SELECT c.id FROM segment_members m TABLESAMPLE SYSTEM ($1) JOIN contacts c ON c.id = m.contact_id
WHERE m.segment_id = $4 AND c.id > $2 AND c.id <= $3 AND ` + gate("")
}

// sampleStarts cuts the audience's ranges from a sample of its ids
// (ranges.Cuts); nil when the sample is too small to cut from.
func sampleStarts(ctx context.Context, tx pgx.Tx, segment int64, minID, maxID [16]byte) ([][16]byte, error) {
	table := "contacts"
	if segment != 0 {
		table = "segment_members"
	}
	var percent float64
	if err := tx.QueryRow(ctx, samplePercent, table, samplePages).Scan(&percent); err != nil {
		return nil, err
	}
	args := []any{percent, minID, maxID}
	if segment != 0 {
		args = append(args, segment)
	}
	return cutsOf(tx.Query(ctx, sampleQuery(segment), args...))
}

// cutsOf reads a query's ids and cuts ranges from them (ranges.Cuts).
func cutsOf(rows pgx.Rows, err error) ([][16]byte, error) {
	if err != nil {
		return nil, err
	}
	var sample []ulid.ULID
	var id [16]byte
	if _, err := pgx.ForEachRow(rows, []any{&id}, func() error {
		sample = append(sample, ulid.ULID(id))
		return nil
	}); err != nil {
		return nil, err
	}
	var out [][16]byte
	for _, c := range ranges.Cuts(sample) {
		out = append(out, uid(c))
	}
	return out, nil
}
