package api_test

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/rangecast/rangecast/internal/api"
	"github.com/rangecast/rangecast/internal/bus"
	"github.com/rangecast/rangecast/internal/coordinator"
	"github.com/rangecast/rangecast/internal/testenv"
	pb "github.com/rangecast/rangecast/proto/rangecast/v1"
)

// logBuffer collects log output written from gRPC's goroutines.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// authServer serves a coordinator behind real gRPC on 127.0.0.1 with cfg's
// tokens and returns a connection to it that sends no token by itself.
func authServer(t *testing.T, cfg api.AuthConfig) *grpc.ClientConn {
	t.Helper()
	st := testenv.Store(t)
	_, js := testenv.NATS(t)
	b, err := bus.Setup(context.Background(), js, bus.Options{Memory: true})
	if err != nil {
		t.Fatal(err)
	}
	c := coordinator.New(coordinator.Config{Store: st, Bus: b, Log: slog.New(slog.DiscardHandler)})
	auth, err := api.NewAuth(cfg)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := api.NewGRPCServer(api.Config{Engine: c, Store: st, Log: slog.New(slog.DiscardHandler)}, auth.ServerOptions()...)
	go srv.Serve(lis) //nolint:errcheck
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func withToken(ctx context.Context, token string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
}

func wantCode(t *testing.T, what string, err error, want codes.Code, wantMsg string) {
	t.Helper()
	if got := status.Code(err); got != want {
		t.Fatalf("%s: code %v (%v), want %v", what, got, err, want)
	}
	if wantMsg != "" && status.Convert(err).Message() != wantMsg {
		t.Fatalf("%s: message %q, want %q", what, status.Convert(err).Message(), wantMsg)
	}
}

func writeTokens(t *testing.T, path, content string, mtime time.Time) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, mtime, mtime); err != nil {
		t.Fatal(err)
	}
}

func TestAuthBearerToken(t *testing.T) {
	const (
		oldToken = "old-token-5f1c9a"
		newToken = "new-token-8d27e4"
		envToken = "env-token-31b0aa"
		wrong    = "wrong-token-77aa01"
	)
	logs := &logBuffer{}
	file := filepath.Join(t.TempDir(), "tokens")
	start := time.Now().Add(-time.Hour)
	writeTokens(t, file, "# rangecast API tokens\n\n"+oldToken+"\n", start)
	conn := authServer(t, api.AuthConfig{
		Tokens:     api.ParseTokens(" " + envToken + ", ,"),
		TokensFile: file,
		Log:        slog.New(slog.NewTextHandler(logs, nil)),
	})
	api := pb.NewBroadcastServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	list := func(ctx context.Context) error {
		_, err := api.ListBroadcasts(ctx, &pb.ListBroadcastsRequest{})
		return err
	}

	wantCode(t, "no token", list(ctx), codes.Unauthenticated, "missing bearer token (set --token or RANGECAST_TOKEN)")
	wantCode(t, "not a bearer token", list(metadata.AppendToOutgoingContext(ctx, "authorization", "Basic "+oldToken)), codes.Unauthenticated, "missing bearer token (set --token or RANGECAST_TOKEN)")
	wantCode(t, "wrong token", list(withToken(ctx, wrong)), codes.Unauthenticated, "invalid bearer token")
	wantCode(t, "token prefix", list(withToken(ctx, oldToken[:5])), codes.Unauthenticated, "invalid bearer token")
	wantCode(t, "file token", list(withToken(ctx, oldToken)), codes.OK, "")
	wantCode(t, "env token", list(withToken(ctx, envToken)), codes.OK, "")
	// The server refuses a NUL in any string (refuseNUL), after the token.
	_, err := api.GetBroadcast(ctx, &pb.GetBroadcastRequest{Id: "x\x00"})
	wantCode(t, "NUL without a token", err, codes.Unauthenticated, "missing bearer token (set --token or RANGECAST_TOKEN)")
	_, err = api.GetBroadcast(withToken(ctx, envToken), &pb.GetBroadcastRequest{Id: "x\x00"})
	wantCode(t, "NUL with a token", err, codes.InvalidArgument, "id contains a NUL byte (at byte 1); no field takes one: remove it")

	// Streams are checked too: the refusal arrives on the first Recv.
	stream, err := api.WatchBroadcast(ctx, &pb.WatchBroadcastRequest{Id: "none"})
	if err == nil {
		_, err = stream.Recv()
	}
	wantCode(t, "stream without token", err, codes.Unauthenticated, "missing bearer token (set --token or RANGECAST_TOKEN)")
	stream, err = api.WatchBroadcast(withToken(ctx, wrong), &pb.WatchBroadcastRequest{Id: "none"})
	if err == nil {
		_, err = stream.Recv()
	}
	wantCode(t, "stream with wrong token", err, codes.Unauthenticated, "invalid bearer token")
	stream, err = api.WatchBroadcast(withToken(ctx, oldToken), &pb.WatchBroadcastRequest{Id: "none"})
	if err == nil {
		_, err = stream.Recv()
	}
	if status.Code(err) == codes.Unauthenticated {
		t.Fatalf("stream with good token: %v", err)
	}

	// Health is open.
	hc, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatalf("health without token: %v", err)
	}
	if hc.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health: %v", hc.Status)
	}

	// Rotate: the Secret now holds only the new token. The file is checked
	// at most once a second, so wait that out.
	writeTokens(t, file, newToken+"\n", start.Add(time.Minute))
	time.Sleep(1100 * time.Millisecond)
	wantCode(t, "removed token", list(withToken(ctx, oldToken)), codes.Unauthenticated, "invalid bearer token")
	wantCode(t, "new token", list(withToken(ctx, newToken)), codes.OK, "")
	wantCode(t, "env token after rotation", list(withToken(ctx, envToken)), codes.OK, "")

	// A file that disappears (mid-update) keeps the last tokens read.
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond)
	wantCode(t, "file gone, new token", list(withToken(ctx, newToken)), codes.OK, "")
	wantCode(t, "file gone, old token", list(withToken(ctx, oldToken)), codes.Unauthenticated, "invalid bearer token")

	out := logs.String()
	if !strings.Contains(out, "grpc call refused") || !strings.Contains(out, "/rangecast.v1.BroadcastService/ListBroadcasts") || !strings.Contains(out, "peer=127.0.0.1:") {
		t.Fatalf("refusals not logged with method and peer:\n%s", out)
	}
	for _, tok := range []string{oldToken, newToken, envToken, wrong, oldToken[:5]} {
		if strings.Contains(out, tok) {
			t.Fatalf("log contains token %q:\n%s", tok, out)
		}
	}
}

// A tokens file that does not exist yet (an optional Secret not created)
// refuses every call, and its tokens work once it appears.
func TestAuthFileAppears(t *testing.T) {
	const token = "late-token-c0ffee"
	file := filepath.Join(t.TempDir(), "tokens")
	logs := &logBuffer{}
	conn := authServer(t, api.AuthConfig{TokensFile: file, Log: slog.New(slog.NewTextHandler(logs, nil))})
	api := pb.NewBroadcastServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := api.ListBroadcasts(withToken(ctx, token), &pb.ListBroadcastsRequest{})
	wantCode(t, "before the file exists", err, codes.Unauthenticated, "invalid bearer token: the coordinator holds no tokens yet (its tokens file is missing or empty; see its log)")
	writeTokens(t, file, token+"\n", time.Now())
	time.Sleep(1100 * time.Millisecond)
	_, err = api.ListBroadcasts(withToken(ctx, token), &pb.ListBroadcastsRequest{})
	wantCode(t, "after the file appears", err, codes.OK, "")
	if !strings.Contains(logs.String(), "does not exist") {
		t.Fatalf("no warning about the missing file:\n%s", logs.String())
	}
}

func TestAuthConfig(t *testing.T) {
	dir := t.TempDir()
	if _, err := api.NewAuth(api.AuthConfig{Tokens: []string{" "}}); err == nil {
		t.Error("blank tokens accepted")
	}
	// A directory where the file should be cannot be read: fatal.
	if _, err := api.NewAuth(api.AuthConfig{TokensFile: dir}); err == nil {
		t.Error("unreadable tokens file accepted")
	}
	empty := filepath.Join(dir, "empty")
	writeTokens(t, empty, "# nothing yet\n\n", time.Now())
	quiet := slog.New(slog.DiscardHandler)
	for _, cfg := range []api.AuthConfig{{TokensFile: empty, Log: quiet}, {TokensFile: filepath.Join(dir, "absent"), Log: quiet}} {
		if !cfg.Enabled() {
			t.Errorf("%s: not enabled", cfg.TokensFile)
		}
		if _, err := api.NewAuth(cfg); err != nil {
			t.Errorf("%s: %v", cfg.TokensFile, err)
		}
	}
	if (api.AuthConfig{}).Enabled() {
		t.Error("empty config enables auth")
	}
	var off *api.Auth
	if len(off.ServerOptions()) != 0 {
		t.Error("nil Auth installs interceptors")
	}
}
