package web

import (
	"encoding/base64"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/rangecast/rangecast/internal/store"
)

// Resend delivers webhooks through Svix (docs.svix.com, "Verifying Webhooks
// Manually"): three headers
//
//	svix-id:        msg_…   (the same on every retry of one message)
//	svix-timestamp: Unix seconds
//	svix-signature: "v1,<base64 HMAC-SHA256(key, id + "." + timestamp + "." + body)>", space-separated when several
//
// where key is the base64 part of the "whsec_…" secret. The Standard
// Webhooks names (webhook-id, webhook-timestamp, webhook-signature) are
// accepted too. The body is {"type": "email.delivered", "created_at": …,
// "data": {"email_id": …, "headers": [{"name": "Message-ID", "value": …}], "bounce": {"type": …}, …}}.
// Our Message-ID is read from data.headers: a message sent through Resend
// with its SMTP relay keeps the Message-ID rangecast wrote.

const svixSecretPrefix = "whsec_"

// DecodeSvixSecret returns the HMAC key of a "whsec_<base64>" secret.
func DecodeSvixSecret(secret string) ([]byte, error) {
	raw, ok := strings.CutPrefix(strings.TrimSpace(secret), svixSecretPrefix)
	if !ok {
		return nil, errors.New(`not a Svix secret: it starts with "whsec_" (copy it from the webhook's page)`)
	}
	key, err := base64.StdEncoding.DecodeString(raw)
	if err != nil {
		return nil, errors.New("the part after whsec_ is not base64")
	}
	if len(key) < 16 {
		return nil, errors.New("the key is shorter than 16 bytes")
	}
	return key, nil
}

// SvixSignature is the svix-signature value for one key.
func SvixSignature(key []byte, id string, ts int64, body []byte) string {
	return "v1," + base64.StdEncoding.EncodeToString(hmacSHA256(key, []byte(id), []byte("."), []byte(strconv.FormatInt(ts, 10)), []byte("."), body))
}

func svixHeader(h http.Header, name string) string {
	if v := h.Get("svix-" + name); v != "" {
		return v
	}
	return h.Get("webhook-" + name)
}

type resendEvent struct {
	Type      string `json:"type"`
	CreatedAt string `json:"created_at"`
	Data      *struct {
		EmailID   string `json:"email_id"`
		CreatedAt string `json:"created_at"`
		Headers   []struct {
			Name  string `json:"name"`
			Value string `json:"value"`
		} `json:"headers"`
		Bounce *struct {
			Type    string `json:"type"`
			SubType string `json:"subType"`
			Message string `json:"message"`
		} `json:"bounce"`
		Click *struct {
			Link string `json:"link"`
		} `json:"click"`
	} `json:"data"`
}

// ParseResend authenticates and parses a Resend (Svix) webhook. keys are the
// decoded secrets (DecodeSvixSecret). Events rangecast does not track
// (email.sent, contact.*, …) come back with an empty Type.
func ParseResend(keys [][]byte, header http.Header, body []byte, now time.Time, window time.Duration) ([]store.DeliveryEvent, error) {
	id, ts, sigs := svixHeader(header, "id"), svixHeader(header, "timestamp"), svixHeader(header, "signature")
	if id == "" || sigs == "" {
		return nil, unsigned("no svix-id or svix-signature header")
	}
	if err := checkTimestamp(ts, now, window); err != nil {
		return nil, err
	}
	if !anyMAC(sigs, " ", "v1,", base64.StdEncoding.DecodeString, func(key []byte) []byte {
		return hmacSHA256(key, []byte(id), []byte("."), []byte(ts), []byte("."), body)
	}, keys) {
		return nil, badSignature("no v1 signature matches")
	}
	if err := checkID("svix-id", id); err != nil {
		return nil, err
	}
	var e resendEvent
	if err := strictJSON(body, &e); err != nil {
		return nil, malformed("body: %v", err)
	}
	if e.Type == "" {
		return nil, malformed("no type")
	}
	ev := store.DeliveryEvent{Provider: ProviderResend, EventID: id, OccurredAt: now}
	switch e.Type {
	case "email.delivered":
		ev.Type = store.EventDelivered
	case "email.opened":
		ev.Type = store.EventOpened
	case "email.clicked":
		ev.Type = store.EventClicked
	case "email.complained":
		ev.Type = store.EventComplained
	case "email.bounced":
		ev.Type = store.EventBounced
	case "email.delivery_delayed":
		ev.Type = store.EventSoftBounced
	default:
		return []store.DeliveryEvent{ev}, nil // not a ledger event
	}
	if e.Data == nil {
		return nil, malformed("no data object")
	}
	d := e.Data
	for _, h := range d.Headers {
		if strings.EqualFold(h.Name, "Message-ID") {
			ev.MessageID = h.Value
		}
	}
	if ev.MessageID == "" {
		// Not sent by rangecast (or sent without our header): stored,
		// matched to nothing, under Resend's own id.
		ev.MessageID = "resend:" + d.EmailID
	}
	for _, raw := range []string{d.CreatedAt, e.CreatedAt} {
		if at, err := time.Parse(time.RFC3339Nano, raw); err == nil {
			ev.OccurredAt = at.UTC()
			break
		}
	}
	if b := d.Bounce; b != nil {
		// Resend sends email.bounced for permanent rejections; a bounce
		// it types as transient is not a reason to suppress anyone.
		if ev.Type == store.EventBounced && strings.EqualFold(b.Type, "Transient") {
			ev.Type = store.EventSoftBounced
		}
		ev.Detail = strings.TrimSpace(b.Type + " " + b.SubType + ": " + b.Message)
	}
	if d.Click != nil {
		ev.Detail = d.Click.Link
	}
	return []store.DeliveryEvent{ev}, nil
}
