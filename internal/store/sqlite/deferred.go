package sqlite

import (
	"context"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/rangecast/rangecast/internal/store"
)

// retryAt is an outcome's retry time as a nullable column.
func retryAt(o store.Outcome) any {
	if o.Status != store.SendDeferred || o.RetryAt.IsZero() {
		return nil
	}
	return ts(o.RetryAt)
}

// notAttempted is what an outcome takes off the row's attempt count: 1 when
// the governor held it and nothing was tried.
func notAttempted(o store.Outcome) int {
	if o.NotAttempted {
		return 1
	}
	return 0
}

// dueQuery reads the due deferred rows with their contacts and whether each
// still passes the gate. The write transaction is the only writer, so what
// it reads cannot be moved by another sweep before it writes. The owner's
// own claims come first, so a repeated call (its answer was lost) gets
// them back even when rows of lower ids came due meanwhile, but not those
// still being sent (:sending, a JSON array of upper-case hex ids). Due rows
// whose address is at one of the domains of :leave (a JSON array) stay due
// (store.Deferrals's leave).
func dueQuery(segment int64) string {
	return `SELECT s.contact_id, c.email, c.name, c.attributes, s.attempt + (s.status = 'deferred'), s.in_doubt, (c.id IS NOT NULL AND ` + gate(segment) + `)
FROM broadcast_sends s LEFT JOIN contacts c ON c.id = s.contact_id
WHERE s.broadcast_id = :broadcast AND ((s.status = 'deferred' AND s.retry_at <= :now
    AND EXISTS (SELECT 1 FROM broadcasts WHERE id = :broadcast AND state = 'running')
    AND NOT EXISTS (SELECT 1 FROM json_each(:leave) d WHERE substr(lower(s.email), -length(d.value) - 1) = '@' || d.value))
    OR (s.status = 'claimed' AND s.owner = :owner AND hex(s.contact_id) NOT IN (SELECT value FROM json_each(:sending))))
ORDER BY s.status = 'claimed' DESC, s.contact_id LIMIT :limit`
}

const (
	reclaimDue = `UPDATE broadcast_sends SET status = 'claimed', attempt = attempt + (status = 'deferred'), claimed_at = ?3, updated_at = ?3, retry_at = NULL, owner = ?4
WHERE broadcast_id = ?1 AND contact_id = ?2 AND (status = 'deferred' OR (status = 'claimed' AND owner = ?4))`
	dropDue = `DELETE FROM broadcast_sends WHERE broadcast_id = ?1 AND contact_id = ?2 AND (status = 'deferred' OR (status = 'claimed' AND owner = ?3))`
	// failErased settles a due row whose contact was erased (deferred after
	// the erasure by a send claimed before it) as failed, or unknown when
	// the reconciler released it after an attempt that may have been
	// delivered, so it keeps its place in the counts instead of vanishing.
	// failIneligible settles a due row attempted before (or in doubt)
	// whose contact no longer passes the gate: failed, or unknown in
	// doubt, its attempts kept (store.IneligibleBeforeRetry); a row never
	// attempted is dropped (left out).
	failIneligible = `UPDATE broadcast_sends SET status = CASE WHEN in_doubt THEN 'unknown' ELSE 'failed' END,
    error = CASE WHEN in_doubt THEN '` + store.IneligibleInDoubt + `' ELSE '` + store.IneligibleBeforeRetry + `' || error END,
    attempt = attempt - (status = 'claimed'), retry_at = NULL, owner = '', updated_at = ?4
WHERE broadcast_id = ?1 AND contact_id = ?2 AND (status = 'deferred' OR (status = 'claimed' AND owner = ?3))`
	failErased = `UPDATE broadcast_sends SET status = CASE WHEN in_doubt THEN 'unknown' ELSE 'failed' END,
    error = CASE WHEN in_doubt THEN ` + erasedInDoubt + ` ELSE ?4 END, retry_at = NULL, owner = '', updated_at = ?5
WHERE broadcast_id = ?1 AND contact_id = ?2 AND (status = 'deferred' OR (status = 'claimed' AND owner = ?3))`
)

func (s *Store) ClaimDue(ctx context.Context, b store.Broadcast, owner string, now time.Time, limit int, sending []ulid.ULID, leave []string) ([]store.Due, error) {
	if limit < 0 {
		return nil, fmt.Errorf("claim due deferrals: negative limit %d", limit)
	}
	held := make([]string, len(sending))
	for i, u := range sending {
		held[i] = strings.ToUpper(hex.EncodeToString(u[:]))
	}
	heldJSON, err := json.Marshal(held)
	if err != nil {
		return nil, err
	}
	leaveJSON, err := json.Marshal(append([]string{}, leave...))
	if err != nil {
		return nil, err
	}
	var out []store.Due
	err = s.write(ctx, "claim due deferrals", func(tx *sql.Tx) error {
		out = out[:0]
		rows, err := tx.QueryContext(ctx, dueQuery(b.SegmentID),
			gateArgs(b.SegmentID, sql.Named("broadcast", id(b.ID)), sql.Named("now", ts(now)), sql.Named("limit", limit), sql.Named("owner", owner), sql.Named("sending", string(heldJSON)), sql.Named("leave", string(leaveJSON)))...)
		if err != nil {
			return err
		}
		var gone, ineligible, erased []ulid.ULID
		for rows.Next() {
			var cid []byte
			var email, name, attrs sql.NullString
			var eligible sql.NullBool
			var attempt int
			var inDoubt bool
			if err := rows.Scan(&cid, &email, &name, &attrs, &attempt, &inDoubt, &eligible); err != nil {
				rows.Close()
				return err
			}
			u, err := fromBlob(cid)
			if err != nil {
				rows.Close()
				return err
			}
			if !email.Valid {
				erased = append(erased, u)
				continue
			}
			if !eligible.Valid || !eligible.Bool {
				// attempt counts this claim: above 1, it was attempted
				// before.
				if inDoubt || attempt > 1 {
					ineligible = append(ineligible, u)
				} else {
					gone = append(gone, u)
				}
				continue
			}
			c := store.Due{Contact: store.Contact{ID: u, Email: email.String, Name: name.String, Subscribed: true}, Attempt: attempt, InDoubt: inDoubt}
			if err := json.Unmarshal([]byte(attrs.String), &c.Attributes); err != nil {
				rows.Close()
				return fmt.Errorf("contact %s: attributes: %w", u, err)
			}
			out = append(out, c)
		}
		if err := rows.Close(); err != nil {
			return err
		}
		if err := rows.Err(); err != nil {
			return err
		}
		for _, c := range out {
			if _, err := tx.ExecContext(ctx, reclaimDue, id(b.ID), id(c.ID), ts(now), owner); err != nil {
				return err
			}
		}
		for _, u := range gone {
			if _, err := tx.ExecContext(ctx, dropDue, id(b.ID), id(u), owner); err != nil {
				return err
			}
		}
		for _, u := range ineligible {
			if _, err := tx.ExecContext(ctx, failIneligible, id(b.ID), id(u), owner, ts(now)); err != nil {
				return err
			}
		}
		for _, u := range erased {
			if _, err := tx.ExecContext(ctx, failErased, id(b.ID), id(u), owner, erasedDeferral, ts(now)); err != nil {
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

func (s *Store) NextDue(ctx context.Context, broadcast ulid.ULID, now time.Time) (int64, time.Time, error) {
	var n int64
	var at sql.NullInt64
	err := s.r.QueryRowContext(ctx, `SELECT (SELECT count(*) FROM broadcast_sends WHERE broadcast_id = ?1 AND status = 'deferred' AND retry_at <= ?2),
       (SELECT min(retry_at) FROM broadcast_sends WHERE broadcast_id = ?1 AND status = 'deferred')`, id(broadcast), ts(now)).Scan(&n, &at)
	if err != nil {
		return 0, time.Time{}, mapErr("next due deferral", err)
	}
	return n, nullTS(at), nil
}

// hastenHeld moves the held rows of the running and paused broadcasts of
// a sending domain (?1, lower case, matched against the From address's
// end) to due now.
const hastenHeld = `UPDATE broadcast_sends SET retry_at = ?4, updated_at = ?4
WHERE status = 'deferred' AND retry_at > ?4 AND error IN (?2, ?3)
  AND broadcast_id IN (SELECT id FROM broadcasts WHERE state IN ('running', 'paused')
      AND substr(lower(from_address), -length(?1) - 1) = '@' || ?1)`

func (s *Store) HastenHeld(ctx context.Context, domain, provider string, now time.Time) (int64, error) {
	var n int64
	err := s.write(ctx, "hasten held deferrals", func(tx *sql.Tx) error {
		r, err := tx.ExecContext(ctx, hastenHeld, strings.ToLower(domain), store.HeldReason(provider), store.StepEndedReason(provider), ts(now))
		if err != nil {
			return err
		}
		n, err = r.RowsAffected()
		return err
	})
	return n, err
}
