// Package store is rangecast's source of truth: contacts, segments,
// broadcasts and the per-recipient ledger (broadcast_sends). Implementations
// live in store/postgres (and store/sqlite); the rest of the system sees only
// this interface, so SQL and driver errors stay behind it.
package store

import (
	"context"
	"errors"
	"time"

	"github.com/oklog/ulid/v2"
)

var (
	// ErrNotFound: the row asked for does not exist.
	ErrNotFound = errors.New("not found")
	// ErrConflict: the row exists in a form that contradicts the request
	// (a different draft under the same request id, a state that does not
	// allow the transition).
	ErrConflict = errors.New("conflict")
	// ErrUnavailable: the database could not be reached, or the connection
	// broke (a failover, a restart, a partition). Worth retrying; the API
	// says Unavailable.
	ErrUnavailable = errors.New("database unavailable")
	// ErrNotRunning: a claim found its broadcast not running (paused, or
	// finished since the page was read) and claimed nothing. The error is
	// a *NotRunningError, which says the state.
	ErrNotRunning = errors.New("broadcast not running")
	// ErrClaimsOut: EditPaused found claims without an outcome (a window
	// still finishing, or a stopped worker's claims not settled yet); it
	// changed nothing.
	ErrClaimsOut = errors.New("claims without an outcome")
)

// NotRunningError is the ErrNotRunning of a claim: the broadcast's state
// when the claim was refused ("" when the broadcast is gone).
type NotRunningError struct{ State State }

func (e *NotRunningError) Error() string {
	if e.State == "" {
		return "broadcast not running: it no longer exists"
	}
	return "broadcast not running: it is " + string(e.State)
}

func (e *NotRunningError) Is(target error) bool { return target == ErrNotRunning }

// State is a broadcast's lifecycle state.
type State string

const (
	StateDraft     State = "draft"
	StateRunning   State = "running"
	StatePaused    State = "paused"
	StateCompleted State = "completed"
	StateCancelled State = "cancelled"
	StateFailed    State = "failed"
)

// Finished reports whether no more mail will ever be sent for s.
func (s State) Finished() bool {
	return s == StateCompleted || s == StateCancelled || s == StateFailed
}

// SendStatus is a ledger row's status. "claimed" means the row was inserted
// and no outcome is recorded yet: in flight, or in doubt after a crash.
type SendStatus string

const (
	SendClaimed  SendStatus = "claimed"
	SendSent     SendStatus = "sent"
	SendFailed   SendStatus = "failed"
	SendDeferred SendStatus = "deferred"
	// SendUnknown: the claim was in doubt and could not be resolved; by
	// policy it was not sent again. Counted and shown, never resent.
	SendUnknown SendStatus = "unknown"
)

// Contact is one recipient.
type Contact struct {
	ID           ulid.ULID
	Email        string
	Name         string
	Attributes   map[string]any
	Subscribed   bool
	DoNotContact bool
	Suppressed   bool
	// Segments is read by ImportContacts alone: the segments (ids) the
	// contact joins, written in the same transaction as the contact, so an
	// import stopped anywhere never leaves a contact written without the
	// memberships its row asked for (a broadcast to the segment would skip
	// it silently).
	Segments []int64
}

// Content is what a broadcast sends; validated by message.Compile before it is stored.
type Content struct {
	FromName    string
	FromAddress string
	Subject     string
	HTML        string
	Text        string
}

// Broadcast is one send to an audience.
type Broadcast struct {
	ID              ulid.ULID
	Name            string
	RequestID       string // client idempotency key; "" when none
	Content         Content
	SegmentID       int64 // 0: every eligible contact
	Segment         string
	ThrottlePerHour int64 // 0: no broadcast throttle
	// InDoubtPolicy is "skip", "resend", or "" for the coordinator's
	// default: what becomes of in-doubt claims no transport can look up.
	InDoubtPolicy string
	// NoUnsubscribeLink: created without the check that the body shows an
	// unsubscribe link (the sender links to a preference page of its own).
	NoUnsubscribeLink bool
	State             State
	Reason            string
	// SnapshotTotal, MinID and MaxID are read once when the broadcast is
	// accepted. The total is for display only; MinID/MaxID bound the ranges.
	SnapshotTotal int64
	MinID, MaxID  ulid.ULID
	// RangeStarts are where ranges 1 … n-1 start (ranges.SplitAt), cut
	// from a sample of the audience when it is accepted; none: ranges are
	// cut by id space (ranges.Split).
	RangeStarts []ulid.ULID
	CreatedAt   time.Time
	StartedAt   time.Time
	FinishedAt  time.Time
	// ScheduledAt is when a draft starts by itself (zero: when started).
	ScheduledAt time.Time
	// ContentRevision counts the edits of the content made while the
	// broadcast was paused (EditPaused); 0 for content as created. Page
	// jobs carry it, so a worker keeping the compiled content reads it
	// again after an edit.
	ContentRevision int
}

// Audience is the result of the accept-time snapshot of the eligible audience.
type Audience struct {
	Count        int64
	MinID, MaxID ulid.ULID
}

// OwnerNone is the owner of a claim nobody holds: one handed to the
// reconciler, or one made before claims had owners. No live worker has it,
// so the reconciler settles such claims after its grace.
const OwnerNone = ""

// Claim is a ledger row to insert before a message may be sent.
type Claim struct {
	ContactID ulid.ULID
	Email     string
	MessageID string
}

// Outcome records what happened to one claimed message. Status
// SendClaimed hands the row to the reconciler: it stays claimed, with no
// owner (OwnerNone), because the sender cannot tell whether it went out (a
// connection lost after the final dot).
type Outcome struct {
	ContactID ulid.ULID
	Status    SendStatus
	Error     string // the server's reply for failures
	// RetryAt is when a deferred row is due again; zero for other statuses.
	RetryAt time.Time
	// NotAttempted: nothing was sent (the governor held the provider), so
	// the claim does not count as an attempt against the recipient; the
	// row's attempt count goes back by one. Only real SMTP attempts count.
	NotAttempted bool
	// HardBounce: the server refused the address itself for good (550
	// 5.1.1 no such user, a domain that takes no mail). With a failed
	// status, the contact is suppressed, as after a bounce a webhook
	// reports: otherwise every broadcast mails the address again. (It is
	// not counted among the reputation's bounces, a sum over the ledger's
	// statuses, in which the row is failed.)
	HardBounce bool
}

// HardBouncePrefix, then the server's reply, is the suppression reason of
// a contact whose address the SMTP server refused for good at send time
// (Outcome.HardBounce).
const HardBouncePrefix = "hard bounce at send: "

// Send is one ledger row.
type Send struct {
	BroadcastID, ContactID ulid.ULID
	Email                  string
	Status                 SendStatus
	Attempt                int
	MessageID              string
	Error                  string
	ClaimedAt, UpdatedAt   time.Time
	// Owner holds the claim ("worker/run"); "" for rows claimed before
	// owners were recorded.
	Owner string
	// InDoubt: an earlier attempt may have been delivered (the in-doubt
	// policy resend, retry --include-unknown, a doubt settled later).
	// Sent with it, the person may have two copies (Counts.SentAgainInDoubt).
	InDoubt bool
}

// Counts sums a broadcast's ledger by status. Sent counts every row the SMTP
// server accepted (SendStatus.Accepted), whatever a webhook reported since.
type Counts struct {
	Claimed, Sent, Failed, Deferred, Unknown int64
	// SentAgainInDoubt is the part of Sent sent again after an attempt
	// that may have been delivered (the in-doubt policy resend, or retry
	// --include-unknown): each of these people may have two copies.
	SentAgainInDoubt int64
}

// Add counts n ledger rows of one status, accepted flag and in-doubt flag
// (a row of GROUP BY status, accepted, in_doubt).
func (c *Counts) Add(status SendStatus, accepted, inDoubt bool, n int64) {
	if accepted {
		c.Sent += n // accepted by the SMTP server, whatever was reported since
		if inDoubt {
			c.SentAgainInDoubt += n
		}
		return
	}
	switch status {
	case SendClaimed:
		c.Claimed += n
	case SendFailed:
		c.Failed += n
	case SendDeferred:
		c.Deferred += n
	case SendUnknown:
		c.Unknown += n
	}
}

// Pending is what completing a broadcast waits for, read from only the
// ledger rows in those states (claimed, deferred, failed), so its cost is
// the rows still open, not the broadcast's size. Each count equals the
// same field of Counts at the same moment.
type Pending struct {
	// Claimed: claims without an outcome (in flight, or in doubt).
	Claimed int64
	// Deferred rows, and when the earliest is due again (zero: none),
	// with that row's last error and attempts: what the tail waits on,
	// said ("452 4.2.2 mailbox full", attempt 17; tester).
	Deferred    int64
	NextDue     time.Time
	NextError   string
	NextAttempt int
	// Failed: rows that failed; what a finished broadcast's reason counts.
	Failed int64
}

// Store is everything rangecast keeps in its database, in named groups; a
// caller that needs one group asks for that one (web takes a Ledger).
type Store interface {
	Contacts     // import, one contact, suppression (audience.go)
	Segments     // segments and their members (audience.go)
	Broadcasts   // drafts, states, the page gate
	Claims       // the ledger's claims and outcomes
	Ledger       // delivery events, unsubscribes, reputation, purges (ledger.go)
	Deferrals    // deferred rows and their sweep (deferred.go)
	Receipts     // transactional messages (receipts.go)
	BroadcastOps // drafts edited and scheduled, reports, exports, retries (report.go)
	Erasure      // erasing a person (erase.go)
	Catalog      // lists a page at a time, deleting segments and templates (catalog.go)
	// Ping checks the database answers (readiness).
	Ping(ctx context.Context) error
	Close()
}

// Broadcasts are the broadcasts' rows, their state machine, and the gate a
// page reads through.
type Broadcasts interface {
	// CreateBroadcast stores a draft. When b.RequestID names an existing
	// broadcast, that one is returned with created=false.
	CreateBroadcast(ctx context.Context, b Broadcast) (out Broadcast, created bool, err error)
	GetBroadcast(ctx context.Context, id ulid.ULID) (Broadcast, error)
	// ContentRevision is the broadcast's content revision
	// (Broadcast.ContentRevision) alone, or ErrNotFound: what a page worker
	// reads once its page holds a claim, to know its content is the one
	// to send (an edit needs the broadcast paused with no claim out, so
	// the revision read then stays until the page's claims have outcomes).
	ContentRevision(ctx context.Context, id ulid.ULID) (int, error)
	ListBroadcasts(ctx context.Context) ([]Broadcast, error)
	// BroadcastPage returns up to limit broadcasts with ids below before
	// (the zero id: from the newest), newest first, without their bodies
	// (Content.HTML and Content.Text are empty): a list for people.
	BroadcastPage(ctx context.Context, before ulid.ULID, limit int) ([]Broadcast, error)
	// AcceptBroadcast snapshots the eligible audience (count and id bounds,
	// one indexed query) and moves a draft to running. ErrConflict if the
	// broadcast is not a draft.
	AcceptBroadcast(ctx context.Context, id ulid.ULID, now time.Time) (Broadcast, error)
	// SetState moves a broadcast to `to` if its state is one of `from`;
	// ErrConflict otherwise. It is ordered against claims (Claim,
	// RecordAndClaim): a claim committed before it is in the ledger it
	// checks, and none commits after it unless the new state is running.
	// A broadcast becomes completed only with no claimed or deferred row
	// left (ErrConflict, the broadcast still running, otherwise): checked
	// in the same transaction, so a claim that raced the caller's own
	// check (Pending) cannot be left behind in a completed broadcast.
	SetState(ctx context.Context, id ulid.ULID, from []State, to State, reason string, now time.Time) (Broadcast, error)

	// EligiblePage returns up to limit contacts that pass the suppression gate
	// for broadcast b (subscribed, not do-not-contact, not suppressed, has an
	// address, in the segment) with from <= id <= until, in id order. It is
	// the same gate that AcceptBroadcast counts.
	EligiblePage(ctx context.Context, b Broadcast, from, until ulid.ULID, limit int) ([]Contact, error)
	// LastEligible returns the contact with the highest id at or below
	// until that passes EligiblePage's gate for b, and false when none
	// does.
	LastEligible(ctx context.Context, b Broadcast, until ulid.ULID) (Contact, bool, error)
}

// Claims are the ledger's claims and outcomes: a message reaches a transport
// only after its claim is committed, and every claim has an owner.
type Claims interface {
	// Claim inserts ledger rows (status claimed) held by owner and returns
	// the contact ids this owner holds among them: the rows it inserted, and
	// rows it inserted before (a retry after an ambiguous commit gets its own
	// claims back). Rows another owner holds, or that have an outcome, are
	// not returned and must not be sent.
	//
	// Only a running broadcast takes new claims. When it is not running
	// (SetState orders the two), Claim returns the rows this owner already
	// holds, as above; if there are none, it claims nothing and returns a
	// *NotRunningError (ErrNotRunning). A page read while the broadcast ran
	// can reach its claim long after (a store outage, a stalled worker):
	// the contact may have unsubscribed and the broadcast completed since.
	Claim(ctx context.Context, broadcast ulid.ULID, owner string, claims []Claim, now time.Time) ([]ulid.ULID, error)
	// RecordOutcomes writes outcomes for rows still claimed by owner, in one
	// batch. A row another owner holds, or that has an outcome already, is
	// left as it is, so repeating a write that may have committed is safe.
	RecordOutcomes(ctx context.Context, broadcast ulid.ULID, owner string, outcomes []Outcome, now time.Time) error
	// RecordAndClaim is RecordOutcomes of one window and Claim of the next in
	// one transaction: a page worker commits once per window rather than
	// twice, and a crash leaves either both or neither. It returns what
	// Claim would, and is as safe to repeat. With ErrNotRunning the
	// outcomes are recorded all the same: only the claim was refused.
	RecordAndClaim(ctx context.Context, broadcast ulid.ULID, owner string, outcomes []Outcome, next []Claim, now time.Time) ([]ulid.ULID, error)
	// Release deletes claims that owner still holds (not sent), so a later
	// page can claim them again. Only the reconciler releases, and it rewinds
	// the range under a new epoch in the same step: a claim a cursor may
	// already have passed is never simply deleted.
	Release(ctx context.Context, broadcast ulid.ULID, owner string, contacts []ulid.ULID) error
	// GetSend returns one ledger row, or ErrNotFound.
	GetSend(ctx context.Context, broadcast, contact ulid.ULID) (Send, error)
	// Counts sums the broadcast's ledger by status. It reads every row of
	// the broadcast: for people (status), not for a loop.
	Counts(ctx context.Context, broadcast ulid.ULID) (Counts, error)
	// Doubts counts, from only such rows, the broadcast's unknown rows and
	// those sent again in doubt: Counts' Unknown and SentAgainInDoubt, for
	// a completed broadcast's reason, without reading every row.
	Doubts(ctx context.Context, broadcast ulid.ULID) (unknown, sentAgainInDoubt int64, err error)
	// Pending reads, in one consistent snapshot, the broadcast's claimed,
	// deferred and failed rows only: what completion checks.
	Pending(ctx context.Context, broadcast ulid.ULID) (Pending, error)
	// ClaimOwners lists the owners of the broadcast's claims still without
	// an outcome (in flight, or in doubt when the owner is gone).
	ClaimOwners(ctx context.Context, broadcast ulid.ULID) ([]string, error)
	// InDoubt returns up to limit claims still without an outcome held by
	// owner, in contact id order: the reconciler calls it for owners that
	// are gone.
	InDoubt(ctx context.Context, broadcast ulid.ULID, owner string, limit int) ([]Send, error)
	// Failures returns up to limit failed rows, the latest first, with the
	// server's reply: what a person needs to see why mail did not go out.
	Failures(ctx context.Context, broadcast ulid.ULID, limit int) ([]Send, error)
}
