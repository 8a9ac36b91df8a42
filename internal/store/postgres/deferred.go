package postgres

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/oklog/ulid/v2"

	"github.com/rangecast/rangecast/internal/store"
)

// retryAt is an outcome's retry time as a nullable column.
func retryAt(o store.Outcome) any {
	if o.Status != store.SendDeferred || o.RetryAt.IsZero() {
		return nil
	}
	return o.RetryAt
}

// notAttempted is what an outcome takes off the row's attempt count: 1 when
// the governor held it and nothing was tried.
func notAttempted(o store.Outcome) int {
	if o.NotAttempted {
		return 1
	}
	return 0
}

// attemptOfClaim is the attempt a due row's own claim counted: a row $4
// holds claimed already (a repeated call) was counted at its claim, and
// not sent yet.
const attemptOfClaim = `CASE WHEN s.status = 'claimed' THEN 1 ELSE 0 END`

// ineligibleBeforeRetry and ineligibleInDoubt are store.IneligibleBeforeRetry
// and store.IneligibleInDoubt as SQL literals.
const (
	ineligibleBeforeRetry = `'` + store.IneligibleBeforeRetry + `'`
	ineligibleInDoubt     = `'` + store.IneligibleInDoubt + `'`
)

// claimDueQuery locks the due deferred rows, and those $4 holds claimed
// already (SKIP LOCKED: a concurrent sweep takes other rows, never the
// same), deletes those never attempted whose contact no longer passes the
// gate (left out; one attempted before fails, or ends unknown in doubt:
// store.IneligibleBeforeRetry), fails those whose contact was erased (deferred after the
// erasure by a send claimed before it: failed, the row keeps its place in
// the counts; unknown instead when the reconciler released it after an
// attempt that may have been delivered, store.InDoubtResent), and moves
// the rest back to claimed. The four statements
// touch disjoint rows. Deferred rows come due only while the broadcast
// runs, read after claimGate's lock as a window's claim is (SetState).
// $1 broadcast, $2 now, $3 limit, $4 owner, $5 the
// erased rows' error, $6 the owner's rows still being sent (never
// returned), $7 the domains whose due rows are left due (store.Deferrals's
// leave: the ledger's address ends with "@" and one of them), $8 segment.
func claimDueQuery(segment int64) string {
	g := gate(segmentParam(segment, "$8"))
	return `
WITH running AS (SELECT 1 FROM broadcasts WHERE id = $1 AND state = 'running'), due AS (
    SELECT s.contact_id FROM broadcast_sends s
    WHERE s.broadcast_id = $1 AND ((s.status = 'deferred' AND s.retry_at <= $2 AND EXISTS (SELECT 1 FROM running)
            AND NOT EXISTS (SELECT 1 FROM unnest($7::text[]) d WHERE right(lower(s.email), length(d) + 1) = '@' || d))
        OR (s.status = 'claimed' AND s.owner = $4 AND s.contact_id <> ALL($6::uuid[])))
    -- The owner's own claims first: a repeated call (its answer was lost)
    -- gets them back even when rows of lower ids came due meanwhile.
    ORDER BY s.status = 'claimed' DESC, s.contact_id LIMIT $3
    FOR UPDATE SKIP LOCKED
), gone AS (
    DELETE FROM broadcast_sends s USING due
    WHERE s.broadcast_id = $1 AND s.contact_id = due.contact_id
      AND NOT s.in_doubt AND s.attempt <= ` + attemptOfClaim + `
      AND EXISTS (SELECT 1 FROM contacts c WHERE c.id = due.contact_id)
      AND NOT EXISTS (SELECT 1 FROM contacts c WHERE c.id = due.contact_id AND ` + g + `)
), ineligible AS (
    UPDATE broadcast_sends s SET status = CASE WHEN s.in_doubt THEN 'unknown' ELSE 'failed' END,
        error = CASE WHEN s.in_doubt THEN ` + ineligibleInDoubt + ` ELSE ` + ineligibleBeforeRetry + ` || s.error END,
        attempt = s.attempt - ` + attemptOfClaim + `, retry_at = NULL, owner = '', updated_at = $2
    FROM due
    WHERE s.broadcast_id = $1 AND s.contact_id = due.contact_id
      AND (s.in_doubt OR s.attempt > ` + attemptOfClaim + `)
      AND EXISTS (SELECT 1 FROM contacts c WHERE c.id = due.contact_id)
      AND NOT EXISTS (SELECT 1 FROM contacts c WHERE c.id = due.contact_id AND ` + g + `)
), erased AS (
    UPDATE broadcast_sends s SET status = CASE WHEN s.in_doubt THEN 'unknown' ELSE 'failed' END,
        error = CASE WHEN s.in_doubt THEN ` + erasedInDoubt + ` ELSE $5 END,
        retry_at = NULL, owner = '', updated_at = $2
    FROM due
    WHERE s.broadcast_id = $1 AND s.contact_id = due.contact_id
      AND NOT EXISTS (SELECT 1 FROM contacts c WHERE c.id = due.contact_id)
)
UPDATE broadcast_sends s
SET status = 'claimed', attempt = s.attempt + CASE WHEN s.status = 'deferred' THEN 1 ELSE 0 END, claimed_at = $2, updated_at = $2, retry_at = NULL, owner = $4
FROM due, contacts c
WHERE s.broadcast_id = $1 AND s.contact_id = due.contact_id AND c.id = due.contact_id AND ` + g + `
RETURNING c.id, c.email, c.name, c.attributes, s.attempt, s.in_doubt`
}

func (s *Store) ClaimDue(ctx context.Context, b store.Broadcast, owner string, now time.Time, limit int, sending []ulid.ULID, leave []string) ([]store.Due, error) {
	args := []any{uid(b.ID), now, limit, owner, erasedDeferral, uids(sending), leaveDomains(leave)}
	if b.SegmentID != 0 {
		args = append(args, b.SegmentID)
	}
	batch := &pgx.Batch{}
	batch.Queue(claimGate, stateLockKeys(b.ID)...)
	batch.Queue(claimDueQuery(b.SegmentID), args...)
	results := s.pool.SendBatch(ctx, batch)
	defer results.Close()
	if _, err := results.Exec(); err != nil {
		return nil, mapErr("claim due deferrals", err)
	}
	rows, err := results.Query()
	if err != nil {
		return nil, mapErr("claim due deferrals", err)
	}
	var out []store.Due
	var d store.Due
	var id [16]byte
	_, err = pgx.ForEachRow(rows, []any{&id, &d.Email, &d.Name, &d.Attributes, &d.Attempt, &d.InDoubt}, func() error {
		d.ID, d.Subscribed = ulid.ULID(id), true
		out = append(out, d)
		d.Attributes = nil
		return nil
	})
	if err == nil {
		err = results.Close() // the commit: the rows are claimed only now
	}
	if err != nil {
		return nil, mapErr("claim due deferrals", err)
	}
	// RETURNING comes in no particular order; callers walk in id order.
	slices.SortFunc(out, func(a, b store.Due) int { return a.ID.Compare(b.ID) })
	return out, nil
}

// leaveDomains is leave as ClaimDue's $7: never nil, so the parameter is a
// text array whatever the caller passed.
func leaveDomains(leave []string) []string {
	if leave == nil {
		return []string{}
	}
	return leave
}

// nextDue reads both from the deferred rows' index: the count walks only
// the due entries, the earliest is the first.
const nextDue = `
SELECT (SELECT count(*) FROM broadcast_sends WHERE broadcast_id = $1 AND status = 'deferred' AND retry_at <= $2),
       (SELECT min(retry_at) FROM broadcast_sends WHERE broadcast_id = $1 AND status = 'deferred')`

func (s *Store) NextDue(ctx context.Context, broadcast ulid.ULID, now time.Time) (int64, time.Time, error) {
	var n int64
	var at *time.Time
	err := s.pool.QueryRow(ctx, nextDue, uid(broadcast), now).Scan(&n, &at)
	if err != nil {
		return 0, time.Time{}, mapErr("next due deferral", err)
	}
	if at == nil {
		return n, time.Time{}, nil
	}
	return n, at.UTC(), nil
}

// hastenHeld moves the held rows of the running and paused broadcasts of
// a sending domain to due now, through the deferred rows' index.
const hastenHeld = `
UPDATE broadcast_sends s SET retry_at = $4, updated_at = $4
FROM broadcasts b
WHERE b.state IN ('running', 'paused') AND right(lower(b.from_address), length($1) + 1) = '@' || $1
  AND s.broadcast_id = b.id AND s.status = 'deferred' AND s.retry_at > $4 AND s.error IN ($2, $3)`

func (s *Store) HastenHeld(ctx context.Context, domain, provider string, now time.Time) (int64, error) {
	tag, err := s.pool.Exec(ctx, hastenHeld, strings.ToLower(domain), store.HeldReason(provider), store.StepEndedReason(provider), now)
	if err != nil {
		return 0, mapErr("hasten held deferrals", err)
	}
	return tag.RowsAffected(), nil
}
