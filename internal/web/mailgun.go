package web

import (
	"crypto/hmac"
	"encoding/hex"
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/rangecast/rangecast/internal/store"
)

// Mailgun posts one event per request as JSON with the signature inside the
// body (documentation.mailgun.com, "Securing Webhooks"):
//
//	{"signature": {"timestamp": "1770920772", "token": "<50 random chars>",
//	               "signature": "<hex HMAC-SHA256(signing key, timestamp + token)>"},
//	 "event-data": {"id": "…", "event": "delivered", "timestamp": 1770920772.5,
//	                "severity": "permanent", "message": {"headers": {"message-id": "…"}}, …}}
//
// The signature covers only timestamp and token, not the event: a captured
// request could carry another event under the same signature. So the token
// (50 random characters, fresh for every request) is the event's id, as
// Mailgun's own advice to remember tokens suggests: a second request under
// a token already stored changes nothing, whatever event it carries, and
// the replay window bounds how long a captured signature is any use at all.
// (event-data.id is only unique within a day.) A Mailgun retry signed
// afresh is applied again, which the ledger's rank guard makes harmless.

// mailgunEnvelope is read first: only the signature, so a request whose
// signature verifies spends its token even when its event data is
// malformed (else the signed token could be replayed with other data).
type mailgunEnvelope struct {
	Signature struct {
		Timestamp string `json:"timestamp"`
		Token     string `json:"token"`
		Signature string `json:"signature"`
	} `json:"signature"`
	EventData json.RawMessage `json:"event-data"`
}

type mailgunRequest struct {
	EventData *struct {
		ID        string  `json:"id"`
		Event     string  `json:"event"`
		Timestamp float64 `json:"timestamp"`
		Severity  string  `json:"severity"`
		Reason    string  `json:"reason"`
		URL       string  `json:"url"`
		Message   struct {
			Headers struct {
				MessageID string `json:"message-id"`
			} `json:"headers"`
		} `json:"message"`
		DeliveryStatus struct {
			Code        int    `json:"code"`
			Message     string `json:"message"`
			Description string `json:"description"`
		} `json:"delivery-status"`
	} `json:"event-data"`
}

// MailgunSignature is the signature Mailgun computes for timestamp and token.
func MailgunSignature(key []byte, timestamp, token string) string {
	return hex.EncodeToString(hmacSHA256(key, []byte(timestamp), []byte(token)))
}

// ParseMailgun authenticates and parses a Mailgun webhook. Events rangecast
// does not track (accepted, stored, …) come back with an empty Type.
//
// Once the signature verifies, the token is spent whatever follows: an
// error after that point comes with one event of no Type under the token,
// which the handler records (as ignored) before refusing the request.
func ParseMailgun(keys [][]byte, body []byte, now time.Time, window time.Duration) ([]store.DeliveryEvent, error) {
	var env mailgunEnvelope
	if err := strictJSON(body, &env); err != nil {
		return nil, malformed("body: %v", err)
	}
	sig := env.Signature
	if sig.Signature == "" || sig.Token == "" {
		return nil, unsigned("no signature object")
	}
	if err := checkTimestamp(sig.Timestamp, now, window); err != nil {
		return nil, err
	}
	got, err := hex.DecodeString(sig.Signature)
	if err != nil {
		return nil, badSignature("signature is not hex")
	}
	ok := false
	for _, k := range keys {
		if hmac.Equal(got, hmacSHA256(k, []byte(sig.Timestamp), []byte(sig.Token))) {
			ok = true
		}
	}
	if !ok {
		return nil, badSignature("signature does not match the signing key")
	}
	if err := checkID("signature.token", sig.Token); err != nil {
		return nil, err
	}
	spent := []store.DeliveryEvent{{Provider: ProviderMailgun, EventID: sig.Token, OccurredAt: now}}
	var req mailgunRequest
	if len(env.EventData) > 0 && string(env.EventData) != "null" {
		if err := json.Unmarshal(env.EventData, &req.EventData); err != nil {
			return spent, malformed("event-data: %v", err)
		}
	}
	ed := req.EventData
	if ed == nil {
		return spent, malformed("no event-data")
	}
	ev := store.DeliveryEvent{Provider: ProviderMailgun, EventID: sig.Token, MessageID: ed.Message.Headers.MessageID, OccurredAt: now}
	if ed.Timestamp > 0 && ed.Timestamp < math.MaxInt32*4 {
		sec, frac := math.Modf(ed.Timestamp)
		ev.OccurredAt = time.Unix(int64(sec), int64(frac*1e9)).UTC()
	}
	switch strings.ToLower(ed.Event) {
	case "delivered":
		ev.Type = store.EventDelivered
	case "opened":
		ev.Type = store.EventOpened
	case "clicked":
		ev.Type, ev.Detail = store.EventClicked, ed.URL
	case "complained":
		ev.Type = store.EventComplained
	case "unsubscribed":
		ev.Type = store.EventUnsubscribed
	case "failed":
		ev.Type = store.EventSoftBounced
		if strings.EqualFold(ed.Severity, "permanent") {
			ev.Type = store.EventBounced
		}
		ev.Detail = mailgunReply(ed.DeliveryStatus.Code, ed.DeliveryStatus.Message, ed.DeliveryStatus.Description, ed.Reason)
	case "":
		return spent, malformed("event-data.event is empty")
	default:
		// accepted, rejected, stored, list events…: not a ledger event.
	}
	if ev.Type != "" && ev.MessageID == "" {
		return spent, malformed("event-data.message.headers.message-id is empty")
	}
	return []store.DeliveryEvent{ev}, nil
}

// mailgunReply keeps what a person needs to see why a message bounced.
func mailgunReply(code int, msg, desc, reason string) string {
	var parts []string
	if code != 0 {
		parts = append(parts, strings.TrimSpace(strings.Join([]string{strconv.Itoa(code), msg}, " ")))
	} else if msg != "" {
		parts = append(parts, msg)
	}
	if desc != "" && desc != msg {
		parts = append(parts, desc)
	}
	if reason != "" {
		parts = append(parts, "("+reason+")")
	}
	return strings.Join(parts, " ")
}
