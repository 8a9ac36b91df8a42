package store

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/oklog/ulid/v2"

	"github.com/rangecast/rangecast/internal/address"
)

// Erasure removes a person's data (GDPR Art. 17) and keeps only what the
// law allows and the system needs: the ledger's counts, and a keyed hash of
// the address so that it is never mailed again.
type Erasure interface {
	// Erase erases each address: its contact (with its segment
	// memberships) is deleted; its ledger rows keep their status and
	// counts but their email becomes an irreversible token and replies
	// naming the address are withheld; its delivery events lose their
	// detail; its transactional receipts keep their row (so counts and
	// idempotency records stay) without address, payload or replies, and
	// a queued one is failed. The address's keyed hash (ErasureHash) is
	// recorded, and every later import and page gate consults it: an
	// erased address that is imported again is suppressed, never mailed.
	// Erasing an address twice, or one that names no contact, is not an
	// error; the hash is recorded either way.
	Erase(ctx context.Context, emails []string, now time.Time) ([]Erased, error)
	// Erased reports whether the address's keyed hash is recorded.
	Erased(ctx context.Context, email string) (bool, error)
	// ErasedAmong counts the addresses whose keyed hash is recorded (an
	// import says how many of its contacts were erased before: kept
	// suppressed, never mailed).
	ErasedAmong(ctx context.Context, emails []string) (int64, error)
}

// Erased is what Erase did for one address.
type Erased struct {
	Email string // as given
	// name is the erased contact's name, withheld with the address in
	// broadcasts' reasons (a relay's reply may quote it); never returned.
	name string
	// Contact is the erased contact's id; zero when the address named none.
	Contact ulid.ULID
	// Sends, Events and Receipts count the ledger rows, delivery events and
	// transactional receipts anonymised.
	Sends, Events, Receipts int64
}

// ErasedReason is the suppression reason of a contact imported with an
// address that was erased before.
const ErasedReason = "address erased before (GDPR Art. 17); imported again, never mailed"

// InDoubtResent is the error of a ledger row the reconciler released to be
// sent again under the resend in-doubt policy, with no lookup to ask: its
// earlier attempt may have been delivered. Recording it marks the row in
// doubt for good (Due.InDoubt), through any later outcome: such a row
// never ends failed, since "not delivered" may be untrue. ErasedInDoubt is
// the error it gets, with status unknown, when its contact is erased
// before a resend; InDoubtEndedPrefix starts the error it gets, with status
// unknown, when a resend is refused for good or given up on.
//
// IneligibleBeforeRetry starts the error of a deferred row, attempted
// before, whose contact no longer passes the gate when it comes due
// (suppressed, flagged do-not-contact, out of the segment): failed, not
// deleted, so the attempts stay on record (deleted, it read as "left out
// before their page", tester); IneligibleInDoubt is the error, with status
// unknown, of such a row in doubt. A row never attempted is left out.
const (
	IneligibleBeforeRetry = "not sent again: the contact was suppressed, flagged do-not-contact or left the segment before its retry; last: "
	IneligibleInDoubt     = "in doubt, not sent again: the contact was suppressed, flagged do-not-contact or left the segment before the resend, and the earlier attempt may have been delivered"
)

const (
	InDoubtResent      = "in doubt: sent again (in-doubt policy resend)"
	ErasedInDoubt      = "in doubt, not sent again: the contact was erased before the resend, and the earlier attempt may have been delivered"
	InDoubtEndedPrefix = "in doubt: an earlier attempt may have been delivered; the resend ended: "
)

// ErasedBeforeSend is the error a page run records, with status failed, for
// a claim of its own that it never sent because the contact was erased
// before the run learnt it held it: a claim whose commit's answer was lost,
// retried after the erasure, does not return the erased contact.
const ErasedBeforeSend = "not sent: the contact was erased before its send"

// ErasedToken is the prefix of every token that replaces an erased
// address. It has no @, so no transport can take it for an address.
const ErasedToken = "erased:"

// Withheld replaces an erased address inside free text (a server's reply).
const Withheld = "[erased address]"

// WithheldReply stands for a server's reply about an erased contact's
// message written after the erasure (the send was in flight): the reply
// may quote the address, so it is not kept.
const WithheldReply = "reply withheld: the contact was erased"

// NewErasureKey returns a fresh random key for ErasureHash; stores keep one,
// made once when their schema is created (migration 016).
func NewErasureKey() []byte {
	k := make([]byte, 32)
	rand.Read(k) //nolint:errcheck // crypto/rand.Read never fails (Go 1.24+)
	return k
}

// ErasureHash is the keyed hash an erased address is remembered by:
// HMAC-SHA256 of address.Key(email) under the store's key, in hex. The key
// is what makes it more than a lookup table: without it, a hash cannot be
// tested against a list of guessed addresses.
func ErasureHash(key []byte, email string) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(address.Key(email)))
	return hex.EncodeToString(m.Sum(nil))
}

// ErasedReceiptKey is the address key an erased transactional receipt
// keeps (outbound_receipts.email_key): ErasedToken and the address's
// ErasureHash, by which the erased addresses are remembered already. A
// request repeated under the same idempotency key after the erasure finds
// the receipt by it (and ErasedIdempotencyKey) and is answered as a
// replay: with a random token there, it made a new receipt and sent the
// message a second time.
func ErasedReceiptKey(key []byte, email string) string {
	return ErasedToken + ErasureHash(key, email)
}

// ErasedIdempotencyKey is the idempotency key an erased transactional
// receipt keeps: ErasedToken and a keyed hash of the key. Applications key
// messages by whatever they have, the address too ("signup:ann@…"), so an
// erasure keeps none of it in clear; a request repeated under the key
// still finds the receipt (with ErasedReceiptKey).
func ErasedIdempotencyKey(key []byte, idempotencyKey string) string {
	return erasedHMAC(key, "idempotency key", idempotencyKey)
}

// ErasedPayloadHash is the payload hash an erased transactional receipt
// keeps: a request repeated under its key with other content is refused
// as before the erasure, not answered as a replay while nothing is sent
// (review).
func ErasedPayloadHash(key []byte, payloadHash string) string {
	return erasedHMAC(key, "payload hash", payloadHash)
}

// erasedHMAC is ErasedToken and the keyed hash of value, labelled so that
// no two kinds of value share a hash.
func erasedHMAC(key []byte, label, value string) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(label + "\x00" + value))
	return ErasedToken + hex.EncodeToString(m.Sum(nil))
}

// MatchErased is the receipt erased found by a request with payloadHash:
// its payload hash is the request's when the request's content is the
// erased one's (ErasedPayloadHash), so a caller compares them as before the
// erasure.
func MatchErased(key []byte, erased Receipt, payloadHash string) Receipt {
	if erased.PayloadHash == ErasedPayloadHash(key, payloadHash) {
		erased.PayloadHash = payloadHash
	}
	return erased
}

// NewErasedToken returns a fresh irreversible token for one erased contact:
// random, so nothing can be derived from it.
func NewErasedToken() string {
	b := make([]byte, 16)
	rand.Read(b) //nolint:errcheck
	return ErasedToken + hex.EncodeToString(b)
}

// ScrubAddress replaces every spelling of email in s (as given, canonical,
// with an ASCII domain; any case) by Withheld.
func ScrubAddress(s, email string) string { return ReplaceAddress(s, email, Withheld) }

// Recipient stands for a recipient's address in a broadcast's reason,
// which names the contact by id instead (ReplaceAddress).
const Recipient = "[recipient]"

// SetName records the erased contact's name for ScrubReason.
func (e *Erased) SetName(name string) { e.name = name }

// ScrubReason is a broadcast's reason with the erased person's address
// and name (as WithholdRecipient reads names) withheld.
func (e Erased) ScrubReason(reason string) string {
	reason = ScrubAddress(reason, e.Email)
	return replaceName(reason, e.name, Withheld)
}

// WithholdRecipient is s with the recipient's address, and their name
// when it is long enough not to be a common word's part (four letters or
// more), replaced by Recipient: for a broadcast's reason and a provider's
// reply, which outlive an erasure in KV and logs (verifier: a relay that
// quoted the name).
func WithholdRecipient(s, email, name string) string {
	return replaceName(ReplaceAddress(s, email, Recipient), name, Recipient)
}

// replaceName replaces name in s, in any case, by with, when it has four
// letters or more (shorter, it may be part of a word).
func replaceName(s, name, with string) string {
	if name = strings.TrimSpace(name); utf8.RuneCountInString(name) >= 4 && strings.Contains(strings.ToLower(s), strings.ToLower(name)) {
		s = regexp.MustCompile(`(?i)`+regexp.QuoteMeta(name)).ReplaceAllLiteralString(s, with)
	}
	return s
}

// ReplaceAddress replaces every spelling of email in s (as ScrubAddress)
// by with.
func ReplaceAddress(s, email, with string) string {
	if s == "" || email == "" {
		return s
	}
	forms := []string{email, address.Key(email)}
	if c, err := address.Canonical(email); err == nil {
		forms = append(forms, c)
		if a, _, err := address.ASCIIDomain(c); err == nil {
			forms = append(forms, a)
		}
	}
	for _, f := range forms {
		if f == "" || !strings.Contains(strings.ToLower(s), strings.ToLower(f)) {
			continue
		}
		s = regexp.MustCompile(`(?i)`+regexp.QuoteMeta(f)).ReplaceAllLiteralString(s, with)
	}
	return s
}
