package store

import (
	"context"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/oklog/ulid/v2"
)

// GaveUpPrefix starts the error of a ledger row the sweep failed after its
// transient attempts ran out (pageworker's runSweep writes it): the rows a
// retry may send again. Every other failed row was refused for good (a 5xx
// for that address, a render error) and is never retried.
const GaveUpPrefix = "gave up after "

// NotSentPrefix starts the error of a failed row whose message the
// transport refused to hand to the server (pageworker writes it for
// transport.SendError.Refused): an address with a non-ASCII local part and
// a relay without SMTPUTF8, or an address it could not encode. Nothing
// reached a server, so a retry (Reopen) may send it again without risk of
// a second copy, once the relay can take it. (Not "not sent: ", which
// starts an erased contact's row, ErasedBeforeSend: never retried.)
const NotSentPrefix = "not handed to the relay: "

// HaltedPrefix marks the error of a ledger row deferred because its own
// refusal, with others like it, halted the broadcast (a permanent refusal
// that may be one recipient's, or a hard bounce, too many of them together
// to be the recipients'; pageworker writes it): the rows FailHalted fails
// when the operator resumes and says they are the recipients' after all.
const HaltedPrefix = "halted the broadcast: "

// RenderFailedPrefix starts the error of a row whose message could not be
// rendered for its contact (pageworker's renderError): nothing was sent, so
// an edit of the content (EditPaused) may send it again.
const RenderFailedPrefix = "render: "

// TemplateMistakePrefix starts the error of the rows of a window whose
// template failed the same way for many contacts (pageworker's
// configError): deferred, and the broadcast paused.
const TemplateMistakePrefix = "the template fails the same way for "

// EditedPrefix starts the error of a row EditPaused made due again.
const EditedPrefix = "content edited; before: "

// FailedHaltedPrefix starts the error of a row FailHalted failed.
const FailedHaltedPrefix = "failed at resume by the operator (refused on every try): "

// DeferredAgainPrefix starts the error of a row a sweep deferred again.
const DeferredAgainPrefix = "deferred again: "

// Draft is what UpdateDraft may change of a draft; every field is the new
// value (the caller merges what it keeps).
type Draft struct {
	Name              string
	Content           Content
	SegmentID         int64
	ThrottlePerHour   int64
	InDoubtPolicy     string
	NoUnsubscribeLink bool
}

// FailureGroup is the failed rows of a broadcast that share one reply.
type FailureGroup struct {
	Reply string
	Count int64
	// Example is one address the reply was given for.
	Example string
}

// Report is what a broadcast's ledger and its delivery events add up to.
type Report struct {
	// Statuses counts ledger rows by their status now.
	Statuses map[SendStatus]int64
	// Counts are the same rows as Store.Counts sums them, from the same
	// read.
	Counts Counts
	// Reputation is the sums the reputation alarms read (accepted,
	// delivered, bounced, complained).
	Reputation Reputation
	// Events counts the contacts with at least one delivery event of each
	// type still kept (events older than the retention are purged; the
	// ledger statuses are not).
	Events map[EventType]int64
	// Failures groups failed rows by reply, the largest groups first.
	Failures []FailureGroup
	// Retryable counts failed rows whose transient attempts ran out
	// (GaveUpPrefix): what Reopen would send again.
	Retryable int64
}

// Reopened is what Reopen did.
type Reopened struct {
	// Failed and Unknown count the rows moved back to deferred.
	Failed, Unknown int64
	Broadcast       Broadcast
}

// BroadcastOps are an operator's everyday changes and readings of one
// broadcast: drafts edited, deleted and scheduled, its report and export,
// and a retry of the rows that failed for transient reasons.
type BroadcastOps interface {
	// UpdateDraft replaces a draft's definition; ErrConflict (with the
	// broadcast as it is) unless it is a draft.
	UpdateDraft(ctx context.Context, id ulid.ULID, d Draft, now time.Time) (Broadcast, error)
	// EditPaused replaces a paused broadcast's content and counts one more
	// content revision; ErrConflict (with the broadcast as it is) unless it
	// is paused, ErrClaimsOut while any of its rows is claimed without an
	// outcome (a window that started before the pause would record its
	// render failures after the edit, and they would stay failed). Nothing
	// else of the broadcast changes. The rows that failed because the old
	// content could not be rendered for their contact (RenderFailedPrefix;
	// nothing was sent) are made deferred, due at now, in the same
	// transaction, and counted in rerendered: sent again with the new
	// content once the broadcast is resumed.
	EditPaused(ctx context.Context, id ulid.ULID, c Content, now time.Time) (b Broadcast, rerendered int64, err error)
	// SetThrottle changes the throttle (messages an hour, 0 for none) of a
	// running, paused or failed (resumable) broadcast, nothing else;
	// ErrConflict (with the broadcast as it is) in any other state (a draft's throttle is
	// UpdateDraft's). The coordinator follows it within a tick.
	SetThrottle(ctx context.Context, id ulid.ULID, perHour int64, now time.Time) (Broadcast, error)
	// HeldByContent returns up to limit contacts whose rows the content
	// held back: deferred by a template mistake (TemplateMistakePrefix) or
	// by an earlier edit (EditedPrefix), or failed to render
	// (RenderFailedPrefix). An edit renders its new content for them
	// before it is accepted.
	HeldByContent(ctx context.Context, id ulid.ULID, limit int) ([]Contact, error)
	// DeleteDraft deletes a draft; ErrConflict (with the broadcast as it
	// is) unless it is a draft, ErrNotFound if there is none.
	DeleteDraft(ctx context.Context, id ulid.ULID) (Broadcast, error)
	// ScheduleDraft sets when a draft starts by itself (zero: never, it
	// waits for a Start); ErrConflict unless it is a draft.
	ScheduleDraft(ctx context.Context, id ulid.ULID, at, now time.Time) (Broadcast, error)
	// DueScheduled lists up to limit drafts whose scheduled time is at or
	// before now, the earliest first.
	DueScheduled(ctx context.Context, now time.Time, limit int) ([]ulid.ULID, error)
	// Report adds up the broadcast's ledger and delivery events, with at
	// most groups failure groups.
	Report(ctx context.Context, id ulid.ULID, groups int) (Report, error)
	// ExportPage returns up to limit ledger rows with contact ids above
	// after, in contact id order: a keyset page, so an export of any size
	// holds one page at a time.
	ExportPage(ctx context.Context, id, after ulid.ULID, limit int) ([]Send, error)
	// Reopen moves the rows that failed after their transient attempts ran
	// out (and, with unknown, the in-doubt rows marked unknown) back to
	// deferred, due now, their attempt count reset, and a completed
	// broadcast back to running, in one transaction: the deferred sweep
	// sends them through the same claim rules (ClaimDue), and the
	// broadcast completes again when none is left. Nothing accepted is
	// touched, so nobody already sent gets a second copy. ErrConflict
	// unless the broadcast is completed.
	Reopen(ctx context.Context, id ulid.ULID, unknown bool, reason string, now time.Time) (Reopened, error)
	// FailHalted fails, while the broadcast is paused, its deferred rows
	// whose refusal halted it (their error starting with HaltedPrefix, or
	// DeferredAgainPrefix and HaltedPrefix: never the words anywhere in a
	// server's reply), keeping the reply: the operator has looked and says
	// those addresses refuse for good while the relay takes others. A row
	// whose earlier attempt may have been delivered (in doubt) ends unknown
	// with InDoubtEndedPrefix instead, as the sweep ends it. Returns how
	// many it failed, and how many it ended unknown; ErrConflict unless the
	// broadcast is paused. Nobody is suppressed for it.
	FailHalted(ctx context.Context, id ulid.ULID, now time.Time) (failed, unknown int64, err error)
}

// ReplyGroup is the key failed rows are grouped by in a report: the reply
// with the row's own address masked, so "550 <ann@x>: no such user" and
// "550 <bob@x>: no such user" are one group.
func ReplyGroup(reply, email string) string {
	if email == "" {
		return reply
	}
	var b strings.Builder
	for i := 0; i < len(reply); {
		if n := foldPrefix(reply[i:], email); n > 0 {
			b.WriteString("<address>")
			i += n
			continue
		}
		_, size := utf8.DecodeRuneInString(reply[i:])
		b.WriteString(reply[i : i+size])
		i += size
	}
	// "<ann@x>" is "<address>", not "<<address>>" (found by a tester).
	return strings.ReplaceAll(b.String(), "<<address>>", "<address>")
}

// foldPrefix is how many bytes of s make t, rune by rune without case
// (strings.EqualFold's rule), or 0 when s does not start with t. Matching
// the reply as it is, not lowercased copies: lowercasing changes some
// letters' length (İ), and offsets found in the copy cut the reply
// elsewhere ("<address>g").
func foldPrefix(s, t string) int {
	n := 0
	for t != "" {
		if s == "" {
			return 0
		}
		r1, n1 := utf8.DecodeRuneInString(s)
		r2, n2 := utf8.DecodeRuneInString(t)
		if r1 != r2 && !strings.EqualFold(s[:n1], t[:n2]) {
			return 0
		}
		s, t, n = s[n1:], t[n2:], n+n1
	}
	return n
}

// FailureTally groups failed rows by ReplyGroup as a store reads them, one
// row at a time; at most maxGroups distinct replies are kept, the rest are
// counted under one "other replies" group.
type FailureTally struct {
	groups    map[string]*FailureGroup
	other     FailureGroup
	retryable int64
}

// maxGroups bounds a tally's memory whatever the number of failed rows.
const maxGroups = 10000

// Add counts one failed row.
func (t *FailureTally) Add(reply, email string) {
	if strings.HasPrefix(reply, GaveUpPrefix) {
		t.retryable++
	}
	if t.groups == nil {
		t.groups = map[string]*FailureGroup{}
	}
	key := ReplyGroup(reply, email)
	g := t.groups[key]
	if g == nil {
		if len(t.groups) >= maxGroups {
			t.other.Count++
			return
		}
		g = &FailureGroup{Reply: key, Example: email}
		t.groups[key] = g
	}
	g.Count++
}

// Fill sets r's Failures (the largest n groups first) and Retryable.
func (t *FailureTally) Fill(r *Report, n int) {
	out := make([]FailureGroup, 0, len(t.groups)+1)
	for _, g := range t.groups {
		out = append(out, *g)
	}
	if t.other.Count > 0 {
		t.other.Reply = "(other replies)"
		out = append(out, t.other)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Count != out[j].Count {
			return out[i].Count > out[j].Count
		}
		return out[i].Reply < out[j].Reply
	})
	if n >= 0 && len(out) > n {
		out = out[:n]
	}
	r.Failures, r.Retryable = out, t.retryable
}
