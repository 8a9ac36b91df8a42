package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/rangecast/rangecast/internal/store"
)

// stateRefusal is the error of a change a broadcast's state does not allow:
// ErrNotFound when there is no such broadcast, ErrConflict otherwise, with
// the broadcast as it is.
func (s *Store) stateRefusal(ctx context.Context, bid ulid.ULID, op string) (store.Broadcast, error) {
	b, err := s.GetBroadcast(ctx, bid)
	if err != nil {
		return b, err
	}
	return b, fmt.Errorf("%s: broadcast %s is %s: %w", op, bid, b.State, store.ErrConflict)
}

// stateWrite runs one statement on a broadcast in the states it names (a
// draft; a running, paused or failed one for SetThrottle) and returns the
// broadcast after it, or the state refusal when it changed nothing.
func (s *Store) stateWrite(ctx context.Context, bid ulid.ULID, op, query string, args ...any) (store.Broadcast, error) {
	n, err := s.execCount(ctx, op, query, args...)
	if err != nil {
		return store.Broadcast{}, err
	}
	if n == 0 {
		return s.stateRefusal(ctx, bid, op)
	}
	return s.GetBroadcast(ctx, bid)
}

func (s *Store) UpdateDraft(ctx context.Context, bid ulid.ULID, d store.Draft, now time.Time) (store.Broadcast, error) {
	if err := store.CheckBroadcast(store.Broadcast{Name: d.Name, Content: d.Content}); err != nil {
		return store.Broadcast{}, fmt.Errorf("update draft: %w", err)
	}
	var segment any
	if d.SegmentID != 0 {
		segment = d.SegmentID
	}
	c := d.Content
	return s.stateWrite(ctx, bid, "update draft", `
UPDATE broadcasts SET name = ?2, from_name = ?3, from_address = ?4, subject = ?5, html = ?6, text_body = ?7,
       segment_id = ?8, throttle_per_hour = ?9, in_doubt_policy = ?10, no_unsubscribe_link = ?11, updated_at = ?12
WHERE id = ?1 AND state = 'draft'`,
		id(bid), d.Name, c.FromName, c.FromAddress, c.Subject, c.HTML, c.Text, segment, d.ThrottlePerHour, d.InDoubtPolicy,
		d.NoUnsubscribeLink, ts(now))
}

func (s *Store) SetThrottle(ctx context.Context, bid ulid.ULID, perHour int64, now time.Time) (store.Broadcast, error) {
	if perHour < 0 {
		return store.Broadcast{}, fmt.Errorf("set throttle: %d an hour: %w", perHour, store.ErrInvalid)
	}
	return s.stateWrite(ctx, bid, "set throttle", `
UPDATE broadcasts SET throttle_per_hour = ?2, updated_at = ?3 WHERE id = ?1 AND state IN ('running', 'paused', 'failed')`,
		id(bid), perHour, ts(now))
}

func (s *Store) EditPaused(ctx context.Context, bid ulid.ULID, c store.Content, now time.Time) (store.Broadcast, int64, error) {
	b, err := s.GetBroadcast(ctx, bid)
	if err != nil {
		return b, 0, err
	}
	if err := store.CheckBroadcast(store.Broadcast{Name: b.Name, Content: c}); err != nil {
		return store.Broadcast{}, 0, fmt.Errorf("edit paused broadcast: %w", err)
	}
	var edited, claimsOut bool
	var rerendered int64
	err = s.write(ctx, "edit paused broadcast", func(tx *sql.Tx) error {
		// One writer at a time: the state and the claims read here hold
		// until the update, and while paused nothing claims at all.
		cur, err := getBroadcast(ctx, tx, bid)
		if err != nil || cur.State != store.StatePaused {
			return err
		}
		err = tx.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM broadcast_sends WHERE broadcast_id = ?1 AND status = 'claimed')`, id(bid)).Scan(&claimsOut)
		if err != nil || claimsOut {
			return err
		}
		res, err := tx.ExecContext(ctx, `
UPDATE broadcasts SET from_name = ?2, from_address = ?3, subject = ?4, html = ?5, text_body = ?6,
       content_revision = content_revision + 1, updated_at = ?7
WHERE id = ?1 AND state = 'paused'`,
			id(bid), c.FromName, c.FromAddress, c.Subject, c.HTML, c.Text, ts(now))
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		if edited = n > 0; err != nil || !edited {
			return err
		}
		// See the Postgres store: these wait for the resume.
		res, err = tx.ExecContext(ctx, `
UPDATE broadcast_sends SET status = 'deferred', retry_at = ?2, attempt = 0, owner = '', updated_at = ?2, error = ?3 || error
WHERE broadcast_id = ?1 AND status = 'failed' AND NOT accepted AND substr(error, 1, ?4) = ?5`,
			id(bid), ts(now), store.EditedPrefix, len(store.RenderFailedPrefix), store.RenderFailedPrefix)
		if err != nil {
			return err
		}
		rerendered, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return store.Broadcast{}, 0, err
	}
	if claimsOut {
		return b, 0, fmt.Errorf("edit paused broadcast %s: %w", bid, store.ErrClaimsOut)
	}
	if !edited {
		b, err := s.stateRefusal(ctx, bid, "edit paused broadcast")
		return b, 0, err
	}
	b, err = s.GetBroadcast(ctx, bid)
	return b, rerendered, err
}

func (s *Store) HeldByContent(ctx context.Context, bid ulid.ULID, limit int) ([]store.Contact, error) {
	return s.contacts(ctx, "contacts held by the content", limit, `
SELECT c.id, c.email, c.name, c.attributes FROM broadcast_sends s JOIN contacts c ON c.id = s.contact_id
WHERE s.broadcast_id = :b AND (s.status = 'deferred' AND (substr(s.error, 1, :ml) = :mistake OR substr(s.error, 1, :el) = :edited)
       OR s.status = 'failed' AND substr(s.error, 1, :rl) = :render)
LIMIT :limit`, sql.Named("b", id(bid)), sql.Named("ml", len(store.TemplateMistakePrefix)), sql.Named("mistake", store.TemplateMistakePrefix),
		sql.Named("el", len(store.EditedPrefix)), sql.Named("edited", store.EditedPrefix),
		sql.Named("rl", len(store.RenderFailedPrefix)), sql.Named("render", store.RenderFailedPrefix), sql.Named("limit", limit))
}

func (s *Store) DeleteDraft(ctx context.Context, bid ulid.ULID) (store.Broadcast, error) {
	var out store.Broadcast
	var deleted bool
	err := s.write(ctx, "delete draft", func(tx *sql.Tx) error {
		b, err := getBroadcast(ctx, tx, bid)
		if err != nil {
			return err
		}
		out = b
		if b.State != store.StateDraft {
			return nil
		}
		_, err = tx.ExecContext(ctx, `DELETE FROM broadcasts WHERE id = ? AND state = 'draft'`, id(bid))
		deleted = err == nil
		return err
	})
	if err != nil {
		return out, err
	}
	if !deleted {
		return out, fmt.Errorf("delete draft: broadcast %s is %s: %w", bid, out.State, store.ErrConflict)
	}
	return out, nil
}

func (s *Store) ScheduleDraft(ctx context.Context, bid ulid.ULID, at, now time.Time) (store.Broadcast, error) {
	var when any
	if !at.IsZero() {
		when = ts(at)
	}
	return s.stateWrite(ctx, bid, "schedule draft",
		`UPDATE broadcasts SET scheduled_at = ?2, updated_at = ?3 WHERE id = ?1 AND state = 'draft'`, id(bid), when, ts(now))
}

func (s *Store) DueScheduled(ctx context.Context, now time.Time, limit int) ([]ulid.ULID, error) {
	rows, err := s.r.QueryContext(ctx, `
SELECT id FROM broadcasts WHERE state = 'draft' AND scheduled_at IS NOT NULL AND scheduled_at <= ?
ORDER BY scheduled_at, id LIMIT ?`, ts(now), limit)
	if err != nil {
		return nil, mapErr("due scheduled broadcasts", err)
	}
	defer rows.Close()
	var out []ulid.ULID
	for rows.Next() {
		var raw []byte
		if err := rows.Scan(&raw); err != nil {
			return nil, mapErr("due scheduled broadcasts", err)
		}
		u, err := fromBlob(raw)
		if err != nil {
			return nil, err
		}
		out = append(out, u)
	}
	return out, mapErr("due scheduled broadcasts", rows.Err())
}

// countBy runs a two-column query (key, count) into a map.
func countBy[K ~string](ctx context.Context, q querier, query string, args ...any) (map[K]int64, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[K]int64{}
	for rows.Next() {
		var k string
		var n int64
		if err := rows.Scan(&k, &n); err != nil {
			return nil, err
		}
		out[K(k)] = n
	}
	return out, rows.Err()
}

// reportStatuses fills r's Statuses and Counts from one read (countSends).
func (s *Store) reportStatuses(ctx context.Context, bid ulid.ULID, r *store.Report) error {
	rows, err := s.r.QueryContext(ctx, countSends, id(bid))
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var status string
		var accepted, inDoubt bool
		var n int64
		if err := rows.Scan(&status, &accepted, &inDoubt, &n); err != nil {
			return err
		}
		r.Statuses[store.SendStatus(status)] += n
		r.Counts.Add(store.SendStatus(status), accepted, inDoubt, n)
	}
	return rows.Err()
}

func (s *Store) Report(ctx context.Context, bid ulid.ULID, groups int) (store.Report, error) {
	if _, err := s.GetBroadcast(ctx, bid); err != nil {
		return store.Report{}, err
	}
	r := store.Report{Statuses: map[store.SendStatus]int64{}}
	if err := s.reportStatuses(ctx, bid, &r); err != nil {
		return r, mapErr("report: statuses", err)
	}
	var err error
	if r.Events, err = countBy[store.EventType](ctx, s.r, `
SELECT type, count(DISTINCT contact_id) FROM delivery_events WHERE broadcast_id = ? GROUP BY type`, id(bid)); err != nil {
		return r, mapErr("report: events", err)
	}
	// Row by row, so the tally's memory is the distinct replies, not the
	// failed rows.
	rows, err := s.r.QueryContext(ctx, `SELECT error, email FROM broadcast_sends WHERE broadcast_id = ? AND status = 'failed'`, id(bid))
	if err != nil {
		return r, mapErr("report: failures", err)
	}
	defer rows.Close()
	var tally store.FailureTally
	for rows.Next() {
		var reply, email string
		if err := rows.Scan(&reply, &email); err != nil {
			return r, mapErr("report: failures", err)
		}
		tally.Add(reply, email)
	}
	if err := rows.Err(); err != nil {
		return r, mapErr("report: failures", err)
	}
	tally.Fill(&r, groups)
	if r.Reputation, err = s.Reputation(ctx, bid); err != nil {
		return r, err
	}
	return r, nil
}

func (s *Store) ExportPage(ctx context.Context, bid, after ulid.ULID, limit int) ([]store.Send, error) {
	return s.sends(ctx, "export ledger", bid, limit, `
WHERE broadcast_id = ? AND contact_id > ?
ORDER BY contact_id LIMIT ?`, id(bid), id(after), limit)
}

func (s *Store) Reopen(ctx context.Context, bid ulid.ULID, unknown bool, reason string, now time.Time) (store.Reopened, error) {
	var out store.Reopened
	var state store.State
	err := s.write(ctx, "reopen broadcast "+bid.String(), func(tx *sql.Tx) error {
		b, err := getBroadcast(ctx, tx, bid)
		if err != nil {
			return err
		}
		if state = b.State; state != store.StateCompleted {
			out.Broadcast = b
			return nil
		}
		// Neither a failed nor an unknown row was accepted, so the
		// reputation sums do not change; "NOT accepted" keeps it so
		// whatever a webhook did.
		// An unknown row sent again may reach someone who has the first
		// copy: marked in doubt, as under the resend policy, so Counts'
		// SentAgainInDoubt shows who may have two.
		const (
			reopenSet = `
UPDATE broadcast_sends SET status = 'deferred', retry_at = ?2, attempt = 0, owner = '', updated_at = ?2,
       error = 'retry requested; before: ' || error`
			reopenWhere = `
WHERE broadcast_id = ?1 AND NOT accepted AND `
			reopen = reopenSet + reopenWhere
		)
		res, err := tx.ExecContext(ctx, reopen+`status = 'failed' AND (substr(error, 1, ?3) = ?4 OR substr(error, 1, ?5) = ?6)`, id(bid), ts(now),
			len(store.GaveUpPrefix), store.GaveUpPrefix, len(store.NotSentPrefix), store.NotSentPrefix)
		if err != nil {
			return err
		}
		if out.Failed, err = res.RowsAffected(); err != nil {
			return err
		}
		if unknown {
			if res, err = tx.ExecContext(ctx, reopenSet+`, in_doubt = 1`+reopenWhere+`status = 'unknown'`, id(bid), ts(now)); err != nil {
				return err
			}
			if out.Unknown, err = res.RowsAffected(); err != nil {
				return err
			}
		}
		if out.Failed+out.Unknown > 0 {
			_, err = tx.ExecContext(ctx, `UPDATE broadcasts SET state = 'running', reason = ?2, finished_at = NULL, updated_at = ?3 WHERE id = ?1`, id(bid), reason, ts(now))
			if err != nil {
				return err
			}
		}
		out.Broadcast, err = getBroadcast(ctx, tx, bid)
		return err
	})
	if err != nil {
		return out, err
	}
	if state != store.StateCompleted {
		return out, fmt.Errorf("reopen: broadcast %s is %s: %w", bid, state, store.ErrConflict)
	}
	return out, nil
}

func (s *Store) FailHalted(ctx context.Context, bid ulid.ULID, now time.Time) (failed, unknown int64, err error) {
	var state store.State
	err = s.write(ctx, "fail halted rows of "+bid.String(), func(tx *sql.Tx) error {
		failed, unknown = 0, 0 // a retried write counts afresh
		b, err := getBroadcast(ctx, tx, bid)
		if err != nil {
			return err
		}
		if state = b.State; state != store.StatePaused {
			return nil
		}
		rows, err := tx.QueryContext(ctx, `
UPDATE broadcast_sends SET status = CASE WHEN in_doubt THEN 'unknown' ELSE 'failed' END, retry_at = NULL, owner = '', updated_at = ?2,
       error = CASE WHEN in_doubt THEN ?6 ELSE ?3 END || error
WHERE broadcast_id = ?1 AND status = 'deferred' AND NOT accepted
  AND (substr(error, 1, length(?4)) = ?4 OR substr(error, 1, length(?5)) = ?5)
RETURNING status`, id(bid), ts(now), store.FailedHaltedPrefix,
			store.HaltedPrefix, store.DeferredAgainPrefix+store.HaltedPrefix, store.InDoubtEndedPrefix)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var status string
			if err := rows.Scan(&status); err != nil {
				return err
			}
			if status == string(store.SendUnknown) {
				unknown++
			} else {
				failed++
			}
		}
		return rows.Err()
	})
	if err != nil {
		return 0, 0, err
	}
	if state != store.StatePaused {
		return 0, 0, fmt.Errorf("broadcast %s is %s, not paused: %w", bid, state, store.ErrConflict)
	}
	return failed, unknown, nil
}
