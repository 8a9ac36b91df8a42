package pageworker

import (
	"net"
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
