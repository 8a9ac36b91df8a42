package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/oklog/ulid/v2"

	"github.com/rangecast/rangecast/internal/address"
	"github.com/rangecast/rangecast/internal/store"
)

// rankOf is store.SendStatus.Rank in SQL: the guard of every statement that
// moves a ledger row past its send outcome compares it with the rank the new
// status reaches, inside the UPDATE, so concurrent or late events are
// decided by the row as it is when the update takes its lock.
const rankOf = `(CASE status WHEN 'claimed' THEN 0 WHEN 'deferred' THEN 0 WHEN 'unknown' THEN 0
 WHEN 'sent' THEN 1 WHEN 'delivered' THEN 2 WHEN 'opened' THEN 3 WHEN 'clicked' THEN 4 ELSE 99 END)`

// sameMessageID matches the row's stored Message-ID (kept with or without
// angle brackets) against $3, case-insensitively: providers echo the header
// and may fold the domain's case.
const sameMessageID = `lower(trim(both '<>' from message_id)) = lower($3)`

const (
	// matchEvent locks the row, so the status and flag it reads are the ones
	// applyEvent replaces: the reputation delta is exact under concurrent
	// events.
	matchEvent = `
SELECT status, accepted, email FROM broadcast_sends
WHERE broadcast_id = $1 AND contact_id = $2 AND ` + sameMessageID + `
FOR UPDATE`

	insertEvent = `
INSERT INTO delivery_events (provider, event_id, type, message_id, broadcast_id, contact_id, detail, occurred_at, received_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
ON CONFLICT (provider, event_id) DO NOTHING`

	// applyEvent is the rank guard: $4 is the rank the new status reaches.
	// Any report from the provider proves the message went out: accepted.
	// A row in doubt
	// (store.InDoubtResent, or reopened unknown) whose one attempt is
	// the one in doubt (deferred or unknown, attempt 1) was sent once,
	// and the report says that once arrived: the doubt is settled.
	// Accepted, claimed (the second attempt in flight) or past a second
	// attempt (itself in doubt: the report, by Message-ID, cannot say
	// which attempt arrived), there may be two copies.
	applyEvent = `
UPDATE broadcast_sends SET status = $5, error = CASE WHEN $6 = '' THEN error WHEN email LIKE ` + erasedLike + ` THEN ` + withheldReply + ` ELSE $6 END, updated_at = $7, accepted = true,
    in_doubt = in_doubt AND (accepted OR status = 'claimed' OR attempt > 1)
WHERE broadcast_id = $1 AND contact_id = $2 AND ` + sameMessageID + ` AND ` + rankOf + ` < $4
RETURNING status`

	// suppressContact records why, unless the contact was already
	// suppressed for a reason of its own.
	suppressContact = `UPDATE contacts SET suppressed = true, updated_at = $2,
    suppressed_reason = CASE WHEN suppressed AND suppressed_reason <> '' THEN suppressed_reason ELSE $3 END,
    suppressed_at = CASE WHEN suppressed AND suppressed_at IS NOT NULL THEN suppressed_at ELSE $2 END
WHERE id = $1`
)

func (s *Store) RecordEvent(ctx context.Context, ev store.DeliveryEvent, now time.Time) (store.EventResult, error) {
	if ev.Provider == "" || ev.EventID == "" || !ev.Type.Valid() {
		return store.EventResult{}, fmt.Errorf("record event: provider %q, event id %q, type %q: all are required", ev.Provider, ev.EventID, ev.Type)
	}
	// An event locks its ledger row, then the contact (a suppression),
	// then, for an unsubscribe, the contact's other rows: a deadlock with
	// an unsubscribe or an outcome write is possible, and the whole event
	// is safe to apply again (nothing of an aborted try is kept).
	var res store.EventResult
	err := retryAborted(func() (err error) {
		res, err = s.recordEvent(ctx, ev, now)
		return err
	})
	return res, err
}

func (s *Store) recordEvent(ctx context.Context, ev store.DeliveryEvent, now time.Time) (store.EventResult, error) {
	var res store.EventResult
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return res, mapErr("record event", err)
	}
	ev.MessageID = store.BareMessageID(ev.MessageID)
	defer tx.Rollback(ctx) //nolint:errcheck
	var bid, cid *[16]byte
	var accepted bool
	if b, c, ok := store.ParseMessageID(ev.MessageID); ok {
		var status, email string
		err := tx.QueryRow(ctx, matchEvent, uid(b), uid(c), ev.MessageID).Scan(&status, &accepted, &email)
		switch {
		case err == nil:
			if strings.HasPrefix(email, store.ErasedToken) {
				ev.Detail = "" // the contact was erased: keep the event, not what it quotes
			}
			res.Matched, res.BroadcastID, res.ContactID, res.Status = true, b, c, store.SendStatus(status)
			bb, cc := uid(b), uid(c)
			bid, cid = &bb, &cc
		case !errors.Is(err, pgx.ErrNoRows):
			return res, mapErr("record event: match", err)
		}
	} else if rid, ok := store.ParseTxMessageID(ev.MessageID); ok {
		var email string
		err := tx.QueryRow(ctx, `SELECT email FROM outbound_receipts WHERE id = $1`, uid(rid)).Scan(&email)
		if err == nil && strings.HasPrefix(email, store.ErasedToken) {
			ev.Detail = "" // the recipient was erased: keep the event, not what it quotes
		}
		if err == nil {
			var c [16]byte
			err = tx.QueryRow(ctx, `SELECT id FROM contacts WHERE email_key = $1`, address.Key(email)).Scan(&c)
			res.Receipt, res.ContactID = err == nil, ulid.ULID(c)
		}
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return res, mapErr("record event: match receipt", err)
		}
	}
	tag, err := tx.Exec(ctx, insertEvent, ev.Provider, ev.EventID, string(ev.Type), ev.MessageID, bid, cid, ev.Detail, ev.OccurredAt, now)
	if err != nil {
		return res, mapErr("record event", err)
	}
	if tag.RowsAffected() == 0 {
		return store.EventResult{Duplicate: true}, nil
	}
	if res.Matched {
		if to := ev.Type.Status(); to != "" {
			var status string
			err := tx.QueryRow(ctx, applyEvent, uid(res.BroadcastID), uid(res.ContactID), ev.MessageID,
				ev.Type.TargetRank(), string(to), eventError(ev), now).Scan(&status)
			switch {
			case err == nil:
				d := store.ReputationOf(store.SendStatus(status), true).Minus(store.ReputationOf(res.Status, accepted))
				if err := addReputation(ctx, tx, res.BroadcastID, d); err != nil {
					return res, mapErr("record event", err)
				}
				res.Changed, res.Status = true, store.SendStatus(status)
			case !errors.Is(err, pgx.ErrNoRows):
				return res, mapErr("record event: apply", err)
			}
		}
		if err := suppressFor(ctx, tx, ev, &res, now); err != nil {
			return res, err
		}
		if ev.Type == store.EventUnsubscribed {
			// The provider's unsubscribe is the person's: they get nothing
			// from the next page on, like after our own link.
			if err := unsubscribeTx(ctx, tx, res.ContactID, res.BroadcastID, now); err != nil && !errors.Is(err, store.ErrNotFound) {
				return res, err
			}
		}
	}
	if res.Receipt {
		if err := suppressFor(ctx, tx, ev, &res, now); err != nil {
			return res, err
		}
		if ev.Type == store.EventUnsubscribed {
			if _, err := tx.Exec(ctx, unsubscribeContact, uid(res.ContactID), now); err != nil {
				return res, mapErr("record event: unsubscribe contact", err)
			}
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return store.EventResult{}, mapErr("record event", err)
	}
	return res, nil
}

// suppressFor suppresses res's contact for an event that does (a hard
// bounce, a complaint), with the reason.
func suppressFor(ctx context.Context, tx pgx.Tx, ev store.DeliveryEvent, res *store.EventResult, now time.Time) error {
	if !ev.Type.Suppresses() {
		return nil
	}
	tag, err := tx.Exec(ctx, suppressContact, uid(res.ContactID), now, store.SuppressionReason(ev))
	if err != nil {
		return mapErr("record event: suppress contact", err)
	}
	res.Suppressed = tag.RowsAffected() > 0
	return nil
}

// eventError is what an event writes to the row's error column: the
// provider's reply for a bounce or complaint, nothing for engagement.
func eventError(ev store.DeliveryEvent) string {
	if ev.Type == store.EventBounced || ev.Type == store.EventComplained {
		return ev.Detail
	}
	return ""
}

const (
	unsubscribeContact = `UPDATE contacts SET subscribed = false, updated_at = $2 WHERE id = $1`
	// unsubscribeUnsent marks what was not sent (deferred) unsubscribed. A
	// claimed row is being sent, or is in doubt: its outcome is the worker's
	// or the reconciler's to record, or the ledger would call a message that
	// went out unsent.
	unsubscribeUnsent = `
UPDATE broadcast_sends SET status = 'unsubscribed', updated_at = $2
WHERE contact_id = $1 AND status = 'deferred'`
	// lockFrom reads the row unsubscribeFrom may move, locked, for its
	// reputation delta.
	lockFrom = `
SELECT status, accepted FROM broadcast_sends WHERE broadcast_id = $1 AND contact_id = $2 FOR UPDATE`
	unsubscribeFrom = `
UPDATE broadcast_sends SET status = 'unsubscribed', updated_at = $3
WHERE broadcast_id = $1 AND contact_id = $2 AND ` + rankOf + ` BETWEEN 1 AND $4 - 1`
)

// UnsubscribeContact locks the contact and then its ledger rows, the
// reverse of an outcome write that suppresses a contact refused at send
// (or of an erasure): when Postgres aborts it to break such a deadlock it
// runs again, so the person's click is never an error page for it.
// TestUnsubscribeSurvivesDeadlock.
func (s *Store) UnsubscribeContact(ctx context.Context, contact, from ulid.ULID, now time.Time) error {
	return retryAborted(func() error { return s.unsubscribeContact(ctx, contact, from, now) })
}

func (s *Store) unsubscribeContact(ctx context.Context, contact, from ulid.ULID, now time.Time) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return mapErr("unsubscribe contact", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	if err := unsubscribeTx(ctx, tx, contact, from, now); err != nil {
		return err
	}
	return mapErr("unsubscribe contact", tx.Commit(ctx))
}

func unsubscribeTx(ctx context.Context, tx pgx.Tx, contact, from ulid.ULID, now time.Time) error {
	tag, err := tx.Exec(ctx, unsubscribeContact, uid(contact), now)
	if err != nil {
		return mapErr("unsubscribe contact", err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("unsubscribe contact %s: %w", contact, store.ErrNotFound)
	}
	// A deferred row is neither accepted nor delivered: marking it
	// unsubscribed changes no reputation sum.
	if _, err := tx.Exec(ctx, unsubscribeUnsent, uid(contact), now); err != nil {
		return mapErr("unsubscribe contact: ledger", err)
	}
	if from == (ulid.ULID{}) {
		return nil
	}
	var status string
	var accepted bool
	err = tx.QueryRow(ctx, lockFrom, uid(from), uid(contact)).Scan(&status, &accepted)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil // never claimed for that broadcast: nothing to move
	}
	if err != nil {
		return mapErr("unsubscribe contact: ledger", err)
	}
	tag, err = tx.Exec(ctx, unsubscribeFrom, uid(from), uid(contact), now, store.EventUnsubscribed.TargetRank())
	if err != nil {
		return mapErr("unsubscribe contact: ledger", err)
	}
	if tag.RowsAffected() == 0 {
		return nil
	}
	// The message went out all the same: the flag stays, only a delivered
	// row leaves Delivered.
	d := store.ReputationOf(store.SendUnsubscribed, accepted).Minus(store.ReputationOf(store.SendStatus(status), accepted))
	return mapErr("unsubscribe contact: ledger", addReputation(ctx, tx, from, d))
}

// addDelta appends one transaction's change of a broadcast's reputation
// sums (migration 008): an insert, so concurrent page workers never wait on
// each other for it.
const addDelta = `
INSERT INTO broadcast_reputation_deltas (broadcast_id, accepted, delivered, bounced, complained, refused)
VALUES ($1, $2, $3, $4, $5, $6)`

// addReputation records d for broadcast in tx, the transaction that changed
// the ledger by d.
func addReputation(ctx context.Context, tx pgx.Tx, broadcast ulid.ULID, d store.Reputation) error {
	if d == (store.Reputation{}) {
		return nil
	}
	_, err := tx.Exec(ctx, addDelta, uid(broadcast), d.Accepted, d.Delivered, d.Bounced, d.Complained, d.Refused)
	return err
}

// foldReputation moves the broadcast's deltas into its sums and returns the
// sums, in one statement. ON CONFLICT DO UPDATE adds to the latest committed
// sums, so of two concurrent folds the second waits for the first and
// returns what both folded: each result is the ledger at one moment. A
// broadcast that does not exist returns no row.
const foldReputation = `
WITH gone AS (
    DELETE FROM broadcast_reputation_deltas WHERE broadcast_id = $1
    RETURNING accepted, delivered, bounced, complained, refused
)
INSERT INTO broadcast_reputation AS r (broadcast_id, accepted, delivered, bounced, complained, refused)
SELECT $1, coalesce(sum(accepted), 0), coalesce(sum(delivered), 0), coalesce(sum(bounced), 0), coalesce(sum(complained), 0), coalesce(sum(refused), 0)
FROM gone
HAVING EXISTS (SELECT 1 FROM broadcasts WHERE id = $1)
ON CONFLICT (broadcast_id) DO UPDATE SET
    accepted = r.accepted + excluded.accepted, delivered = r.delivered + excluded.delivered,
    bounced = r.bounced + excluded.bounced, complained = r.complained + excluded.complained,
    refused = r.refused + excluded.refused
RETURNING accepted, delivered, bounced, complained, refused`

// Reputation writes (it folds), but only the leader's alarm calls it, every
// 30 s per running broadcast; it reads the deltas of that interval.
func (s *Store) Reputation(ctx context.Context, broadcast ulid.ULID) (store.Reputation, error) {
	var r store.Reputation
	err := s.pool.QueryRow(ctx, foldReputation, uid(broadcast)).Scan(&r.Accepted, &r.Delivered, &r.Bounced, &r.Complained, &r.Refused)
	if errors.Is(err, pgx.ErrNoRows) {
		return store.Reputation{}, nil
	}
	return r, mapErr("reputation", err)
}

// purgeEvents deletes a batch of old events, found through
// delivery_events_received.
const purgeEvents = `
DELETE FROM delivery_events WHERE (provider, event_id) IN (
    SELECT provider, event_id FROM delivery_events WHERE received_at < $1 LIMIT $2)`

func (s *Store) PurgeEvents(ctx context.Context, receivedBefore time.Time, limit int) (int64, error) {
	tag, err := s.pool.Exec(ctx, purgeEvents, receivedBefore, limit)
	if err != nil {
		return 0, mapErr("purge events", err)
	}
	return tag.RowsAffected(), nil
}

// foldAllReputation is foldReputation for every broadcast at once, a batch
// of deltas at a time.
const foldAllReputation = `
WITH gone AS (
    DELETE FROM broadcast_reputation_deltas WHERE ctid IN (SELECT ctid FROM broadcast_reputation_deltas LIMIT $1)
    RETURNING broadcast_id, accepted, delivered, bounced, complained, refused
), sums AS (
    SELECT broadcast_id, count(*) AS n, sum(accepted) AS accepted, sum(delivered) AS delivered,
           sum(bounced) AS bounced, sum(complained) AS complained, sum(refused) AS refused
    FROM gone GROUP BY broadcast_id
), folded AS (
    INSERT INTO broadcast_reputation AS r (broadcast_id, accepted, delivered, bounced, complained, refused)
    SELECT broadcast_id, accepted, delivered, bounced, complained, refused FROM sums
    ON CONFLICT (broadcast_id) DO UPDATE SET
        accepted = r.accepted + excluded.accepted, delivered = r.delivered + excluded.delivered,
        bounced = r.bounced + excluded.bounced, complained = r.complained + excluded.complained,
        refused = r.refused + excluded.refused
)
SELECT coalesce(sum(n), 0) FROM sums`

func (s *Store) FoldReputation(ctx context.Context, limit int) (int64, error) {
	var n int64
	err := s.pool.QueryRow(ctx, foldAllReputation, limit).Scan(&n)
	return n, mapErr("fold reputation", err)
}
