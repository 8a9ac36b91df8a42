package store

import (
	"context"
	"strings"
	"time"

	"github.com/oklog/ulid/v2"
)

// Ledger statuses past "sent". sent < delivered < opened < clicked only ever
// move up; bounced, complained, unsubscribed and failed are terminal
// off-ramps. The order is enforced by the UPDATE that applies an event
// (see Rank), so events arriving late, twice or concurrently cannot walk a
// row backwards.
const (
	SendDelivered    SendStatus = "delivered"
	SendOpened       SendStatus = "opened"
	SendClicked      SendStatus = "clicked"
	SendBounced      SendStatus = "bounced"
	SendComplained   SendStatus = "complained"
	SendUnsubscribed SendStatus = "unsubscribed"
)

// Ranks of ledger statuses. A status may replace another only when its rank is
// higher. Rows without a final outcome yet (claimed, deferred, unknown) rank
// lowest: a delivery report proves the message went out. Off-ramps outrank
// the whole sent ladder and nothing outranks a terminal status.
const (
	RankPending  = 0
	RankOffRamp  = 50
	RankTerminal = 99
)

// Rank is s's place in the ledger order; see the constants above.
func (s SendStatus) Rank() int {
	switch s {
	case SendClaimed, SendDeferred, SendUnknown:
		return RankPending
	case SendSent:
		return 1
	case SendDelivered:
		return 2
	case SendOpened:
		return 3
	case SendClicked:
		return 4
	}
	return RankTerminal // failed, bounced, complained, unsubscribed
}

// Accepted reports whether a row with status s was accepted by the SMTP
// server: sent, or any status a delivery event can only give a sent message.
func (s SendStatus) Accepted() bool {
	switch s {
	case SendSent, SendDelivered, SendOpened, SendClicked, SendBounced, SendComplained:
		return true
	}
	return false
}

// EventType is what a delivery webhook reports about one message.
type EventType string

const (
	EventDelivered EventType = "delivered"
	EventOpened    EventType = "opened"
	EventClicked   EventType = "clicked"
	// EventBounced is a hard (permanent) bounce: the row becomes bounced and
	// the contact is suppressed.
	EventBounced EventType = "bounced"
	// EventSoftBounced is a temporary failure the provider retries: stored
	// and counted, it changes no ledger row.
	EventSoftBounced  EventType = "soft_bounced"
	EventComplained   EventType = "complained"
	EventUnsubscribed EventType = "unsubscribed"
	// EventIgnored is an authenticated event of a kind rangecast does not
	// track (accepted, stored, …). It is stored like any other, so its
	// provider event id cannot be used again: Mailgun signs only a token
	// and a timestamp, not the event, and a token seen once must not carry
	// a forged complaint later.
	EventIgnored EventType = "ignored"
)

// EventTypes lists every event type, for validation and metrics.
var EventTypes = []EventType{EventDelivered, EventOpened, EventClicked, EventBounced, EventSoftBounced, EventComplained, EventUnsubscribed}

// Valid reports whether t is one of EventTypes.
func (t EventType) Valid() bool {
	if t == EventIgnored {
		return true
	}
	for _, v := range EventTypes {
		if t == v {
			return true
		}
	}
	return false
}

// Status is the ledger status the event moves a row to, or "" when it moves
// none (a soft bounce).
func (t EventType) Status() SendStatus {
	switch t {
	case EventDelivered:
		return SendDelivered
	case EventOpened:
		return SendOpened
	case EventClicked:
		return SendClicked
	case EventBounced:
		return SendBounced
	case EventComplained:
		return SendComplained
	case EventUnsubscribed:
		return SendUnsubscribed
	}
	return ""
}

// statusRank is the rank a status reaches when an event sets it: off-ramps
// rank above the ladder but below terminal statuses, so an off-ramp moves
// any sent-ladder row and no row that is already terminal.
func statusRank(s SendStatus) int {
	if r := s.Rank(); r != RankTerminal {
		return r
	}
	return RankOffRamp
}

// TargetRank is the rank a row's current status must be below for an event
// of type t to change it; 0 when t changes no row.
func (t EventType) TargetRank() int {
	s := t.Status()
	if s == "" {
		return 0
	}
	return statusRank(s)
}

// Suppresses reports whether an event of type t suppresses the contact for
// all future broadcasts.
func (t EventType) Suppresses() bool { return t == EventBounced || t == EventComplained }

// DeliveryEvent is one authenticated report from a mail provider.
type DeliveryEvent struct {
	// Provider and EventID identify the event: it is stored once per pair,
	// so a provider's retry changes nothing.
	Provider, EventID string
	Type              EventType
	// MessageID is our Message-ID, without angle brackets; it names the
	// ledger row (<broadcast>.<contact>@<sending domain>).
	MessageID  string
	OccurredAt time.Time
	// Detail is what the provider said (a bounce reply, a clicked URL).
	Detail string
}

// EventResult is what recording a delivery event did.
type EventResult struct {
	// Duplicate: the event was stored before; nothing changed.
	Duplicate bool
	// Matched: a ledger row carries this Message-ID.
	Matched                bool
	BroadcastID, ContactID ulid.ULID
	// Changed: the rank guard let the event move the row.
	Changed bool
	// Status is the row's status afterwards (when Matched).
	Status SendStatus
	// Suppressed: the event suppressed the contact.
	Suppressed bool
	// Receipt: the event is about a transactional message (no ledger row,
	// so not Matched) to a known contact, ContactID: a hard bounce or a
	// complaint suppresses that contact for broadcasts, and a provider's
	// unsubscribe unsubscribes them, as one about a broadcast does (a
	// tester's complaint about a receipt changed nothing).
	Receipt bool
}

// ParseTxMessageID reads the receipt id of a transactional message's
// Message-ID ("tx.<id>@domain", message.TransactionalMessageID).
func ParseTxMessageID(mid string) (ulid.ULID, bool) {
	local, _, found := strings.Cut(BareMessageID(mid), "@")
	rest, ok := strings.CutPrefix(local, "tx.")
	if !found || !ok {
		return ulid.ULID{}, false
	}
	id, err := ulid.ParseStrict(rest)
	return id, err == nil
}

// Reputation is what the auto-pause alarms read of one broadcast's ledger.
type Reputation struct {
	// Accepted counts rows the SMTP server accepted (SendStatus.Accepted).
	Accepted int64
	// Delivered counts rows reported delivered or further: delivered,
	// opened, clicked, and complained (a complaint needs a delivered
	// message).
	Delivered  int64
	Bounced    int64 // hard bounces
	Complained int64
	// Refused counts hard refusals at send time: outcomes written failed
	// with Outcome.HardBounce (550 5.1.1 and the like), the bounces a
	// direct-to-MX sender hears of, where a relay would have accepted the
	// message and reported the bounce later. Unlike the other fields it is
	// not a sum over the rows' statuses (the row is failed, and
	// ReputationOf never counts it): it grows by one for each outcome
	// write that moves a claimed row to such a failure, and nothing takes
	// it back, since the server's answer stays said.
	Refused int64
}

// ReputationOf is what one ledger row with this status and accepted flag
// adds to its broadcast's Reputation. Stores keep Reputation as a running
// sum, so every statement that changes a row's status or flag adds
// ReputationOf(new) - ReputationOf(old) in its own transaction.
func ReputationOf(s SendStatus, accepted bool) Reputation {
	var r Reputation
	if accepted {
		r.Accepted = 1
	}
	switch s {
	case SendDelivered, SendOpened, SendClicked:
		r.Delivered = 1
	case SendComplained:
		r.Delivered, r.Complained = 1, 1
	case SendBounced:
		r.Bounced = 1
	}
	return r
}

// Plus is r + o, field by field.
func (r Reputation) Plus(o Reputation) Reputation {
	return Reputation{r.Accepted + o.Accepted, r.Delivered + o.Delivered, r.Bounced + o.Bounced, r.Complained + o.Complained, r.Refused + o.Refused}
}

// Minus is r - o, field by field.
func (r Reputation) Minus(o Reputation) Reputation {
	return Reputation{r.Accepted - o.Accepted, r.Delivered - o.Delivered, r.Bounced - o.Bounced, r.Complained - o.Complained, r.Refused - o.Refused}
}

// Ledger is the per-recipient record past the send: delivery events and
// unsubscribes.
type Ledger interface {
	// RecordEvent stores ev once per (Provider, EventID) and, the first
	// time, applies it to the ledger row whose Message-ID it names through
	// the rank guard, and suppresses the contact for a hard bounce or a
	// complaint. All of it commits together or not at all. An event that
	// names no ledger row is stored unmatched.
	RecordEvent(ctx context.Context, ev DeliveryEvent, now time.Time) (EventResult, error)
	// UnsubscribeContact unsubscribes the contact with this id, marks its
	// deferred and claimed-but-unsent rows of every broadcast unsubscribed
	// (they will not be sent), and, when from is not zero, moves that
	// broadcast's sent row to unsubscribed through the rank guard (the
	// message the person unsubscribed from). ErrNotFound when no such
	// contact exists. Repeating it changes nothing further.
	UnsubscribeContact(ctx context.Context, contact, from ulid.ULID, now time.Time) error
	// Reputation counts the broadcast's ledger for the reputation alarms,
	// exactly as of one moment. Its cost does not grow with the audience:
	// stores keep the sums as every change commits, not by counting rows.
	Reputation(ctx context.Context, broadcast ulid.ULID) (Reputation, error)
	// PurgeEvents deletes up to limit delivery events received before
	// receivedBefore and returns how many it deleted. The ledger rows they
	// moved keep their status; only the raw events (and the provider ids
	// that made a repeated event count once) go.
	PurgeEvents(ctx context.Context, receivedBefore time.Time, limit int) (int64, error)
	// FoldReputation brings up to limit pending changes of any broadcast's
	// reputation sums into the sums and returns how many it folded.
	// Reputation folds its own broadcast's as it reads; this serves the
	// broadcasts nobody reads any more (finished ones still get delivery
	// events for days), so their pending changes do not pile up. Stores
	// that keep the sums directly return 0.
	FoldReputation(ctx context.Context, limit int) (int64, error)
}

// ParseMessageID splits one of our Message-IDs, "<broadcast>.<contact>@<sending
// domain>" (message.MessageID; angle brackets optional), into its ids. ok is
// false for any other Message-ID: the event then matches no ledger row.
func ParseMessageID(mid string) (broadcast, contact ulid.ULID, ok bool) {
	mid = BareMessageID(mid)
	local, _, found := strings.Cut(mid, "@")
	if !found {
		return broadcast, contact, false
	}
	b, c, found := strings.Cut(local, ".")
	if !found {
		return broadcast, contact, false
	}
	var err1, err2 error
	broadcast, err1 = ulid.ParseStrict(b)
	contact, err2 = ulid.ParseStrict(c)
	return broadcast, contact, err1 == nil && err2 == nil
}

// BareMessageID is mid without surrounding space and angle brackets, the
// form events are matched and stored in.
func BareMessageID(mid string) string {
	return strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(mid), "<"), ">")
}

// SuppressionReason is what a contact suppressed by a delivery event shows
// as its reason (GetContact): the kind, the provider and its words.
func SuppressionReason(ev DeliveryEvent) string {
	kind := "hard bounce"
	if ev.Type == EventComplained {
		kind = "spam complaint"
	}
	r := kind + " reported by " + ev.Provider
	if ev.Detail != "" {
		r += ": " + ev.Detail
	}
	return r
}
