package pageworker

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rangecast/rangecast/internal/bus"
	"github.com/rangecast/rangecast/internal/store"
	"github.com/rangecast/rangecast/internal/transport"
)

const givenUp = store.GaveUpPrefix + "24h0m0s of refusals: example.org has accepted nothing since 2031-03-13 09:00 UTC (breaker or hold)"

// TestGivenUpProviderFailsUntried: a provider the coordinator gave up on
// (bus.PageJob's GiveUp) has its held recipients failed with the reason and
// no attempt counted, on a page and on a sweep; a row in doubt (maybe
// delivered by a worker that died) is never failed but ends unknown; and a
// page carrying the provider's ramp step still sends it, so the attempts
// the step makes are real and only the recipients it never tried are given
// up.
func TestGivenUpProviderFailsUntried(t *testing.T) {
	t.Parallel()
	later := &transport.SendError{Code: 451, Enhanced: "4.3.0", Text: "try again later", Stage: transport.StageRcpt}
	for name, open := range bothStores {
		t.Run(name+"/page and sweep", func(t *testing.T) {
			t.Parallel()
			st := open(t)
			var sends atomic.Int32
			tr := &scripted{accepted: map[string]int{}, answer: func(string) error { sends.Add(1); return later }}
			f := newCopiesFixture(t, st, 12, tr)
			ctx := t.Context()
			now := f.clk.Now()
			// Two rows in doubt: claimed by a worker that died, released
			// by the reconciler to be sent again.
			inDoubt := f.contacts[:2]
			var claims []store.Claim
			var outcomes []store.Outcome
			for _, c := range inDoubt {
				claims = append(claims, store.Claim{ContactID: c.ID, Email: c.Email, MessageID: "<" + c.ID.String() + "@example.com>"})
				outcomes = append(outcomes, store.Outcome{ContactID: c.ID, Status: store.SendDeferred, RetryAt: now, Error: store.InDoubtResent})
			}
			if _, err := st.Claim(ctx, f.b.ID, "w/A", claims, now); err != nil {
				t.Fatal(err)
			}
			if err := st.RecordOutcomes(ctx, f.b.ID, "w/A", outcomes, now); err != nil {
				t.Fatal(err)
			}
			// A page while example.org is held, not given up: deferred.
			job := f.job()
			job.Defer = map[string]time.Time{"example.org": now.Add(time.Minute)}
			if _, err := f.w.RunPage(ctx, job, "w/1"); err != nil {
				t.Fatal(err)
			}
			// A page and a sweep once it is given up.
			job.GiveUp = map[string]string{"example.org": givenUp}
			if _, err := f.w.RunPage(ctx, job, "w/1"); err != nil {
				t.Fatal(err)
			}
			f.clk.Advance(time.Hour)
			sweep := bus.PageJob{Broadcast: f.b.ID.String(), Range: bus.SweepRange, Limit: 100, Sweep: true,
				Defer: job.Defer, GiveUp: job.GiveUp}
			sweep.Defer = map[string]time.Time{"example.org": f.clk.Now().Add(time.Minute)}
			if _, err := f.w.RunPage(ctx, sweep, "w/S"); err != nil {
				t.Fatal(err)
			}
			if n := sends.Load(); n != 0 {
				t.Fatalf("%d sends to a provider held, then given up", n)
			}
			for i, c := range f.contacts {
				row, err := st.GetSend(ctx, f.b.ID, c.ID)
				if err != nil {
					t.Fatal(err)
				}
				want, attempts := store.SendFailed, 0
				if i < len(inDoubt) {
					want, attempts = store.SendUnknown, 1
				}
				if row.Status != want || row.Attempt != attempts || !strings.Contains(row.Error, givenUp) {
					t.Fatalf("%s: %s, %d attempts (%s); want %s, %d attempts, given up", c.Email, row.Status, row.Attempt, row.Error, want, attempts)
				}
			}
		})
		t.Run(name+"/a page carrying the ramp step", func(t *testing.T) {
			t.Parallel()
			st := open(t)
			var sends atomic.Int32
			tr := &scripted{accepted: map[string]int{}, answer: func(string) error { sends.Add(1); return later }}
			f := newCopiesFixture(t, st, 30, tr)
			job := f.rampStepJob()
			job.GiveUp = map[string]string{"example.org": givenUp}
			rep, err := f.w.RunPage(t.Context(), job, "w/1")
			if err != nil {
				t.Fatal(err)
			}
			if pr := rep.Providers["example.org"]; !pr.StepEnded || pr.Transient != int(sends.Load()) || len(rep.Probed) != 1 {
				t.Fatalf("report %+v, probed %v after %d sends; want the step ended by its refusals, the probe echoed", pr, rep.Probed, sends.Load())
			}
			// The step's refusals are judged as the step's: the page goes
			// on and walks the range, giving the rest up, instead of
			// stopping as a transient failure that made no progress.
			if rep.Class != bus.ClassNone || !rep.Done || rep.Failed == 0 {
				t.Fatalf("report class %q, done %v, failed %d; want the page walked to the range's end", rep.Class, rep.Done, rep.Failed)
			}
			tried, gaveUp := 0, 0
			for _, c := range f.contacts {
				row, err := st.GetSend(t.Context(), f.b.ID, c.ID)
				if err != nil {
					t.Fatal(err)
				}
				switch {
				case row.Status == store.SendDeferred && row.Attempt == 1 && strings.HasPrefix(row.Error, "smtp rcpt: 451"):
					tried++
				case row.Status == store.SendFailed && row.Attempt == 0 && row.Error == givenUp:
					gaveUp++
				default:
					t.Fatalf("%s: %s, %d attempts (%s)", c.Email, row.Status, row.Attempt, row.Error)
				}
			}
			if tried != int(sends.Load()) || tried < 5 || gaveUp == 0 {
				t.Fatalf("%d sends, %d deferred after their attempt, %d given up untried; want the step's 5+ attempts kept, the rest given up", sends.Load(), tried, gaveUp)
			}
		})
	}
}
