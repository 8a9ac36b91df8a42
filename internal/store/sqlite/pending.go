package sqlite

import (
	"context"
	"database/sql"

	"github.com/oklog/ulid/v2"

	"github.com/rangecast/rangecast/internal/store"
)

// pendingQuery reads the open states through their partial indexes
// (broadcast_sends_pending, _deferred, _failed), in one statement: one
// snapshot, as Postgres's. "NOT accepted" is Counts' rule.
const pendingQuery = `
SELECT (SELECT count(*) FROM broadcast_sends WHERE broadcast_id = ?1 AND status = 'claimed' AND NOT accepted),
       (SELECT count(*) FROM broadcast_sends WHERE broadcast_id = ?1 AND status = 'deferred' AND NOT accepted),
       (SELECT min(retry_at) FROM broadcast_sends WHERE broadcast_id = ?1 AND status = 'deferred' AND NOT accepted),
       (SELECT count(*) FROM broadcast_sends WHERE broadcast_id = ?1 AND status = 'failed' AND NOT accepted),
       coalesce((SELECT error FROM broadcast_sends WHERE broadcast_id = ?1 AND status = 'deferred' AND NOT accepted ORDER BY retry_at LIMIT 1), ''),
       coalesce((SELECT attempt FROM broadcast_sends WHERE broadcast_id = ?1 AND status = 'deferred' AND NOT accepted ORDER BY retry_at LIMIT 1), 0)`

func (s *Store) Pending(ctx context.Context, broadcast ulid.ULID) (store.Pending, error) {
	var p store.Pending
	var at sql.NullInt64
	if err := s.r.QueryRowContext(ctx, pendingQuery, id(broadcast)).Scan(&p.Claimed, &p.Deferred, &at, &p.Failed, &p.NextError, &p.NextAttempt); err != nil {
		return store.Pending{}, mapErr("pending sends", err)
	}
	p.NextDue = nullTS(at)
	return p, nil
}

// doubtsQuery is the Postgres store's: the partial indexes of migration 019.
const doubtsQuery = `
SELECT (SELECT count(*) FROM broadcast_sends WHERE broadcast_id = ?1 AND status = 'unknown' AND NOT accepted),
       (SELECT count(*) FROM broadcast_sends WHERE broadcast_id = ?1 AND in_doubt AND accepted)`

func (s *Store) Doubts(ctx context.Context, broadcast ulid.ULID) (unknown, sentAgainInDoubt int64, err error) {
	err = s.r.QueryRowContext(ctx, doubtsQuery, id(broadcast)).Scan(&unknown, &sentAgainInDoubt)
	return unknown, sentAgainInDoubt, mapErr("count doubts", err)
}
