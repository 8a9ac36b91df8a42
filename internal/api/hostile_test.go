package api_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
	"google.golang.org/grpc/codes"

	"github.com/rangecast/rangecast/internal/store"
	pb "github.com/rangecast/rangecast/proto/rangecast/v1"
)

// onBothStores runs f on Postgres (or what testenv.Store picks) and SQLite.
func onBothStores(t *testing.T, f func(t *testing.T, sqlite bool)) {
	for _, sqlite := range []bool{false, true} {
		name := "Postgres"
		if sqlite {
			name = "SQLite"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f(t, sqlite)
		})
	}
}

// TestBadRowsSprinkledThroughAList: an import with undeliverable and
// unstorable rows among good ones imports the good rows and names each bad
// one with its reason; spellings of one mailbox are one contact. The
// broadcast to the list completes: the contact the relay cannot be asked
// to deliver to (a non-ASCII local part, no SMTPUTF8) fails alone, each
// once although it was imported in two spellings, an IDN
// domain goes out as A-labels, nobody else is held up.
func TestBadRowsSprinkledThroughAList(t *testing.T) {
	t.Parallel()
	onBothStores(t, func(t *testing.T, sqlite bool) {
		s := newStack(t, stackOptions{sqlite: sqlite, workers: 1})
		ac := newAudienceClient(t, s)

		var rows []*pb.ContactRow
		good := map[string]bool{}
		bad := map[int64]string{}
		undeliverable := 0
		add := func(email, reason string, attrs map[string]string) {
			if attrs == nil {
				attrs = map[string]string{}
			}
			attrs["plan"] = "free"
			rows = append(rows, &pb.ContactRow{Email: email, Name: "N", Attributes: attrs})
			if reason != "" {
				bad[int64(len(rows))] = reason
			}
		}
		badRows := []struct{ email, reason string }{
			{"ip@[127.0.0.1]", "IP literal"},
			{"a@-x.com", "not a host name"},
			{"a%b@example.org", "percent routing"},
			{"nb\u00a0sp@example.org", "U+00A0"},
			{"zero\u200bwidth@example.org", "U+200B"},
			{"Ü@example.org", ""}, // first spelling: good
			{"ü@example.org", "duplicate of row"},
			{"e\u0301mile@example.org", ""},
			{"\u00e9mile@example.org", "duplicate of row"},
		}
		for i := range 60 {
			email := fmt.Sprintf("good%02d@example.org", i)
			add(email, "", nil)
			good[email] = true
			if i%6 == 0 && i/6 < len(badRows) {
				b := badRows[i/6]
				add(b.email, b.reason, nil)
				if b.reason == "" {
					undeliverable++ // a non-ASCII local part: stored, but this relay has no SMTPUTF8
				}
			}
		}
		add("nul@example.org", `attribute "city" contains a NUL byte`, map[string]string{"city": "Ly\x00on"})
		add("jürgen@example.org", "", nil) // storable, undeliverable here
		undeliverable++
		add("ok@bücher.example", "", nil)
		good["ok@xn--bcher-kva.example"] = true

		resp := importRows(t, ac, rows, 17, 23)
		if resp.GetImported() != int64(len(rows)-len(bad)) || resp.GetRejected() != int64(len(bad)) {
			t.Fatalf("imported %d, rejected %d; want %d and %d: %v", resp.GetImported(), resp.GetRejected(), len(rows)-len(bad), len(bad), resp.GetErrors())
		}
		got := map[int64]string{}
		for _, e := range resp.GetErrors() {
			got[e.GetRow()] = e.GetError()
		}
		for row, reason := range bad {
			if !strings.Contains(got[row], reason) {
				t.Errorf("row %d (%q): error %q, want it to say %q", row, rows[row-1].GetEmail(), got[row], reason)
			}
		}

		id := s.create("", 0)
		if _, err := s.client.StartBroadcast(context.Background(), &pb.StartBroadcastRequest{Id: id}); err != nil {
			t.Fatal(err)
		}
		b := s.waitState(id, pb.BroadcastState_BROADCAST_STATE_COMPLETED, 60*time.Second)
		if p := b.GetProgress(); p.GetFailed() != int64(undeliverable) || p.GetSent() != int64(len(good)) {
			t.Errorf("sent %d, failed %d; want %d and %d (the non-ASCII mailboxes alone)", p.GetSent(), p.GetFailed(), len(good), undeliverable)
		}
		received := s.sink.CountByRecipient()
		for email := range good {
			if received[email] != 1 {
				t.Errorf("%s received %d copies, want 1", email, received[email])
			}
		}
		if len(received) != len(good) {
			t.Errorf("%d recipients received mail, want %d: %v", len(received), len(good), received)
		}
		if !strings.Contains(b.GetReason(), "never handed to the relay") || !strings.Contains(b.GetReason(), "broadcasts retry "+id) {
			t.Errorf("reason %q; want it to say the failures were never handed to the relay, and how to send them again", b.GetReason())
		}
		// Their messages were never handed to the relay, so a retry (once a
		// relay with SMTPUTF8 is set up) may send them again; this relay
		// still has none, and they fail again, alone.
		r, err := pb.NewBroadcastOpsServiceClient(s.conn).RetryBroadcast(context.Background(), &pb.RetryBroadcastRequest{Id: id})
		if err != nil || r.GetFailed() != int64(undeliverable) {
			t.Fatalf("retry = %v, %v; want the %d never handed to the relay retried", r, err, undeliverable)
		}
		b = s.waitState(id, pb.BroadcastState_BROADCAST_STATE_COMPLETED, 60*time.Second)
		if p := b.GetProgress(); p.GetFailed() != int64(undeliverable) || p.GetSent() != int64(len(good)) {
			t.Errorf("after the retry: sent %d, failed %d; want %d and %d", p.GetSent(), p.GetFailed(), len(good), undeliverable)
		}
		if again := s.sink.CountByRecipient(); len(again) != len(good) {
			t.Errorf("after the retry %d recipients received mail, want %d", len(again), len(good))
		}
	})
}

// TestTemplateMistakesRefusedOrPause: a template that cannot render for the
// real contacts is refused at create, naming the contact and the field; a
// bomb is InvalidArgument at once; and a template error that repeats on
// many contacts after start pauses the broadcast instead of failing them.
func TestTemplateMistakesRefusedOrPause(t *testing.T) {
	t.Parallel()
	onBothStores(t, func(t *testing.T, sqlite bool) {
		s := newStack(t, stackOptions{sqlite: sqlite, workers: 1})
		ctx := context.Background()
		now := time.Now()
		contacts := make([]store.Contact, 40)
		for i := range contacts {
			contacts[i] = store.Contact{ID: ulid.Make(), Email: fmt.Sprintf("c%02d@example.org", i), Name: "C", Subscribed: true}
			if i < 4 || i == len(contacts)-1 {
				contacts[i].Attributes = map[string]any{"city": "Lyon"}
			}
		}
		if _, err := s.store.ImportContacts(ctx, contacts, now); err != nil {
			t.Fatal(err)
		}
		create := func(html string) (string, error) {
			resp, err := s.client.CreateBroadcast(ctx, &pb.CreateBroadcastRequest{Name: "b", Content: &pb.BroadcastContent{
				FromAddress: "news@rangecast.test", Subject: "Hi", Html: html + unsubscribeLink}})
			return resp.GetBroadcast().GetId(), err
		}

		_, err := create(`<p>{{.Attributes.cty}}</p>`)
		wantStatus(t, "typo", err, codes.InvalidArgument, contacts[0].ID.String(), "html", `"cty"`)

		for _, bomb := range []string{`{{range 100000000000}}{{end}}`, `{{range 10000}}{{range 10000}}x{{end}}{{end}}`, "a\x00b"} {
			start := time.Now()
			_, err := create(bomb)
			wantStatus(t, "bomb", err, codes.InvalidArgument, "html")
			if d := time.Since(start); d > time.Second {
				t.Errorf("bomb %.30q refused after %s", bomb, d)
			}
		}

		// The sample (the first and the last contacts) has the attribute;
		// the rest of the list does not.
		id, err := create(`<p>{{.Attributes.city}}</p>`)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.client.StartBroadcast(ctx, &pb.StartBroadcastRequest{Id: id}); err != nil {
			t.Fatal(err)
		}
		b := s.waitState(id, pb.BroadcastState_BROADCAST_STATE_PAUSED, 30*time.Second)
		if !strings.Contains(b.GetReason(), "configuration mistake") || !strings.Contains(b.GetReason(), "city") {
			t.Errorf("paused with reason %q, want the repeated template error", b.GetReason())
		}
		// At most the first few, before the mistake is recognised.
		if f := b.GetProgress().GetFailed(); f >= 3 {
			t.Errorf("%d contacts failed; a configuration mistake fails at most 2 per worker", f)
		}
	})
}

// TestFewOddContactsFailAlone: a template that fails for a handful of
// contacts with odd data (3 of 400, next to each other, so in one window)
// fails those three alone; the broadcast does not pause, and everyone else
// is sent. It used to pause at the third and again at every resume.
func TestFewOddContactsFailAlone(t *testing.T) {
	t.Parallel()
	onBothStores(t, func(t *testing.T, sqlite bool) {
		s := newStack(t, stackOptions{sqlite: sqlite, workers: 1})
		ctx := context.Background()
		contacts := make([]store.Contact, 400)
		odd := map[string]bool{}
		for i := range contacts {
			contacts[i] = store.Contact{ID: ulid.Make(), Email: fmt.Sprintf("c%03d@example.org", i), Name: "C", Subscribed: true,
				Attributes: map[string]any{"code": "ok"}}
			if i >= 200 && i < 203 { // away from the create-time sample (the first of each range, the last)
				contacts[i].Attributes["code"] = "odd"
				odd[contacts[i].Email] = true
			}
		}
		if _, err := s.store.ImportContacts(ctx, contacts, time.Now()); err != nil {
			t.Fatal(err)
		}
		resp, err := s.client.CreateBroadcast(ctx, &pb.CreateBroadcastRequest{Name: "b", Content: &pb.BroadcastContent{
			FromAddress: "news@rangecast.test", Subject: "Hi",
			Html: `<p>{{if eq .Attributes.code "odd"}}{{slice .Attributes.code 5}}{{end}}</p>` + unsubscribeLink}})
		if err != nil {
			t.Fatal(err)
		}
		id := resp.GetBroadcast().GetId()
		if _, err := s.client.StartBroadcast(ctx, &pb.StartBroadcastRequest{Id: id}); err != nil {
			t.Fatal(err)
		}
		b := s.waitState(id, pb.BroadcastState_BROADCAST_STATE_COMPLETED, 60*time.Second)
		if p := b.GetProgress(); p.GetSent() != 397 || p.GetFailed() != 3 {
			t.Errorf("sent %d, failed %d (reason %q); want 397 sent and the 3 odd contacts failed", p.GetSent(), p.GetFailed(), b.GetReason())
		}
		bid := ulid.MustParse(id)
		for _, c := range contacts {
			send, err := s.store.GetSend(ctx, bid, c.ID)
			if err != nil {
				t.Fatalf("%s: %v", c.Email, err)
			}
			if failed := send.Status == store.SendFailed; failed != odd[c.Email] {
				t.Errorf("%s: %s (%s)", c.Email, send.Status, send.Error)
			}
		}
	})
}

func newAudienceClient(t *testing.T, s *stack) pb.AudienceServiceClient {
	t.Helper()
	return pb.NewAudienceServiceClient(s.conn)
}

// ListBroadcasts pages, and listed broadcasts carry no bodies.
func TestListBroadcastsPaginatedWithoutBodies(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{})
	ctx := context.Background()
	var want []string
	for range 5 {
		want = append([]string{s.create("", 0)}, want...)
	}
	var got []string
	token := ""
	for pages := 0; pages < 10; pages++ {
		resp, err := s.client.ListBroadcasts(ctx, &pb.ListBroadcastsRequest{PageSize: 2, PageToken: token})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.GetBroadcasts()) > 2 {
			t.Fatalf("page of %d, asked for 2", len(resp.GetBroadcasts()))
		}
		for _, b := range resp.GetBroadcasts() {
			if b.GetContent().GetHtml() != "" || b.GetContent().GetText() != "" {
				t.Errorf("listed broadcast %s has its body", b.GetId())
			}
			got = append(got, b.GetId())
		}
		if token = resp.GetNextPageToken(); token == "" {
			break
		}
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("listed %v, want %v", got, want)
	}
	if b := s.status(want[0]); b.GetContent().GetHtml() == "" {
		t.Error("GetBroadcast lost the body")
	}
	_, err := s.client.ListBroadcasts(ctx, &pb.ListBroadcastsRequest{PageSize: 100000})
	wantStatus(t, "page_size", err, codes.InvalidArgument, "page_size")
	_, err = s.client.ListBroadcasts(ctx, &pb.ListBroadcastsRequest{PageToken: "nope"})
	wantStatus(t, "page_token", err, codes.InvalidArgument, "page_token")
	// Another list's token (a contact list's, or a bare id) is refused,
	// not read as a place among broadcasts.
	for _, token := range []string{"ct." + want[0], want[0], "seg.4"} {
		_, err = s.client.ListBroadcasts(ctx, &pb.ListBroadcastsRequest{PageToken: token})
		wantStatus(t, "page_token "+token, err, codes.InvalidArgument, "start again without it")
	}
}

// Start repeats the pre-flight: a contact added after create that the
// template cannot render for stops the start, named, before anyone is sent
// anything.
func TestStartRepeatsPreflight(t *testing.T) {
	t.Parallel()
	onBothStores(t, func(t *testing.T, sqlite bool) {
		s := newStack(t, stackOptions{sqlite: sqlite, workers: 1})
		ctx := context.Background()
		with := store.Contact{ID: ulid.Make(), Email: "with@example.org", Subscribed: true, Attributes: map[string]any{"city": "Lyon"}}
		if _, err := s.store.ImportContacts(ctx, []store.Contact{with}, time.Now()); err != nil {
			t.Fatal(err)
		}
		resp, err := s.client.CreateBroadcast(ctx, &pb.CreateBroadcastRequest{Name: "b", Content: &pb.BroadcastContent{
			FromAddress: "news@rangecast.test", Subject: "Hi", Html: `<p>{{.Attributes.city}}</p>` + unsubscribeLink}})
		if err != nil {
			t.Fatal(err)
		}
		without := store.Contact{ID: ulid.Make(), Email: "without@example.org", Subscribed: true}
		if _, err := s.store.ImportContacts(ctx, []store.Contact{without}, time.Now()); err != nil {
			t.Fatal(err)
		}
		_, err = s.client.StartBroadcast(ctx, &pb.StartBroadcastRequest{Id: resp.GetBroadcast().GetId()})
		wantStatus(t, "start", err, codes.FailedPrecondition, without.ID.String(), "without@example.org", "html", "city")
		if b := s.status(resp.GetBroadcast().GetId()); b.GetState() != pb.BroadcastState_BROADCAST_STATE_DRAFT {
			t.Errorf("state %s after a refused start, want draft", b.GetState())
		}
		if n := s.sink.Count(); n != 0 {
			t.Errorf("%d messages sent", n)
		}
	})
}

// unsubscribeLink is the visible link every broadcast body must carry.
const unsubscribeLink = `<p><a href="{{.UnsubscribeURL}}">Unsubscribe</a></p>`
