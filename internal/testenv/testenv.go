// Package testenv builds the real parts tests run against: a Postgres schema
// of their own, an embedded JetStream server of their own.
package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rangecast/rangecast/internal/child"
	"github.com/rangecast/rangecast/internal/store"
	"github.com/rangecast/rangecast/internal/store/postgres"
	"github.com/rangecast/rangecast/internal/store/sqlite"
)

// DatabaseURL returns a connection string for a fresh schema of the test's
// own, dropped when the test ends. Without a reachable Postgres the test is
// skipped, unless RANGECAST_REQUIRE_PG=1 (as in CI), where it fails.
func DatabaseURL(t testing.TB) string {
	t.Helper()
	base := child.DatabaseURL("") // TEST_DATABASE_URL, else the default server
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		if os.Getenv("RANGECAST_REQUIRE_PG") == "1" {
			t.Fatalf("Postgres is required (RANGECAST_REQUIRE_PG=1) but %s is unreachable: %v", redact(base), err)
		}
		t.Skipf("skipping: no Postgres at %s (set TEST_DATABASE_URL): %v", redact(base), err)
	}
	defer conn.Close(ctx)
	schema := "t_" + randomHex(8)
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatalf("create schema: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, base)
		if err != nil {
			return
		}
		defer conn.Close(ctx)
		conn.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE") //nolint:errcheck
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("TEST_DATABASE_URL: %v", err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

// Postgres opens a migrated store on a fresh schema.
func Postgres(t testing.TB) *postgres.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := postgres.Open(ctx, DatabaseURL(t))
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

// SQLite opens a migrated SQLite store in the test's temporary folder.
func SQLite(t testing.TB) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "rangecast.db"))
	if err != nil {
		t.Fatalf("open sqlite store: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

// Store is the store for tests of everything above the store: Postgres when
// one is reachable (always in CI), else SQLite, so the suite still runs on a
// machine with nothing but Go.
func Store(t testing.TB) store.Store {
	t.Helper()
	if os.Getenv("RANGECAST_REQUIRE_PG") != "1" && !postgresReachable() {
		t.Log("no Postgres reachable: running on SQLite")
		return SQLite(t)
	}
	return Postgres(t)
}

func postgresReachable() bool {
	base := child.DatabaseURL("") // TEST_DATABASE_URL, else the default server
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		return false
	}
	conn.Close(ctx)
	return true
}

// NATS starts an embedded JetStream server for the test and returns a
// connection to it (in-process, no port).
func NATS(t testing.TB) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	srv := NATSServer(t, t.TempDir())
	nc, err := nats.Connect("", nats.InProcessServer(srv))
	if err != nil {
		t.Fatalf("connect to embedded nats: %v", err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("jetstream: %v", err)
	}
	return nc, js
}

// NATSServer starts an embedded JetStream server storing under dir.
func NATSServer(t testing.TB, dir string) *server.Server {
	t.Helper()
	srv, err := server.NewServer(&server.Options{
		ServerName: "rangecast-test",
		JetStream:  true,
		StoreDir:   dir,
		DontListen: true,
		NoSigs:     true,
		NoLog:      true,
	})
	if err != nil {
		t.Fatalf("nats server: %v", err)
	}
	srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("embedded nats server did not start")
	}
	t.Cleanup(func() {
		srv.Shutdown()
		srv.WaitForShutdown()
	})
	return srv
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b) //nolint:errcheck
	return hex.EncodeToString(b)
}

func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparseable url)"
	}
	return u.Redacted()
}

// Poll calls cond every 20 ms until it holds (true) or within has passed
// (false). It is the one polling loop of the tests; a test that can wait on
// a signal (a channel, a watch) should.
func Poll(within time.Duration, cond func() bool) bool {
	deadline := time.After(within)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline:
			return false
		case <-tick.C:
		}
	}
	return true
}

// Eventually is Poll that fails t, naming what it waited for.
func Eventually(t testing.TB, what string, within time.Duration, cond func() bool) {
	t.Helper()
	if !Poll(within, cond) {
		t.Fatalf("%s: not within %s", what, within)
	}
}
