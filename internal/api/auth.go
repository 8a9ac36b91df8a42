package api

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	reflectionv1 "google.golang.org/grpc/reflection/grpc_reflection_v1"
	reflectionv1alpha "google.golang.org/grpc/reflection/grpc_reflection_v1alpha"
	"google.golang.org/grpc/status"
)

// Messages of the Unauthenticated errors. The CLI's hint names its flag and
// environment variable.
const (
	msgMissingToken = "missing bearer token (set --token or RANGECAST_TOKEN)"
	msgInvalidToken = "invalid bearer token"
)

// reloadEvery bounds how often the tokens file is stat'ed.
const reloadEvery = time.Second

// openServices need no token: load balancers and Kubernetes probe health
// without credentials, and reflection only describes the API.
var openServices = map[string]bool{
	healthpb.Health_ServiceDesc.ServiceName:                    true,
	reflectionv1.ServerReflection_ServiceDesc.ServiceName:      true,
	reflectionv1alpha.ServerReflection_ServiceDesc.ServiceName: true,
}

// AuthConfig says where the accepted bearer tokens come from. Tokens and
// the file's tokens are all accepted; several at once let a token be
// rotated without a moment when neither the old nor the new one works.
type AuthConfig struct {
	// Tokens are fixed for the life of the process (RANGECAST_TOKENS).
	Tokens []string
	// TokensFile holds one token per line; blank lines and lines starting
	// with # are ignored. It is re-read when its modification time or size
	// changes (checked at most once a second), so a rotated Kubernetes
	// Secret mounted as a file takes effect without a restart.
	TokensFile string
	Log        *slog.Logger
}

// Enabled reports whether the configuration turns authentication on.
func (c AuthConfig) Enabled() bool { return len(c.Tokens) > 0 || c.TokensFile != "" }

// ParseTokens splits a comma-separated list of tokens, dropping blanks.
func ParseTokens(s string) []string {
	var out []string
	for t := range strings.SplitSeq(s, ",") {
		if t = strings.TrimSpace(t); t != "" {
			out = append(out, t)
		}
	}
	return out
}

// Auth checks the bearer token of every gRPC call except health and
// reflection. Tokens are kept as SHA-256 digests and compared in constant
// time, so neither a token's content nor its length leaks through timing.
type Auth struct {
	file string
	log  *slog.Logger

	static [][sha256.Size]byte

	mu        sync.Mutex
	fromFile  [][sha256.Size]byte
	modTime   time.Time
	size      int64
	lastCheck time.Time
	readErr   string // the last reload error logged, so it is logged once
}

// NewAuth returns the checker for cfg. A tokens file that does not exist
// yet, or holds no tokens, is not fatal but fails closed: every call is
// refused (and a warning logged) until tokens appear in it, so an optional
// Kubernetes Secret created after the pod starts takes effect live. A file
// that exists but cannot be read is an error.
func NewAuth(cfg AuthConfig) (*Auth, error) {
	a := &Auth{file: cfg.TokensFile, log: cfg.Log, size: -1}
	if a.log == nil {
		a.log = slog.Default()
	}
	for _, t := range cfg.Tokens {
		if t = strings.TrimSpace(t); t != "" {
			a.static = append(a.static, sha256.Sum256([]byte(t)))
		}
	}
	if a.file == "" {
		if len(a.static) == 0 {
			return nil, errors.New("no tokens: RANGECAST_TOKENS is empty")
		}
		return a, nil
	}
	a.lastCheck = time.Now()
	fi, err := os.Stat(a.file)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		a.readErr = err.Error()
		if len(a.static) == 0 {
			a.log.Warn("tokens file does not exist (yet): every gRPC call is refused until it does", "file", a.file)
		}
		return a, nil
	case err != nil:
		return nil, fmt.Errorf("tokens file: %w", err)
	}
	tokens, err := readTokens(a.file)
	if err != nil {
		return nil, fmt.Errorf("tokens file: %w", err)
	}
	a.fromFile, a.modTime, a.size = tokens, fi.ModTime(), fi.Size()
	if len(a.static) == 0 && len(a.fromFile) == 0 {
		a.log.Warn("tokens file holds no tokens: every gRPC call is refused until it does", "file", a.file)
	}
	return a, nil
}

// readTokens reads one token per line, skipping blanks and # comments.
func readTokens(path string) ([][sha256.Size]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out [][sha256.Size]byte
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		out = append(out, sha256.Sum256([]byte(line)))
	}
	return out, sc.Err()
}

// current returns the file's tokens, re-reading the file when it changed.
// A file that cannot be read keeps the last tokens read: a Secret update
// briefly swapping files must not lock every client out (or let anyone in).
func (a *Auth) current() [][sha256.Size]byte {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.file == "" {
		return nil
	}
	now := time.Now()
	if now.Sub(a.lastCheck) < reloadEvery {
		return a.fromFile
	}
	a.lastCheck = now
	fi, err := os.Stat(a.file)
	if err == nil && fi.ModTime().Equal(a.modTime) && fi.Size() == a.size {
		return a.fromFile
	}
	var tokens [][sha256.Size]byte
	if err == nil {
		tokens, err = readTokens(a.file)
	}
	if err != nil {
		if msg := err.Error(); msg != a.readErr {
			a.readErr = msg
			a.log.Warn("cannot re-read tokens file; keeping the previous tokens", "file", a.file, "err", err)
		}
		return a.fromFile
	}
	a.readErr = ""
	a.fromFile, a.modTime, a.size = tokens, fi.ModTime(), fi.Size()
	a.log.Info("tokens file reloaded", "file", a.file, "tokens", len(tokens))
	if len(tokens) == 0 && len(a.static) == 0 {
		a.log.Warn("tokens file holds no tokens: every gRPC call is refused until it does", "file", a.file)
	}
	return tokens
}

// valid reports whether token is accepted. It compares against every
// token, so the time taken does not say which one (if any) matched.
func (a *Auth) valid(token string) bool {
	sum := sha256.Sum256([]byte(token))
	match := 0
	for _, set := range [][][sha256.Size]byte{a.static, a.current()} {
		for _, t := range set {
			match |= subtle.ConstantTimeCompare(sum[:], t[:])
		}
	}
	return match == 1
}

// check authenticates a call to fullMethod ("/package.Service/Method").
func (a *Auth) check(ctx context.Context, fullMethod string) error {
	if openServices[serviceOf(fullMethod)] {
		return nil
	}
	token, ok := bearerToken(ctx)
	switch {
	case !ok:
		a.refuse(ctx, fullMethod, "missing bearer token")
		return status.Error(codes.Unauthenticated, msgMissingToken)
	case !a.valid(token):
		a.refuse(ctx, fullMethod, "invalid bearer token")
		if len(a.static) == 0 && len(a.current()) == 0 {
			// Every token is refused: say why, which the server's log
			// alone said (tester). It names no token, so it tells a
			// caller nothing that would let them in.
			return status.Error(codes.Unauthenticated, msgInvalidToken+": the coordinator holds no tokens yet (its tokens file is missing or empty; see its log)")
		}
		return status.Error(codes.Unauthenticated, msgInvalidToken)
	}
	return nil
}

// refuse logs a refused call: the method and the peer, never the token.
func (a *Auth) refuse(ctx context.Context, method, reason string) {
	addr := "unknown"
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		addr = p.Addr.String()
	}
	a.log.Warn("grpc call refused", "reason", reason, "method", method, "peer", addr)
}

func serviceOf(fullMethod string) string {
	s := strings.TrimPrefix(fullMethod, "/")
	if i := strings.LastIndex(s, "/"); i >= 0 {
		return s[:i]
	}
	return s
}

// bearerToken returns the token of the call's "authorization: Bearer …"
// header; ok is false when there is none.
func bearerToken(ctx context.Context) (string, bool) {
	md, _ := metadata.FromIncomingContext(ctx)
	for _, v := range md.Get("authorization") {
		scheme, token, found := strings.Cut(strings.TrimSpace(v), " ")
		if found && strings.EqualFold(scheme, "Bearer") {
			if token = strings.TrimSpace(token); token != "" {
				return token, true
			}
		}
	}
	return "", false
}

// UnaryInterceptor authenticates unary calls.
func (a *Auth) UnaryInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if err := a.check(ctx, info.FullMethod); err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

// StreamInterceptor authenticates streaming calls.
func (a *Auth) StreamInterceptor(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if err := a.check(ss.Context(), info.FullMethod); err != nil {
		return err
	}
	return handler(srv, ss)
}

// ServerOptions install a's interceptors; a nil Auth installs none
// (authentication off).
func (a *Auth) ServerOptions() []grpc.ServerOption {
	if a == nil {
		return nil
	}
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(a.UnaryInterceptor),
		grpc.ChainStreamInterceptor(a.StreamInterceptor),
	}
}
