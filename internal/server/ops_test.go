package server

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	grpchealth "google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/rangecast/rangecast/internal/store"
	"github.com/rangecast/rangecast/internal/testenv"
)

type pingStore struct {
	store.Store
	err error
}

func (p pingStore) Ping(context.Context) error { return p.err }

func TestReadyz(t *testing.T) {
	t.Parallel()
	srv := testenv.NATSServer(t, t.TempDir())
	nc, err := nats.Connect("", nats.InProcessServer(srv))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	get := func(o *ops, path string) (int, string) {
		rec := httptest.NewRecorder()
		o.handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		return rec.Code, rec.Body.String()
	}
	up := &ops{nc: nc, store: pingStore{}}
	if code, _ := get(up, "/readyz"); code != http.StatusServiceUnavailable {
		t.Fatalf("before start: %d, want 503", code)
	}
	up.ready.Store(true)
	if code, body := get(up, "/readyz"); code != http.StatusOK {
		t.Fatalf("ready: %d %s", code, body)
	}
	dbDown := &ops{nc: nc, store: pingStore{err: errors.New("connection refused")}}
	dbDown.ready.Store(true)
	if code, body := get(dbDown, "/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "database") {
		t.Fatalf("database down: %d %s", code, body)
	}
	natsDown := &ops{store: pingStore{}}
	natsDown.ready.Store(true)
	if code, body := get(natsDown, "/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "NATS") {
		t.Fatalf("NATS down: %d %s", code, body)
	}
	// A coordinator stays ready without NATS: its unsubscribes, webhooks,
	// pause and status answer from the store.
	coordinator := &ops{store: pingStore{}, coordinator: true}
	coordinator.ready.Store(true)
	if code, body := get(coordinator, "/readyz"); code != http.StatusOK {
		t.Fatalf("coordinator with NATS down: %d %s; want ready", code, body)
	}
	if code, _ := get(dbDown, "/healthz"); code != http.StatusOK {
		t.Fatalf("healthz must stay up while a dependency is down: %d", code)
	}
}

// TestNATSClosedForGood: a connection NATS closed and the client will not
// reopen (here a subject past the server's control line, as a 5,000-
// character domain once made one) fails /healthz, so a liveness probe
// restarts the process, and ends the context connect returned, with
// errNATSClosed as its cause, so the process stops on its own. Before,
// the coordinator ran on without leading or sending, and /healthz said ok.
func TestNATSClosedForGood(t *testing.T) {
	t.Parallel()
	srv, err := natsserver.NewServer(&natsserver.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoSigs: true, NoLog: true})
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	defer srv.Shutdown()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats did not start")
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	runCtx, st, nc, _, closeAll, err := connect(ctx, "sqlite:"+filepath.Join(t.TempDir(), "db"), srv.ClientURL(), 1, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer closeAll()
	o := &ops{nc: nc, store: st}
	health := func() int {
		rec := httptest.NewRecorder()
		o.handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
		return rec.Code
	}
	if code := health(); code != http.StatusOK {
		t.Fatalf("healthz while connected: %d", code)
	}
	nc.Publish(strings.Repeat("a", 8192), nil) //nolint:errcheck // the server answers by closing
	nc.Flush()                                 //nolint:errcheck
	select {
	case <-runCtx.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the run's context did not end when NATS closed the connection for good")
	}
	if cause := context.Cause(runCtx); !errors.Is(cause, errNATSClosed) {
		t.Errorf("the run ended with %v; want errNATSClosed", cause)
	}
	if code := health(); code != http.StatusServiceUnavailable {
		t.Errorf("healthz after NATS closed the connection for good: %d; want 503", code)
	}
	if err := stoppedFor(runCtx, nil); !errors.Is(err, errNATSClosed) {
		t.Errorf("the process's error: %v; want it to say NATS closed the connection", err)
	}
}

// TestStopGRPCEndsOpenStreams: a stopping coordinator does not wait for a
// stream whose client stays (broadcasts watch): after the drain, what is
// left is closed. GracefulStop alone waited for the watcher, past the
// pod's grace period.
func TestStopGRPCEndsOpenStreams(t *testing.T) {
	t.Parallel()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, grpchealth.NewServer())
	go srv.Serve(lis) //nolint:errcheck
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	watch, err := healthpb.NewHealthClient(conn).Watch(t.Context(), &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := watch.Recv(); err != nil { // the stream is open
		t.Fatal(err)
	}
	stopped := make(chan struct{})
	go func() {
		stopGRPC(srv, 200*time.Millisecond)
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("the server was still stopping 10 s later: an open stream held it")
	}
}

// TestEachProcessServesItsOwnMetrics: a page worker's /metrics has no
// rangecast_coordinator_* series (it runs no coordinator: its
// rangecast_coordinator_leader 0 kept the alert on that metric's absence
// from ever firing), and a coordinator's has no rangecast_pageworker_*
// series (zeros of a sender that sends nothing); each has its own, and
// rangecast dev, which runs both in one process, has both.
func TestEachProcessServesItsOwnMetrics(t *testing.T) {
	t.Parallel()
	scrape := func(o *ops) string {
		rec := httptest.NewRecorder()
		o.handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		return rec.Body.String()
	}
	for _, c := range []struct {
		name        string
		ops         *ops
		has, hasNot []string
	}{
		{"worker", workerOps(nil, pingStore{}), []string{"rangecast_pageworker_pages_total"}, []string{"rangecast_coordinator_"}},
		{"coordinator", coordinatorOps(nil, pingStore{}, false), []string{"rangecast_coordinator_leader"}, []string{"rangecast_pageworker_"}},
		{"dev", coordinatorOps(nil, pingStore{}, true), []string{"rangecast_coordinator_leader", "rangecast_pageworker_pages_total"}, nil},
	} {
		body := scrape(c.ops)
		for _, m := range c.has {
			if !strings.Contains(body, m) {
				t.Errorf("a %s's /metrics has no %s", c.name, m)
			}
		}
		for _, m := range c.hasNot {
			if strings.Contains(body, m) {
				t.Errorf("a %s's /metrics has series it does not run:\n%s", c.name, grepLines(body, m))
			}
		}
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestStoreWaitedFor: a database that cannot be reached yet is waited for
// (until the context ends), as NATS is; exiting at once crash-looped the
// pods of a first install while Postgres came up. A malformed URL fails at
// once.
func TestStoreWaitedFor(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 2500*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := openStoreWaiting(ctx, "postgres://postgres@127.0.0.1:1/test?sslmode=disable&connect_timeout=1")
	if err == nil || !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("unreachable database: %v; want ErrUnavailable once the wait ends", err)
	}
	if waited := time.Since(start); waited < 2*time.Second {
		t.Errorf("gave up after %s; want it to wait until the context ends", waited)
	}
	start = time.Now()
	if _, err := openStoreWaiting(t.Context(), "postgres://[::1"); err == nil || time.Since(start) > time.Second {
		t.Errorf("malformed URL: %v after %s; want an error at once", err, time.Since(start))
	}
}

// TestPlaceholderPublicURLRefused: deploy/k8s's placeholder public URL is
// refused, naming the variable: every List-Unsubscribe link would point
// at a host that never resolves. A real one passes.
func TestPlaceholderPublicURLRefused(t *testing.T) {
	t.Parallel()
	s := Secrets{UnsubscribeKeys: "4f1c2a9be07d35c8a6f4e1b2d9c07a3e5b8f6d2c1a0e9b7d4c3f2a1e0d9c8b7a"}
	for _, u := range []string{"https://CHANGE-ME.invalid", "https://mail.change-me.example", "https://news.invalid/"} {
		if _, err := unsubscribeLinks(u, s); err == nil || !strings.Contains(err.Error(), "RANGECAST_PUBLIC_URL") {
			t.Errorf("public URL %s: %v; want it refused as a placeholder", u, err)
		}
	}
	if _, err := unsubscribeLinks("https://mail.rangecast.dev", s); err != nil {
		t.Errorf("a real public URL: %v", err)
	}
}

// TestStoreRefusalNotWaitedFor: a server that answers with an error of its
// own (here a database that does not exist; a wrong password alike) is not
// waited for: the process stops at once with the server's words.
func TestStoreRefusalNotWaitedFor(t *testing.T) {
	t.Parallel()
	base := testenv.DatabaseURL(t)
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/no_such_database_rangecast"
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	start := time.Now()
	_, err = openStoreWaiting(ctx, u.String())
	if err == nil || errors.Is(err, store.ErrUnavailable) || time.Since(start) > 10*time.Second {
		t.Fatalf("missing database: %v after %s; want the server's refusal at once", err, time.Since(start))
	}
}
