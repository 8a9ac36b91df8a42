package pageworker

import (
	"fmt"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rangecast/rangecast/internal/bus"
	"github.com/rangecast/rangecast/internal/store"
	"github.com/rangecast/rangecast/internal/testenv"
	"github.com/rangecast/rangecast/internal/transport"
)

// TestRampStepKeepsToItsConnections is the worker's side of the connection
// ramp: a page that carries a half-open provider's step on 2 connections
// never has more than 2 of its sends in flight at once (the window has 8),
// and at the step's first refusal the provider's other recipients are
// deferred until its hold time without an attempt counted against them.
func TestRampStepKeepsToItsConnections(t *testing.T) {
	t.Parallel()
	st := testenv.SQLite(t)
	var mu sync.Mutex
	inflight, most, sends := 0, 0, 0
	tr := &scripted{accepted: map[string]int{}}
	f := newCopiesFixture(t, st, 30, tr)
	f.w.cfg.Concurrency = 8
	refused := f.contacts[11].Email
	tr.answer = func(to string) error {
		mu.Lock()
		inflight++
		sends++
		most = max(most, inflight)
		mu.Unlock()
		time.Sleep(3 * time.Millisecond)
		mu.Lock()
		inflight--
		mu.Unlock()
		if to == refused {
			return &transport.SendError{Code: 451, Enhanced: "4.3.0", Text: "try again later", Stage: transport.StageRcpt}
		}
		return nil
	}
	hold := f.clk.Now().Add(30 * time.Second)
	job := f.job()
	job.Defer = map[string]time.Time{"example.org": hold}
	job.Probe, job.Conns = []string{"example.org"}, map[string]int{"example.org": 2}
	rep, err := f.w.RunPage(t.Context(), job, "w/1")
	if err != nil {
		t.Fatal(err)
	}
	if most > 2 {
		t.Fatalf("%d sends in flight at once on a step of 2 connections", most)
	}
	if pr := rep.Providers["example.org"]; pr.Transient != 1 || pr.Sent != sends-1 || len(rep.Probed) != 1 {
		t.Fatalf("report: %+v, probed %v; want the refusal and %d sent, the probe echoed", pr, rep.Probed, sends-1)
	}
	if sends >= len(f.contacts) {
		t.Fatalf("all %d sent: the step did not end at its refusal", sends)
	}
	deferred := 0
	for _, c := range f.contacts {
		row, err := st.GetSend(t.Context(), f.b.ID, c.ID)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case row.Status == store.SendSent:
		case c.Email == refused:
			if row.Status != store.SendDeferred || row.Attempt != 1 {
				t.Fatalf("the refused recipient: %s attempt %d; want deferred after one attempt", row.Status, row.Attempt)
			}
		case row.Status == store.SendDeferred:
			deferred++
			if row.Attempt != 0 {
				t.Fatalf("%s: deferred with %d attempts; a recipient the step never tried has none", c.Email, row.Attempt)
			}
		default:
			t.Fatalf("%s: %s", c.Email, row.Status)
		}
	}
	if deferred == 0 {
		t.Fatal("no recipient was left for after the hold")
	}
	t.Logf("%d sends (at most %d at once), then %d deferred to the hold", sends, most, deferred)
}

// TestRampStepJudgedByTheBreakersRule: a step carried with the breaker's
// rule (5 refusals that are 20 % of its attempts) goes on past a plain
// deferral, so a provider's ordinary few percent do not end it, and ends at
// once on a reply that says more than "later" (a quota, the provider's own
// pause), reporting that it ended.
func TestRampStepJudgedByTheBreakersRule(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		refusal error
		ends    bool
	}{
		{"a 451 goes on", &transport.SendError{Code: 451, Enhanced: "4.3.0", Text: "try again later", Stage: transport.StageRcpt}, false},
		{"a 452 quota stops it", &transport.SendError{Code: 452, Enhanced: "4.5.3", Text: "too many recipients today", Stage: transport.StageRcpt}, true},
		{"Gmail's 421 4.7.28 stops it", &transport.SendError{Code: 421, Enhanced: "4.7.28", Text: "Our system has detected an unusual rate of unsolicited mail. To protect our users, this message has been temporarily rate limited.", Stage: transport.StageRcpt}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			st := testenv.SQLite(t)
			var mu sync.Mutex
			sends := 0
			tr := &scripted{accepted: map[string]int{}}
			f := newCopiesFixture(t, st, 30, tr)
			f.w.cfg.Concurrency = 4
			refused := f.contacts[3].Email
			tr.answer = func(to string) error {
				mu.Lock()
				sends++
				mu.Unlock()
				if to == refused {
					return c.refusal
				}
				return nil
			}
			rep, err := f.w.RunPage(t.Context(), f.rampStepJob(), "w/1")
			if err != nil {
				t.Fatal(err)
			}
			pr := rep.Providers["example.org"]
			if c.ends {
				if !pr.StepEnded || sends >= len(f.contacts) {
					t.Fatalf("%d of %d sent, report %+v; want the step ended at the refusal and reported ended", sends, len(f.contacts), pr)
				}
				return
			}
			if pr.StepEnded || sends != len(f.contacts) || pr.Sent != len(f.contacts)-1 || pr.Transient != 1 {
				t.Fatalf("%d of %d sent, report %+v; want every recipient tried, one deferral, the step not ended", sends, len(f.contacts), pr)
			}
		})
	}
}

// rampStepJob is the fixture's page carrying example.org's ramp step on one
// connection, judged by the breaker's rule (5 refusals that are 20 % of its
// attempts), with the provider held for 30 s once the step ends.
func (f *copiesFixture) rampStepJob() bus.PageJob {
	job := f.job()
	job.Defer = map[string]time.Time{"example.org": f.clk.Now().Add(30 * time.Second)}
	job.Probe, job.Conns = []string{"example.org"}, map[string]int{"example.org": 1}
	job.StepShare, job.StepFloor = 0.2, 5
	return job
}

// TestRelayOutageDuringARampStep: a provider's ramp step whose sends all
// fail at connect (the relay is down) neither ends the step nor counts a
// refusal against the provider: the relay's failure says nothing of it,
// and counted, a relay outage put every provider ramping back to open.
func TestRelayOutageDuringARampStep(t *testing.T) {
	t.Parallel()
	st := testenv.SQLite(t)
	down := &transport.SendError{Stage: transport.StageConnect, Err: &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}}
	tr := &scripted{accepted: map[string]int{}, answer: func(string) error { return down }}
	f := newCopiesFixture(t, st, 12, tr)
	f.w.cfg.Concurrency = 4
	job := f.job()
	job.Defer = map[string]time.Time{"example.org": f.clk.Now().Add(30 * time.Second)}
	job.Probe, job.Conns = []string{"example.org"}, map[string]int{"example.org": 1}
	rep, err := f.w.RunPage(t.Context(), job, "w/1")
	if err != nil {
		t.Fatal(err)
	}
	if pr := rep.Providers["example.org"]; pr.Transient != 0 || pr.StepEnded || pr.Sent != 0 {
		t.Fatalf("report: %+v; want no refusal counted and the step not ended", pr)
	}
	if rep.Sent != 0 || rep.Class != bus.ClassTransient {
		t.Fatalf("report: sent %d, class %q; want nobody sent and the page stopped", rep.Sent, rep.Class)
	}
}

// TestSlowRampStepHoldsNoOtherRetry: a sweep carries the ramp step of a
// provider that answers slowly (a tarpit: here, until the test lets it) on
// one connection, and half of its due rows are that provider's. The
// other providers' retries must all go out while the provider's first send
// is still unanswered: its other recipients are given back unsent, not
// queued behind its one connection, and while that connection is busy the
// sweep claims other rows (ClaimDue's leave). Once it answers, the sweep
// sends the provider's recipients one at a time as the step allows. While
// it waits, the only claim without an outcome is the send under way. Every
// recipient gets one copy, and the rows given back are charged no attempt.
// Before, each window waited for its share of the provider's queue: the
// tester's tarpit held every retry of the broadcast for hours.
func TestSlowRampStepHoldsNoOtherRetry(t *testing.T) {
	t.Parallel()
	for name, open := range bothStores {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			st := open(t)
			var emails []string
			for i := range 36 {
				if i%4 == 1 || i%4 == 2 { // two in each window of 4
					emails = append(emails, fmt.Sprintf("s%02d@slow.example", i))
				} else {
					emails = append(emails, fmt.Sprintf("p%02d@example.org", i))
				}
			}
			answer := make(chan struct{}) // closed: the slow provider answers
			var mu sync.Mutex
			slowNow, slowMost, others := 0, 0, 0
			tr := &scripted{accepted: map[string]int{}}
			tr.answer = func(to string) error {
				if !strings.HasSuffix(to, "@slow.example") {
					mu.Lock()
					others++
					mu.Unlock()
					return nil
				}
				mu.Lock()
				slowNow++
				slowMost = max(slowMost, slowNow)
				mu.Unlock()
				<-answer
				mu.Lock()
				slowNow--
				mu.Unlock()
				return nil
			}
			f := newCopiesFixtureOf(t, st, emails, tr)
			f.w.cfg.StragglerAfter = 5 * time.Millisecond
			ctx := t.Context()
			f.deferredDue(t)
			f.clk.Advance(time.Minute)
			sweep := bus.PageJob{Broadcast: f.b.ID.String(), Range: bus.SweepRange, Limit: 200, Sweep: true,
				Defer: map[string]time.Time{"slow.example": f.clk.Now().Add(30 * time.Second)},
				Probe: []string{"slow.example"}, Conns: map[string]int{"slow.example": 1}, StepShare: 0.2, StepFloor: 5}
			type result struct {
				rep bus.Report
				err error
			}
			done := make(chan result, 1)
			go func() {
				rep, err := f.w.RunPage(ctx, sweep, "w/S")
				done <- result{rep, err}
			}()
			for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(5 * time.Millisecond) {
				mu.Lock()
				n := others
				mu.Unlock()
				if n == 18 {
					break
				}
				if time.Now().After(deadline) {
					close(answer)
					t.Fatalf("%d of the 18 other recipients sent after 20 s while the slow provider's first send waited: its ramp step held them", n)
				}
			}
			// What a kill -9 now would leave in doubt: the one send into
			// the provider, not its recipients queued behind it (each
			// would be marked unknown though never sent).
			for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
				n, err := st.Counts(ctx, f.b.ID)
				if err != nil {
					close(answer)
					t.Fatal(err)
				}
				if n.Claimed <= 1 {
					break
				}
				if time.Now().After(deadline) {
					close(answer)
					t.Fatalf("%d claims without an outcome while one send is under way; want the provider's recipients that wait for its connection given back", n.Claimed)
				}
			}
			select {
			case r := <-done:
				t.Fatalf("the sweep ended (%+v, %v) before the slow provider answered; want it waiting to send the rest of the step", r.rep, r.err)
			default:
			}
			close(answer)
			r := <-done
			if r.err != nil {
				t.Fatal(r.err)
			}
			if slowMost > 1 {
				t.Fatalf("%d sends at once into a step of one connection", slowMost)
			}
			if r.rep.Sent != len(f.contacts) || r.rep.Class != "" {
				t.Fatalf("report %+v; want all %d sent, no stop", r.rep, len(f.contacts))
			}
			for _, c := range f.contacts {
				if n := tr.accepted[c.Email]; n != 1 {
					t.Errorf("%s received %d copies, want 1", c.Email, n)
				}
				row, err := st.GetSend(ctx, f.b.ID, c.ID)
				if err != nil || row.Status != store.SendSent || row.Attempt != 2 {
					t.Errorf("%s: row %s, attempt %d (%v); want sent on its second attempt (a row given back is charged none)", c.Email, row.Status, row.Attempt, err)
				}
			}
			if held := len(f.w.late); held != 0 {
				t.Errorf("%d straggler tokens still held after the sweep", held)
			}
		})
	}
}

// TestRampStepAloneGoesThroughItsConnections: a sweep whose due rows are
// all the ramping provider's (its hold just ran out, or was lifted) sends
// them all through the step's one connection, fast replies or not, so the
// step is judged on its whole share: a provider refusing three sends in
// four ends it (the breaker's rule, 5 refusals that are 20 % of the
// attempts), one taking everything gets them all. Rows given back while
// the connection was busy are claimed again in the same sweep, and no row
// is charged an attempt it did not get. (Counted against the sweep's
// limit, the given-back rows left 4 of 40 sent and the step judged on 4
// attempts: a reviewer's.)
func TestRampStepAloneGoesThroughItsConnections(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		refuse  func(n int) bool // the n-th send (from 0)
		ends    bool
		minSent int
	}{
		{"accepted", func(int) bool { return false }, false, 40},
		{"three in four refused", func(n int) bool { return n%4 != 0 }, true, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			st := testenv.SQLite(t)
			var mu sync.Mutex
			sends := 0
			tr := &scripted{accepted: map[string]int{}}
			tr.answer = func(string) error {
				mu.Lock()
				n := sends
				sends++
				mu.Unlock()
				time.Sleep(2 * time.Millisecond)
				if tc.refuse(n) {
					return &transport.SendError{Code: 451, Enhanced: "4.3.0", Text: "try again later", Stage: transport.StageRcpt}
				}
				return nil
			}
			f := newCopiesFixture(t, st, 40, tr)
			f.w.cfg.Concurrency = 10
			f.w.cfg.StragglerAfter = 5 * time.Millisecond
			f.deferredDue(t)
			f.clk.Advance(time.Minute)
			sweep := bus.PageJob{Broadcast: f.b.ID.String(), Range: bus.SweepRange, Limit: 40, Sweep: true,
				Defer: map[string]time.Time{"example.org": f.clk.Now().Add(30 * time.Second)},
				Probe: []string{"example.org"}, Conns: map[string]int{"example.org": 1}, StepShare: 0.2, StepFloor: 5}
			rep, err := f.w.RunPage(t.Context(), sweep, "w/S")
			if err != nil {
				t.Fatal(err)
			}
			pr := rep.Providers["example.org"]
			if pr.StepEnded != tc.ends || rep.Sent < tc.minSent {
				t.Fatalf("%d sends, report %+v, provider %+v; want the step ended %v and at least %d sent", sends, rep, pr, tc.ends, tc.minSent)
			}
			if tc.ends && pr.Transient < 5 {
				t.Fatalf("the step ended after %d refusals; want the breaker's 5", pr.Transient)
			}
			for _, c := range f.contacts {
				row, err := st.GetSend(t.Context(), f.b.ID, c.ID)
				if err != nil {
					t.Fatal(err)
				}
				want := 1 // the deferral before, and no attempt since
				if tr.accepted[c.Email] > 0 || row.Status == store.SendDeferred && strings.HasPrefix(row.Error, store.DeferredAgainPrefix) {
					want = 2
				}
				if row.Attempt != want || tr.accepted[c.Email] > 1 {
					t.Errorf("%s: %s, attempt %d, %d copies; want attempt %d and at most one copy", c.Email, row.Status, row.Attempt, tr.accepted[c.Email], want)
				}
			}
			t.Logf("%d sends: %d sent, %d refused, step ended %v", sends, rep.Sent, pr.Transient, pr.StepEnded)
		})
	}
}

// TestRetriesComingDueGoBesideASlowStep: a sweep whose only due rows are
// a tarpitting provider's, carried on one connection, waits for that
// connection; retries of other providers that come due meanwhile (here
// 30 s on) are claimed and sent while the slow send is still unanswered,
// not after it. (Waiting only for the connection, the sweep starved them
// for as long as the provider's queue took: a reviewer's.)
func TestRetriesComingDueGoBesideASlowStep(t *testing.T) {
	t.Parallel()
	st := testenv.SQLite(t)
	var emails []string
	for i := range 4 {
		emails = append(emails, fmt.Sprintf("s%02d@slow.example", i))
	}
	for i := range 6 {
		emails = append(emails, fmt.Sprintf("p%02d@example.org", i))
	}
	answer := make(chan struct{})
	var mu sync.Mutex
	others := 0
	tr := &scripted{accepted: map[string]int{}}
	tr.answer = func(to string) error {
		if strings.HasSuffix(to, "@slow.example") {
			<-answer
			return nil
		}
		mu.Lock()
		others++
		mu.Unlock()
		return nil
	}
	f := newCopiesFixtureOf(t, st, emails, tr)
	f.w.cfg.StragglerAfter = 5 * time.Millisecond
	f.deferredAt(t, func(c store.Contact) time.Duration {
		if strings.HasSuffix(c.Email, "@slow.example") {
			return 0
		}
		return 30 * time.Second // the others come due during the sweep
	})
	sweep := bus.PageJob{Broadcast: f.b.ID.String(), Range: bus.SweepRange, Limit: 100, Sweep: true,
		Defer: map[string]time.Time{"slow.example": f.clk.Now().Add(time.Minute)},
		Probe: []string{"slow.example"}, Conns: map[string]int{"slow.example": 1}, StepShare: 0.2, StepFloor: 5}
	done := make(chan error, 1)
	go func() {
		_, err := f.w.RunPage(t.Context(), sweep, "w/S")
		done <- err
	}()
	defer func() {
		select {
		case <-answer:
		default:
			close(answer)
		}
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	// The first slow send is out and the sweep waits; then the others
	// come due.
	time.Sleep(100 * time.Millisecond)
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		f.clk.Advance(time.Second) // the sweep's look for other retries, and their retry time
		mu.Lock()
		n := others
		mu.Unlock()
		if n == 6 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of the 6 retries come due were sent while the slow provider's send waited", n)
		}
	}
}

// TestRampStepHasItsTime: a sweep carrying a tarpitting provider's step
// claims for StepFor and then ends, its send in flight answered, the rest
// of the provider's rows left due for the next step (a step into a tarpit
// ran for an hour, and the coordinator, giving up on it after 3 minutes,
// sent the next step beside it: verifier).
func TestRampStepHasItsTime(t *testing.T) {
	t.Parallel()
	st := testenv.SQLite(t)
	emails := make([]string, 10)
	for i := range emails {
		emails[i] = fmt.Sprintf("s%02d@slow.example", i)
	}
	answered := make(chan struct{}, len(emails))
	release := make(chan struct{})
	tr := &scripted{accepted: map[string]int{}}
	tr.answer = func(string) error {
		<-release
		answered <- struct{}{}
		return nil
	}
	f := newCopiesFixtureOf(t, st, emails, tr)
	f.w.cfg.StragglerAfter = 5 * time.Millisecond
	f.deferredDue(t)
	sweep := bus.PageJob{Broadcast: f.b.ID.String(), Range: bus.SweepRange, Limit: 100, Sweep: true,
		Defer: map[string]time.Time{"slow.example": f.clk.Now().Add(time.Minute)},
		Probe: []string{"slow.example"}, Conns: map[string]int{"slow.example": 1}, StepShare: 0.2, StepFloor: 5}
	type result struct {
		rep bus.Report
		err error
	}
	done := make(chan result, 1)
	go func() {
		rep, err := f.w.RunPage(t.Context(), sweep, "w/S")
		done <- result{rep, err}
	}()
	time.Sleep(100 * time.Millisecond) // the first send is out, the sweep waits for the connection
	f.clk.Advance(StepFor)
	close(release)
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.rep.Sent == 0 || r.rep.Sent > 2 {
		t.Fatalf("report %+v; want the step ended after its time with the send in flight (1, or 2 if one began as the time ran out)", r.rep)
	}
	due := 0
	for _, c := range f.contacts {
		row, err := st.GetSend(t.Context(), f.b.ID, c.ID)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case row.Status == store.SendSent:
		case row.Status == store.SendDeferred && row.Attempt == 1:
			due++
		default:
			t.Errorf("%s: %s attempt %d; want sent, or left deferred with no attempt added", c.Email, row.Status, row.Attempt)
		}
	}
	if due+r.rep.Sent != len(emails) {
		t.Fatalf("%d sent and %d left due of %d", r.rep.Sent, due, len(emails))
	}
}
