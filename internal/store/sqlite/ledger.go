package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/rangecast/rangecast/internal/store"
)

// rankOf is store.SendStatus.Rank in SQL: the guard of every statement that
// moves a ledger row past its send outcome compares it with the rank the new
// status reaches, inside the UPDATE (SQLite has one writer, so the row it
// compares is the row it writes).
const rankOf = `(CASE status WHEN 'claimed' THEN 0 WHEN 'deferred' THEN 0 WHEN 'unknown' THEN 0
 WHEN 'sent' THEN 1 WHEN 'delivered' THEN 2 WHEN 'opened' THEN 3 WHEN 'clicked' THEN 4 ELSE 99 END)`

// sameMessageID matches the row's stored Message-ID (kept with or without
// angle brackets) against ?3 case-insensitively (ASCII folding suffices:
// ULIDs and host names are ASCII).
const sameMessageID = `lower(trim(message_id, '<>')) = lower(?3)`

const (
	matchEvent = `
SELECT status, accepted, email FROM broadcast_sends
WHERE broadcast_id = ?1 AND contact_id = ?2 AND ` + sameMessageID

	insertEvent = `
INSERT INTO delivery_events (provider, event_id, type, message_id, broadcast_id, contact_id, detail, occurred_at, received_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (provider, event_id) DO NOTHING`

	// applyEvent is the rank guard: ?4 is the rank the new status reaches.
	// Any report from the provider proves the message went out: accepted.
	// A row in doubt
	// (store.InDoubtResent, or reopened unknown) whose one attempt is
	// the one in doubt (deferred or unknown, attempt 1) was sent once,
	// and the report says that once arrived: the doubt is settled.
	// Accepted, claimed (the second attempt in flight) or past a second
	// attempt (itself in doubt: the report, by Message-ID, cannot say
	// which attempt arrived), there may be two copies.
	applyEvent = `
UPDATE broadcast_sends SET status = ?5, error = CASE WHEN ?6 = '' THEN error WHEN email LIKE ` + erasedLike + ` THEN ` + withheldReply + ` ELSE ?6 END, updated_at = ?7, accepted = 1,
    in_doubt = in_doubt AND (accepted OR status = 'claimed' OR attempt > 1)
WHERE broadcast_id = ?1 AND contact_id = ?2 AND ` + sameMessageID + ` AND ` + rankOf + ` < ?4
RETURNING status`

	// suppressContact records why, unless the contact was already
	// suppressed for a reason of its own.
	suppressContact = `UPDATE contacts SET suppressed = 1, updated_at = ?2,
    suppressed_reason = CASE WHEN suppressed AND suppressed_reason <> '' THEN suppressed_reason ELSE ?3 END,
    suppressed_at = CASE WHEN suppressed AND suppressed_at IS NOT NULL THEN suppressed_at ELSE ?2 END
WHERE id = ?1`
)

func (s *Store) RecordEvent(ctx context.Context, ev store.DeliveryEvent, now time.Time) (store.EventResult, error) {
	var res store.EventResult
	if ev.Provider == "" || ev.EventID == "" || !ev.Type.Valid() {
		return res, fmt.Errorf("record event: provider %q, event id %q, type %q: all are required", ev.Provider, ev.EventID, ev.Type)
	}
	ev.MessageID = store.BareMessageID(ev.MessageID)
	err := s.write(ctx, "record event", func(tx *sql.Tx) error {
		var bid, cid any
		var accepted bool
		if b, c, ok := store.ParseMessageID(ev.MessageID); ok {
			var status, email string
			err := tx.QueryRowContext(ctx, matchEvent, id(b), id(c), ev.MessageID).Scan(&status, &accepted, &email)
			switch {
			case err == nil:
				if strings.HasPrefix(email, store.ErasedToken) {
					ev.Detail = "" // the contact was erased: keep the event, not what it quotes
				}
				res.Matched, res.BroadcastID, res.ContactID, res.Status = true, b, c, store.SendStatus(status)
				bid, cid = id(b), id(c)
			case !errors.Is(err, sql.ErrNoRows):
				return fmt.Errorf("match: %w", err)
			}
		} else if rid, ok := store.ParseTxMessageID(ev.MessageID); ok {
			var email string
			var c []byte
			err := tx.QueryRowContext(ctx, `SELECT email FROM outbound_receipts WHERE id = ?1`, id(rid)).Scan(&email)
			if err == nil && strings.HasPrefix(email, store.ErasedToken) {
				ev.Detail = "" // the recipient was erased: keep the event, not what it quotes
			}
			if err == nil {
				err = tx.QueryRowContext(ctx, `SELECT id FROM contacts WHERE email_key = ?1`, emailKey(email)).Scan(&c)
			}
			switch {
			case err == nil && len(c) == 16:
				res.Receipt, res.ContactID = true, ulid.ULID(c)
			case err != nil && !errors.Is(err, sql.ErrNoRows):
				return fmt.Errorf("match receipt: %w", err)
			}
		}
		r, err := tx.ExecContext(ctx, insertEvent, ev.Provider, ev.EventID, string(ev.Type), ev.MessageID, bid, cid, ev.Detail, ts(ev.OccurredAt), ts(now))
		if err != nil {
			return err
		}
		if n, err := r.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			res = store.EventResult{Duplicate: true}
			return nil
		}
		if res.Receipt {
			return receiptEvent(ctx, tx, ev, &res, now)
		}
		if !res.Matched {
			return nil
		}
		if to := ev.Type.Status(); to != "" {
			var status string
			err := tx.QueryRowContext(ctx, applyEvent, id(res.BroadcastID), id(res.ContactID), ev.MessageID,
				ev.Type.TargetRank(), string(to), eventError(ev), ts(now)).Scan(&status)
			switch {
			case err == nil:
				// One writer: the row matched above is the row replaced.
				d := store.ReputationOf(store.SendStatus(status), true).Minus(store.ReputationOf(res.Status, accepted))
				if err := addReputation(ctx, tx, res.BroadcastID, d); err != nil {
					return err
				}
				res.Changed, res.Status = true, store.SendStatus(status)
			case !errors.Is(err, sql.ErrNoRows):
				return fmt.Errorf("apply: %w", err)
			}
		}
		if err := suppressFor(ctx, tx, ev, &res, now); err != nil {
			return err
		}
		if ev.Type == store.EventUnsubscribed {
			// The provider's unsubscribe is the person's: they get nothing
			// from the next page on, like after our own link.
			if err := unsubscribeTx(ctx, tx, res.ContactID, res.BroadcastID, now); err != nil && !errors.Is(err, store.ErrNotFound) {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return store.EventResult{}, err
	}
	return res, nil
}

// suppressFor suppresses res's contact for an event that does (a hard
// bounce, a complaint), with the reason.
func suppressFor(ctx context.Context, tx *sql.Tx, ev store.DeliveryEvent, res *store.EventResult, now time.Time) error {
	if !ev.Type.Suppresses() {
		return nil
	}
	r, err := tx.ExecContext(ctx, suppressContact, id(res.ContactID), ts(now), store.SuppressionReason(ev))
	if err != nil {
		return fmt.Errorf("suppress contact: %w", err)
	}
	n, err := r.RowsAffected()
	if err != nil {
		return err
	}
	res.Suppressed = n > 0
	return nil
}

// receiptEvent applies an event about a transactional message to its
// contact: a suppression, or a provider's unsubscribe (EventResult.Receipt).
func receiptEvent(ctx context.Context, tx *sql.Tx, ev store.DeliveryEvent, res *store.EventResult, now time.Time) error {
	if err := suppressFor(ctx, tx, ev, res, now); err != nil {
		return err
	}
	if ev.Type == store.EventUnsubscribed {
		if _, err := tx.ExecContext(ctx, unsubscribeContact, id(res.ContactID), ts(now)); err != nil {
			return fmt.Errorf("unsubscribe contact: %w", err)
		}
	}
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
	unsubscribeContact = `UPDATE contacts SET subscribed = 0, updated_at = ?2 WHERE id = ?1`
	// unsubscribeUnsent marks what was not sent (deferred) unsubscribed. A
	// claimed row is being sent, or is in doubt: its outcome is the worker's
	// or the reconciler's to record, or the ledger would call a message that
	// went out unsent.
	unsubscribeUnsent = `
UPDATE broadcast_sends SET status = 'unsubscribed', updated_at = ?2
WHERE contact_id = ?1 AND status = 'deferred'`
	unsubscribeFrom = `
UPDATE broadcast_sends SET status = 'unsubscribed', updated_at = ?3
WHERE broadcast_id = ?1 AND contact_id = ?2 AND ` + rankOf + ` BETWEEN 1 AND ?4 - 1`
	// fromRow reads the row unsubscribeFrom may move, for its reputation
	// delta (one writer: nothing changes it in between).
	fromRow = `SELECT status, accepted FROM broadcast_sends WHERE broadcast_id = ?1 AND contact_id = ?2`
)

func (s *Store) UnsubscribeContact(ctx context.Context, contact, from ulid.ULID, now time.Time) error {
	return s.write(ctx, "unsubscribe contact", func(tx *sql.Tx) error {
		return unsubscribeTx(ctx, tx, contact, from, now)
	})
}

func unsubscribeTx(ctx context.Context, tx *sql.Tx, contact, from ulid.ULID, now time.Time) error {
	r, err := tx.ExecContext(ctx, unsubscribeContact, id(contact), ts(now))
	if err != nil {
		return err
	}
	if n, err := r.RowsAffected(); err != nil {
		return err
	} else if n == 0 {
		return fmt.Errorf("contact %s: %w", contact, store.ErrNotFound)
	}
	// A deferred row is neither accepted nor delivered: marking it
	// unsubscribed changes no reputation sum.
	if _, err := tx.ExecContext(ctx, unsubscribeUnsent, id(contact), ts(now)); err != nil {
		return fmt.Errorf("ledger: %w", err)
	}
	if from == (ulid.ULID{}) {
		return nil
	}
	var status string
	var accepted bool
	err = tx.QueryRowContext(ctx, fromRow, id(from), id(contact)).Scan(&status, &accepted)
	if errors.Is(err, sql.ErrNoRows) {
		return nil // never claimed for that broadcast: nothing to move
	}
	if err != nil {
		return fmt.Errorf("ledger: %w", err)
	}
	r, err = tx.ExecContext(ctx, unsubscribeFrom, id(from), id(contact), ts(now), store.EventUnsubscribed.TargetRank())
	if err != nil {
		return fmt.Errorf("ledger: %w", err)
	}
	if n, err := r.RowsAffected(); err != nil || n == 0 {
		return err
	}
	// The message went out all the same: the flag stays, only a delivered
	// row leaves Delivered.
	d := store.ReputationOf(store.SendUnsubscribed, accepted).Minus(store.ReputationOf(store.SendStatus(status), accepted))
	return addReputation(ctx, tx, from, d)
}

// addSums adds one change to a broadcast's reputation sums (migration 008).
// SQLite has one writer, so one row per broadcast serializes nothing that
// was not serialized already.
const addSums = `
INSERT INTO broadcast_reputation (broadcast_id, accepted, delivered, bounced, complained, refused)
VALUES (?1, ?2, ?3, ?4, ?5, ?6)
ON CONFLICT (broadcast_id) DO UPDATE SET
    accepted = accepted + excluded.accepted, delivered = delivered + excluded.delivered,
    bounced = bounced + excluded.bounced, complained = complained + excluded.complained,
    refused = refused + excluded.refused`

// addReputation records d for broadcast in tx, the transaction that changed
// the ledger by d.
func addReputation(ctx context.Context, tx *sql.Tx, broadcast ulid.ULID, d store.Reputation) error {
	if d == (store.Reputation{}) {
		return nil
	}
	_, err := tx.ExecContext(ctx, addSums, id(broadcast), d.Accepted, d.Delivered, d.Bounced, d.Complained, d.Refused)
	return err
}

func (s *Store) Reputation(ctx context.Context, broadcast ulid.ULID) (store.Reputation, error) {
	var r store.Reputation
	err := s.r.QueryRowContext(ctx, `
SELECT accepted, delivered, bounced, complained, refused FROM broadcast_reputation WHERE broadcast_id = ?`,
		id(broadcast)).Scan(&r.Accepted, &r.Delivered, &r.Bounced, &r.Complained, &r.Refused)
	if errors.Is(err, sql.ErrNoRows) {
		return store.Reputation{}, nil // nothing recorded yet
	}
	return r, mapErr("reputation", err)
}

// purgeEvents deletes a batch of old events, found through
// delivery_events_received.
const purgeEvents = `
DELETE FROM delivery_events WHERE (provider, event_id) IN (
    SELECT provider, event_id FROM delivery_events WHERE received_at < ?1 LIMIT ?2)`

func (s *Store) PurgeEvents(ctx context.Context, receivedBefore time.Time, limit int) (int64, error) {
	return s.execCount(ctx, "purge events", purgeEvents, ts(receivedBefore), limit)
}

// FoldReputation has nothing to do: SQLite has one writer, so every change
// is added to the sums as it commits.
func (s *Store) FoldReputation(context.Context, int) (int64, error) { return 0, nil }
