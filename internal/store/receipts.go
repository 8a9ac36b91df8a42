package store

import (
	"context"
	"time"

	"github.com/oklog/ulid/v2"
)

// ReceiptStatus is an outbound receipt's status. A receipt is claimed
// (sending) before its message goes to a transport, exactly like a ledger
// row of a broadcast.
type ReceiptStatus string

const (
	// ReceiptQueued: waiting for its first attempt or for a retry at
	// NextAttemptAt. Only a queued receipt can be claimed.
	ReceiptQueued ReceiptStatus = "queued"
	// ReceiptSending: claimed by a worker for attempt Attempts; in flight,
	// or in doubt once the claim is older than the lease.
	ReceiptSending ReceiptStatus = "sending"
	ReceiptSent    ReceiptStatus = "sent"
	ReceiptFailed  ReceiptStatus = "failed"
	// ReceiptUnknown: an in-doubt send no transport could settle; never
	// sent again.
	ReceiptUnknown ReceiptStatus = "unknown"
)

// Finished reports whether no more attempts will be made.
func (s ReceiptStatus) Finished() bool {
	return s == ReceiptSent || s == ReceiptFailed || s == ReceiptUnknown
}

// Receipt is one outbound message that is not part of a broadcast
// (outbound_receipts): unique on (Kind, Key, lower(Email)).
type Receipt struct {
	ID    ulid.ULID
	Kind  string // "transactional"
	Key   string // the client's idempotency key
	Email string // the recipient
	// PayloadHash identifies the request's content, so a replay with the
	// same key can be told from a different message under a reused key.
	PayloadHash string
	// Payload is what the sender renders, opaque to the store.
	Payload       []byte
	MessageID     string
	Status        ReceiptStatus
	Attempts      int // attempts started
	NextAttemptAt time.Time
	ClaimedAt     time.Time // zero unless sending
	Error         string    // the latest reply or reason
	CreatedAt     time.Time
	UpdatedAt     time.Time
}

// Attempt is one try at sending a receipt's message.
type Attempt struct {
	N          int
	StartedAt  time.Time
	FinishedAt time.Time // zero while in flight
	Result     string    // "in_flight" until finished
	Reply      string
}

// AttemptInFlight is the Result of an attempt that has not finished.
const AttemptInFlight = "in_flight"

// AttemptOutcome finishes an attempt and moves its receipt on.
type AttemptOutcome struct {
	// Status is where the receipt goes: queued (retry at NextAttemptAt),
	// sent, failed or unknown.
	Status        ReceiptStatus
	Result        string
	Reply         string
	NextAttemptAt time.Time
	// Reason becomes Receipt.Error; empty means Reply.
	Reason string
}

// Receipts keeps outbound receipts (transactional mail) and their attempts.
type Receipts interface {
	// CreateReceipt inserts r as queued, unless a receipt with the same
	// kind, key and case-insensitive email exists: then that one is
	// returned with created=false and r is not stored.
	CreateReceipt(ctx context.Context, r Receipt) (out Receipt, created bool, err error)
	// GetReceipt returns one receipt, or ErrNotFound.
	GetReceipt(ctx context.Context, id ulid.ULID) (Receipt, error)
	// FindReceipt returns the receipt stored under kind, key and
	// case-insensitive email, or ErrNotFound.
	FindReceipt(ctx context.Context, kind, key, email string) (Receipt, error)
	// ClaimReceipt moves a queued receipt whose NextAttemptAt is not after
	// now to sending, counts the attempt and records its start, in one
	// statement. ErrConflict if the receipt is not queued or not yet due:
	// someone else holds it, or it is finished.
	ClaimReceipt(ctx context.Context, id ulid.ULID, now time.Time) (Receipt, error)
	// FinishAttempt records the outcome of attempt n and moves the
	// receipt on, only while the receipt is sending attempt n; ErrConflict
	// otherwise (another worker settled it first).
	FinishAttempt(ctx context.Context, id ulid.ULID, n int, o AttemptOutcome, now time.Time) (Receipt, error)
	// ReceiptAttempts returns a receipt's attempts in order.
	ReceiptAttempts(ctx context.Context, id ulid.ULID) ([]Attempt, error)
	// StaleReceipts returns up to limit receipts that may have lost their
	// job: queued ones due before dueBefore and sending ones claimed
	// before claimedBefore, oldest first.
	StaleReceipts(ctx context.Context, dueBefore, claimedBefore time.Time, limit int) ([]Receipt, error)
	// PurgeReceipts deletes up to limit finished receipts (sent, failed,
	// unknown) last updated before finishedBefore, with their attempts, and
	// returns how many it deleted. Queued and sending receipts are never
	// purged. A client retry with a purged receipt's key is a new message.
	PurgeReceipts(ctx context.Context, finishedBefore time.Time, limit int) (int64, error)

	// PutTemplate stores t under t.Name, creating it at version 1 or
	// replacing it with the version raised by one; returns what is stored.
	PutTemplate(ctx context.Context, t Template, now time.Time) (Template, error)
	// GetTemplate returns the named template, or ErrNotFound.
	GetTemplate(ctx context.Context, name string) (Template, error)
}

// Template is a stored template for transactional mail (validated by the
// caller before it is stored).
type Template struct {
	Name                  string
	FromAddress, FromName string
	Subject, Text, HTML   string
	Version               int
	CreatedAt, UpdatedAt  time.Time
}
