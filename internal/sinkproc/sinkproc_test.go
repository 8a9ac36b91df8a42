package sinkproc

import (
	"encoding/json"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/emersion/go-smtp"
)

func send(t *testing.T, addr string, to ...string) {
	t.Helper()
	c, err := smtp.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// The sink offers no TLS; plain SendMail would insist on STARTTLS.
	if err := c.SendMail("from@example.org", to, strings.NewReader("Message-ID: <m1@example.org>\r\nSubject: hi\r\n\r\nbody\r\n")); err != nil {
		t.Fatal(err)
	}
	if err := c.Quit(); err != nil {
		t.Fatal(err)
	}
}

// Without a log the sink only counts; Stats and its JSON handler report
// messages and recipients.
func TestCountOnly(t *testing.T) {
	t.Parallel()
	s, err := Start(Options{Addr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	send(t, s.Addr(), "a@example.org", "b@example.org")
	send(t, s.Addr(), "c@example.org")
	st := s.Stats()
	if st.Messages != 2 || st.Recipients != 3 || st.FirstUnixNano == 0 || st.LastUnixNano < st.FirstUnixNano {
		t.Fatalf("stats %+v; want 2 messages, 3 recipients, first <= last", st)
	}
	rec := httptest.NewRecorder()
	s.StatsHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/stats", nil))
	var got Stats
	if err := json.NewDecoder(rec.Body).Decode(&got); err != nil {
		t.Fatal(err)
	}
	if got != st {
		t.Fatalf("GET /stats = %+v, want %+v", got, st)
	}
}

// With a log every recipient is on disk with the Message-ID.
func TestLog(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "sink.log")
	s, err := Start(Options{Addr: "127.0.0.1:0", LogPath: path})
	if err != nil {
		t.Fatal(err)
	}
	send(t, s.Addr(), "A@example.org", "b@example.org")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	recs, err := ReadLog(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 || recs[0].Recipient != "a@example.org" || recs[0].MessageID != "m1@example.org" || s.Stats().Recipients != 2 {
		t.Fatalf("log %+v, stats %+v", recs, s.Stats())
	}
}

// A tarpitted message's DATA reply is held TarpitDelay, the others Latency.
func TestTarpit(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		share     float64
		least     time.Duration
		mostUnder time.Duration
	}{{1, 300 * time.Millisecond, 0}, {0, 0, 300 * time.Millisecond}} {
		s, err := Start(Options{Addr: "127.0.0.1:0", Tarpit: tc.share, TarpitDelay: 300 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		began := time.Now()
		send(t, s.Addr(), "a@example.org")
		took := time.Since(began)
		s.Close()
		if took < tc.least || (tc.mostUnder > 0 && took >= tc.mostUnder) {
			t.Errorf("tarpit share %v: the message took %s", tc.share, took)
		}
	}
}
