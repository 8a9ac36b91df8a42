package postgres

import (
	"context"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/rangecast/rangecast/internal/store"
)

// pendingQuery reads the three open states through their partial indexes
// (broadcast_sends_pending, broadcast_sends_deferred, and
// broadcast_sends_failed of migration 017), so it reads only rows in them,
// where Counts reads every row of the broadcast. One statement: one
// snapshot, so a row moving from deferred to claimed (a sweep) is counted
// in one state or the other. "NOT accepted" is Counts' rule (an accepted
// row counts as sent whatever its status).
const pendingQuery = `
SELECT c.n, d.n, d.at, f.n, coalesce(nx.error, ''), coalesce(nx.attempt, 0) FROM
  (SELECT count(*) AS n FROM broadcast_sends WHERE broadcast_id = $1 AND status = 'claimed' AND NOT accepted) c,
  (SELECT count(*) AS n, min(retry_at) AS at FROM broadcast_sends WHERE broadcast_id = $1 AND status = 'deferred' AND NOT accepted) d,
  (SELECT count(*) AS n FROM broadcast_sends WHERE broadcast_id = $1 AND status = 'failed' AND NOT accepted) f
  LEFT JOIN LATERAL (SELECT error, attempt FROM broadcast_sends WHERE broadcast_id = $1 AND status = 'deferred' AND NOT accepted
    ORDER BY retry_at LIMIT 1) nx ON true`

func (s *Store) Pending(ctx context.Context, broadcast ulid.ULID) (store.Pending, error) {
	var p store.Pending
	var at *time.Time
	// Under openRowScans: called on every tick while a broadcast's last
	// claims settle, just after most rows left 'claimed'.
	results, err := s.after(ctx, openRowScans, pendingQuery, uid(broadcast))
	if err != nil {
		return store.Pending{}, mapErr("pending sends", err)
	}
	defer results.Close()
	if err := results.QueryRow().Scan(&p.Claimed, &p.Deferred, &at, &p.Failed, &p.NextError, &p.NextAttempt); err != nil {
		return store.Pending{}, mapErr("pending sends", err)
	}
	if at != nil {
		p.NextDue = at.UTC()
	}
	return p, nil
}

// doubtsQuery reads Counts' Unknown and SentAgainInDoubt through the
// partial indexes of migration 019, so only such rows.
const doubtsQuery = `
SELECT (SELECT count(*) FROM broadcast_sends WHERE broadcast_id = $1 AND status = 'unknown' AND NOT accepted),
       (SELECT count(*) FROM broadcast_sends WHERE broadcast_id = $1 AND in_doubt AND accepted)`

func (s *Store) Doubts(ctx context.Context, broadcast ulid.ULID) (unknown, sentAgainInDoubt int64, err error) {
	err = s.pool.QueryRow(ctx, doubtsQuery, uid(broadcast)).Scan(&unknown, &sentAgainInDoubt)
	return unknown, sentAgainInDoubt, mapErr("count doubts", err)
}
