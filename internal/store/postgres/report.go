package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/oklog/ulid/v2"

	"github.com/rangecast/rangecast/internal/store"
)

// stateRefusal is the error of a change a broadcast's state does not allow:
// ErrNotFound when there is no such broadcast, ErrConflict otherwise, with
// the broadcast as it is.
func (s *Store) stateRefusal(ctx context.Context, id ulid.ULID, op string) (store.Broadcast, error) {
	b, err := s.GetBroadcast(ctx, id)
	if err != nil {
		return b, err
	}
	return b, fmt.Errorf("%s: broadcast %s is %s: %w", op, id, b.State, store.ErrConflict)
}

// stateWrite runs one statement on a broadcast in the states it names
// (a draft; a running, paused or failed one for SetThrottle) and returns
// the broadcast after it, or the state refusal when it changed nothing.
func (s *Store) stateWrite(ctx context.Context, id ulid.ULID, op, query string, args ...any) (store.Broadcast, error) {
	tag, err := s.pool.Exec(ctx, query, args...)
	if err != nil {
		return store.Broadcast{}, mapErr(op, err)
	}
	if tag.RowsAffected() == 0 {
		return s.stateRefusal(ctx, id, op)
	}
	return s.GetBroadcast(ctx, id)
}

func (s *Store) UpdateDraft(ctx context.Context, id ulid.ULID, d store.Draft, now time.Time) (store.Broadcast, error) {
	if err := store.CheckBroadcast(store.Broadcast{Name: d.Name, Content: d.Content}); err != nil {
		return store.Broadcast{}, fmt.Errorf("update draft: %w", err)
	}
	var segment *int64
	if d.SegmentID != 0 {
		segment = &d.SegmentID
	}
	c := d.Content
	return s.stateWrite(ctx, id, "update draft", `
UPDATE broadcasts SET name = $2, from_name = $3, from_address = $4, subject = $5, html = $6, text_body = $7,
       segment_id = $8, throttle_per_hour = $9, in_doubt_policy = $10, no_unsubscribe_link = $11, updated_at = $12
WHERE id = $1 AND state = 'draft'`,
		uid(id), d.Name, c.FromName, c.FromAddress, c.Subject, c.HTML, c.Text, segment, d.ThrottlePerHour, d.InDoubtPolicy,
		d.NoUnsubscribeLink, now)
}

func (s *Store) SetThrottle(ctx context.Context, id ulid.ULID, perHour int64, now time.Time) (store.Broadcast, error) {
	if perHour < 0 {
		return store.Broadcast{}, fmt.Errorf("set throttle: %d an hour: %w", perHour, store.ErrInvalid)
	}
	return s.stateWrite(ctx, id, "set throttle", `
UPDATE broadcasts SET throttle_per_hour = $2, updated_at = $3 WHERE id = $1 AND state IN ('running', 'paused', 'failed')`,
		uid(id), perHour, now)
}

func (s *Store) EditPaused(ctx context.Context, id ulid.ULID, c store.Content, now time.Time) (store.Broadcast, int64, error) {
	b, err := s.GetBroadcast(ctx, id)
	if err != nil {
		return b, 0, err
	}
	if err := store.CheckBroadcast(store.Broadcast{Name: b.Name, Content: c}); err != nil {
		return store.Broadcast{}, 0, fmt.Errorf("edit paused broadcast: %w", err)
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return store.Broadcast{}, 0, mapErr("edit paused broadcast", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	// Row locked first: a resume waits for the edit, or the edit sees it.
	var state string
	if err := tx.QueryRow(ctx, `SELECT state FROM broadcasts WHERE id = $1 FOR UPDATE`, uid(id)).Scan(&state); err != nil {
		return store.Broadcast{}, 0, mapErr("edit paused broadcast", err)
	}
	if store.State(state) != store.StatePaused {
		b, err := s.stateRefusal(ctx, id, "edit paused broadcast")
		return b, 0, err
	}
	// Paused, no claim is made (the claim reads the state), so none can
	// appear after this look.
	var out bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM broadcast_sends WHERE broadcast_id = $1 AND status = 'claimed')`, uid(id)).Scan(&out); err != nil {
		return store.Broadcast{}, 0, mapErr("edit paused broadcast", err)
	}
	if out {
		return b, 0, fmt.Errorf("edit paused broadcast %s: %w", id, store.ErrClaimsOut)
	}
	if _, err := tx.Exec(ctx, `
UPDATE broadcasts SET from_name = $2, from_address = $3, subject = $4, html = $5, text_body = $6,
       content_revision = content_revision + 1, updated_at = $7
WHERE id = $1`,
		uid(id), c.FromName, c.FromAddress, c.Subject, c.HTML, c.Text, now); err != nil {
		return store.Broadcast{}, 0, mapErr("edit paused broadcast", err)
	}
	// Paused: no sweep claims a deferred row meanwhile (ClaimDue needs the
	// broadcast running), so these wait for the resume.
	tag, err := tx.Exec(ctx, `
UPDATE broadcast_sends SET status = 'deferred', retry_at = $2, attempt = 0, owner = '', updated_at = $2, error = $3 || error
WHERE broadcast_id = $1 AND status = 'failed' AND NOT accepted AND starts_with(error, $4)`,
		uid(id), now, store.EditedPrefix, store.RenderFailedPrefix)
	if err != nil {
		return store.Broadcast{}, 0, mapErr("edit paused broadcast: rows to render again", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return store.Broadcast{}, 0, mapErr("edit paused broadcast", err)
	}
	b, err = s.GetBroadcast(ctx, id)
	return b, tag.RowsAffected(), err
}

func (s *Store) HeldByContent(ctx context.Context, id ulid.ULID, limit int) ([]store.Contact, error) {
	// Two scans, each on its status's partial index.
	rows, err := s.pool.Query(ctx, `
(SELECT c.id, c.email, c.name, c.attributes FROM broadcast_sends s JOIN contacts c ON c.id = s.contact_id
 WHERE s.broadcast_id = $1 AND s.status = 'deferred' AND (starts_with(s.error, $2) OR starts_with(s.error, $5)) LIMIT $4)
UNION ALL
(SELECT c.id, c.email, c.name, c.attributes FROM broadcast_sends s JOIN contacts c ON c.id = s.contact_id
 WHERE s.broadcast_id = $1 AND s.status = 'failed' AND starts_with(s.error, $3) LIMIT $4)
LIMIT $4`, uid(id), store.TemplateMistakePrefix, store.RenderFailedPrefix, limit, store.EditedPrefix)
	if err != nil {
		return nil, mapErr("contacts held by the content", err)
	}
	var out []store.Contact
	var c store.Contact
	var cid [16]byte
	_, err = pgx.ForEachRow(rows, []any{&cid, &c.Email, &c.Name, &c.Attributes}, func() error {
		c.ID, c.Subscribed = ulid.ULID(cid), true
		out = append(out, c)
		c.Attributes = nil
		return nil
	})
	return out, mapErr("contacts held by the content", err)
}

func (s *Store) DeleteDraft(ctx context.Context, id ulid.ULID) (store.Broadcast, error) {
	b, err := scanBroadcast(s.pool.QueryRow(ctx, `
WITH gone AS (DELETE FROM broadcasts WHERE id = $1 AND state = 'draft' RETURNING *)
SELECT `+broadcastColumns+` FROM gone b LEFT JOIN segments s ON s.id = b.segment_id`, uid(id)))
	if errors.Is(err, pgx.ErrNoRows) {
		return s.stateRefusal(ctx, id, "delete draft")
	}
	return b, mapErr("delete draft", err)
}

func (s *Store) ScheduleDraft(ctx context.Context, id ulid.ULID, at, now time.Time) (store.Broadcast, error) {
	var when *time.Time
	if !at.IsZero() {
		when = &at
	}
	return s.stateWrite(ctx, id, "schedule draft", `UPDATE broadcasts SET scheduled_at = $2, updated_at = $3 WHERE id = $1 AND state = 'draft'`, uid(id), when, now)
}

func (s *Store) DueScheduled(ctx context.Context, now time.Time, limit int) ([]ulid.ULID, error) {
	rows, err := s.pool.Query(ctx, `
SELECT id FROM broadcasts WHERE state = 'draft' AND scheduled_at IS NOT NULL AND scheduled_at <= $1
ORDER BY scheduled_at, id LIMIT $2`, now, limit)
	if err != nil {
		return nil, mapErr("due scheduled broadcasts", err)
	}
	var out []ulid.ULID
	var id [16]byte
	_, err = pgx.ForEachRow(rows, []any{&id}, func() error {
		out = append(out, ulid.ULID(id))
		return nil
	})
	return out, mapErr("due scheduled broadcasts", err)
}

func (s *Store) Report(ctx context.Context, id ulid.ULID, groups int) (store.Report, error) {
	if _, err := s.GetBroadcast(ctx, id); err != nil {
		return store.Report{}, err
	}
	r := store.Report{Statuses: map[store.SendStatus]int64{}, Events: map[store.EventType]int64{}}
	rows, err := s.pool.Query(ctx, countSends, uid(id))
	if err != nil {
		return r, mapErr("report: statuses", err)
	}
	var key string
	var accepted, inDoubt bool
	var n int64
	if _, err := pgx.ForEachRow(rows, []any{&key, &accepted, &inDoubt, &n}, func() error {
		r.Statuses[store.SendStatus(key)] += n
		r.Counts.Add(store.SendStatus(key), accepted, inDoubt, n)
		return nil
	}); err != nil {
		return r, mapErr("report: statuses", err)
	}
	rows, err = s.pool.Query(ctx, `
SELECT type, count(DISTINCT contact_id) FROM delivery_events WHERE broadcast_id = $1 GROUP BY type`, uid(id))
	if err != nil {
		return r, mapErr("report: events", err)
	}
	if _, err := pgx.ForEachRow(rows, []any{&key, &n}, func() error { r.Events[store.EventType(key)] = n; return nil }); err != nil {
		return r, mapErr("report: events", err)
	}
	// Row by row, so the tally's memory is the distinct replies, not the
	// failed rows.
	rows, err = s.pool.Query(ctx, `SELECT error, email FROM broadcast_sends WHERE broadcast_id = $1 AND status = 'failed'`, uid(id))
	if err != nil {
		return r, mapErr("report: failures", err)
	}
	var tally store.FailureTally
	var reply, email string
	if _, err := pgx.ForEachRow(rows, []any{&reply, &email}, func() error { tally.Add(reply, email); return nil }); err != nil {
		return r, mapErr("report: failures", err)
	}
	tally.Fill(&r, groups)
	if r.Reputation, err = s.Reputation(ctx, id); err != nil {
		return r, err
	}
	return r, nil
}

func (s *Store) ExportPage(ctx context.Context, id, after ulid.ULID, limit int) ([]store.Send, error) {
	return s.sends(ctx, "export ledger", id, `
WHERE broadcast_id = $1 AND contact_id > $2
ORDER BY contact_id LIMIT $3`, uid(id), uid(after), limit)
}

func (s *Store) Reopen(ctx context.Context, id ulid.ULID, unknown bool, reason string, now time.Time) (store.Reopened, error) {
	var out store.Reopened
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return out, mapErr("reopen", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	var state string
	if err := tx.QueryRow(ctx, `SELECT state FROM broadcasts WHERE id = $1 FOR UPDATE`, uid(id)).Scan(&state); err != nil {
		return out, mapErr("reopen broadcast "+id.String(), err)
	}
	if store.State(state) != store.StateCompleted {
		out.Broadcast, err = s.GetBroadcast(ctx, id)
		if err != nil {
			return out, err
		}
		return out, fmt.Errorf("reopen: broadcast %s is %s: %w", id, state, store.ErrConflict)
	}
	// Neither a failed nor an unknown row was accepted, so the reputation
	// sums do not change; "NOT accepted" keeps it so whatever a webhook did.
	// An unknown row sent again may reach someone who has the first copy:
	// it is marked in doubt (in_doubt), as the resend policy marks its
	// rows, so Counts' SentAgainInDoubt shows who may have two.
	const (
		reopenSet = `
UPDATE broadcast_sends SET status = 'deferred', retry_at = $2, attempt = 0, owner = '', updated_at = $2,
       error = 'retry requested; before: ' || error`
		reopenWhere = `
WHERE broadcast_id = $1 AND NOT accepted AND `
		reopen = reopenSet + reopenWhere
	)
	tag, err := tx.Exec(ctx, reopen+`status = 'failed' AND (error LIKE $3 OR error LIKE $4)`, uid(id), now, store.GaveUpPrefix+"%", store.NotSentPrefix+"%")
	if err != nil {
		return out, mapErr("reopen failed rows", err)
	}
	out.Failed = tag.RowsAffected()
	if unknown {
		if tag, err = tx.Exec(ctx, reopenSet+`, in_doubt = true`+reopenWhere+`status = 'unknown'`, uid(id), now); err != nil {
			return out, mapErr("reopen unknown rows", err)
		}
		out.Unknown = tag.RowsAffected()
	}
	if out.Failed+out.Unknown > 0 {
		_, err = tx.Exec(ctx, `UPDATE broadcasts SET state = 'running', reason = $2, finished_at = NULL, updated_at = $3 WHERE id = $1`, uid(id), reason, now)
		if err != nil {
			return out, mapErr("reopen broadcast", err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return out, mapErr("reopen", err)
	}
	out.Broadcast, err = s.GetBroadcast(ctx, id)
	return out, err
}

func (s *Store) FailHalted(ctx context.Context, id ulid.ULID, now time.Time) (failed, unknown int64, err error) {
	// The state is tested in the statement: while paused no sweep claims a
	// deferred row, so none of these is in flight.
	rows, err := s.pool.Query(ctx, `
UPDATE broadcast_sends SET status = CASE WHEN in_doubt THEN 'unknown' ELSE 'failed' END, retry_at = NULL, owner = '', updated_at = $2,
       error = CASE WHEN in_doubt THEN $6 ELSE $3 END || error
WHERE broadcast_id = $1 AND status = 'deferred' AND NOT accepted
  AND (starts_with(error, $4) OR starts_with(error, $5))
  AND EXISTS (SELECT 1 FROM broadcasts WHERE id = $1 AND state = 'paused')
RETURNING status`, uid(id), now, store.FailedHaltedPrefix,
		store.HaltedPrefix, store.DeferredAgainPrefix+store.HaltedPrefix, store.InDoubtEndedPrefix)
	if err != nil {
		return 0, 0, mapErr("fail halted rows", err)
	}
	var status string
	_, err = pgx.ForEachRow(rows, []any{&status}, func() error {
		if status == string(store.SendUnknown) {
			unknown++
		} else {
			failed++
		}
		return nil
	})
	if err != nil {
		return 0, 0, mapErr("fail halted rows", err)
	}
	if failed+unknown == 0 {
		b, err := s.GetBroadcast(ctx, id)
		if err != nil {
			return 0, 0, err
		}
		if b.State != store.StatePaused {
			return 0, 0, fmt.Errorf("broadcast %s is %s, not paused: %w", id, b.State, store.ErrConflict)
		}
	}
	return failed, unknown, nil
}
