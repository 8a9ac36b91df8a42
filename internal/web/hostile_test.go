package web_test

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/rangecast/rangecast/internal/store"
	"github.com/rangecast/rangecast/internal/testenv"
	"github.com/rangecast/rangecast/internal/web"
)

// countingBody records whether anything read it.
type countingBody struct {
	r    io.Reader
	read atomic.Int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.read.Add(int64(n))
	return n, err
}
func (b *countingBody) Close() error { return nil }

// A webhook request without its signature headers, or with a stale
// timestamp, is refused before a byte of its body is read.
func TestWebhookHeadersCheckedBeforeBody(t *testing.T) {
	t.Parallel()
	f := setup(t, 1)
	h := f.srv.Config.Handler
	stale := strconv.FormatInt(f.clock.Now().Unix()-3600, 10)
	for _, tc := range []struct {
		path   string
		header map[string]string
	}{
		{"/webhooks/generic", nil},
		{"/webhooks/generic", map[string]string{web.GenericSignatureHeader: "v1=00", web.GenericTimestampHeader: stale}},
		{"/webhooks/resend", nil},
		{"/webhooks/resend", map[string]string{"svix-id": "x", "svix-signature": "v1,AA==", "svix-timestamp": stale}},
	} {
		body := &countingBody{r: bytes.NewReader(make([]byte, 1<<20))}
		req := httptest.NewRequest(http.MethodPost, tc.path, nil)
		req.Body = body
		for k, v := range tc.header {
			req.Header.Set(k, v)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusUnauthorized || body.read.Load() != 0 {
			t.Errorf("%s %v: %d after reading %d bytes; want 401 before reading", tc.path, tc.header, rec.Code, body.read.Load())
		}
	}
}

// blockingBody blocks its first Read until released.
type blockingBody struct {
	started chan struct{}
	release chan struct{}
}

func (b *blockingBody) Read(p []byte) (int, error) {
	close(b.started)
	<-b.release
	return 0, io.EOF
}
func (b *blockingBody) Close() error { return nil }

// At most MaxReads bodies are read at once; the others are told to retry.
func TestWebhookConcurrentReadsCapped(t *testing.T) {
	t.Parallel()
	h, err := web.New(web.Config{Store: testenv.SQLite(t), Log: slog.New(slog.DiscardHandler), MaxReads: 1,
		MailgunKeys: [][]byte{mailgunKey}})
	if err != nil {
		t.Fatal(err)
	}
	slow := &blockingBody{started: make(chan struct{}), release: make(chan struct{})}
	done := make(chan struct{})
	go func() {
		defer close(done)
		req := httptest.NewRequest(http.MethodPost, "/webhooks/mailgun", nil)
		req.Body = slow
		h.ServeHTTP(httptest.NewRecorder(), req)
	}()
	<-slow.started
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/webhooks/mailgun", bytes.NewReader([]byte(`{}`))))
	if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") == "" {
		t.Errorf("second read while one is in progress: %d (Retry-After %q); want 503 with Retry-After", rec.Code, rec.Header().Get("Retry-After"))
	}
	close(slow.release)
	<-done
}

// A Mailgun request whose signature verifies spends its token even when its
// event data is malformed: the same signature cannot then carry an event.
func TestMailgunTokenSpentOnMalformedBody(t *testing.T) {
	t.Parallel()
	f := setup(t, 1)
	now := f.clock.Now().Unix()
	post := func(body []byte) response {
		req, _ := http.NewRequest(http.MethodPost, f.srv.URL+"/webhooks/mailgun", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		return f.do(req)
	}
	good := mailgunBody(t, mailgunKey, now, "m1", "complained", "", f.mid(f.contacts[0].ID))
	var parts map[string]json.RawMessage
	if err := json.Unmarshal(good, &parts); err != nil {
		t.Fatal(err)
	}
	bad, _ := json.Marshal(map[string]any{"signature": parts["signature"], "event-data": "not an object"})
	if r := post(bad); r.status != http.StatusBadRequest {
		t.Fatalf("malformed event data: %d %s", r.status, r.body)
	}
	if r := post(good); r.status != http.StatusOK {
		t.Fatalf("same token, well-formed: %d %s", r.status, r.body)
	}
	if got := f.status(0); got != store.SendSent || !f.eligible(0) {
		t.Errorf("a token spent by a malformed request carried a complaint: %s (eligible %v)", got, f.eligible(0))
	}
}
