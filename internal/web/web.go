// Package web is rangecast's public HTTP: one-click unsubscribe links
// (RFC 8058) and mail providers' delivery webhooks. It runs in every
// coordinator replica, leader or not; everything it does is a single store
// transaction, so any replica can answer.
//
// Routes:
//
//	GET  /u/{token}          a confirmation form (link scanners follow GETs; only a POST unsubscribes)
//	POST /u/{token}          body List-Unsubscribe=One-Click: unsubscribe
//	POST /webhooks/generic   rangecast's own signed JSON format (see ParseGeneric)
//	POST /webhooks/mailgun   Mailgun's webhook format (see ParseMailgun)
//	POST /webhooks/resend    Resend's webhooks, signed by Svix (see ParseResend)
//	GET  /healthz            the process is up
//
// A webhook endpoint exists only when its secret is configured. Requests
// that are unsigned, badly signed or outside the replay window get 401, those
// that cannot be parsed 400, and neither changes anything.
package web

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/rangecast/rangecast/internal/clock"
	"github.com/rangecast/rangecast/internal/store"
)

// Config wires the public HTTP to its parts.
type Config struct {
	Store store.Ledger
	Clock clock.Clock
	Log   *slog.Logger
	// UnsubscribeKeys verify one-click tokens: every key is accepted, so a
	// key can be rotated in front of the workers' signing key
	// (message.ParseUnsubscribeKeys). Without keys no token verifies, and
	// every request still gets the same page.
	UnsubscribeKeys [][]byte
	// GenericSecrets, MailgunKeys and ResendSecrets authenticate the
	// webhooks; each endpoint is served only when it has at least one.
	// Several are accepted for rotation. Resend's are "whsec_…" as Resend
	// shows them.
	GenericSecrets [][]byte
	MailgunKeys    [][]byte
	ResendSecrets  []string
	// ReplayWindow is how far a webhook's signed timestamp may be from now,
	// either way (default 5 minutes, what Svix and Mailgun recommend).
	ReplayWindow time.Duration
	// MaxBody bounds a webhook body (default 1 MiB).
	MaxBody int64
	// MaxReads bounds the webhook bodies read at once (DefaultMaxReads).
	MaxReads int
}

// DefaultReplayWindow is the default Config.ReplayWindow.
const DefaultReplayWindow = 5 * time.Minute

// DefaultMaxReads is how many webhook bodies are read at once by default.
const DefaultMaxReads = 32

// Handler serves the public HTTP.
type Handler struct {
	cfg    Config
	resend [][]byte // decoded Svix keys
	mux    *http.ServeMux
	reads  chan struct{} // webhook bodies being read, at most MaxReads
}

// New checks cfg and returns the handler.
func New(cfg Config) (*Handler, error) {
	if cfg.Store == nil {
		return nil, errors.New("web: no store")
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.ReplayWindow <= 0 {
		cfg.ReplayWindow = DefaultReplayWindow
	}
	if cfg.MaxBody <= 0 {
		cfg.MaxBody = 1 << 20
	}
	if cfg.MaxReads <= 0 {
		cfg.MaxReads = DefaultMaxReads
	}
	h := &Handler{cfg: cfg, mux: http.NewServeMux(), reads: make(chan struct{}, cfg.MaxReads)}
	for i, s := range cfg.ResendSecrets {
		k, err := DecodeSvixSecret(s)
		if err != nil {
			return nil, fmt.Errorf("web: resend webhook secret %d: %w", i+1, err)
		}
		h.resend = append(h.resend, k)
	}
	h.mux.HandleFunc("GET /u/{token}", h.unsubscribeForm)
	h.mux.HandleFunc("POST /u/{token}", h.unsubscribe)
	h.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	if len(cfg.GenericSecrets) > 0 {
		pre := signedHeaders(cfg.ReplayWindow, func(h http.Header) string { return h.Get(GenericTimestampHeader) },
			func(h http.Header) string { return h.Get(GenericSignatureHeader) })
		h.mux.Handle("POST /webhooks/generic", h.webhook(ProviderGeneric, pre, func(r *http.Request, body []byte, now time.Time) ([]store.DeliveryEvent, error) {
			return ParseGeneric(cfg.GenericSecrets, r.Header, body, now, cfg.ReplayWindow)
		}))
	}
	if len(cfg.MailgunKeys) > 0 {
		// Mailgun signs inside the body: nothing to check before reading it.
		h.mux.Handle("POST /webhooks/mailgun", h.webhook(ProviderMailgun, nil, func(_ *http.Request, body []byte, now time.Time) ([]store.DeliveryEvent, error) {
			return ParseMailgun(cfg.MailgunKeys, body, now, cfg.ReplayWindow)
		}))
	}
	if len(h.resend) > 0 {
		pre := signedHeaders(cfg.ReplayWindow, func(h http.Header) string { return svixHeader(h, "timestamp") },
			func(h http.Header) string { return svixHeader(h, "id") }, func(h http.Header) string { return svixHeader(h, "signature") })
		h.mux.Handle("POST /webhooks/resend", h.webhook(ProviderResend, pre, func(r *http.Request, body []byte, now time.Time) ([]store.DeliveryEvent, error) {
			return ParseResend(h.resend, r.Header, body, now, cfg.ReplayWindow)
		}))
	}
	return h, nil
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }
