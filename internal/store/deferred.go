package store

import (
	"context"
	"time"

	"github.com/oklog/ulid/v2"
)

// Due is a deferred row claimed again: its contact and the attempt this is
// (the page's was 1).
type Due struct {
	Contact
	Attempt int
	// InDoubt says an earlier attempt may have been delivered: the
	// reconciler released the row to be sent again (InDoubtResent). If it
	// ends without a send, it ends unknown, never failed.
	InDoubt bool
}

// Deferrals is the part of the ledger for rows the governor held back: a
// page records a recipient whose receiving provider is held or whose breaker
// is open as deferred, with a retry time, and moves on; the reconciler's
// sweep later sends the due ones through the same claim rules.
type Deferrals interface {
	// ClaimDue moves up to limit deferred rows of broadcast b whose retry
	// time has come (retry_at <= now) back to claimed, held by owner, in
	// contact id order, and returns their contacts, with the rows owner
	// holds claimed already (a retry after an ambiguous commit gets them
	// back): only the caller that moved a row may send it, so two sweeps
	// can never both send one. Due rows whose contact no
	// longer passes the suppression gate (unsubscribed, suppressed, left the
	// segment since) are deleted instead, exactly as a page skips an
	// ineligible contact. Only a running broadcast's deferred rows come
	// due (SetState orders the two, as for Claim): when it is not running,
	// ClaimDue returns only the rows owner holds already.
	//
	// sending names rows owner holds that are being sent still (a sweep's
	// stragglers): they are never returned nor touched, since returning
	// one would send its contact a second copy while the first is on its
	// way.
	//
	// leave names recipient domains (lower case) whose due rows stay due,
	// untouched, for a later call: a ramping provider whose few connections
	// are all busy (a sweep carrying its ramp step), so the window claims
	// the other providers' retries instead of rows it could only give back.
	// A row of such a domain returned anyway (its address spelt another
	// way) is only given back by the caller: leave is a hint.
	ClaimDue(ctx context.Context, b Broadcast, owner string, now time.Time, limit int, sending []ulid.ULID, leave []string) ([]Due, error)
	// NextDue counts the broadcast's deferred rows due at now (a retry
	// time at or before it) and returns the earliest retry time of any
	// deferred row (zero when there is none). Only due rows are counted: a
	// backlog mostly not yet due would otherwise ask for sweeps that come
	// back empty.
	NextDue(ctx context.Context, broadcast ulid.ULID, now time.Time) (due int64, at time.Time, err error)
	// HastenHeld makes due at now the rows the governor deferred for
	// provider (HeldReason, StepEndedReason: not attempts) and not yet
	// due, in the broadcasts sending from domain (their From address's,
	// lower case) that run or are paused: an operator lifted the
	// provider's hold. It returns how many.
	HastenHeld(ctx context.Context, domain, provider string, now time.Time) (int64, error)
}

// HeldReason is the error of a row deferred because its provider was held
// or its breaker open: no attempt was made.
func HeldReason(provider string) string { return "deferred: " + provider + " held by the governor" }

// StepEndedReason is the error of a row deferred because its provider's
// ramp step ended at a refusal before it was tried: no attempt was made.
func StepEndedReason(provider string) string {
	return "deferred: " + provider + " refused while ramping back up"
}
