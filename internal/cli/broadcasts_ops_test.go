package cli

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/emersion/go-smtp"
	"github.com/oklog/ulid/v2"

	"github.com/rangecast/rangecast/internal/api"
	"github.com/rangecast/rangecast/internal/bus"
	"github.com/rangecast/rangecast/internal/capture"
	"github.com/rangecast/rangecast/internal/coordinator"
	"github.com/rangecast/rangecast/internal/message"
	"github.com/rangecast/rangecast/internal/pageworker"
	"github.com/rangecast/rangecast/internal/store"
	"github.com/rangecast/rangecast/internal/testenv"
	"github.com/rangecast/rangecast/internal/transport"
)

// opsStack is the whole system for the operator's commands: a store (Postgres
// or SQLite), embedded JetStream, a capture SMTP server, a coordinator behind
// the real gRPC API with the workers' mail settings, and page workers that
// give a row up after two attempts.
type opsStack struct {
	t     *testing.T
	addr  string
	store store.Store
	sink  *capture.Server
	// flaky answers 451 to these addresses while set, dead 550 always.
	flaky, dead sync.Map
	unsubs      *message.Unsubscribe
	usage       usageLog
}

// usageLog records what test copies report to the governors.
type usageLog struct {
	mu  sync.Mutex
	got []string
}

func (u *usageLog) Observe(domain, recipient string, sendErr error, _ time.Time) {
	u.mu.Lock()
	defer u.mu.Unlock()
	c := transport.Class(0)
	if sendErr != nil {
		c = transport.Classify(sendErr)
	}
	u.got = append(u.got, fmt.Sprintf("%s %s %d", domain, recipient, c))
}

func (u *usageLog) String() string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return strings.Join(u.got, ",")
}

func newOpsStack(t *testing.T, sqlite bool, workers int) *opsStack {
	t.Helper()
	ctx := context.Background()
	s := &opsStack{t: t}
	if sqlite {
		s.store = testenv.SQLite(t)
	} else {
		s.store = testenv.Postgres(t)
	}
	_, js := testenv.NATS(t)
	b, err := bus.Setup(ctx, js, bus.Options{Memory: true})
	if err != nil {
		t.Fatal(err)
	}
	s.sink, err = capture.Start("127.0.0.1:0", capture.WithRcptHook(func(to string) *smtp.SMTPError {
		if _, ok := s.flaky.Load(to); ok {
			return &smtp.SMTPError{Code: 451, EnhancedCode: smtp.EnhancedCode{4, 3, 0}, Message: "Temporary failure, please try again later"}
		}
		if _, ok := s.dead.Load(to); ok {
			return &smtp.SMTPError{Code: 550, EnhancedCode: smtp.EnhancedCode{5, 1, 1}, Message: "No such user"}
		}
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.sink.Close() })
	s.unsubs, err = message.NewUnsubscribe("https://mail.example.test", []byte(strings.Repeat("k", message.MinUnsubscribeKeyLen)))
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	if os.Getenv("RANGECAST_TEST_LOG") != "" {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	runCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	c := coordinator.New(coordinator.Config{Store: s.store, Bus: b, Log: log, PageLimit: 20, Tick: 100 * time.Millisecond,
		Backoff: 20 * time.Millisecond, MaxBackoff: 100 * time.Millisecond, MaxFruitless: 1000, InDoubtAfter: time.Second})
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := c.Run(runCtx); err != nil {
			t.Errorf("coordinator: %v", err)
		}
	}()
	tr, err := transport.NewSMTP(s.sink.URL())
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := api.NewGRPCServer(api.Config{Engine: c, Store: s.store, Log: log, Mail: api.Mail{Unsubscribe: s.unsubs, Transport: tr, Usage: &s.usage}})
	go srv.Serve(lis) //nolint:errcheck
	s.addr = lis.Addr().String()
	for range workers {
		wtr, err := transport.NewSMTP(s.sink.URL() + "&pool=4")
		if err != nil {
			t.Fatal(err)
		}
		w := pageworker.New(pageworker.Config{Store: s.store, Bus: b, Transport: wtr, Log: log, Concurrency: 4, Unsubscribe: s.unsubs,
			MaxAttempts: 2, RetryAfter: 50 * time.Millisecond, SweepRetry: 100 * time.Millisecond, RetryFor: time.Nanosecond,
			ParkDelay: 300 * time.Millisecond, FetchWait: 200 * time.Millisecond})
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := w.Run(runCtx); err != nil {
				t.Errorf("worker: %v", err)
			}
			wtr.Close()
		}()
	}
	t.Cleanup(func() {
		srv.Stop()
		cancel()
		wg.Wait()
		tr.Close()
	})
	testenv.Eventually(t, "the coordinator leads", 10*time.Second, c.Leading)
	return s
}

// run runs the CLI against the stack.
func (s *opsStack) run(args ...string) (string, error) {
	s.t.Helper()
	return rangecast(s.t, "", append([]string{"--addr", s.addr}, args...)...)
}

func (s *opsStack) must(args ...string) string {
	s.t.Helper()
	out, err := s.run(args...)
	if err != nil {
		s.t.Fatalf("rangecast %s: %v\n%s", strings.Join(args, " "), describe(err), out)
	}
	return out
}

// refused runs a command that must fail with a message containing want.
func (s *opsStack) refused(want string, args ...string) {
	s.t.Helper()
	out, err := s.run(args...)
	if err == nil || !strings.Contains(describe(err), want) {
		s.t.Fatalf("rangecast %s: error %v (output %q); want one saying %q", strings.Join(args, " "), err, out, want)
	}
}

// importN imports contacts user0…user(n-1)@example.org with a plan.
func (s *opsStack) importN(n int) []store.Contact {
	s.t.Helper()
	entropy := ulid.Monotonic(strings.NewReader(strings.Repeat("entropy!", 4096)), 0)
	now := time.Now()
	cs := make([]store.Contact, n)
	for i := range cs {
		cs[i] = store.Contact{ID: ulid.MustNew(ulid.Timestamp(now.Add(-time.Duration(n-i)*time.Hour)), entropy),
			Email: fmt.Sprintf("user%d@example.org", i), Name: fmt.Sprintf("User %d", i), Subscribed: true,
			Attributes: map[string]any{"plan": []string{"free", "pro"}[i%2]}}
	}
	if _, err := s.store.ImportContacts(context.Background(), cs, now); err != nil {
		s.t.Fatal(err)
	}
	return cs
}

// create makes a draft through the CLI and returns its id.
func (s *opsStack) create(name string) string {
	s.t.Helper()
	html := writeFile(s.t, "news.html", `<p>Hi {{.Name}}, you are on the {{.Attributes.plan}} plan.</p><a href="{{.UnsubscribeURL}}">Unsubscribe</a>`)
	out := s.must("broadcasts", "create", "--name", name, "--from", "news@rangecast.test", "--from-name", "Rangecast News",
		"--subject", "Hello {{.Name}}", "--html", html, "--json")
	var b struct{ ID, State string }
	if err := json.Unmarshal([]byte(out), &b); err != nil || b.State != "BROADCAST_STATE_DRAFT" {
		s.t.Fatalf("create --json printed %q (%v); want the draft as JSON", out, err)
	}
	return b.ID
}

func (s *opsStack) waitState(id, want string, within time.Duration) {
	s.t.Helper()
	var out string
	if !testenv.Poll(within, func() bool {
		out, _ = s.run("broadcasts", "status", id)
		return strings.Contains(out, "state      "+want)
	}) {
		s.t.Fatalf("broadcast %s is not %s after %s:\n%s", id, want, within, out)
	}
}

// stripDate drops the Date field: the one header a message made at another
// moment differs in.
func stripDate(raw []byte) string {
	var b strings.Builder
	for _, line := range strings.SplitAfter(string(raw), "\r\n") {
		if !strings.HasPrefix(line, "Date: ") {
			b.WriteString(line)
		}
	}
	return b.String()
}

func bothStores(t *testing.T, run func(t *testing.T, sqlite bool)) {
	for _, name := range []string{"postgres", "sqlite"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			run(t, name == "sqlite")
		})
	}
}

// TestBroadcastOpsCommands drives every command of an operator's day with a
// broadcast, on both stores: preview, test copies, update, schedule and
// unschedule, delete, then after the send report, export and retry, with
// their refusals.
func TestBroadcastOpsCommands(t *testing.T) {
	t.Parallel()
	bothStores(t, func(t *testing.T, sqlite bool) {
		s := newOpsStack(t, sqlite, 1)
		ctx := context.Background()
		cs := s.importN(12)
		id := s.create("November news")

		// Preview: what user1 would get, without a claim.
		out := s.must("broadcasts", "preview", id, "--contact", "USER1@example.org")
		for _, want := range []string{"Subject: Hello User 1", "List-Unsubscribe: <https://mail.example.test/", "List-Unsubscribe-Post: List-Unsubscribe=One-Click",
			"Message-ID: <" + id + "." + cs[1].ID.String() + "@rangecast.test>", "----- text -----", "you are on the pro plan", "----- html -----", "<p>Hi User 1"} {
			if !strings.Contains(out, want) {
				t.Errorf("preview lacks %q:\n%s", want, out)
			}
		}
		var pv struct {
			Subject, Text, HTML string
			Eligible            bool
		}
		if err := json.Unmarshal([]byte(s.must("broadcasts", "preview", id, "--contact", "user1@example.org", "--json")), &pv); err != nil ||
			pv.Subject != "Hello User 1" || !strings.Contains(pv.Text, "pro plan") || !pv.Eligible {
			t.Errorf("preview --json = %+v, %v", pv, err)
		}
		s.refused("no contact has the email nobody@example.org", "broadcasts", "preview", id, "--contact", "nobody@example.org")
		// Not an address: said so, as contacts show does (InvalidArgument,
		// where preview had said NotFound).
		s.refused("invalid request: \"nobody\" is neither an email address", "broadcasts", "preview", id, "--contact", "nobody")
		s.refused("not a broadcast id", "broadcasts", "preview", "nope", "--contact", "user1@example.org")
		s.refused(`"contact" not set`, "broadcasts", "preview", id)

		// Test copies go out through the relay, outside the ledger.
		// The same mailbox twice (case aside) gets one copy.
		out = s.must("broadcasts", "test", id, "--to", "qa@example.net,user2@example.org,QA@example.net")
		if strings.Count(out, "sent test copy to ") != 2 {
			t.Errorf("test printed %q; want two copies sent", out)
		}
		got := s.sink.CountByRecipient()
		if got["qa@example.net"] != 1 || got["user2@example.org"] != 1 || s.sink.Count() != 2 {
			t.Errorf("sink after test: %v; want one copy each", got)
		}
		for _, m := range s.sink.Messages() {
			if m.MessageID == store.BareMessageID(message.MessageID(ulid.MustParse(id), cs[2].ID, "rangecast.test")) {
				t.Errorf("a test copy carries the contact's real Message-ID %s", m.MessageID)
			}
			if m.To[0] == "user2@example.org" && m.Subject != "Hello User 2" {
				t.Errorf("the copy to a contact is rendered with %q; want its own data", m.Subject)
			}
		}
		if u := s.usage.String(); !strings.Contains(u, "rangecast.test qa@example.net 0") || !strings.Contains(u, "rangecast.test user2@example.org 0") {
			t.Errorf("the governors were told %q; want both copies counted as sent", u)
		}
		if c, err := s.store.Counts(ctx, ulid.MustParse(id)); err != nil || c != (store.Counts{}) {
			t.Errorf("ledger after test copies: %+v, %v; want nothing", c, err)
		}
		var tr struct{ Results []struct{ To, Reply string } }
		if err := json.Unmarshal([]byte(s.must("broadcasts", "test", id, "--to", "qa@example.net", "--json")), &tr); err != nil ||
			len(tr.Results) != 1 || !strings.HasPrefix(tr.Results[0].Reply, "250") {
			t.Errorf("test --json: %+v, %v", tr, err)
		}
		s.refused("is not an email address", "broadcasts", "test", id, "--to", "not an address")

		// Update a draft; bad content is refused as at create.
		out = s.must("broadcasts", "update", id, "--subject", "Hello again {{.Name}}", "--throttle", "100000", "--json")
		var up struct {
			Content         struct{ Subject string }
			ThrottlePerHour string
		}
		if err := json.Unmarshal([]byte(out), &up); err != nil || up.Content.Subject != "Hello again {{.Name}}" || up.ThrottlePerHour != "100000" {
			t.Errorf("update --json printed %s (%v)", out, err)
		}
		s.refused("content:", "broadcasts", "update", id, "--subject", "Hello {{.Name")
		s.refused("nothing to change", "broadcasts", "update", id)
		s.refused(`segment "vip" does not exist`, "broadcasts", "update", id, "--segment", "vip")
		raw := s.must("broadcasts", "preview", id, "--contact", "user1@example.org", "--raw")

		// Schedule, shown in status and list; unschedule.
		s.refused("not in the future", "broadcasts", "schedule", id, "--at", "2001-01-01T00:00:00Z")
		s.refused("--tz", "broadcasts", "schedule", id, "--at", "2031-03-14 09:00")
		s.refused("not a time zone", "broadcasts", "schedule", id, "--at", "2031-03-14 09:00", "--tz", "Mars/Olympus")
		if out := s.must("broadcasts", "schedule", id, "--at", "2031-03-14 09:00", "--tz", "Europe/Paris"); !strings.Contains(out, "2031-03-14 08:00:00 UTC") {
			t.Errorf("schedule --tz printed %q; want 08:00 UTC", out)
		}
		if out := s.must("broadcasts", "status", id); !strings.Contains(out, "scheduled  starts by itself at 2031-03-14 08:00:00 UTC") {
			t.Errorf("status of a scheduled draft:\n%s", out)
		}
		if out := s.must("broadcasts", "list"); !strings.Contains(out, "2031-03-14 08:00:00 UTC") {
			t.Errorf("list does not show the schedule:\n%s", out)
		}
		var un struct{ ScheduledAt *string }
		if out := s.must("broadcasts", "unschedule", id, "--json"); json.Unmarshal([]byte(out), &un) != nil || un.ScheduledAt != nil {
			t.Errorf("unschedule --json still shows a time: %s", out)
		}
		if out := s.must("broadcasts", "unschedule", id); !strings.Contains(out, "was not scheduled") {
			t.Errorf("unschedule of a draft with no start time printed %q; want it to say it was not scheduled", out)
		}

		// Delete a draft; a started one is refused with what to do.
		other := s.create("Scratch")
		if out := s.must("broadcasts", "delete", other); !strings.HasPrefix(out, "deleted draft "+other) {
			t.Errorf("delete printed %q", out)
		}
		s.refused("not found", "broadcasts", "status", other)

		s.must("broadcasts", "start", id, "--json")
		s.waitState(id, "completed", time.Minute)
		s.refused("only a draft can be edited", "broadcasts", "update", id, "--name", "late")
		s.refused("kept as the record of who was sent what", "broadcasts", "delete", id)
		s.refused("only a draft can be scheduled", "broadcasts", "schedule", id, "--at", "2031-03-14T09:00:00Z")

		// What the worker sent user1 is what the preview showed, but for the
		// Date field.
		compared := 0
		for _, m := range s.sink.Messages() {
			if m.To[0] != "user1@example.org" {
				continue
			}
			compared++
			if stripDate(m.Raw) != stripDate([]byte(raw)) {
				t.Errorf("the preview differs from the message sent:\n%s\n---\n%s", raw, m.Raw)
			}
		}
		if compared != 1 {
			t.Errorf("user1 received %d messages; want the one broadcast message", compared)
		}

		// Webhook outcomes for the report.
		bid := ulid.MustParse(id)
		for i, typ := range []store.EventType{store.EventDelivered, store.EventOpened, store.EventClicked, store.EventBounced, store.EventComplained} {
			mid := store.BareMessageID(message.MessageID(bid, cs[i].ID, "rangecast.test"))
			if _, err := s.store.RecordEvent(ctx, store.DeliveryEvent{Provider: "test", EventID: fmt.Sprint(i), Type: typ, MessageID: mid, OccurredAt: time.Now()}, time.Now()); err != nil {
				t.Fatal(err)
			}
		}
		out = strings.Join(strings.Fields(s.must("broadcasts", "report", id)), " ")
		for _, want := range []string{"accepted by the SMTP server 12", "bounced after acceptance 1", "hard bounces, both 1 8.33% of tried", "refused at send (address gone) 0", "complained", "alarm at 2.00% once 1000 are counted", "opened (or clicked)"} {
			if !strings.Contains(out, want) {
				t.Errorf("report lacks %q:\n%s", want, out)
			}
		}
		var rep struct {
			Accepted, Delivered, Opened, Clicked, Bounced, Complained string
			BounceRate                                                float64
		}
		if err := json.Unmarshal([]byte(s.must("broadcasts", "report", id, "--json")), &rep); err != nil ||
			rep.Accepted != "12" || rep.Delivered != "4" || rep.Opened != "2" || rep.Clicked != "1" || rep.Bounced != "1" || rep.Complained != "1" {
			t.Errorf("report --json = %+v, %v", rep, err)
		}

		// Export: every ledger row once, as CSV.
		file := writeFile(t, "out.csv", "")
		s.must("broadcasts", "export", id, "--output", file)
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		recs, err := csv.NewReader(bytes.NewReader(data)).ReadAll()
		if err != nil || len(recs) != 13 || strings.Join(recs[0], ",") != strings.Join(csvHeader, ",") {
			t.Fatalf("export: %d records, %v:\n%s", len(recs), err, data)
		}
		seen := map[string]string{}
		for _, r := range recs[1:] {
			seen[r[0]] = r[1]
			if r[2] != "1" || r[4] == "" || r[8] != "false" {
				t.Errorf("export row %v: want one attempt, a claim time, no earlier attempt that may have been delivered", r)
			}
		}
		if again, err := csv.NewReader(strings.NewReader(s.must("broadcasts", "export", id, "--sent-again"))).ReadAll(); err != nil || len(again) != 1 {
			t.Errorf("export --sent-again of a broadcast sent once each: %v (%v); want the header alone", again, err)
		}
		if len(seen) != 12 || seen["user3@example.org"] != "bounced" || seen["user5@example.org"] != "sent" {
			t.Errorf("export statuses: %v", seen)
		}
		// --status keeps the rows in the statuses given.
		want := 0
		for _, st := range seen {
			if st == "bounced" || st == "complained" {
				want++
			}
		}
		some, err := csv.NewReader(strings.NewReader(s.must("broadcasts", "export", id, "--status", "bounced,complained"))).ReadAll()
		if err != nil || len(some) != want+1 || want == 0 {
			t.Errorf("export --status bounced,complained: %d records, %v; want the header and %d", len(some), err, want)
		}
		for _, r := range some[1:] {
			if r[1] != "bounced" && r[1] != "complained" {
				t.Errorf("export --status bounced,complained wrote %v", r)
			}
		}
		s.refused(`--status "nope": use claimed, deferred, sent`, "broadcasts", "export", id, "--status", "nope")
		// A failed export leaves the file it was to replace as it was,
		// and no partial file beside it.
		s.refused("not found", "broadcasts", "export", ulid.Make().String(), "--output", file)
		if after, err := os.ReadFile(file); err != nil || !bytes.Equal(after, data) {
			t.Errorf("a failed export changed %s: %d bytes, was %d (%v)", file, len(after), len(data), err)
		}
		if left, _ := filepath.Glob(filepath.Join(filepath.Dir(file), ".*partial")); len(left) > 0 {
			t.Errorf("a failed export left %v", left)
		}

		out = s.must("broadcasts", "retry", id)
		if !strings.HasPrefix(out, "nothing to retry") {
			t.Errorf("retry with nothing failed printed %q", out)
		}
		s.refused("not possible now", "broadcasts", "retry", s.create("Another draft"))
	})
}

// TestRetryCommand: a broadcast ends with some rows sent, some failed after
// their transient attempts ran out, one refused for good and one in doubt
// (marked unknown). retry sends the ones that gave up, nobody sent before
// gets a second copy, the permanent failure stays failed; only
// --include-unknown sends the unknown one. Counted at the SMTP capture.
func TestRetryCommand(t *testing.T) {
	t.Parallel()
	bothStores(t, func(t *testing.T, sqlite bool) {
		s := newOpsStack(t, sqlite, 2)
		ctx := context.Background()
		cs := s.importN(40)
		flaky := []string{cs[3].Email, cs[17].Email, cs[30].Email}
		for _, e := range flaky {
			s.flaky.Store(e, true)
		}
		dead := cs[9].Email // refused for good (550): never retried
		s.dead.Store(dead, true)
		id := s.create("Retry me")
		bid := ulid.MustParse(id)
		// A claim nobody holds any more, as a worker killed mid-send leaves
		// it: the reconciler finds its owner gone and, with no lookup and
		// the skip policy, marks it unknown.
		// Only a running broadcast takes claims: the draft runs for the
		// moment of the claim and is a draft again when started.
		ghost := cs[25]
		if _, err := s.store.SetState(ctx, bid, []store.State{store.StateDraft}, store.StateRunning, "", time.Now()); err != nil {
			t.Fatal(err)
		}
		if _, err := s.store.Claim(ctx, bid, "ghost/1", []store.Claim{{ContactID: ghost.ID, Email: ghost.Email,
			MessageID: message.MessageID(bid, ghost.ID, "rangecast.test")}}, time.Now()); err != nil {
			t.Fatal(err)
		}
		if _, err := s.store.SetState(ctx, bid, []store.State{store.StateRunning}, store.StateDraft, "", time.Now()); err != nil {
			t.Fatal(err)
		}
		s.must("broadcasts", "start", id)
		s.waitState(id, "completed", 2*time.Minute)
		c, err := s.store.Counts(ctx, bid)
		if err != nil || c.Sent != 35 || c.Failed != 4 || c.Unknown != 1 {
			t.Fatalf("before retry: %+v, %v; want 35 sent, 4 failed (3 after their attempts, 1 for good), 1 unknown", c, err)
		}
		if out := s.must("broadcasts", "report", id); !strings.Contains(out, "3 failed after their transient attempts ran out") {
			t.Errorf("report does not offer the retry:\n%s", out)
		}
		before := s.sink.CountByRecipient()
		for _, e := range flaky {
			if before[e] != 0 {
				t.Fatalf("%s received %d before the retry", e, before[e])
			}
			s.flaky.Delete(e) // the provider recovered
		}

		out := s.must("broadcasts", "retry", id, "--json")
		var rr struct{ Failed, Unknown string }
		if err := json.Unmarshal([]byte(out), &rr); err != nil || rr.Failed != "3" || rr.Unknown != "0" {
			t.Errorf("retry --json printed %s (%v)", out, err)
		}
		s.waitState(id, "completed", time.Minute)
		after := s.sink.CountByRecipient()
		for _, c := range cs {
			want := 1
			if c.Email == ghost.Email || c.Email == dead {
				want = 0 // unknown: not resent without the flag; refused for good
			}
			if after[c.Email] != want {
				t.Errorf("%s received %d copies after retry; want %d", c.Email, after[c.Email], want)
			}
		}

		if out := s.must("broadcasts", "retry", id, "--include-unknown"); !strings.Contains(out, "retrying 0 failed and 1 unknown") {
			t.Errorf("retry --include-unknown printed %q", out)
		}
		s.waitState(id, "completed", time.Minute)
		final := s.sink.CountByRecipient()
		for _, c := range cs {
			if want := map[bool]int{true: 0, false: 1}[c.Email == dead]; final[c.Email] != want {
				t.Errorf("%s received %d copies in all; want %d", c.Email, final[c.Email], want)
			}
		}
		if c, err := s.store.Counts(ctx, bid); err != nil || c.Sent != 39 || c.Failed != 1 || c.Unknown+c.Deferred+c.Claimed != 0 {
			t.Errorf("after both retries: %+v, %v; want 39 sent, the 550 still failed", c, err)
		}
	})
}
