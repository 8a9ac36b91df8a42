package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/rangecast/rangecast/internal/store"
)

var _ store.Receipts = (*Store)(nil)

const receiptColumns = `id, kind, key, email, payload_hash, payload, message_id, status, attempts,
	next_attempt_at, claimed_at, error, created_at, updated_at`

func scanReceipt(row interface{ Scan(...any) error }) (store.Receipt, error) {
	var r store.Receipt
	var rid []byte
	var status string
	var next, created, updated int64
	var claimed sql.NullInt64
	if err := row.Scan(&rid, &r.Kind, &r.Key, &r.Email, &r.PayloadHash, &r.Payload, &r.MessageID, &status, &r.Attempts,
		&next, &claimed, &r.Error, &created, &updated); err != nil {
		return store.Receipt{}, err
	}
	u, err := fromBlob(rid)
	if err != nil {
		return store.Receipt{}, err
	}
	r.ID, r.Status = u, store.ReceiptStatus(status)
	r.NextAttemptAt, r.ClaimedAt, r.CreatedAt, r.UpdatedAt = fromTS(next), nullTS(claimed), fromTS(created), fromTS(updated)
	return r, nil
}

const (
	insertReceipt = `
INSERT INTO outbound_receipts (id, kind, key, email, email_key, payload_hash, payload, message_id, status, next_attempt_at, created_at, updated_at)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, 'queued', ?9, ?10, ?10)
ON CONFLICT (kind, key, email_key) DO NOTHING`
	findReceipt = `SELECT ` + receiptColumns + ` FROM outbound_receipts WHERE kind = ?1 AND key = ?2 AND email_key = ?3`
)

// CreateReceipt inserts and reads back in one write transaction: the one
// writer connection serialises concurrent calls, so the first inserts and
// every later one finds its row.
func (s *Store) CreateReceipt(ctx context.Context, r store.Receipt) (store.Receipt, bool, error) {
	if err := store.CheckFields("kind", r.Kind, "idempotency key", r.Key, "email", r.Email); err != nil {
		return store.Receipt{}, false, fmt.Errorf("create receipt: %w", err)
	}
	var out store.Receipt
	var created bool
	err := s.write(ctx, "create receipt", func(tx *sql.Tx) error {
		// A receipt erased since keeps its idempotency key (eraseReceipts):
		// the request is a replay of it, not a new message.
		erased, err := scanReceipt(tx.QueryRowContext(ctx, findReceipt, r.Kind, store.ErasedIdempotencyKey(s.erasureKey, r.Key), store.ErasedReceiptKey(s.erasureKey, r.Email)))
		if err == nil {
			out, created = store.MatchErased(s.erasureKey, erased, r.PayloadHash), false
			return nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		res, err := tx.ExecContext(ctx, insertReceipt, id(r.ID), r.Kind, r.Key, r.Email, emailKey(r.Email), r.PayloadHash, r.Payload,
			r.MessageID, ts(r.NextAttemptAt), ts(r.CreatedAt))
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return err
		}
		created = n == 1
		out, err = scanReceipt(tx.QueryRowContext(ctx, findReceipt, r.Kind, r.Key, emailKey(r.Email)))
		return err
	})
	if err != nil {
		return store.Receipt{}, false, err
	}
	return out, created, nil
}

func (s *Store) FindReceipt(ctx context.Context, kind, key, email string) (store.Receipt, error) {
	r, err := scanReceipt(s.r.QueryRowContext(ctx, findReceipt, kind, key, emailKey(email)))
	return r, mapErr("find receipt", err)
}

func (s *Store) GetReceipt(ctx context.Context, rid ulid.ULID) (store.Receipt, error) {
	r, err := scanReceipt(s.r.QueryRowContext(ctx, `SELECT `+receiptColumns+` FROM outbound_receipts WHERE id = ?1`, id(rid)))
	return r, mapErr("get receipt", err)
}

const (
	claimReceipt = `
UPDATE outbound_receipts
SET status = 'sending', attempts = attempts + 1, claimed_at = ?2, updated_at = ?2
WHERE id = ?1 AND status = 'queued' AND next_attempt_at <= ?2
RETURNING ` + receiptColumns
	openAttempt = `INSERT INTO outbound_attempts (receipt_id, n, started_at, result) VALUES (?1, ?2, ?3, 'in_flight')`
)

func (s *Store) ClaimReceipt(ctx context.Context, rid ulid.ULID, now time.Time) (store.Receipt, error) {
	var r store.Receipt
	err := s.write(ctx, "claim receipt", func(tx *sql.Tx) error {
		var err error
		if r, err = scanReceipt(tx.QueryRowContext(ctx, claimReceipt, id(rid), ts(now))); err != nil {
			if errors.Is(err, sql.ErrNoRows) {
				return fmt.Errorf("receipt %s: %w: not queued, or not due yet", rid, store.ErrConflict)
			}
			return err
		}
		_, err = tx.ExecContext(ctx, openAttempt, id(rid), r.Attempts, ts(now))
		return err
	})
	if err != nil {
		return store.Receipt{}, err
	}
	return r, nil
}

const (
	finishReceipt = `
UPDATE outbound_receipts
SET status = CASE WHEN ?3 = 'queued' AND email LIKE ` + erasedLike + ` THEN 'failed' ELSE ?3 END, next_attempt_at = coalesce(?4, next_attempt_at), claimed_at = NULL, error = CASE WHEN ?5 <> '' AND email LIKE ` + erasedLike + ` THEN ` + withheldReply + ` ELSE ?5 END, updated_at = ?6
WHERE id = ?1 AND status = 'sending' AND attempts = ?2
RETURNING ` + receiptColumns
	closeAttempt = `UPDATE outbound_attempts SET finished_at = ?3, result = ?4,
    reply = CASE WHEN (SELECT email FROM outbound_receipts WHERE id = ?1) LIKE ` + erasedLike + ` THEN '' ELSE ?5 END
WHERE receipt_id = ?1 AND n = ?2`
)

func (s *Store) FinishAttempt(ctx context.Context, rid ulid.ULID, n int, o store.AttemptOutcome, now time.Time) (store.Receipt, error) {
	var next any
	if !o.NextAttemptAt.IsZero() {
		next = ts(o.NextAttemptAt)
	}
	reason := o.Reason
	if reason == "" {
		reason = o.Reply
	}
	var r store.Receipt
	err := s.write(ctx, "finish attempt", func(tx *sql.Tx) error {
		var err error
		if r, err = scanReceipt(tx.QueryRowContext(ctx, finishReceipt, id(rid), n, string(o.Status), next, reason, ts(now))); err != nil {
			if errors.Is(err, sql.ErrNoRows) {
				return fmt.Errorf("attempt %d of receipt %s: %w: not sending that attempt", n, rid, store.ErrConflict)
			}
			return err
		}
		_, err = tx.ExecContext(ctx, closeAttempt, id(rid), n, ts(now), o.Result, o.Reply)
		return err
	})
	if err != nil {
		return store.Receipt{}, err
	}
	return r, nil
}

func (s *Store) ReceiptAttempts(ctx context.Context, rid ulid.ULID) ([]store.Attempt, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT n, started_at, finished_at, result, reply FROM outbound_attempts WHERE receipt_id = ?1 ORDER BY n`, id(rid))
	if err != nil {
		return nil, mapErr("receipt attempts", err)
	}
	defer rows.Close()
	var out []store.Attempt
	for rows.Next() {
		var a store.Attempt
		var started int64
		var finished sql.NullInt64
		if err := rows.Scan(&a.N, &started, &finished, &a.Result, &a.Reply); err != nil {
			return nil, mapErr("receipt attempts", err)
		}
		a.StartedAt, a.FinishedAt = fromTS(started), nullTS(finished)
		out = append(out, a)
	}
	return out, mapErr("receipt attempts", rows.Err())
}

const staleReceipts = `
SELECT * FROM (SELECT ` + receiptColumns + ` FROM outbound_receipts WHERE status = 'queued' AND next_attempt_at < ?1 ORDER BY next_attempt_at LIMIT ?3)
UNION ALL
SELECT * FROM (SELECT ` + receiptColumns + ` FROM outbound_receipts WHERE status = 'sending' AND claimed_at < ?2 ORDER BY claimed_at LIMIT ?3)
ORDER BY updated_at LIMIT ?3`

func (s *Store) StaleReceipts(ctx context.Context, dueBefore, claimedBefore time.Time, limit int) ([]store.Receipt, error) {
	rows, err := s.r.QueryContext(ctx, staleReceipts, ts(dueBefore), ts(claimedBefore), limit)
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
VALUES (?1, ?2, ?3, ?4, ?5, ?6, 1, ?7, ?7)
ON CONFLICT (name) DO UPDATE SET
    from_address = excluded.from_address, from_name = excluded.from_name, subject = excluded.subject,
    text_body = excluded.text_body, html = excluded.html, version = t.version + 1, updated_at = excluded.updated_at
RETURNING ` + templateColumns
	templateColumns = `name, from_address, from_name, subject, text_body, html, version, created_at, updated_at`
)

func scanTemplate(row interface{ Scan(...any) error }) (store.Template, error) {
	var t store.Template
	var created, updated int64
	err := row.Scan(&t.Name, &t.FromAddress, &t.FromName, &t.Subject, &t.Text, &t.HTML, &t.Version, &created, &updated)
	t.CreatedAt, t.UpdatedAt = fromTS(created), fromTS(updated)
	return t, err
}

func (s *Store) PutTemplate(ctx context.Context, t store.Template, now time.Time) (store.Template, error) {
	if err := store.CheckTemplate(t); err != nil {
		return store.Template{}, fmt.Errorf("put template: %w", err)
	}
	var out store.Template
	err := s.write(ctx, "put template", func(tx *sql.Tx) error {
		var err error
		out, err = scanTemplate(tx.QueryRowContext(ctx, putTemplate, t.Name, t.FromAddress, t.FromName, t.Subject, t.Text, t.HTML, ts(now)))
		return err
	})
	return out, err
}

func (s *Store) GetTemplate(ctx context.Context, name string) (store.Template, error) {
	t, err := scanTemplate(s.r.QueryRowContext(ctx, `SELECT `+templateColumns+` FROM transactional_templates WHERE name = ?1`, name))
	return t, mapErr("get template", err)
}

// purgeReceipts deletes a batch of finished receipts (their attempts go by
// ON DELETE CASCADE), found through outbound_receipts_finished.
const purgeReceipts = `
DELETE FROM outbound_receipts WHERE id IN (
    SELECT id FROM outbound_receipts
    WHERE status IN ('sent', 'failed', 'unknown') AND updated_at < ?1
    LIMIT ?2)`

func (s *Store) PurgeReceipts(ctx context.Context, finishedBefore time.Time, limit int) (int64, error) {
	return s.execCount(ctx, "purge receipts", purgeReceipts, ts(finishedBefore), limit)
}
