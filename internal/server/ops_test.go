package server

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

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
	if code, _ := get(dbDown, "/healthz"); code != http.StatusOK {
		t.Fatalf("healthz must stay up while a dependency is down: %d", code)
	}
}
