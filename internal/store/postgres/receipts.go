package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/oklog/ulid/v2"

	"github.com/rangecast/rangecast/internal/address"
	"github.com/rangecast/rangecast/internal/store"
)

var _ store.Receipts = (*Store)(nil)

const receiptColumns = `id, kind, key, email, payload_hash, payload, message_id, status, attempts,
	next_attempt_at, claimed_at, error, created_at, updated_at`

func scanReceipt(row pgx.Row) (store.Receipt, error) {
	var r store.Receipt
	var id [16]byte
	var status string
	var claimed *time.Time
	if err := row.Scan(&id, &r.Kind, &r.Key, &r.Email, &r.PayloadHash, &r.Payload, &r.MessageID, &status, &r.Attempts,
		&r.NextAttemptAt, &claimed, &r.Error, &r.CreatedAt, &r.UpdatedAt); err != nil {
		return store.Receipt{}, err
	}
	r.ID, r.Status = ulid.ULID(id), store.ReceiptStatus(status)
	if claimed != nil {
		r.ClaimedAt = claimed.UTC()
	}
	r.NextAttemptAt, r.CreatedAt, r.UpdatedAt = r.NextAttemptAt.UTC(), r.CreatedAt.UTC(), r.UpdatedAt.UTC()
	return r, nil
}

const (
	// The conflict target is the unique index on (kind, key, email_key):
	// of any number of concurrent inserts under one key exactly one
	// returns a row; the others wait for its commit and find nothing to do.
	insertReceipt = `
INSERT INTO outbound_receipts (id, kind, key, email, email_key, payload_hash, payload, message_id, status, next_attempt_at, created_at, updated_at)
VALUES ($1, $2, $3, $4, $10, $5, $6, $7, 'queued', $8, $9, $9)
ON CONFLICT (kind, key, email_key) DO NOTHING
RETURNING ` + receiptColumns
	findReceipt = `SELECT ` + receiptColumns + ` FROM outbound_receipts WHERE kind = $1 AND key = $2 AND email_key = $3`
)

func (s *Store) CreateReceipt(ctx context.Context, r store.Receipt) (store.Receipt, bool, error) {
	if err := store.CheckFields("kind", r.Kind, "idempotency key", r.Key, "email", r.Email); err != nil {
		return store.Receipt{}, false, fmt.Errorf("create receipt: %w", err)
	}
	var out store.Receipt
	var created bool
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		// A receipt erased since keeps its keys as keyed hashes
		// (eraseReceipts): the request is a replay of it, not a new
		// message. SHARE waits for an erasure in progress (ROW EXCLUSIVE)
		// and holds off the next: without it a repeat racing the erasure
		// found neither the receipt in clear nor the erased one, and was
		// sent again (review).
		if _, err := tx.Exec(ctx, `LOCK TABLE erased_addresses IN SHARE MODE`); err != nil {
			return err
		}
		erased, err := scanReceipt(tx.QueryRow(ctx, findReceipt, r.Kind, store.ErasedIdempotencyKey(s.erasureKey, r.Key), store.ErasedReceiptKey(s.erasureKey, r.Email)))
		if err == nil {
			out = store.MatchErased(s.erasureKey, erased, r.PayloadHash)
			return nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		out, err = scanReceipt(tx.QueryRow(ctx, insertReceipt, uid(r.ID), r.Kind, r.Key, r.Email, r.PayloadHash, r.Payload,
			r.MessageID, r.NextAttemptAt, r.CreatedAt, address.Key(r.Email)))
		if err == nil {
			created = true
			return nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		out, err = scanReceipt(tx.QueryRow(ctx, findReceipt, r.Kind, r.Key, address.Key(r.Email)))
		return err
	})
	if err != nil {
		return store.Receipt{}, false, mapErr("create receipt", err)
	}
	return out, created, nil
}

func (s *Store) FindReceipt(ctx context.Context, kind, key, email string) (store.Receipt, error) {
	r, err := scanReceipt(s.pool.QueryRow(ctx, findReceipt, kind, key, address.Key(email)))
	return r, mapErr("find receipt", err)
}

func (s *Store) GetReceipt(ctx context.Context, id ulid.ULID) (store.Receipt, error) {
	r, err := scanReceipt(s.pool.QueryRow(ctx, `SELECT `+receiptColumns+` FROM outbound_receipts WHERE id = $1`, uid(id)))
	return r, mapErr("get receipt", err)
}

// claimReceipt claims and opens the attempt row in one statement, so a
// claim never exists without its attempt.
const claimReceipt = `
WITH c AS (
    UPDATE outbound_receipts
    SET status = 'sending', attempts = attempts + 1, claimed_at = $2, updated_at = $2
    WHERE id = $1 AND status = 'queued' AND next_attempt_at <= $2
    RETURNING ` + receiptColumns + `
), a AS (
    INSERT INTO outbound_attempts (receipt_id, n, started_at, result)
    SELECT id, attempts, $2, 'in_flight' FROM c
)
SELECT ` + receiptColumns + ` FROM c`

func (s *Store) ClaimReceipt(ctx context.Context, id ulid.ULID, now time.Time) (store.Receipt, error) {
	r, err := scanReceipt(s.pool.QueryRow(ctx, claimReceipt, uid(id), now))
	if errors.Is(err, pgx.ErrNoRows) {
		return store.Receipt{}, fmt.Errorf("claim receipt %s: %w: not queued, or not due yet", id, store.ErrConflict)
	}
	return r, mapErr("claim receipt", err)
}

const finishAttempt = `
WITH r AS (
    UPDATE outbound_receipts
    SET status = CASE WHEN $3 = 'queued' AND email LIKE ` + erasedLike + ` THEN 'failed' ELSE $3 END, next_attempt_at = COALESCE($4, next_attempt_at),
        claimed_at = NULL, error = CASE WHEN $5 <> '' AND email LIKE ` + erasedLike + ` THEN ` + withheldReply + ` ELSE $5 END, updated_at = $6
    WHERE id = $1 AND status = 'sending' AND attempts = $2
    RETURNING ` + receiptColumns + `
), a AS (
    UPDATE outbound_attempts SET finished_at = $6, result = $7,
        reply = CASE WHEN (SELECT email FROM r) LIKE ` + erasedLike + ` THEN '' ELSE $8 END
    WHERE receipt_id = $1 AND n = $2 AND EXISTS (SELECT 1 FROM r)
)
SELECT ` + receiptColumns + ` FROM r`

func (s *Store) FinishAttempt(ctx context.Context, id ulid.ULID, n int, o store.AttemptOutcome, now time.Time) (store.Receipt, error) {
	var next *time.Time
	if !o.NextAttemptAt.IsZero() {
		next = &o.NextAttemptAt
	}
	reason := o.Reason
	if reason == "" {
		reason = o.Reply
	}
	r, err := scanReceipt(s.pool.QueryRow(ctx, finishAttempt, uid(id), n, string(o.Status), next, reason, now, o.Result, o.Reply))
	if errors.Is(err, pgx.ErrNoRows) {
		return store.Receipt{}, fmt.Errorf("finish attempt %d of receipt %s: %w: not sending that attempt", n, id, store.ErrConflict)
	}
	return r, mapErr("finish attempt", err)
}

func (s *Store) ReceiptAttempts(ctx context.Context, id ulid.ULID) ([]store.Attempt, error) {
	rows, err := s.pool.Query(ctx, `SELECT n, started_at, finished_at, result, reply FROM outbound_attempts WHERE receipt_id = $1 ORDER BY n`, uid(id))
	if err != nil {
		return nil, mapErr("receipt attempts", err)
	}
	var out []store.Attempt
	var a store.Attempt
	var finished *time.Time
	_, err = pgx.ForEachRow(rows, []any{&a.N, &a.StartedAt, &finished, &a.Result, &a.Reply}, func() error {
		a.StartedAt = a.StartedAt.UTC()
		a.FinishedAt = time.Time{}
		if finished != nil {
			a.FinishedAt = finished.UTC()
		}
		out = append(out, a)
		return nil
	})
	return out, mapErr("receipt attempts", err)
}

const staleReceipts = `
(SELECT ` + receiptColumns + ` FROM outbound_receipts WHERE status = 'queued' AND next_attempt_at < $1 ORDER BY next_attempt_at LIMIT $3)
UNION ALL
(SELECT ` + receiptColumns + ` FROM outbound_receipts WHERE status = 'sending' AND claimed_at < $2 ORDER BY claimed_at LIMIT $3)
ORDER BY updated_at LIMIT $3`

func (s *Store) StaleReceipts(ctx context.Context, dueBefore, claimedBefore time.Time, limit int) ([]store.Receipt, error) {
	rows, err := s.pool.Query(ctx, staleReceipts, dueBefore, claimedBefore, limit)
	if err != nil {
		return nil, mapErr("stale receipts", err)
	}
	defer rows.Close()
	var out []store.Receipt
	for rows.Next() {
		r, err := scanReceipt(rows)
		if err != nil {
			return nil, mapErr("stale receipts", err)
		}
		out = append(out, r)
	}
	return out, mapErr("stale receipts", rows.Err())
}

const (
	putTemplate = `
INSERT INTO transactional_templates AS t (name, from_address, from_name, subject, text_body, html, version, created_at, updated_at)
VALUES ($1, $2, $3, $4, $5, $6, 1, $7, $7)
ON CONFLICT (name) DO UPDATE SET
    from_address = EXCLUDED.from_address, from_name = EXCLUDED.from_name, subject = EXCLUDED.subject,
    text_body = EXCLUDED.text_body, html = EXCLUDED.html, version = t.version + 1, updated_at = EXCLUDED.updated_at
RETURNING ` + templateColumns
	templateColumns = `name, from_address, from_name, subject, text_body, html, version, created_at, updated_at`
)

func scanTemplate(row pgx.Row) (store.Template, error) {
	var t store.Template
	err := row.Scan(&t.Name, &t.FromAddress, &t.FromName, &t.Subject, &t.Text, &t.HTML, &t.Version, &t.CreatedAt, &t.UpdatedAt)
	t.CreatedAt, t.UpdatedAt = t.CreatedAt.UTC(), t.UpdatedAt.UTC()
	return t, err
}

func (s *Store) PutTemplate(ctx context.Context, t store.Template, now time.Time) (store.Template, error) {
	if err := store.CheckTemplate(t); err != nil {
		return store.Template{}, fmt.Errorf("put template: %w", err)
	}
	out, err := scanTemplate(s.pool.QueryRow(ctx, putTemplate, t.Name, t.FromAddress, t.FromName, t.Subject, t.Text, t.HTML, now))
	return out, mapErr("put template", err)
}

func (s *Store) GetTemplate(ctx context.Context, name string) (store.Template, error) {
	t, err := scanTemplate(s.pool.QueryRow(ctx, `SELECT `+templateColumns+` FROM transactional_templates WHERE name = $1`, name))
	return t, mapErr("get template", err)
}

// purgeReceipts deletes a batch of finished receipts (their attempts go by
// ON DELETE CASCADE), found through outbound_receipts_finished.
const purgeReceipts = `
DELETE FROM outbound_receipts WHERE id IN (
    SELECT id FROM outbound_receipts
    WHERE status IN ('sent', 'failed', 'unknown') AND updated_at < $1
    LIMIT $2)`

func (s *Store) PurgeReceipts(ctx context.Context, finishedBefore time.Time, limit int) (int64, error) {
	tag, err := s.pool.Exec(ctx, purgeReceipts, finishedBefore, limit)
	if err != nil {
		return 0, mapErr("purge receipts", err)
	}
	return tag.RowsAffected(), nil
}
