package web_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/rangecast/rangecast/internal/clock"
	"github.com/rangecast/rangecast/internal/message"
	"github.com/rangecast/rangecast/internal/store"
	"github.com/rangecast/rangecast/internal/testenv"
	"github.com/rangecast/rangecast/internal/web"
)

var (
	t0         = time.Date(2031, time.May, 2, 10, 0, 0, 0, time.UTC)
	unsubKey   = []byte("unsubscribe-key-0123456789abcdef-0001")
	genericKey = []byte("generic-webhook-secret-0123456789")
	mailgunKey = []byte("key-3ax6xnjp29jd6fds4gc373sgvjxteol0")
	svixKey    = []byte("svix-test-key-0123456789abcdef!!")
	svixSecret = "whsec_" + base64.StdEncoding.EncodeToString(svixKey)
)

const sendingDomain = "news.example.org"

// fixture is a store with one running broadcast whose rows are all sent,
// and the public HTTP in front of it.
type fixture struct {
	t        *testing.T
	st       store.Store
	clock    *clock.Fake
	srv      *httptest.Server
	b        store.Broadcast
	contacts []store.Contact
}

func setup(t *testing.T, n int) *fixture {
	t.Helper()
	ctx := t.Context()
	st := testenv.Store(t)
	f := &fixture{t: t, st: st, clock: clock.NewFake(t0)}
	var cs []store.Contact
	for i := range n {
		cs = append(cs, store.Contact{ID: ulid.MustNew(ulid.Timestamp(t0.Add(time.Duration(i)*time.Second)), nil), Email: fmt.Sprintf("p%03d@example.com", i), Name: "P", Subscribed: true})
	}
	ids, err := st.ImportContacts(ctx, cs, t0)
	if err != nil {
		t.Fatal(err)
	}
	for i := range cs {
		cs[i].ID = ids[i]
	}
	f.contacts = cs
	b, _, err := st.CreateBroadcast(ctx, store.Broadcast{ID: ulid.MustNew(ulid.Timestamp(t0.Add(-time.Hour)), nil), Name: "web", CreatedAt: t0,
		Content: store.Content{FromAddress: "news@" + sendingDomain, Subject: "s", HTML: "<p>h</p>"}})
	if err != nil {
		t.Fatal(err)
	}
	if f.b, err = st.AcceptBroadcast(ctx, b.ID, t0); err != nil {
		t.Fatal(err)
	}
	var claims []store.Claim
	var outcomes []store.Outcome
	for _, c := range cs {
		claims = append(claims, store.Claim{ContactID: c.ID, Email: c.Email, MessageID: f.mid(c.ID)})
		outcomes = append(outcomes, store.Outcome{ContactID: c.ID, Status: store.SendSent})
	}
	if _, err := st.Claim(ctx, f.b.ID, "w1/1", claims, t0); err != nil {
		t.Fatal(err)
	}
	if err := st.RecordOutcomes(ctx, f.b.ID, "w1/1", outcomes, t0); err != nil {
		t.Fatal(err)
	}
	h, err := web.New(web.Config{
		Store: st, Clock: f.clock, Log: slog.New(slog.NewTextHandler(t.Output(), nil)),
		UnsubscribeKeys: [][]byte{unsubKey},
		GenericSecrets:  [][]byte{genericKey}, MailgunKeys: [][]byte{mailgunKey}, ResendSecrets: []string{svixSecret},
	})
	if err != nil {
		t.Fatal(err)
	}
	f.srv = httptest.NewServer(h)
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fixture) mid(c ulid.ULID) string { return message.MessageID(f.b.ID, c, sendingDomain) }

func (f *fixture) status(i int) store.SendStatus {
	f.t.Helper()
	s, err := f.st.GetSend(context.Background(), f.b.ID, f.contacts[i].ID)
	if err != nil {
		f.t.Fatal(err)
	}
	return s.Status
}

// eligible reports whether contact i would receive a new broadcast.
func (f *fixture) eligible(i int) bool {
	f.t.Helper()
	id := f.contacts[i].ID
	cs, err := f.st.EligiblePage(context.Background(), f.b, id, id, 1)
	if err != nil {
		f.t.Fatal(err)
	}
	return len(cs) == 1
}

type response struct {
	status int
	body   string
	header http.Header
}

func (f *fixture) do(req *http.Request) response {
	f.t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		f.t.Fatal(err)
	}
	return response{resp.StatusCode, string(b), resp.Header}
}

func (f *fixture) get(path string) response {
	req, _ := http.NewRequest(http.MethodGet, f.srv.URL+path, nil)
	return f.do(req)
}

func (f *fixture) oneClick(path string) response {
	req, _ := http.NewRequest(http.MethodPost, f.srv.URL+path, strings.NewReader("List-Unsubscribe=One-Click"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return f.do(req)
}

func (f *fixture) link(i int) string {
	return message.UnsubscribePath + message.UnsubscribeToken(unsubKey, f.b.ID, f.contacts[i].ID)
}

// Tokens that verify (valid, for a contact since gone, replayed) get the
// same status and the same bytes, for the form and for the one-click POST,
// so nobody learns whom a link names; only the valid one unsubscribes, and
// a GET never does. Tokens that do not verify (cut short, tampered, another
// key) are told apart, with a page that says nothing changed: "unsubscribed"
// to a person whose link was broken had them keep getting mail (tester).
func TestUnsubscribeAnswersAlike(t *testing.T) {
	t.Parallel()
	f := setup(t, 3)
	valid := f.link(0)
	tok := strings.TrimPrefix(valid, message.UnsubscribePath)
	flipped := []byte(tok)
	flipped[len(flipped)-1] ^= 1
	paths := map[string]string{
		"valid":         valid,
		"gone contact":  message.UnsubscribePath + message.UnsubscribeToken(unsubKey, f.b.ID, ulid.MustNew(ulid.Timestamp(t0.Add(time.Hour)), nil)),
		"invalid":       message.UnsubscribePath + "not-a-token",
		"cut short":     strings.TrimSuffix(valid, valid[len(valid)-5:]),
		"tampered":      message.UnsubscribePath + string(flipped),
		"other key":     message.UnsubscribePath + message.UnsubscribeToken([]byte("some-other-key-0123456789abcdef-xx"), f.b.ID, f.contacts[1].ID),
		"empty-looking": message.UnsubscribePath + strings.Repeat("A", message.UnsubscribeTokenLen),
	}
	verifies := map[string]bool{"valid": true, "gone contact": true}
	var first, broken *response
	for name, p := range paths {
		r := f.get(p)
		if !verifies[name] {
			if r.status != http.StatusBadRequest || !strings.Contains(r.body, "Nothing was changed") || strings.Contains(r.body, "<form") {
				t.Errorf("GET %s: status %d, page %q; want 400 and the page saying the link is not complete", name, r.status, r.body)
			}
			if broken == nil {
				broken = &r
			} else if r.body != broken.body {
				t.Errorf("GET %s: the broken-link page differs from another's", name)
			}
			continue
		}
		if r.status != http.StatusOK {
			t.Errorf("GET %s: status %d", name, r.status)
		}
		if first == nil {
			first = &r
		} else if r.body != first.body {
			t.Errorf("GET %s: page differs from another token's:\n%s\nvs\n%s", name, r.body, first.body)
		}
		if !strings.Contains(r.body, `<form method="post">`) || !strings.Contains(r.body, `name="List-Unsubscribe" value="One-Click"`) {
			t.Errorf("GET %s: no one-click form in %q", name, r.body)
		}
		if strings.Contains(r.body, tok) {
			t.Errorf("GET %s: the page echoes the token", name)
		}
	}
	if !f.eligible(0) || f.status(0) != store.SendSent {
		t.Fatal("a GET unsubscribed the contact")
	}

	for _, name := range []string{"invalid", "cut short", "tampered", "other key", "empty-looking"} {
		if r := f.oneClick(paths[name]); r.status != http.StatusBadRequest || r.body != broken.body {
			t.Errorf("POST %s: status %d (%s); want 400 and the broken-link page", name, r.status, r.body)
		}
	}
	var done *response
	for _, name := range []string{"gone contact", "valid", "valid"} { // valid twice: a replay
		r := f.oneClick(paths[name])
		if r.status != http.StatusOK {
			t.Errorf("POST %s: status %d (%s)", name, r.status, r.body)
		}
		if done == nil {
			done = &r
		} else if r.body != done.body {
			t.Errorf("POST %s: page differs:\n%s\nvs\n%s", name, r.body, done.body)
		}
		for _, h := range []string{"Content-Type", "Cache-Control", "Content-Security-Policy"} {
			if r.header.Get(h) != done.header.Get(h) {
				t.Errorf("POST %s: header %s = %q, another token got %q", name, h, r.header.Get(h), done.header.Get(h))
			}
		}
	}
	if f.eligible(0) {
		t.Error("valid one-click POST did not unsubscribe the contact")
	}
	if got := f.status(0); got != store.SendUnsubscribed {
		t.Errorf("the broadcast's row is %s, want unsubscribed (the message the person left from)", got)
	}
	for i := 1; i < 3; i++ {
		if !f.eligible(i) || f.status(i) != store.SendSent {
			t.Errorf("contact %d changed by someone else's or a forged token", i)
		}
	}
}

// RFC 8058 mail clients may POST multipart/form-data; a POST without the
// one-click field (or with another value) changes nothing.
func TestUnsubscribeBodies(t *testing.T) {
	t.Parallel()
	f := setup(t, 3)
	for _, body := range []string{"", "List-Unsubscribe=Yes", "unsubscribe=1"} {
		req, _ := http.NewRequest(http.MethodPost, f.srv.URL+f.link(0), strings.NewReader(body))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if r := f.do(req); r.status != http.StatusBadRequest {
			t.Errorf("POST %q: status %d, want 400", body, r.status)
		}
	}
	if !f.eligible(0) {
		t.Fatal("a POST without List-Unsubscribe=One-Click unsubscribed")
	}
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	mw.WriteField("List-Unsubscribe", "One-Click") //nolint:errcheck
	mw.Close()
	req, _ := http.NewRequest(http.MethodPost, f.srv.URL+f.link(1), &buf)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	if r := f.do(req); r.status != http.StatusOK {
		t.Fatalf("multipart one-click: %d %s", r.status, r.body)
	}
	if f.eligible(1) {
		t.Error("multipart one-click POST did not unsubscribe")
	}
	// The form served on GET posts exactly what the one-click POST needs.
	form := f.get(f.link(2))
	vals := url.Values{}
	vals.Set("List-Unsubscribe", "One-Click")
	if !strings.Contains(form.body, `name="List-Unsubscribe" value="One-Click"`) {
		t.Fatal("form lacks the field")
	}
	if r := f.oneClick(f.link(2)); r.status != http.StatusOK || f.eligible(2) {
		t.Errorf("form submission: %d, eligible=%v", r.status, f.eligible(2))
	}
}

// generic posts events in the generic format, signed at the fake clock's
// time unless ts is given.
func (f *fixture) generic(events []map[string]string, sign func(ts int64, body []byte) (string, string)) response {
	f.t.Helper()
	body, _ := json.Marshal(map[string]any{"events": events})
	req, _ := http.NewRequest(http.MethodPost, f.srv.URL+"/webhooks/generic", bytes.NewReader(body))
	if sign == nil {
		sign = func(ts int64, body []byte) (string, string) {
			return strconv.FormatInt(ts, 10), web.GenericSignature(genericKey, ts, body)
		}
	}
	ts, sig := sign(f.clock.Now().Unix(), body)
	if ts != "" {
		req.Header.Set(web.GenericTimestampHeader, ts)
	}
	if sig != "" {
		req.Header.Set(web.GenericSignatureHeader, sig)
	}
	return f.do(req)
}

func (f *fixture) ev(id, typ string, contact int) map[string]string {
	return map[string]string{"id": id, "type": typ, "message_id": "<" + f.mid(f.contacts[contact].ID) + ">", "occurred_at": t0.Format(time.RFC3339), "detail": "550 5.1.1 no such user"}
}

// Out-of-order events over HTTP end in the right status, and the same event
// twice counts once.
func TestGenericWebhookOrderAndDuplicates(t *testing.T) {
	t.Parallel()
	f := setup(t, 3)
	batches := [][]map[string]string{
		{f.ev("a1", "opened", 0), f.ev("b1", "clicked", 1), f.ev("c1", "opened", 2)},
		{f.ev("a2", "delivered", 0), f.ev("b2", "delivered", 1), f.ev("c2", "bounced", 2)},
		{f.ev("a2", "delivered", 0), f.ev("c2", "bounced", 2), f.ev("c3", "delivered", 2)}, // a retry, and late news
	}
	for i, b := range batches {
		if r := f.generic(b, nil); r.status != http.StatusOK {
			t.Fatalf("batch %d: %d %s", i, r.status, r.body)
		}
	}
	want := []store.SendStatus{store.SendOpened, store.SendClicked, store.SendBounced}
	for i, w := range want {
		if got := f.status(i); got != w {
			t.Errorf("contact %d: %s, want %s", i, got, w)
		}
	}
	if f.eligible(2) {
		t.Error("hard-bounced contact still eligible")
	}
	rep, err := f.st.Reputation(t.Context(), f.b.ID)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Bounced != 1 || rep.Delivered != 2 {
		t.Errorf("Reputation = %+v, want 1 bounce (counted once) and 2 delivered", rep)
	}
}

// A detail with a NUL byte or invalid UTF-8 (a reply quoting a broken
// server) is stored cleaned, and the hard bounce after it in the batch is
// applied: Postgres refused the text, and the 500 had the provider retry
// the batch for ever (tester). A NUL in an id or a Message-ID refuses the
// request with 400.
func TestWebhookEventsWithUnstorableText(t *testing.T) {
	t.Parallel()
	f := setup(t, 3)
	soft := f.ev("n1", "soft_bounced", 0)
	soft["detail"] = "451 4.2.0 mailbox busy\x00 \xff"
	if r := f.generic([]map[string]string{soft, f.ev("n2", "bounced", 1)}, nil); r.status != http.StatusOK {
		t.Fatalf("batch with a NUL in a detail: %d %s; want 200", r.status, r.body)
	}
	if f.eligible(1) {
		t.Error("the hard bounce after the NUL detail was not applied")
	}
	for _, field := range []string{"id", "message_id"} {
		e := f.ev("n3", "bounced", 2)
		e[field] += "\x00"
		if r := f.generic([]map[string]string{e}, nil); r.status != http.StatusBadRequest || !strings.Contains(r.body, "NUL") {
			t.Errorf("NUL in %s: %d %s; want 400 naming the NUL", field, r.status, r.body)
		}
	}
	if !f.eligible(2) {
		t.Error("a refused request changed a contact")
	}
}

// Unsigned, badly signed, stale and malformed requests are refused with
// 401/400 and change nothing, for every provider.
func TestForgedWebhooksChangeNothing(t *testing.T) {
	t.Parallel()
	f := setup(t, 1)
	now := f.clock.Now().Unix()
	bounce := []map[string]string{f.ev("x1", "bounced", 0)}
	cases := []struct {
		name   string
		sign   func(ts int64, body []byte) (string, string)
		status int
	}{
		{"unsigned", func(ts int64, _ []byte) (string, string) { return strconv.FormatInt(ts, 10), "" }, 401},
		{"no timestamp", func(ts int64, body []byte) (string, string) { return "", web.GenericSignature(genericKey, ts, body) }, 401},
		{"wrong secret", func(ts int64, body []byte) (string, string) {
			return strconv.FormatInt(ts, 10), web.GenericSignature([]byte("guessed"), ts, body)
		}, 401},
		{"signature of another body", func(ts int64, _ []byte) (string, string) {
			return strconv.FormatInt(ts, 10), web.GenericSignature(genericKey, ts, []byte(`{"events":[]}`))
		}, 401},
		{"timestamp swapped after signing", func(ts int64, body []byte) (string, string) {
			return strconv.FormatInt(ts+1, 10), web.GenericSignature(genericKey, ts, body)
		}, 401},
		{"stale", func(_ int64, body []byte) (string, string) {
			return strconv.FormatInt(now-3600, 10), web.GenericSignature(genericKey, now-3600, body)
		}, 401},
		{"from the future", func(_ int64, body []byte) (string, string) {
			return strconv.FormatInt(now+3600, 10), web.GenericSignature(genericKey, now+3600, body)
		}, 401},
		{"garbage signature", func(ts int64, _ []byte) (string, string) { return strconv.FormatInt(ts, 10), "v1=zz" }, 401},
	}
	for _, c := range cases {
		if r := f.generic(bounce, c.sign); r.status != c.status {
			t.Errorf("%s: status %d, want %d (%s)", c.name, r.status, c.status, r.body)
		}
	}
	// Signed but malformed: 400.
	for _, body := range []string{`{`, `{"events":[{"id":"m","type":"exploded","message_id":"x","occurred_at":"2031-05-02T10:00:00Z"}]}`, `{"events":[]}`, `[]`} {
		req, _ := http.NewRequest(http.MethodPost, f.srv.URL+"/webhooks/generic", strings.NewReader(body))
		req.Header.Set(web.GenericTimestampHeader, strconv.FormatInt(now, 10))
		req.Header.Set(web.GenericSignatureHeader, web.GenericSignature(genericKey, now, []byte(body)))
		if r := f.do(req); r.status != http.StatusBadRequest {
			t.Errorf("malformed %q: status %d, want 400", body, r.status)
		}
	}
	// Mailgun: a signature made with another key, and a stale one.
	for name, mg := range map[string][]byte{
		"mailgun wrong key": mailgunBody(t, []byte("key-not-the-one"), now, "mg-1", "failed", "permanent", f.mid(f.contacts[0].ID)),
		"mailgun stale":     mailgunBody(t, mailgunKey, now-3600, "mg-2", "failed", "permanent", f.mid(f.contacts[0].ID)),
	} {
		req, _ := http.NewRequest(http.MethodPost, f.srv.URL+"/webhooks/mailgun", bytes.NewReader(mg))
		if r := f.do(req); r.status != http.StatusUnauthorized {
			t.Errorf("%s: status %d, want 401", name, r.status)
		}
	}
	// Mailgun signs only timestamp and token: a captured request's
	// signature reused with another event changes nothing.
	genuine := mailgunBody(t, mailgunKey, now, "mg-3", "delivered", "", f.mid(f.contacts[0].ID))
	forged := bytes.Replace(genuine, []byte(`"event":"delivered"`), []byte(`"event":"complained"`), 1)
	if bytes.Equal(genuine, forged) {
		t.Fatal("test body did not change")
	}
	for i, body := range [][]byte{genuine, forged} {
		req, _ := http.NewRequest(http.MethodPost, f.srv.URL+"/webhooks/mailgun", bytes.NewReader(body))
		if r := f.do(req); r.status != http.StatusOK {
			t.Fatalf("mailgun request %d: %d %s", i, r.status, r.body)
		}
	}
	if got := f.status(0); got != store.SendDelivered || !f.eligible(0) {
		t.Fatalf("a reused Mailgun signature carried a complaint: status %s, eligible %v", got, f.eligible(0))
	}
	// Resend: tampered body under a valid signature.
	body := resendBody(t, "email.bounced", f.mid(f.contacts[0].ID), "Permanent")
	req := resendRequest(t, f.srv.URL, "msg_1", now, body)
	req.Body = io.NopCloser(bytes.NewReader(bytes.Replace(body, []byte("Permanent"), []byte("Permanenu"), 1)))
	if r := f.do(req); r.status != http.StatusUnauthorized {
		t.Errorf("resend tampered: status %d, want 401", r.status)
	}
	if got := f.status(0); got != store.SendDelivered || !f.eligible(0) {
		t.Errorf("after forged requests: status %s, eligible %v; want delivered (the one genuine event) and eligible", got, f.eligible(0))
	}
	// Finally the genuine one goes through.
	if r := f.generic(bounce, nil); r.status != http.StatusOK || f.status(0) != store.SendBounced {
		t.Errorf("genuine request: %d, status %s", r.status, f.status(0))
	}
}

// mailgunBody is a Mailgun webhook as documented: the signature object and
// the event data.
func mailgunBody(t *testing.T, key []byte, ts int64, id, event, severity, mid string) []byte {
	t.Helper()
	token := "a8ce0edb2dd8301dee6c2405235584e45aa91d1e9f979f3de0-" + id // fresh per request, as Mailgun's are
	tss := strconv.FormatInt(ts, 10)
	b, err := json.Marshal(map[string]any{
		"signature": map[string]string{"timestamp": tss, "token": token, "signature": web.MailgunSignature(key, tss, token)},
		"event-data": map[string]any{
			"id": id, "event": event, "severity": severity, "timestamp": float64(ts) + 0.25, "reason": "bounce",
			"recipient":       "p000@example.com",
			"message":         map[string]any{"headers": map[string]string{"message-id": mid}},
			"delivery-status": map[string]any{"code": 550, "message": "5.1.1 The email account does not exist"},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func resendBody(t *testing.T, typ, mid, bounceType string) []byte {
	t.Helper()
	data := map[string]any{
		"email_id": "56761188-7520-42d8-8898-ff6fc54ce618", "created_at": "2031-05-02T09:59:00.000Z",
		"to": []string{"p000@example.com"}, "headers": []map[string]string{{"name": "Message-ID", "value": "<" + mid + ">"}},
	}
	if bounceType != "" {
		data["bounce"] = map[string]string{"type": bounceType, "subType": "General", "message": "The recipient's mailbox does not exist."}
	}
	b, err := json.Marshal(map[string]any{"type": typ, "created_at": "2031-05-02T09:59:01.000Z", "data": data})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func resendRequest(t *testing.T, base, id string, ts int64, body []byte) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, base+"/webhooks/resend", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("svix-id", id)
	req.Header.Set("svix-timestamp", strconv.FormatInt(ts, 10))
	// A rotated-out signature first, as Svix sends several.
	req.Header.Set("svix-signature", web.SvixSignature([]byte("old-key-old-key-old-key!"), id, ts, body)+" "+web.SvixSignature(svixKey, id, ts, body))
	return req
}

func TestMailgunWebhook(t *testing.T) {
	t.Parallel()
	f := setup(t, 3)
	now := f.clock.Now().Unix()
	post := func(body []byte) response {
		req, _ := http.NewRequest(http.MethodPost, f.srv.URL+"/webhooks/mailgun", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		return f.do(req)
	}
	steps := []struct {
		id, event, severity string
		contact             int
	}{
		{"e1", "delivered", "", 0},
		{"e2", "opened", "", 0},
		{"e3", "failed", "temporary", 1}, // soft: nothing changes
		{"e4", "failed", "permanent", 2},
		{"e5", "accepted", "", 1}, // not tracked
		{"e4", "failed", "permanent", 2},
	}
	for _, s := range steps {
		if r := post(mailgunBody(t, mailgunKey, now, s.id, s.event, s.severity, f.mid(f.contacts[s.contact].ID))); r.status != http.StatusOK {
			t.Fatalf("%s %s: %d %s", s.id, s.event, r.status, r.body)
		}
	}
	want := []store.SendStatus{store.SendOpened, store.SendSent, store.SendBounced}
	for i, w := range want {
		if got := f.status(i); got != w {
			t.Errorf("contact %d: %s, want %s", i, got, w)
		}
	}
	s, err := f.st.GetSend(t.Context(), f.b.ID, f.contacts[2].ID)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(s.Error, "550 5.1.1 The email account does not exist") {
		t.Errorf("bounced row's error %q lacks the reply", s.Error)
	}
	if !f.eligible(1) || f.eligible(2) {
		t.Errorf("eligible: soft-bounced %v (want true), hard-bounced %v (want false)", f.eligible(1), f.eligible(2))
	}
	// Mailgun signs the token, not the event: the token of an event
	// rangecast ignores ("accepted", e5) must not carry a complaint later.
	if r := post(mailgunBody(t, mailgunKey, now, "e5", "complained", "", f.mid(f.contacts[1].ID))); r.status != http.StatusOK {
		t.Fatalf("replayed token: %d %s", r.status, r.body)
	}
	if got := f.status(1); got != store.SendSent || !f.eligible(1) {
		t.Errorf("a replayed token of an ignored event changed the row to %s (eligible %v)", got, f.eligible(1))
	}
	if r := post([]byte(`{"signature": {}}`)); r.status != http.StatusUnauthorized {
		t.Errorf("unsigned mailgun: %d", r.status)
	}
	if r := post([]byte(`not json`)); r.status != http.StatusBadRequest {
		t.Errorf("malformed mailgun: %d", r.status)
	}
}

func TestResendWebhook(t *testing.T) {
	t.Parallel()
	f := setup(t, 3)
	now := f.clock.Now().Unix()
	steps := []struct {
		id, typ, bounce string
		contact         int
	}{
		{"msg_1", "email.clicked", "", 0},
		{"msg_2", "email.delivered", "", 0},
		{"msg_3", "email.complained", "", 1},
		{"msg_4", "email.bounced", "Transient", 2},
		{"msg_5", "email.sent", "", 2},
		{"msg_3", "email.complained", "", 1},
	}
	for _, s := range steps {
		if r := f.do(resendRequest(t, f.srv.URL, s.id, now, resendBody(t, s.typ, f.mid(f.contacts[s.contact].ID), s.bounce))); r.status != http.StatusOK {
			t.Fatalf("%s %s: %d %s", s.id, s.typ, r.status, r.body)
		}
	}
	want := []store.SendStatus{store.SendClicked, store.SendComplained, store.SendSent}
	for i, w := range want {
		if got := f.status(i); got != w {
			t.Errorf("contact %d: %s, want %s", i, got, w)
		}
	}
	if f.eligible(1) {
		t.Error("complained contact still eligible")
	}
	if !f.eligible(2) {
		t.Error("transient bounce suppressed the contact")
	}
	// Unsigned and stale.
	req := resendRequest(t, f.srv.URL, "msg_9", now, resendBody(t, "email.bounced", f.mid(f.contacts[0].ID), "Permanent"))
	req.Header.Del("svix-signature")
	if r := f.do(req); r.status != http.StatusUnauthorized {
		t.Errorf("unsigned resend: %d", r.status)
	}
	f.clock.Advance(10 * time.Minute)
	if r := f.do(resendRequest(t, f.srv.URL, "msg_10", now, resendBody(t, "email.bounced", f.mid(f.contacts[0].ID), "Permanent"))); r.status != http.StatusUnauthorized {
		t.Errorf("stale resend: %d", r.status)
	}
	if f.status(0) != store.SendClicked {
		t.Errorf("refused requests changed contact 0: %s", f.status(0))
	}
}

// An endpoint without a secret does not exist.
func TestUnconfiguredWebhookIsNotServed(t *testing.T) {
	t.Parallel()
	h, err := web.New(web.Config{Store: testenv.SQLite(t)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	for _, p := range []string{"/webhooks/generic", "/webhooks/mailgun", "/webhooks/resend"} {
		resp, err := http.Post(srv.URL+p, "application/json", strings.NewReader(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("%s without a secret: %d, want 404", p, resp.StatusCode)
		}
	}
	if _, err := web.New(web.Config{Store: testenv.SQLite(t), ResendSecrets: []string{"not-whsec"}}); err == nil {
		t.Error("a Resend secret without whsec_ accepted")
	}
}
