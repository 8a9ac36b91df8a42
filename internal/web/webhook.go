package web

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/rangecast/rangecast/internal/store"
)

// Providers, as stored with each event and used in metrics.
const (
	ProviderGeneric = "generic"
	ProviderMailgun = "mailgun"
	ProviderResend  = "resend"
)

// Rejection reasons (metrics label values).
const (
	reasonUnsigned     = "unsigned"
	reasonBadSignature = "bad_signature"
	reasonStale        = "stale"
	reasonMalformed    = "malformed"
	reasonTooLarge     = "too_large"
	reasonBusy         = "busy"
)

// Rejection is why a webhook request was refused: Status is 401 for
// authentication (unsigned, bad signature, outside the replay window) and 400
// for a request that cannot be read.
type Rejection struct {
	Status int
	Reason string // a metrics label: unsigned, bad_signature, stale, malformed, too_large
	Msg    string
}

func (e *Rejection) Error() string { return e.Reason + ": " + e.Msg }

func unsigned(format string, a ...any) error {
	return &Rejection{http.StatusUnauthorized, reasonUnsigned, fmt.Sprintf(format, a...)}
}

func badSignature(format string, a ...any) error {
	return &Rejection{http.StatusUnauthorized, reasonBadSignature, fmt.Sprintf(format, a...)}
}

func malformed(format string, a ...any) error {
	return &Rejection{http.StatusBadRequest, reasonMalformed, fmt.Sprintf(format, a...)}
}

// checkTimestamp parses a Unix-seconds timestamp and refuses one outside the
// replay window: a captured request cannot be replayed later.
func checkTimestamp(raw string, now time.Time, window time.Duration) error {
	if raw == "" {
		return unsigned("no timestamp")
	}
	sec, err := strconv.ParseInt(raw, 10, 64)
	if err != nil {
		return badSignature("timestamp %q is not Unix seconds", truncate(raw))
	}
	ts := time.Unix(sec, 0)
	if d := now.Sub(ts); d > window || d < -window {
		when := fmt.Sprintf("%s ago", d.Round(time.Second))
		if d < 0 {
			when = fmt.Sprintf("%s ahead", (-d).Round(time.Second))
		}
		return &Rejection{http.StatusUnauthorized, reasonStale, fmt.Sprintf("timestamp %d is %s; the window is ±%s (check the sender's clock)", sec, when, window)}
	}
	return nil
}

func hmacSHA256(key []byte, parts ...[]byte) []byte {
	m := hmac.New(sha256.New, key)
	for _, p := range parts {
		m.Write(p)
	}
	return m.Sum(nil)
}

func truncate(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}

// A webhook parser authenticates a request and returns its events, or a
// *Rejection.
type parser func(r *http.Request, body []byte, now time.Time) ([]store.DeliveryEvent, error)

// A precheck refuses a request from its headers alone, before its body is
// read: a request without the provider's signature headers, or with a
// timestamp outside the replay window, costs no read of up to MaxBody.
type precheck func(h http.Header, now time.Time) error

// signedHeaders is a precheck for providers that sign in headers.
func signedHeaders(window time.Duration, timestamp func(http.Header) string, required ...func(http.Header) string) precheck {
	return func(h http.Header, now time.Time) error {
		for _, get := range required {
			if get(h) == "" {
				return unsigned("no signature headers")
			}
		}
		return checkTimestamp(timestamp(h), now, window)
	}
}

// webhook reads, authenticates and applies one provider's request. Events
// are applied one by one, each idempotent: a failure part-way answers 500,
// the provider retries, and what was applied is recognised as a duplicate.
//
// Headers are checked before the body is read (pre may be nil), a body
// longer than MaxBody is refused as it is read, and at most MaxReads
// bodies are read at once: the others are answered 503 with Retry-After,
// which every provider retries, so a flood cannot hold MaxBody bytes per
// connection.
func (h *Handler) webhook(provider string, pre precheck, parse parser) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		log := h.cfg.Log.With("provider", provider)
		if pre != nil {
			if err := pre(r.Header, h.cfg.Clock.Now()); err != nil {
				var rej *Rejection
				if !errors.As(err, &rej) {
					rej = &Rejection{http.StatusBadRequest, reasonMalformed, err.Error()}
				}
				h.reject(w, log, provider, rej)
				return
			}
		}
		select {
		case h.reads <- struct{}{}:
			defer func() { <-h.reads }()
		default:
			webhookRejected.WithLabelValues(provider, reasonBusy).Inc()
			w.Header().Set("Retry-After", "1")
			http.Error(w, "busy: too many webhook requests at once; retry", http.StatusServiceUnavailable)
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.cfg.MaxBody))
		if err != nil {
			var tooLarge *http.MaxBytesError
			if errors.As(err, &tooLarge) {
				h.reject(w, log, provider, &Rejection{http.StatusRequestEntityTooLarge, reasonTooLarge, fmt.Sprintf("body over %d bytes", h.cfg.MaxBody)})
				return
			}
			h.reject(w, log, provider, &Rejection{http.StatusBadRequest, reasonMalformed, "read body: " + err.Error()})
			return
		}
		now := h.cfg.Clock.Now()
		events, err := parse(r, body, now)
		if err != nil {
			// Events that come with an error are spent ids (a Mailgun token
			// whose signature verified): record them, so the signature
			// cannot be replayed with other data, then refuse.
			for _, ev := range events {
				ev.Type = store.EventIgnored
				if _, rerr := h.cfg.Store.RecordEvent(r.Context(), ev, now); rerr != nil {
					log.Error("webhook token not recorded as spent", "event", ev.EventID, "err", rerr)
				}
			}
			var rej *Rejection
			if !errors.As(err, &rej) {
				rej = &Rejection{http.StatusBadRequest, reasonMalformed, err.Error()}
			}
			h.reject(w, log, provider, rej)
			return
		}
		if err := cleanEvents(events); err != nil {
			h.reject(w, log, provider, err)
			return
		}
		for _, ev := range events {
			label := string(ev.Type)
			if ev.Type == "" {
				// Recorded all the same: its event id (a Mailgun token) is
				// spent, so its signature cannot be replayed with other
				// event data.
				ev.Type, label = store.EventIgnored, "other"
			}
			res, err := h.cfg.Store.RecordEvent(r.Context(), ev, now)
			if errors.Is(err, store.ErrInvalid) {
				// A value the database cannot hold: a retry would fail
				// the same way for ever (and hold back the events after
				// it), so the provider is told the request is bad.
				h.reject(w, log, provider, &Rejection{http.StatusBadRequest, reasonMalformed, "event " + truncate(ev.EventID) + ": " + err.Error()})
				return
			}
			if err != nil {
				log.Error("webhook event not recorded; the provider will retry", "event", ev.EventID, "err", err)
				http.Error(w, "event not recorded; retry later", http.StatusInternalServerError)
				return
			}
			result := "applied"
			switch {
			case ev.Type == store.EventIgnored:
				result = "ignored"
			case res.Duplicate:
				result = "duplicate"
			case !res.Matched && !res.Receipt:
				result = "unmatched"
			case !res.Changed && !res.Suppressed:
				result = "unchanged"
			}
			webhookEvents.WithLabelValues(provider, label, result).Inc()
			log.Debug("webhook event", "event", ev.EventID, "type", ev.Type, "message_id", ev.MessageID, "result", result, "status", res.Status)
			if res.Suppressed {
				log.Info("contact suppressed by a delivery event", "type", ev.Type, "broadcast", res.BroadcastID, "contact", res.ContactID)
			}
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintf(w, "ok: %d events\n", len(events))
	})
}

func (h *Handler) reject(w http.ResponseWriter, log interface {
	Warn(string, ...any)
}, provider string, rej *Rejection) {
	webhookRejected.WithLabelValues(provider, rej.Reason).Inc()
	log.Warn("webhook rejected", "reason", rej.Reason, "detail", rej.Msg)
	http.Error(w, rej.Error(), rej.Status)
}

// The generic format, for providers without a parser here or a relay of
// your own:
//
//	POST /webhooks/generic
//	Rangecast-Timestamp: 1767225600
//	Rangecast-Signature: v1=<hex HMAC-SHA256(secret, timestamp + "." + body)>
//
//	{"events": [{"id": "evt-1", "type": "delivered", "message_id": "<…>",
//	             "occurred_at": "2026-01-01T00:00:00Z", "detail": "…"}]}
//
// type is one of delivered, opened, clicked, bounced (hard), soft_bounced,
// complained, unsubscribed. Rangecast-Signature may list several v1=
// signatures separated by commas (one per secret while rotating).
const (
	GenericTimestampHeader = "Rangecast-Timestamp"
	GenericSignatureHeader = "Rangecast-Signature"
	// MaxEvents bounds the events of one generic request.
	MaxEvents = 1000
)

// GenericSignature is the signature header value for body at ts under secret.
func GenericSignature(secret []byte, ts int64, body []byte) string {
	return "v1=" + hex.EncodeToString(hmacSHA256(secret, []byte(strconv.FormatInt(ts, 10)), []byte("."), body))
}

type genericEvent struct {
	ID         string `json:"id"`
	Type       string `json:"type"`
	MessageID  string `json:"message_id"`
	OccurredAt string `json:"occurred_at"`
	Detail     string `json:"detail"`
}

// ParseGeneric authenticates and parses a request in the generic format.
func ParseGeneric(secrets [][]byte, header http.Header, body []byte, now time.Time, window time.Duration) ([]store.DeliveryEvent, error) {
	sigs := header.Get(GenericSignatureHeader)
	ts := header.Get(GenericTimestampHeader)
	if sigs == "" {
		return nil, unsigned("no %s header", GenericSignatureHeader)
	}
	if err := checkTimestamp(ts, now, window); err != nil {
		return nil, err
	}
	if !anyMAC(sigs, ",", "v1=", hex.DecodeString, func(secret []byte) []byte {
		return hmacSHA256(secret, []byte(ts), []byte("."), body)
	}, secrets) {
		return nil, badSignature("no v1 signature matches")
	}
	var req struct {
		Events []genericEvent `json:"events"`
	}
	if err := strictJSON(body, &req); err != nil {
		return nil, malformed("body: %v", err)
	}
	if len(req.Events) == 0 || len(req.Events) > MaxEvents {
		return nil, malformed("%d events; send 1 to %d", len(req.Events), MaxEvents)
	}
	out := make([]store.DeliveryEvent, len(req.Events))
	for i, e := range req.Events {
		typ := store.EventType(e.Type)
		if !typ.Valid() {
			return nil, malformed("events[%d]: type %q; use one of %v", i, truncate(e.Type), store.EventTypes)
		}
		if err := checkID("events["+strconv.Itoa(i)+"].id", e.ID); err != nil {
			return nil, err
		}
		if e.MessageID == "" {
			return nil, malformed("events[%d]: no message_id", i)
		}
		at, err := time.Parse(time.RFC3339Nano, e.OccurredAt)
		if err != nil {
			return nil, malformed("events[%d]: occurred_at %q is not RFC 3339", i, truncate(e.OccurredAt))
		}
		out[i] = store.DeliveryEvent{Provider: ProviderGeneric, EventID: e.ID, Type: typ, MessageID: e.MessageID, OccurredAt: at.UTC(), Detail: e.Detail}
	}
	return out, nil
}

// cleanEvents makes parsed events storable, whatever the provider: the
// free text of a detail has NUL bytes and invalid UTF-8 replaced (a
// bounce's reply quoting a broken server is still a bounce), and an id or
// Message-ID holding either refuses the request. Stored as they came, they
// failed the insert, and a 500 had the provider retry the batch for ever,
// holding back the hard bounce after it (tester).
func cleanEvents(events []store.DeliveryEvent) *Rejection {
	for i := range events {
		ev := &events[i]
		ev.Detail = strings.ToValidUTF8(strings.ReplaceAll(ev.Detail, "\x00", "\uFFFD"), "\uFFFD")
		for _, f := range []struct{ name, v string }{{"id", ev.EventID}, {"message_id", ev.MessageID}} {
			if err := store.CheckText(f.name, f.v); err != nil {
				return &Rejection{http.StatusBadRequest, reasonMalformed, fmt.Sprintf("events[%d]: %v", i, err)}
			}
		}
	}
	return nil
}

// checkID refuses an empty or absurd event id (it is a primary key).
func checkID(field, id string) error {
	if id == "" {
		return malformed("no %s", field)
	}
	if len(id) > 200 {
		return malformed("%s is %d bytes; at most 200", field, len(id))
	}
	return nil
}

// strictJSON decodes exactly one JSON value.
func strictJSON(body []byte, v any) error {
	dec := json.NewDecoder(strings.NewReader(string(body)))
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("data after the JSON value")
	}
	return nil
}

// anyMAC reports whether one of the signatures in list (separated by sep,
// each prefixed by prefix, decoded by decode) equals mac(secret) for one of
// secrets, compared in constant time.
func anyMAC(list, sep, prefix string, decode func(string) ([]byte, error), mac func(secret []byte) []byte, secrets [][]byte) bool {
	var want [][]byte
	for _, s := range secrets {
		want = append(want, mac(s))
	}
	for _, f := range strings.Split(list, sep) {
		f = strings.TrimSpace(f)
		sig, ok := strings.CutPrefix(f, prefix)
		if !ok {
			continue
		}
		got, err := decode(sig)
		if err != nil {
			continue
		}
		for _, w := range want {
			if hmac.Equal(got, w) {
				return true
			}
		}
	}
	return false
}
