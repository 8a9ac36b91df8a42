package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/rangecast/rangecast/internal/store"
)

var _ store.Erasure = (*Store)(nil)

func (s *Store) Erased(ctx context.Context, email string) (bool, error) {
	var ok bool
	err := s.r.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM erased_addresses WHERE hash = ?)`, store.ErasureHash(s.erasureKey, email)).Scan(&ok)
	return ok, mapErr("erased", err)
}

func (s *Store) ErasedAmong(ctx context.Context, emails []string) (int64, error) {
	hashes := make([]string, len(emails))
	for i, e := range emails {
		hashes[i] = store.ErasureHash(s.erasureKey, e)
	}
	list, err := json.Marshal(hashes)
	if err != nil {
		return 0, err
	}
	var n int64
	err = s.r.QueryRowContext(ctx, `SELECT count(*) FROM erased_addresses WHERE hash IN (SELECT value FROM json_each(?))`, string(list)).Scan(&n)
	return n, mapErr("erased among", err)
}

// eraseBatch bounds the addresses of one erasure transaction, which holds
// the write lock while it runs.
const eraseBatch = 100

// Erase follows the Postgres store (see there for what each step keeps).
// Claims and erasures are write transactions, one at a time, so a claim
// after an erasure finds no contact and claims nothing.
func (s *Store) Erase(ctx context.Context, emails []string, now time.Time) ([]store.Erased, error) {
	out := make([]store.Erased, 0, len(emails))
	for i := 0; i < len(emails); i += eraseBatch {
		batch := emails[i:min(i+eraseBatch, len(emails))]
		res := make([]store.Erased, len(batch))
		err := s.write(ctx, "erase contacts", func(tx *sql.Tx) error {
			for j, email := range batch {
				res[j] = store.Erased{Email: email}
				if err := s.eraseOne(ctx, tx, &res[j], now); err != nil {
					return err
				}
			}
			if err := eraseUnmatched(ctx, tx, res); err != nil {
				return err
			}
			return eraseReasons(ctx, tx, res)
		})
		if err != nil {
			return out, err
		}
		out = append(out, res...)
	}
	return out, nil
}

func (s *Store) eraseOne(ctx context.Context, tx *sql.Tx, e *store.Erased, now time.Time) error {
	if _, err := tx.ExecContext(ctx, `INSERT INTO erased_addresses (hash, erased_at) VALUES (?, ?) ON CONFLICT (hash) DO NOTHING`,
		store.ErasureHash(s.erasureKey, e.Email), ts(now)); err != nil {
		return err
	}
	var cid []byte
	var name string
	err := tx.QueryRowContext(ctx, `DELETE FROM contacts WHERE email_key = ? RETURNING id, name`, emailKey(e.Email)).Scan(&cid, &name)
	e.SetName(name)
	switch {
	case errors.Is(err, sql.ErrNoRows):
	case err != nil:
		return err
	default:
		if e.Contact, err = fromBlob(cid); err != nil {
			return err
		}
		if err := eraseLedger(ctx, tx, e, now); err != nil {
			return err
		}
	}
	return s.eraseReceipts(ctx, tx, e, now)
}

// eraseUnmatched clears the detail of events that matched no ledger row
// and quote one of the batch's addresses, in one scan per batch.
func eraseUnmatched(ctx context.Context, tx *sql.Tx, out []store.Erased) error {
	var where []string
	var args []any
	for _, e := range out {
		where = append(where, `lower(detail) LIKE ? ESCAPE '\'`)
		args = append(args, "%"+likeEscaper.Replace(strings.ToLower(e.Email))+"%")
	}
	rows, err := tx.QueryContext(ctx, `SELECT provider, event_id, lower(detail) FROM delivery_events
WHERE contact_id IS NULL AND detail <> '' AND (`+strings.Join(where, " OR ")+`)`, args...)
	if err != nil {
		return err
	}
	type key struct{ provider, id string }
	var keys []key
	for rows.Next() {
		var k key
		var detail string
		if err := rows.Scan(&k.provider, &k.id, &detail); err != nil {
			rows.Close()
			return err
		}
		keys = append(keys, k)
		for i := range out {
			if strings.Contains(detail, strings.ToLower(out[i].Email)) {
				out[i].Events++
			}
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, k := range keys {
		if _, err := tx.ExecContext(ctx, `UPDATE delivery_events SET detail = '' WHERE provider = ? AND event_id = ?`, k.provider, k.id); err != nil {
			return err
		}
	}
	return nil
}

// likeEscaper escapes LIKE's wildcards (an address may hold '_').
var likeEscaper = strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`)

// erasedLike matches the email of an erased contact's ledger row or
// receipt (store.ErasedToken). Outcomes, events and attempts written after
// an erasure, for a send that was in flight, test it: a reply written then
// becomes store.WithheldReply (it may quote the address), and a receipt
// that would be retried fails instead (its payload is gone).
const erasedLike = `'` + store.ErasedToken + `%'`

// withheldReply is store.WithheldReply as an SQL literal.
const withheldReply = `'` + store.WithheldReply + `'`

// erasedDeferral and erasedReceipt are the errors of a deferred row and a
// queued receipt whose person was erased.
const (
	// store.InDoubtResent and store.ErasedInDoubt as SQL literals: a
	// deferred row released after an attempt that may have been delivered
	// is recorded unknown, not failed.
	inDoubtResent    = `'` + store.InDoubtResent + `'`
	erasedInDoubt    = `'` + store.ErasedInDoubt + `'`
	erasedBeforeSend = `'` + store.ErasedBeforeSend + `'`
	erasedDeferral   = "not sent: the contact was erased before its retry"
	erasedReceipt    = "not sent: the recipient was erased"
)

func eraseLedger(ctx context.Context, tx *sql.Tx, e *store.Erased, now time.Time) error {
	rows, err := tx.QueryContext(ctx, `SELECT broadcast_id, email, error FROM broadcast_sends WHERE contact_id = ?`, id(e.Contact))
	if err != nil {
		return err
	}
	type row struct {
		bid          []byte
		email, reply string
	}
	var todo []row
	for rows.Next() {
		var r row
		if err := rows.Scan(&r.bid, &r.email, &r.reply); err != nil {
			rows.Close()
			return err
		}
		todo = append(todo, r)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	token := store.NewErasedToken()
	for _, r := range todo {
		reply := store.ScrubAddress(store.ScrubAddress(r.reply, r.email), e.Email)
		if _, err := tx.ExecContext(ctx, `
UPDATE broadcast_sends SET email = ?3,
    error = CASE WHEN status <> 'deferred' THEN ?4 WHEN in_doubt THEN `+erasedInDoubt+` ELSE ?5 END,
    retry_at = CASE WHEN status = 'deferred' THEN NULL ELSE retry_at END,
    status = CASE WHEN status <> 'deferred' THEN status WHEN in_doubt THEN 'unknown' ELSE 'failed' END, updated_at = ?6
WHERE broadcast_id = ?1 AND contact_id = ?2`, r.bid, id(e.Contact), token, reply, erasedDeferral, ts(now)); err != nil {
			return err
		}
		e.Sends++
	}
	res, err := tx.ExecContext(ctx, `UPDATE delivery_events SET detail = '' WHERE contact_id = ?`, id(e.Contact))
	if err != nil {
		return err
	}
	n, _ := res.RowsAffected()
	e.Events += n
	return nil
}

// eraseReceipts anonymises the address's transactional receipts as the
// Postgres store's does: the keys become keyed hashes, by which a request
// repeated under the idempotency key still finds the receipt.
func (s *Store) eraseReceipts(ctx context.Context, tx *sql.Tx, e *store.Erased, now time.Time) error {
	rows, err := tx.QueryContext(ctx, `SELECT id, key, payload_hash FROM outbound_receipts WHERE email_key = ?`, emailKey(e.Email))
	if err != nil {
		return err
	}
	type receipt struct {
		id               []byte
		key, payloadHash string
	}
	found, err := collectRows(rows, func(rows *sql.Rows) (r receipt, err error) {
		return r, rows.Scan(&r.id, &r.key, &r.payloadHash)
	})
	if err != nil {
		return err
	}
	erasedEmailKey := store.ErasedReceiptKey(s.erasureKey, e.Email)
	for _, r := range found {
		if _, err := tx.ExecContext(ctx, `
UPDATE outbound_receipts SET email = ?2, email_key = ?5, key = ?6, payload = X'', payload_hash = ?7,
    error = CASE WHEN status = 'queued' THEN ?3 ELSE '' END,
    status = CASE WHEN status = 'queued' THEN 'failed' ELSE status END, updated_at = ?4
WHERE id = ?1`, r.id, store.NewErasedToken(), erasedReceipt, ts(now), erasedEmailKey, store.ErasedIdempotencyKey(s.erasureKey, r.key),
			store.ErasedPayloadHash(s.erasureKey, r.payloadHash)); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE outbound_attempts SET reply = '' WHERE receipt_id = ?`, r.id); err != nil {
			return err
		}
		e.Receipts++
	}
	return nil
}

// eraseReasons withholds the batch's addresses in broadcasts' reasons, as
// the Postgres store's does.
func eraseReasons(ctx context.Context, tx *sql.Tx, out []store.Erased) error {
	rows, err := tx.QueryContext(ctx, `SELECT id, reason FROM broadcasts WHERE reason <> ''`)
	if err != nil {
		return err
	}
	type reason struct {
		id   []byte
		text string
	}
	found, err := collectRows(rows, func(rows *sql.Rows) (r reason, err error) {
		return r, rows.Scan(&r.id, &r.text)
	})
	if err != nil {
		return err
	}
	for _, r := range found {
		scrubbed := r.text
		for _, e := range out {
			scrubbed = e.ScrubReason(scrubbed)
		}
		if scrubbed != r.text {
			if _, err := tx.ExecContext(ctx, `UPDATE broadcasts SET reason = ?2 WHERE id = ?1`, r.id, scrubbed); err != nil {
				return err
			}
		}
	}
	return nil
}

// collectRows reads every row of rows with scan, and closes rows.
func collectRows[T any](rows *sql.Rows, scan func(*sql.Rows) (T, error)) ([]T, error) {
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}
