package postgres

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/oklog/ulid/v2"

	"github.com/rangecast/rangecast/internal/store"
)

var _ store.Erasure = (*Store)(nil)

// erasureHashes is store.ErasureHash of each email.
func (s *Store) erasureHashes(emails []string) []string {
	out := make([]string, len(emails))
	for i, e := range emails {
		out[i] = store.ErasureHash(s.erasureKey, e)
	}
	return out
}

func (s *Store) Erased(ctx context.Context, email string) (bool, error) {
	var ok bool
	err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM erased_addresses WHERE hash = $1)`, store.ErasureHash(s.erasureKey, email)).Scan(&ok)
	return ok, mapErr("erased", err)
}

func (s *Store) ErasedAmong(ctx context.Context, emails []string) (int64, error) {
	var n int64
	err := s.pool.QueryRow(ctx, `SELECT count(*) FROM erased_addresses WHERE hash = ANY($1)`, s.erasureHashes(emails)).Scan(&n)
	return n, mapErr("erased among", err)
}

// eraseBatch bounds the addresses of one erasure transaction: it holds the
// ledger's lock (below) while it runs.
const eraseBatch = 100

func (s *Store) Erase(ctx context.Context, emails []string, now time.Time) ([]store.Erased, error) {
	out := make([]store.Erased, 0, len(emails))
	for i := 0; i < len(emails); i += eraseBatch {
		batch := emails[i:min(i+eraseBatch, len(emails))]
		var res []store.Erased
		// Erasure locks the ledger and then contacts, the reverse of an
		// unsubscribe: a deadlock is possible, and retrying the whole
		// batch is safe.
		err := retryAborted(func() (err error) {
			res, err = s.eraseTx(ctx, batch, now)
			return err
		})
		if err != nil {
			return out, mapErr("erase contacts", err)
		}
		out = append(out, res...)
	}
	return out, nil
}

func (s *Store) eraseTx(ctx context.Context, emails []string, now time.Time) ([]store.Erased, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	// The lock waits for every claim and outcome write in progress and holds
	// off new ones until this commits. A claim committed before it is
	// anonymised below; a claim after it runs its statement on a snapshot
	// without the contact and claims nothing (claimQuery), so no page sends
	// to an erased address it read a moment before, and no ledger row is
	// written with it afterwards. SHARE ROW EXCLUSIVE also excludes another
	// erasure.
	//
	// The erased addresses first: an import holds them SHARE (so that it
	// sees an erasure's hashes), and an erasure waiting for an import
	// while holding the ledger would stall every claim and outcome write
	// of every broadcast for that import batch.
	if _, err := tx.Exec(ctx, `LOCK TABLE erased_addresses IN ROW EXCLUSIVE MODE`); err != nil {
		return nil, err
	}
	if _, err := tx.Exec(ctx, `LOCK TABLE broadcast_sends IN SHARE ROW EXCLUSIVE MODE`); err != nil {
		return nil, err
	}
	out := make([]store.Erased, len(emails))
	for i, email := range emails {
		out[i].Email = email
		if _, err := tx.Exec(ctx, `INSERT INTO erased_addresses (hash, erased_at) VALUES ($1, $2) ON CONFLICT (hash) DO NOTHING`,
			store.ErasureHash(s.erasureKey, email), now); err != nil {
			return nil, err
		}
		var cid [16]byte
		var name string
		err := tx.QueryRow(ctx, `DELETE FROM contacts WHERE email_key = $1 RETURNING id, name`, keys([]string{email})[0]).Scan(&cid, &name)
		out[i].SetName(name)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
		case err != nil:
			return nil, err
		default:
			out[i].Contact = ulid.ULID(cid)
			if err := eraseLedger(ctx, tx, &out[i], now); err != nil {
				return nil, err
			}
		}
		if err := s.eraseReceipts(ctx, tx, &out[i], now); err != nil {
			return nil, err
		}
	}
	if err := eraseUnmatched(ctx, tx, out); err != nil {
		return nil, err
	}
	if err := eraseReasons(ctx, tx, out); err != nil {
		return nil, err
	}
	return out, tx.Commit(ctx)
}

// eraseReasons withholds the batch's addresses in broadcasts' reasons: one
// written before reasons named a contact by id quoted the recipient a halt
// or a failure was about ("1 message failed, e.g. ann@…"; tester), or a
// relay's reply quoting their name. Broadcasts are few; a row is locked
// only to change it.
func eraseReasons(ctx context.Context, tx pgx.Tx, out []store.Erased) error {
	rows, err := tx.Query(ctx, `SELECT id, reason FROM broadcasts WHERE reason <> ''`)
	if err != nil {
		return err
	}
	type reason struct {
		id   [16]byte
		text string
	}
	found, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (reason, error) {
		var r reason
		return r, row.Scan(&r.id, &r.text)
	})
	if err != nil {
		return err
	}
	for _, r := range found {
		if scrubbed := scrubReason(r.text, out); scrubbed != r.text {
			if _, err := tx.Exec(ctx, `UPDATE broadcasts SET reason = $2 WHERE id = $1 AND reason = $3`, r.id, scrubbed, r.text); err != nil {
				return err
			}
		}
	}
	return nil
}

// scrubReason is reason with every address (and name) of out withheld.
func scrubReason(reason string, out []store.Erased) string {
	for _, e := range out {
		reason = e.ScrubReason(reason)
	}
	return reason
}

// eraseUnmatched clears the detail of events that matched no ledger row
// (so carry no contact) and quote one of the batch's addresses: one scan
// of the unmatched events per batch, not per address.
func eraseUnmatched(ctx context.Context, tx pgx.Tx, out []store.Erased) error {
	patterns := make([]string, len(out))
	for i, e := range out {
		patterns[i] = "%" + likeEscaper.Replace(strings.ToLower(e.Email)) + "%"
	}
	rows, err := tx.Query(ctx, `
SELECT provider, event_id, lower(detail) FROM delivery_events
WHERE contact_id IS NULL AND detail <> '' AND lower(detail) LIKE ANY($1::text[])
FOR UPDATE`, patterns)
	if err != nil {
		return err
	}
	var providers, ids []string
	var provider, id, detail string
	if _, err := pgx.ForEachRow(rows, []any{&provider, &id, &detail}, func() error {
		providers, ids = append(providers, provider), append(ids, id)
		for i := range out {
			if strings.Contains(detail, strings.ToLower(out[i].Email)) {
				out[i].Events++
			}
		}
		return nil
	}); err != nil {
		return err
	}
	if len(ids) == 0 {
		return nil
	}
	_, err = tx.Exec(ctx, `
UPDATE delivery_events d SET detail = '' FROM unnest($1::text[], $2::text[]) AS u(provider, event_id)
WHERE d.provider = u.provider AND d.event_id = u.event_id`, providers, ids)
	return err
}

// likeEscaper escapes LIKE's wildcards (an address may hold '_'), with
// Postgres's default escape character.
var likeEscaper = strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`)

// eraseLedger anonymises the erased contact's ledger rows and events. A
// row keeps its status, so the broadcast's counts do not move, except a
// deferred one, which would otherwise wait for a retry that can never
// happen: it fails, with the reason, or, released by the reconciler to be
// sent again after an attempt that may have been delivered
// (store.InDoubtResent), it is recorded unknown. A claimed row is left claimed: its
// worker (or the reconciler) records its outcome, and only the token is
// left to find.
func eraseLedger(ctx context.Context, tx pgx.Tx, e *store.Erased, now time.Time) error {
	rows, err := tx.Query(ctx, `SELECT broadcast_id, email, error FROM broadcast_sends WHERE contact_id = $1`, uid(e.Contact))
	if err != nil {
		return err
	}
	type row struct {
		bid          [16]byte
		email, reply string
	}
	var todo []row
	var r row
	if _, err := pgx.ForEachRow(rows, []any{&r.bid, &r.email, &r.reply}, func() error {
		todo = append(todo, r)
		return nil
	}); err != nil {
		return err
	}
	token := store.NewErasedToken()
	for _, r := range todo {
		reply := store.ScrubAddress(store.ScrubAddress(r.reply, r.email), e.Email)
		if _, err := tx.Exec(ctx, `
UPDATE broadcast_sends SET email = $3,
    error = CASE WHEN status <> 'deferred' THEN $4 WHEN in_doubt THEN `+erasedInDoubt+` ELSE $5 END,
    status = CASE WHEN status <> 'deferred' THEN status WHEN in_doubt THEN 'unknown' ELSE 'failed' END,
    retry_at = CASE WHEN status = 'deferred' THEN NULL ELSE retry_at END, updated_at = $6
WHERE broadcast_id = $1 AND contact_id = $2`, r.bid, uid(e.Contact), token, reply, erasedDeferral, now); err != nil {
			return err
		}
		e.Sends++
	}
	tag, err := tx.Exec(ctx, `UPDATE delivery_events SET detail = '' WHERE contact_id = $1`, uid(e.Contact))
	if err != nil {
		return err
	}
	e.Events += tag.RowsAffected()
	return nil
}

// erasedLike matches the email of an erased contact's ledger row or
// receipt (store.ErasedToken). Outcomes, events and attempts written after
// an erasure, for a send that was in flight, test it: a reply written then
// becomes store.WithheldReply (it may quote the address), and a receipt
// that would be retried fails instead (its payload is gone).
const erasedLike = `'` + store.ErasedToken + `%'`

// withheldReply is store.WithheldReply as an SQL literal.
const withheldReply = `'` + store.WithheldReply + `'`

// erasedDeferral is the error of a deferred row whose contact was erased.
const erasedDeferral = "not sent: the contact was erased before its retry"

// inDoubtResent and erasedInDoubt are store.InDoubtResent and
// store.ErasedInDoubt as SQL literals.
const (
	inDoubtResent    = `'` + store.InDoubtResent + `'`
	erasedInDoubt    = `'` + store.ErasedInDoubt + `'`
	erasedBeforeSend = `'` + store.ErasedBeforeSend + `'`
)

// eraseReceipts anonymises the address's transactional receipts: the row
// (status, attempts, times) stays, the address, payload, replies and the
// idempotency key in clear go; the keys become keyed hashes
// (store.ErasedReceiptKey, store.ErasedIdempotencyKey), so a request
// repeated under the key still finds it. A queued receipt fails; a sending
// one is left to its worker, whose outcome finds the row by id.
func (s *Store) eraseReceipts(ctx context.Context, tx pgx.Tx, e *store.Erased, now time.Time) error {
	rows, err := tx.Query(ctx, `SELECT id, key, payload_hash FROM outbound_receipts WHERE email_key = $1`, keys([]string{e.Email})[0])
	if err != nil {
		return err
	}
	type receipt struct {
		id               [16]byte
		key, payloadHash string
	}
	found, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (receipt, error) {
		var r receipt
		return r, row.Scan(&r.id, &r.key, &r.payloadHash)
	})
	if err != nil {
		return err
	}
	emailKey := store.ErasedReceiptKey(s.erasureKey, e.Email)
	for _, r := range found {
		if _, err := tx.Exec(ctx, `
UPDATE outbound_receipts SET email = $2, email_key = $5, key = $6, payload = ''::bytea, payload_hash = $7,
    error = CASE WHEN status = 'queued' THEN $3 ELSE '' END,
    status = CASE WHEN status = 'queued' THEN 'failed' ELSE status END, updated_at = $4
WHERE id = $1`, r.id, store.NewErasedToken(), erasedReceipt, now, emailKey, store.ErasedIdempotencyKey(s.erasureKey, r.key),
			store.ErasedPayloadHash(s.erasureKey, r.payloadHash)); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE outbound_attempts SET reply = '' WHERE receipt_id = $1`, r.id); err != nil {
			return err
		}
		e.Receipts++
	}
	return nil
}

// erasedReceipt is the error of a queued receipt whose recipient was erased.
const erasedReceipt = "not sent: the recipient was erased"
