package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/oklog/ulid/v2"

	"github.com/rangecast/rangecast/internal/ranges"
)

// snapshotQuery reads count and id bounds of the eligible audience; the
// bounds come from the primary key (ORDER BY id LIMIT 1), as Postgres has no
// min(uuid). The gate's column tests match the partial index
// contacts_eligible (migration 017), which also holds the one other column
// the gate reads (erasure_hash): the count can be an index-only scan.
//
// Without erasures the gate's erasure test is left out: against an empty
// erased_addresses it passes every contact, but it was still a lookup per
// contact, a quarter of the count's time at 1M contacts. The accept
// transaction knows whether there are any from its first query
// (visibility). An erasure that commits in between deletes its contact,
// which the count then no longer sees either; only an import of that same
// address racing it could add one to the count (a figure for display), and
// no page mails that contact: pages test the whole gate.
func snapshotQuery(segment int64, erasures bool) string {
	g := gate(segmentParam(segment, "$1"))
	if !erasures {
		g = gateColumns(segmentParam(segment, "$1"))
	}
	return `SELECT (SELECT count(*) FROM contacts c WHERE ` + g + `),
       (SELECT c.id FROM contacts c WHERE ` + g + ` ORDER BY c.id LIMIT 1),
       (SELECT c.id FROM contacts c WHERE ` + g + ` ORDER BY c.id DESC LIMIT 1)`
}

// visibility is, without a scan, the share of contacts' pages the
// visibility map marks all-visible (as the last VACUUM or ANALYZE,
// autovacuum's included, left pg_class), and the table's size in pages now
// (from its file, as samplePercent reads it).
//
// Its last column says whether any address was ever erased (snapshotQuery).
const visibility = `SELECT CASE WHEN relpages > 0 THEN least(1, relallvisible::float8 / relpages) ELSE 0 END,
       pg_relation_size(oid) / current_setting('block_size')::int,
       EXISTS (SELECT 1 FROM erased_addresses)
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
//
// Where it costs: at 1M contacts on the 2-core bench box of 2026-12-03,
// the count by the index and by the table took 152 and 141 ms with a warm
// cache, but in make bench the index's took 298 ms in each parallel worker
// for 4,678 index pages (clean buffers, none written, no heap fetch, and
// every page of the index in the kernel's page cache, by mincore) against
// 74 ms in each for the table's 19,230 pages when the harness ran the bare
// query a few seconds before. Why is not known: not I/O, not dirty
// buffers; the processes started for the run, or the sample beside, taking
// CPU from the count's three processes on two cores is the suspicion.
// With shared buffers full of dirty pages the index scan also writes one
// out for each page it reads (250 against 130 ms after a 1.5M-row insert).
// The planner's table scan was tried for the whole audience: StartBroadcast
// went from 3.4x to 1.3-1.4x the bare query, but every contact's row was
// then read once per broadcast (rows read per message 2.1 -> 3.2 at 1M,
// 3.6 at 100k, past the 3), so it was not kept.
//
// What was wrong is the parallel scan: the planner splits the count of
// contacts_eligible over two workers, and a parallel index scan hands its
// leaf pages out one at a time through shared state, which for an index of
// a few thousand pages costs more than it shares out. At 1M contacts on the
// same 2-core box (2026-12-04, a session each, alternating): the count with
// the bounds took 197-384 ms with the two workers, 161-167 ms with one,
// 111-156 ms with none, and the table scan 148-183 ms. So the count runs in
// the accept's own backend, which also leaves the other core to the sample
// beside it. A Postgres with many cores and tens of millions of contacts
// might count faster in parallel; that was not measured.
const indexOnly = `SELECT set_config('enable_seqscan', 'off', true), set_config('enable_bitmapscan', 'off', true),
       set_config('random_page_cost', current_setting('seq_page_cost'), true),
       set_config('max_parallel_workers_per_gather', '0', true)`

// planDefault undoes indexOnly for the rest of the transaction (the
// sample and the update that follow).
const planDefault = `SELECT set_config('enable_seqscan', 'on', true), set_config('enable_bitmapscan', 'on', true),
       set_config('random_page_cost', (SELECT reset_val FROM pg_settings WHERE name = 'random_page_cost'), true),
       set_config('max_parallel_workers_per_gather', (SELECT reset_val FROM pg_settings WHERE name = 'max_parallel_workers_per_gather'), true)`

// snapshotAudience reads the eligible audience's count and id bounds, and
// cuts its ranges, reading each eligible contact at most once:
//
//   - a table of at most samplePages pages (which the sample would read
//     whole): one pass over the eligible ids gives the count, the bounds
//     and the cuts at the audience's real quantiles (exactSnapshot);
//   - a larger table: the count, then a sample of samplePages pages
//     (sampleIDs), a small share of the rows. One after the other, the
//     sample was a tenth of a StartBroadcast at 1M contacts, so it runs
//     beside the count on another of the pool's connections, if one comes
//     while the count runs (besideSample). The accept never waits for a
//     second connection past that: one that waited while holding its first
//     (and the broadcast's row lock) could wait for good once accepts held
//     every connection. Without one, or if that sample fails, the sample
//     runs after the count in the accept's transaction, as it always did.
//     The cuts only balance the ranges; the bounds, from the count's
//     snapshot, decide what the ranges cover, so a cut outside them (a
//     contact imported between the two snapshots) is dropped.
//
// When the visibility map covers contacts, the pass is an index-only scan
// of contacts_eligible and reads no contact row. Right after a bulk
// import, before autovacuum has been by, it reads every row of the table
// as it did before that index.
func snapshotAudience(ctx context.Context, pool *pgxpool.Pool, tx pgx.Tx, segment int64) (count int64, minID, maxID pgtype.UUID, starts [][16]byte, err error) {
	var share float64
	var pages int64
	var erasures bool
	if err = tx.QueryRow(ctx, visibility).Scan(&share, &pages, &erasures); err != nil {
		return 0, minID, maxID, nil, fmt.Errorf("contacts' visibility: %w", err)
	}
	fromIndex := share >= minVisibleShare
	exact := pages <= samplePages
	var beside *besideSample
	if !exact {
		beside = startSample(ctx, pool, segment)
		defer beside.stop()
	}
	if fromIndex {
		if _, err = tx.Exec(ctx, indexOnly); err != nil {
			return 0, minID, maxID, nil, err
		}
	}
	if exact {
		count, minID, maxID, starts, err = exactSnapshot(ctx, tx, segment)
	} else {
		var args []any
		if segment != 0 {
			args = append(args, segment)
		}
		err = tx.QueryRow(ctx, snapshotQuery(segment, erasures), args...).Scan(&count, &minID, &maxID)
	}
	if err != nil {
		return 0, minID, maxID, nil, fmt.Errorf("snapshot audience: %w", err)
	}
	if fromIndex {
		if _, err = tx.Exec(ctx, planDefault); err != nil {
			return 0, minID, maxID, nil, err
		}
	}
	if exact || count == 0 {
		return count, minID, maxID, starts, nil
	}
	ids, err := beside.result()
	if err != nil {
		ids, err = sampleIDs(ctx, tx, segment)
	}
	if err != nil {
		return 0, minID, maxID, nil, fmt.Errorf("sample audience: %w", err)
	}
	return count, minID, maxID, cutsWithin(ids, minID.Bytes, maxID.Bytes), nil
}

// besideSample is a sample read on a connection of its own while the
// accept transaction counts.
type besideSample struct {
	cancel   context.CancelFunc
	acquired chan struct{} // closed once it holds its connection
	done     chan sampled  // its one result
	finished bool          // done has been received from
	got      sampled
}

// sampled is a sample's ids, or why there are none.
type sampled struct {
	ids []ulid.ULID
	err error
}

func startSample(ctx context.Context, pool *pgxpool.Pool, segment int64) *besideSample {
	ctx, cancel := context.WithCancel(ctx)
	b := &besideSample{cancel: cancel, acquired: make(chan struct{}), done: make(chan sampled, 1)}
	go func() {
		conn, err := pool.Acquire(ctx)
		if err != nil {
			b.done <- sampled{err: err}
			return
		}
		close(b.acquired)
		defer conn.Release()
		ids, err := sampleIDs(ctx, conn, segment)
		b.done <- sampled{ids, err}
	}()
	return b
}

// result is the sample if it got a connection while the count ran: it
// then waits for the sample, which holds everything it needs. Otherwise
// it gives up the wait for one, and returns an error.
func (b *besideSample) result() ([]ulid.ULID, error) {
	select {
	case <-b.acquired:
	default:
		b.cancel()
	}
	b.got, b.finished = <-b.done, true
	return b.got.ids, b.got.err
}

// stop cancels the sample and waits for it to end, so no query of it is
// left running when the accept returns.
func (b *besideSample) stop() {
	b.cancel()
	if !b.finished {
		<-b.done
	}
}

// exactQuery reads every eligible id in id order: for a table of at most
// samplePages pages, as the whole-table sample did.
func exactQuery(segment int64) string {
	return `SELECT c.id FROM contacts c WHERE ` + gate(segmentParam(segment, "$1")) + ` ORDER BY c.id`
}

// exactSnapshot is snapshotQuery and the cut in one scan: the count and
// bounds of the ids exactQuery reads, and ranges.AudienceCuts of them:
// ranges of whole pages, which a sample could only estimate.
func exactSnapshot(ctx context.Context, tx pgx.Tx, segment int64) (count int64, minID, maxID pgtype.UUID, starts [][16]byte, err error) {
	var args []any
	if segment != 0 {
		args = append(args, segment)
	}
	ids, err := idsOf(tx.Query(ctx, exactQuery(segment), args...))
	if err != nil || len(ids) == 0 {
		return 0, minID, maxID, nil, err
	}
	minID = pgtype.UUID{Bytes: ids[0], Valid: true}
	maxID = pgtype.UUID{Bytes: ids[len(ids)-1], Valid: true}
	return int64(len(ids)), minID, maxID, rangeStarts(ranges.AudienceCuts(ids)), nil
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

// sampleQuery reads the eligible ids on a sample of pages: of contacts, or
// of the segment's members (each sampled row then checked against the rest
// of the gate by key). $1 percent, $2 segment.
func sampleQuery(segment int64) string {
	if segment == 0 {
		return `SELECT c.id FROM contacts c TABLESAMPLE SYSTEM ($1) WHERE ` + gate("")
	}
	return `SELECT c.id FROM segment_members m TABLESAMPLE SYSTEM ($1) JOIN contacts c ON c.id = m.contact_id
WHERE m.segment_id = $2 AND ` + gate("")
}

// querier is what sampleIDs reads through: the accept's transaction, or a
// connection of its own.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// sampleIDs reads the eligible ids on a sample of about samplePages pages.
func sampleIDs(ctx context.Context, q querier, segment int64) ([]ulid.ULID, error) {
	table := "contacts"
	if segment != 0 {
		table = "segment_members"
	}
	var percent float64
	if err := q.QueryRow(ctx, samplePercent, table, samplePages).Scan(&percent); err != nil {
		return nil, err
	}
	args := []any{percent}
	if segment != 0 {
		args = append(args, segment)
	}
	return idsOf(q.Query(ctx, sampleQuery(segment), args...))
}

// cutsWithin cuts the audience's ranges from a sample of its ids
// (ranges.Cuts) taken from the ids in (min, max]; nil when the sample is
// too small to cut from.
func cutsWithin(sample []ulid.ULID, min, max [16]byte) [][16]byte {
	in := sample[:0]
	for _, id := range sample {
		if id.Compare(ulid.ULID(min)) > 0 && id.Compare(ulid.ULID(max)) <= 0 {
			in = append(in, id)
		}
	}
	return rangeStarts(ranges.Cuts(in))
}

// idsOf reads a query's ids.
func idsOf(rows pgx.Rows, err error) ([]ulid.ULID, error) {
	if err != nil {
		return nil, err
	}
	var ids []ulid.ULID
	var id [16]byte
	_, err = pgx.ForEachRow(rows, []any{&id}, func() error {
		ids = append(ids, ulid.ULID(id))
		return nil
	})
	return ids, err
}

// rangeStarts are range starts as the broadcasts table stores them: none
// is NULL.
func rangeStarts(starts []ulid.ULID) [][16]byte {
	if len(starts) == 0 {
		return nil
	}
	return uids(starts)
}
