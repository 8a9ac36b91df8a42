package coordinator_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/mail"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/emersion/go-smtp"
	"github.com/oklog/ulid/v2"

	"github.com/rangecast/rangecast/internal/capture"
	"github.com/rangecast/rangecast/internal/message"
	"github.com/rangecast/rangecast/internal/pageworker"
	"github.com/rangecast/rangecast/internal/ranges"
	"github.com/rangecast/rangecast/internal/store"
	"github.com/rangecast/rangecast/internal/transport"
	"github.com/rangecast/rangecast/internal/web"
	pb "github.com/rangecast/rangecast/proto/rangecast/v1"
)

// startUnsubscribeWorker is startWorker with one-click links in every
// message.
func (s *stack) startUnsubscribeWorker(u *message.Unsubscribe) {
	t := s.t
	tr, err := transport.NewSMTP(s.sink.URL() + fmt.Sprintf("&pool=%d", max(s.workerConc, 1)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := pageworker.New(pageworker.Config{
		Store: s.store, Bus: s.bus, Transport: tr, Log: testLogger(t), Clock: s.clock, Unsubscribe: u,
		Concurrency: s.workerConc, ParkDelay: 300 * time.Millisecond, FetchWait: 200 * time.Millisecond,
	})
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := w.Run(ctx); err != nil {
			t.Errorf("worker: %v", err)
		}
	}()
	var once sync.Once
	s.workers = append(s.workers, func() {
		once.Do(func() {
			cancel()
			<-done
			tr.Close()
		})
	})
}

// TestOneClickUnsubscribeEndToEnd: a broadcast's messages, as the SMTP
// server received them, carry RFC 8058 headers; a real HTTP client POSTs the
// one-click body to the link taken from a received message; the contact is
// unsubscribed, the message it came from is marked so, and a broadcast that
// is running when the POST lands sends that contact nothing from its next
// page on.
func TestOneClickUnsubscribeEndToEnd(t *testing.T) {
	t.Parallel()
	const pageLimit = 20
	var (
		armed    atomic.Bool // the second broadcast is starting
		hold     sync.Once   // its first RCPT waits for the unsubscribes
		blocked  = make(chan struct{})
		released = make(chan struct{})
	)
	s := newStack(t, stackOptions{workers: 0, concurrency: 4, pageLimit: pageLimit, sinkOpts: []capture.Option{
		capture.WithRcptHook(func(string) *smtp.SMTPError {
			if armed.Load() {
				hold.Do(func() {
					close(blocked)
					<-released
				})
			}
			return nil
		}),
	}})
	key := []byte("e2e-unsubscribe-signing-key-0123456789")
	h, err := web.New(web.Config{Store: s.store, Log: testLogger(t), UnsubscribeKeys: [][]byte{key}})
	if err != nil {
		t.Fatal(err)
	}
	public := httptest.NewServer(h)
	t.Cleanup(public.Close)
	u, err := message.NewUnsubscribe(public.URL, key)
	if err != nil {
		t.Fatal(err)
	}
	s.startUnsubscribeWorker(u)
	s.startUnsubscribeWorker(u)

	a := s.seed(1500)
	want := a.eligible(false)
	first := s.create("", 0)
	s.start(first)
	s.waitState(first, pb.BroadcastState_BROADCAST_STATE_COMPLETED, 2*time.Minute)
	s.exactlyOnce(want)

	// Every received message carries both headers; keep each recipient's link.
	links := map[string]string{}
	for _, m := range s.sink.Messages() {
		pm, err := mail.ReadMessage(bytes.NewReader(m.Raw))
		if err != nil {
			t.Fatal(err)
		}
		lu, post := pm.Header.Get("List-Unsubscribe"), pm.Header.Get("List-Unsubscribe-Post")
		if post != "List-Unsubscribe=One-Click" || !strings.HasPrefix(lu, "<"+public.URL+message.UnsubscribePath) || !strings.HasSuffix(lu, ">") {
			t.Fatalf("message %s: List-Unsubscribe %q, List-Unsubscribe-Post %q", m.MessageID, lu, post)
		}
		links[m.To[0]] = strings.Trim(lu, "<>")
	}

	// Victims: in each range, eligible contacts past its first page, so no
	// page of the second broadcast has read them when the POSTs land.
	var eligible []store.Contact
	for _, c := range a.contacts {
		if want[c.Email] {
			eligible = append(eligible, c)
		}
	}
	rs, err := audienceRanges(eligible)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]int{}
	var victims []store.Contact
	for _, c := range eligible {
		r := ranges.Find(rs, c.ID)
		seen[r]++
		if seen[r] > pageLimit && seen[r]%3 == 0 {
			victims = append(victims, c)
		}
	}
	if len(victims) < 10 {
		t.Fatalf("only %d victims; the test needs ranges longer than a page", len(victims))
	}

	second := s.create("", 0)
	armed.Store(true)
	s.start(second)
	select {
	case <-blocked:
	case <-time.After(time.Minute):
		t.Fatal("the second broadcast sent nothing in a minute")
	}
	client := &http.Client{Timeout: 10 * time.Second}
	var page []byte
	for i, v := range victims {
		link := links[v.Email]
		if link == "" {
			t.Fatalf("no message received by %s", v.Email)
		}
		resp, err := client.Post(link, "application/x-www-form-urlencoded", strings.NewReader("List-Unsubscribe=One-Click"))
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("POST %s: %d %v", link, resp.StatusCode, err)
		}
		if i > 0 && !bytes.Equal(body, page) {
			t.Fatal("one-click answers differ between contacts")
		}
		page = body
	}
	close(released)
	s.waitState(second, pb.BroadcastState_BROADCAST_STATE_COMPLETED, 2*time.Minute)

	// The second broadcast reached everyone else once and no victim at all.
	secondID := ulid.MustParse(second)
	got := map[string]int{}
	for _, m := range s.sink.Messages() {
		if strings.HasPrefix(m.MessageID, second+".") {
			got[m.To[0]]++
		}
	}
	isVictim := map[string]bool{}
	for _, v := range victims {
		isVictim[v.Email] = true
	}
	for email := range want {
		switch n := got[email]; {
		case isVictim[email] && n != 0:
			t.Errorf("%s unsubscribed by one-click but got %d messages of the running broadcast", email, n)
		case !isVictim[email] && n != 1:
			t.Errorf("%s got %d messages of the second broadcast, want 1", email, n)
		}
	}
	ctx := context.Background()
	firstID := ulid.MustParse(first)
	for _, v := range victims {
		row, err := s.store.GetSend(ctx, firstID, v.ID)
		if err != nil || row.Status != store.SendUnsubscribed {
			t.Errorf("%s: first broadcast's row %+v (%v), want unsubscribed", v.Email, row, err)
		}
		if _, err := s.store.GetSend(ctx, secondID, v.ID); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("%s: the second broadcast has a ledger row for an unsubscribed contact (%v)", v.Email, err)
		}
	}
	t.Logf("%d contacts unsubscribed by one-click links from received mail; the running broadcast sent them nothing and %d others one each", len(victims), len(want)-len(victims))
}
