package pageworker

import (
	"sync"
	"testing"
	"time"

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
