package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/rangecast/rangecast/internal/bus"
	"github.com/rangecast/rangecast/internal/clock"
	"github.com/rangecast/rangecast/internal/message"
	"github.com/rangecast/rangecast/internal/store"
	"github.com/rangecast/rangecast/internal/web"
)

// Secrets are the public HTTP's keys, read from the environment (never
// flags: they would show in ps). Each holds comma-separated values; the
// first unsubscribe key signs links, every key verifies them, and several
// webhook secrets are accepted while one is rotated.
type Secrets struct {
	UnsubscribeKeys string // RANGECAST_UNSUBSCRIBE_KEYS
	// UnsubscribeKeysFile holds more keys, one per line (# comments), e.g.
	// a mounted Kubernetes Secret; its keys come first.
	UnsubscribeKeysFile string
	GenericWebhook      string // RANGECAST_WEBHOOK_SECRET
	MailgunSigningKey   string // RANGECAST_MAILGUN_SIGNING_KEY
	ResendWebhook       string // RANGECAST_RESEND_WEBHOOK_SECRET (whsec_…)
}

// Environment variables of Secrets.
const (
	EnvUnsubscribeKeys = "RANGECAST_UNSUBSCRIBE_KEYS"
	EnvWebhookSecret   = "RANGECAST_WEBHOOK_SECRET"
	EnvMailgunKey      = "RANGECAST_MAILGUN_SIGNING_KEY"
	EnvResendSecret    = "RANGECAST_RESEND_WEBHOOK_SECRET"
)

// SecretsFromEnv reads Secrets from the environment (UnsubscribeKeysFile
// comes from a flag).
func SecretsFromEnv() Secrets {
	return Secrets{
		UnsubscribeKeys:   os.Getenv(EnvUnsubscribeKeys),
		GenericWebhook:    os.Getenv(EnvWebhookSecret),
		MailgunSigningKey: os.Getenv(EnvMailgunKey),
		ResendWebhook:     os.Getenv(EnvResendSecret),
	}
}

// unsubscribeKeys returns the configured keys, the signing key first; none
// is not an error here (the caller decides).
func (s Secrets) unsubscribeKeys() ([][]byte, error) {
	var list []string
	if s.UnsubscribeKeysFile != "" {
		raw, err := os.ReadFile(s.UnsubscribeKeysFile)
		if err != nil {
			return nil, fmt.Errorf("unsubscribe keys file: %w", err)
		}
		for _, line := range strings.Split(string(raw), "\n") {
			if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
				list = append(list, line)
			}
		}
	}
	if s.UnsubscribeKeys != "" {
		list = append(list, s.UnsubscribeKeys)
	}
	if len(list) == 0 {
		return nil, nil
	}
	return message.ParseUnsubscribeKeys(strings.Join(list, ","))
}

// minWebhookSecret is the shortest webhook secret accepted: providers
// generate longer ones (Mailgun's signing keys are 32 hex digits, Resend's
// whsec_ 32 bytes of base64).
const minWebhookSecret = 16

func splitSecrets(s string) [][]byte {
	var out [][]byte
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, []byte(v))
		}
	}
	return out
}

// webConfig is the public HTTP's configuration from s.
func (s Secrets) webConfig() (web.Config, error) {
	keys, err := s.unsubscribeKeys()
	if err != nil {
		return web.Config{}, err
	}
	for _, sec := range []struct{ env, v string }{{EnvWebhookSecret, s.GenericWebhook}, {EnvMailgunKey, s.MailgunSigningKey}, {EnvResendSecret, s.ResendWebhook}} {
		for i, v := range splitSecrets(sec.v) {
			if len(v) < minWebhookSecret {
				return web.Config{}, fmt.Errorf("%s: secret %d is %d characters; use at least %d", sec.env, i+1, len(v), minWebhookSecret)
			}
			if why := message.WeakSecret(string(v)); why != "" {
				return web.Config{}, fmt.Errorf("%s: secret %d %s", sec.env, i+1, why)
			}
		}
	}
	cfg := web.Config{UnsubscribeKeys: keys, GenericSecrets: splitSecrets(s.GenericWebhook), MailgunKeys: splitSecrets(s.MailgunSigningKey)}
	for _, r := range splitSecrets(s.ResendWebhook) {
		cfg.ResendSecrets = append(cfg.ResendSecrets, string(r))
	}
	return cfg, nil
}

// unsubscribeLinks is what a page worker signs its messages' one-click links
// with. Both the public URL and a key are required: a broadcast message
// without a working List-Unsubscribe breaks the bulk-sender rules of the
// large mailbox providers.
func unsubscribeLinks(publicURL string, s Secrets) (*message.Unsubscribe, error) {
	keys, err := s.unsubscribeKeys()
	if err != nil {
		return nil, err
	}
	if publicURL == "" || len(keys) == 0 {
		return nil, errors.New("no one-click unsubscribe links: set RANGECAST_PUBLIC_URL (--public-url, the coordinators' public HTTP, e.g. https://mail.example.com) and RANGECAST_UNSUBSCRIBE_KEYS (the coordinators' keys; at least 32 random characters, e.g. openssl rand -hex 32)")
	}
	if u, err := url.Parse(publicURL); err == nil {
		// deploy/k8s ships a placeholder that can never resolve: every
		// List-Unsubscribe link would point at it, which bulk senders'
		// rules (and the law in places) forbid.
		if h := strings.ToLower(u.Hostname()); strings.Contains(h, "change-me") || strings.HasSuffix(h, ".invalid") {
			return nil, fmt.Errorf("RANGECAST_PUBLIC_URL (--public-url) %q is a placeholder: set it to the https URL where mail readers reach the coordinators' public HTTP (your Ingress), which every List-Unsubscribe link points at", publicURL)
		}
	}
	return message.NewUnsubscribe(publicURL, keys...)
}

// warnPlainHTTP warns when the links point at plain http on a host that is
// not this machine: RFC 8058 asks for an https one-click URI, and mailbox
// providers may not offer one-click unsubscribe without it (tester).
func warnPlainHTTP(publicURL string, log *slog.Logger) {
	u, err := url.Parse(publicURL)
	if err != nil || u.Scheme != "http" {
		return
	}
	if h := u.Hostname(); h == "localhost" || net.ParseIP(h) != nil && net.ParseIP(h).IsLoopback() {
		return
	}
	log.Warn("the public URL is plain http: one-click unsubscribe (RFC 8058) wants https, and mailbox providers may not offer it; point RANGECAST_PUBLIC_URL at your Ingress's https address", "public_url", publicURL)
}

// servePublic serves the public HTTP (unsubscribe links, webhooks) on
// o.HTTPAddr, or on the listener StartStack bound, until ctx ends.
//
// stop takes this coordinator's keys out of the verifier bucket
// (publishVerifier); it is called before the process ends.
func servePublic(ctx context.Context, st store.Store, b *bus.Bus, o CoordinatorOptions) (stop func(), err error) {
	stop = func() {}
	lis := o.publicLis
	if lis == nil && o.HTTPAddr == "" {
		return stop, nil
	}
	cfg, err := o.Secrets.webConfig()
	if err != nil {
		return stop, err
	}
	cfg.Store, cfg.Clock, cfg.Log = st, clock.Real{}, o.Log
	h, err := web.New(cfg)
	if err != nil {
		return stop, err
	}
	if len(cfg.UnsubscribeKeys) == 0 {
		o.Log.Warn("no unsubscribe keys: one-click links will not unsubscribe anyone; set " + EnvUnsubscribeKeys + " to the keys the page workers sign with")
	}
	if b != nil {
		stop = publishVerifier(ctx, b.Verifiers, cfg.UnsubscribeKeys, o.Log)
	}
	if lis == nil {
		if lis, err = net.Listen("tcp", o.HTTPAddr); err != nil {
			stop()
			return func() {}, fmt.Errorf("listen on %s: %w", o.HTTPAddr, err)
		}
	}
	serveOn(ctx, lis, h, o.Log)
	o.Log.Info("public http listening", "addr", lis.Addr().String(),
		"webhooks", strings.Join(webhooks(cfg), ","), "unsubscribe_keys", len(cfg.UnsubscribeKeys))
	return stop, nil
}

func webhooks(cfg web.Config) []string {
	var out []string
	if len(cfg.GenericSecrets) > 0 {
		out = append(out, web.ProviderGeneric)
	}
	if len(cfg.MailgunKeys) > 0 {
		out = append(out, web.ProviderMailgun)
	}
	if len(cfg.ResendSecrets) > 0 {
		out = append(out, web.ProviderResend)
	}
	return out
}

// serveOn serves h on lis until ctx ends, then shuts down gracefully.
func serveOn(ctx context.Context, lis net.Listener, h http.Handler, log *slog.Logger) {
	// Public-facing: slow or idle clients must not hold connections open.
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
		WriteTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute}
	go func() {
		if err := srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("http server stopped", "addr", lis.Addr().String(), "err", err)
		}
	}()
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		srv.Shutdown(shutdown) //nolint:errcheck
	}()
}

// devUnsubscribeKey is `rangecast dev`'s signing key, made once and kept in
// dir, so links in mail captured before a restart still work after it.
func devUnsubscribeKey(dir string) (string, error) {
	path := filepath.Join(dir, "unsubscribe.key")
	if raw, err := os.ReadFile(path); err == nil {
		if k := strings.TrimSpace(string(raw)); len(k) >= message.MinUnsubscribeKeyLen {
			return k, nil
		}
	}
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	k := hex.EncodeToString(b)
	if err := os.WriteFile(path, []byte(k+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("unsubscribe key: %w", err)
	}
	return k, nil
}

// devPublic binds `rangecast dev`'s public HTTP (addr, or a free local port
// when addr is empty) and returns its secrets: the dev signing key, and
// any webhook secrets set in the environment.
func devPublic(dir, addr string) (net.Listener, Secrets, error) {
	secrets := SecretsFromEnv()
	key, err := devUnsubscribeKey(dir)
	if err != nil {
		return nil, secrets, err
	}
	secrets.UnsubscribeKeys = key
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, secrets, fmt.Errorf("public http: listen on %s: %w", addr, err)
	}
	return lis, secrets, nil
}
