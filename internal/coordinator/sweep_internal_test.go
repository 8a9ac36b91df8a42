package coordinator

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/rangecast/rangecast/internal/bus"
	"github.com/rangecast/rangecast/internal/clock"
	"github.com/rangecast/rangecast/internal/governor"
	"github.com/rangecast/rangecast/internal/ranges"
	"github.com/rangecast/rangecast/internal/store"
	"github.com/rangecast/rangecast/internal/store/sqlite"
)

// holdingPacer grants everything and holds one provider while hold is
// set, handing its ramp step to the sweep it answers while ramp is set.
type holdingPacer struct{ hold, ramp bool }

func (p *holdingPacer) Grant(_ time.Time, _ string, n int) (int, governor.Refusal) {
	return n, governor.Refusal{}
}
func (p *holdingPacer) Settle(string, int, int)               {}
func (p *holdingPacer) Observe(time.Time, string, bus.Report) {}
func (p *holdingPacer) Holds(now time.Time, _ string, _ bool, _ time.Time) ProviderHolds {
	h := ProviderHolds{}
	if p.hold {
		h.Defer = map[string]time.Time{"google": now.Add(10 * time.Minute)}
	}
	if p.ramp {
		h.Probe, h.Conns = []string{"google"}, map[string]int{"google": 2}
	}
	return h
}

// jobsKept is a PagePublisher that keeps what it is given.
type jobsKept struct{ jobs []bus.PageJob }

func (p *jobsKept) PublishPage(_ context.Context, job bus.PageJob, _ time.Time) error {
	p.jobs = append(p.jobs, job)
	return nil
}

// TestSweepsGrowWithTheBacklog: once every range is walked, a backlog of due
// deferred rows is swept by several sweeps at once, doubling while each
// comes back full, each under a dedupe id of its own, and no more than the
// backlog fills; a sweep that comes back short of its limit brings it back
// to one. One sweep at a time retried a large backlog at one window's pace
// however many workers ran.
func TestSweepsGrowWithTheBacklog(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	clk := clock.NewFake(time.Date(2031, 3, 14, 9, 0, 0, 0, time.UTC))
	const pageLimit = 4
	a, pages := backlogActor(t, clk, 100, pageLimit, func(int) time.Time { return clk.Now() })
	c, b := a.c, a.b
	full := func(j bus.PageJob) bus.Report {
		return bus.Report{Broadcast: j.Broadcast, Range: bus.SweepRange, Sweep: true, Done: true, Limit: j.Limit, Issue: j.Issue, Claimed: j.Limit, Sent: j.Limit}
	}
	sweep := func() []bus.PageJob {
		before := len(pages.jobs)
		clk.Advance(time.Millisecond)
		a.sweep(ctx)
		return pages.jobs[before:]
	}
	if got := sweep(); len(got) != 1 {
		t.Fatalf("first look: %d sweeps out, want 1", len(got))
	}
	// Each full report doubles the sweeps out, up to the ranges' count.
	issues := map[int]bool{pages.jobs[0].Issue: true}
	for round, want := range []int{2, 4, 8, 16, 25, 25} {
		out := append([]bus.PageJob(nil), pages.jobs[len(pages.jobs)-len(a.sweeps):]...)
		for _, j := range out {
			if err := a.applySweep(ctx, full(j)); err != nil {
				t.Fatal(err)
			}
		}
		if len(a.sweeps) != 0 {
			t.Fatalf("round %d: %d sweeps still out after every one reported", round, len(a.sweeps))
		}
		got := sweep()
		// The backlog is 100 rows, 4 a sweep: 25 sweeps take it all.
		if len(got) != min(want, len(a.recs)) {
			t.Fatalf("round %d: %d sweeps out at once, want %d (ranges %d)", round, len(got), min(want, len(a.recs)), len(a.recs))
		}
		for _, j := range got {
			if issues[j.Issue] {
				t.Fatalf("round %d: two sweeps under one dedupe id %d", round, j.Issue)
			}
			issues[j.Issue] = true
		}
	}
	// One that comes back short: the rows due are taken, back to one.
	last := a.sweeps[len(a.sweeps)-1]
	if err := a.applySweep(ctx, bus.Report{Broadcast: b.ID.String(), Range: bus.SweepRange, Sweep: true, Done: true, Limit: last.limit, Issue: last.issue, Claimed: 1, Sent: 1}); err != nil {
		t.Fatal(err)
	}
	if a.sweepsWanted != 1 || len(a.sweeps) != 24 || a.sweeps[len(a.sweeps)-1].issue == last.issue {
		t.Fatalf("after a short sweep: wanted %d, out %d; want 1 wanted, the reported one settled", a.sweepsWanted, len(a.sweeps))
	}

	// A sweep stopped by a window half refused that accepted, all told, as
	// many as were refused is a tail of deferring recipients: half as many
	// sweeps, and no pause. One that sent fewer, or nobody: back to one,
	// after a pause.
	stop := func(sent, refused int) bus.Report {
		return bus.Report{Broadcast: b.ID.String(), Range: bus.SweepRange, Sweep: true, Done: true, Limit: 200, Issue: -1,
			Class: bus.ClassTransient, Error: "450 4.7.1 greylisted", Claimed: sent + refused, Sent: sent, Reached: sent + refused,
			Providers: map[string]bus.ProviderResult{"example.org": {Sent: sent, Transient: refused}}}
	}
	for _, c := range []struct {
		sent, refused, wanted int
		pause                 bool
	}{
		{sent: 40, refused: 24, wanted: 8},             // a greylisting tail: half as many, no pause
		{sent: 8, refused: 8, wanted: 8},               // half of it refused, all told
		{sent: 1, refused: 49, wanted: 1, pause: true}, // a relay taking a trickle
		{sent: 0, refused: 16, wanted: 1, pause: true}, // nobody sent
		{sent: 10, refused: 0, wanted: 1, pause: true}, // stopped by no refusal: the store
	} {
		a.sweepsWanted, a.nextSweep = 16, clk.Now()
		if err := a.applySweep(ctx, stop(c.sent, c.refused)); err != nil {
			t.Fatal(err)
		}
		if a.sweepsWanted != c.wanted || a.nextSweep.After(clk.Now()) != c.pause {
			t.Fatalf("a sweep stopped with %d sent and %d refused: wanted %d, next sweep in %v; want %d, paused %v",
				c.sent, c.refused, a.sweepsWanted, a.nextSweep.Sub(clk.Now()), c.wanted, c.pause)
		}
	}
	a.nextSweep = clk.Now()

	// While a provider's ramp is judged a step at a time by the sweep that
	// carries it, one sweep at a time: one beside it would hold that
	// provider's recipients for the breaker's whole open time. A provider
	// merely held holds no sweep back.
	endAll := func() {
		t.Helper()
		for len(a.sweeps) > 0 {
			s := a.sweeps[0]
			if err := a.applySweep(ctx, bus.Report{Broadcast: b.ID.String(), Range: bus.SweepRange, Sweep: true, Done: true, Limit: s.limit, Issue: s.issue, Claimed: s.limit, Sent: s.limit}); err != nil {
				t.Fatal(err)
			}
		}
	}
	endAll()
	pacer := &holdingPacer{hold: true}
	c.mu.Lock()
	c.pace = pacer
	c.mu.Unlock()
	if got := sweep(); len(got) < 2 || len(got[0].Defer) != 1 {
		t.Fatalf("held: %d sweeps out at once, want several, each holding google", len(got))
	}
	endAll()
	pacer.ramp = true
	if got := sweep(); len(got) != 1 || len(got[0].Probe) != 1 {
		t.Fatalf("ramping: %d sweeps out at once (%+v), want 1 carrying the step", len(got), got)
	}
	for range 3 {
		j := pages.jobs[len(pages.jobs)-1]
		if err := a.applySweep(ctx, full(j)); err != nil {
			t.Fatal(err)
		}
		if got := sweep(); len(got) != 1 {
			t.Fatalf("ramping, after a full sweep: %d sweeps out at once, want 1", len(got))
		}
	}
	// Ramped up: the next sweep carries no step, and more go beside it.
	pacer.hold, pacer.ramp = false, false
	j := pages.jobs[len(pages.jobs)-1]
	if err := a.applySweep(ctx, full(j)); err != nil {
		t.Fatal(err)
	}
	if got := sweep(); len(got) < 2 {
		t.Fatalf("ramped up: %d sweeps out at once, want several", len(got))
	}
	// While a range is still walked, one sweep at a time, however full:
	// retries do not take workers from first sends.
	endAll()
	a.recs[3].Done = false
	if got := sweep(); len(got) != 1 {
		t.Fatalf("a range still walked: %d sweeps out at once, want 1", len(got))
	}
	endAll()
	if got := sweep(); len(got) != 1 {
		t.Fatalf("a range still walked, after full sweeps: %d sweeps out at once, want 1", len(got))
	}
	a.recs[3].Done = true
	endAll()
	if got := sweep(); len(got) < 2 {
		t.Fatalf("walked: %d sweeps out at once, want several", len(got))
	}
	// A report of a sweep not out (given up on at Redispatch, reported
	// twice, another leader's) ends none of those out.
	out := len(a.sweeps)
	stale := full(pages.jobs[0])
	if err := a.applySweep(ctx, stale); err != nil {
		t.Fatal(err)
	}
	if len(a.sweeps) != out {
		t.Fatalf("a stale sweep's report ended one of the %d out: %d left", out, len(a.sweeps))
	}
}

// backlogActor is the actor of a broadcast of n contacts whose every range
// is walked and every contact deferred (by a greylisting provider) until
// due(i), its coordinator publishing pages of pageLimit to pages.
func backlogActor(t *testing.T, clk *clock.Fake, n, pageLimit int, due func(i int) time.Time) (*actor, *jobsKept) {
	t.Helper()
	ctx := t.Context()
	st, err := sqlite.Open(ctx, ":memory:")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	cs := make([]store.Contact, n)
	for i := range cs {
		cs[i] = store.Contact{ID: ulid.Make(), Email: fmt.Sprintf("p%03d@example.org", i), Name: "P", Subscribed: true}
	}
	if _, err := st.ImportContacts(ctx, cs, clk.Now()); err != nil {
		t.Fatal(err)
	}
	b, _, err := st.CreateBroadcast(ctx, store.Broadcast{ID: ulid.Make(), Name: "backlog", CreatedAt: clk.Now(),
		Content: store.Content{FromAddress: "news@example.com", Subject: "Hi", HTML: "<p>Hi</p>"}})
	if err != nil {
		t.Fatal(err)
	}
	if b, err = st.AcceptBroadcast(ctx, b.ID, clk.Now()); err != nil {
		t.Fatal(err)
	}
	claims := make([]store.Claim, n)
	outcomes := make([]store.Outcome, n)
	for i, c := range cs {
		claims[i] = store.Claim{ContactID: c.ID, Email: c.Email, MessageID: "<" + c.ID.String() + "@example.com>"}
		outcomes[i] = store.Outcome{ContactID: c.ID, Status: store.SendDeferred, RetryAt: due(i), Error: "450 4.7.1 greylisted"}
	}
	if _, err := st.Claim(ctx, b.ID, "w/1", claims, clk.Now()); err != nil {
		t.Fatal(err)
	}
	if err := st.RecordOutcomes(ctx, b.ID, "w/1", outcomes, clk.Now()); err != nil {
		t.Fatal(err)
	}
	pages := &jobsKept{}
	c := New(Config{Store: st, Bus: &bus.Bus{Broadcasts: newFakeKV(), Workers: newFakeKV()}, Pages: pages, Clock: clk,
		Log: slog.New(slog.DiscardHandler), PageLimit: pageLimit, Tick: time.Second})
	a, err := newActor(ctx, c, b)
	if err != nil {
		t.Fatal(err)
	}
	for i := range a.recs {
		a.recs[i].Done = true // every range walked: only sweeps are left
	}
	return a, pages
}

// TestSweepsOnlyForDueRows: with many sweeps wanted, a backlog of which
// only a few rows are due sends the sweeps those few fill, not one per
// page of the whole backlog: the rest would come back empty, each a job
// and a report for nothing, and bring the sweeps wanted back to one.
func TestSweepsOnlyForDueRows(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	clk := clock.NewFake(time.Date(2031, 3, 14, 9, 0, 0, 0, time.UTC))
	later := clk.Now().Add(time.Hour)
	a, pages := backlogActor(t, clk, 100, 4, func(i int) time.Time {
		if i < 6 {
			return clk.Now() // 6 due now: two sweeps of 4
		}
		return later
	})
	a.sweepsWanted = 16
	clk.Advance(time.Millisecond)
	a.sweep(ctx)
	if len(pages.jobs) != 2 {
		t.Fatalf("%d sweeps out for 6 due rows of 100 deferred, 4 a sweep; want 2", len(pages.jobs))
	}
}

// TestThrottledSweepsWaitForAWorthwhileLimit: under a broadcast's throttle a
// sweep waits, as a page does (minPage), until the throttle has given back
// what it refills in a tick; one sweep per token or two cost a job and a
// report per message.
func TestThrottledSweepsWaitForAWorthwhileLimit(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	clk := clock.NewFake(time.Date(2031, 3, 14, 9, 0, 0, 0, time.UTC))
	a, pages := backlogActor(t, clk, 100, 40, func(int) time.Time { return clk.Now() })
	a.b.ThrottlePerHour = 36_000 // 10 a second: a tick (1 s) refills 10
	a.throttle = a.newThrottle(clk.Now())
	if floor := a.minPage(); floor != 10 {
		t.Fatalf("minPage %d; the test wants 10", floor)
	}
	a.throttle.Take(clk.Now(), 1_000) // spent
	clk.Advance(500 * time.Millisecond)
	a.sweep(ctx)
	if len(pages.jobs) != 0 {
		t.Fatalf("a sweep of %d out with 5 tokens back; want none before 10", pages.jobs[0].Limit)
	}
	clk.Advance(600 * time.Millisecond)
	a.sweep(ctx)
	if len(pages.jobs) != 1 || pages.jobs[0].Limit < 10 {
		t.Fatalf("sweeps out with 11 tokens back: %+v; want one of at least 10", pages.jobs)
	}
}

// TestStatusNamesWhatRefusedTheRetries: once every range is walked only
// sweeps run; one that sent nobody (a relay that is down) leaves its error
// in the status's waiting line, which said only "due now".
func TestStatusNamesWhatRefusedTheRetries(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	clk := clock.NewFake(time.Date(2031, 3, 14, 9, 0, 0, 0, time.UTC))
	a, pages := backlogActor(t, clk, 20, 8, func(int) time.Time { return clk.Now() })
	for i := range a.recs {
		if err := a.write(ctx, i, a.recs[i]); err != nil {
			t.Fatal(err)
		}
	}
	clk.Advance(time.Millisecond)
	a.sweep(ctx)
	if len(pages.jobs) != 1 {
		t.Fatalf("%d sweeps out; want 1", len(pages.jobs))
	}
	down := "smtp connect: dial tcp 127.0.0.1:2727: connect: connection refused"
	j := pages.jobs[0]
	if err := a.applySweep(ctx, bus.Report{Broadcast: j.Broadcast, Range: bus.SweepRange, Sweep: true, Done: true, Limit: j.Limit, Issue: j.Issue,
		Claimed: 8, Deferred: 8, Unreached: 8, Class: bus.ClassTransient, Error: down}); err != nil {
		t.Fatal(err)
	}
	a.nextSweep = clk.Now().Add(time.Minute) // past the look below
	if a.finish(ctx) {
		t.Fatal("completed with 20 deferred")
	}
	if w := a.waiting(); !strings.Contains(w, "connection refused") {
		t.Fatalf("waiting for %q; want the last retry's refusal named", w)
	}
}

// walkingActor is a backlog actor (rows deferred for an hour) whose
// ranges are all still being walked.
func walkingActor(t *testing.T, clk *clock.Fake) *actor {
	a, _ := backlogActor(t, clk, 20, 8, func(int) time.Time { return clk.Now().Add(time.Hour) })
	for i := range a.recs {
		a.recs[i].Done = false
	}
	return a
}

// TestRangesGoAgainWhenTheRelayTakesMail: a range backing off after pages
// refused at connect (the relay down) goes again as soon as any page sends
// after that run of refusals, not at its backoff, which after a minute's
// outage had grown to a minute or more.
func TestRangesGoAgainWhenTheRelayTakesMail(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	clk := clock.NewFake(time.Date(2031, 3, 14, 9, 0, 0, 0, time.UTC))
	a := walkingActor(t, clk)
	// Its window's rows deferred, the cursor past them, nobody sent.
	past, _ := ranges.Next(ulid.MustParseStrict(a.recs[0].Next))
	down := bus.Report{Broadcast: a.id.String(), Range: 0, From: a.recs[0].Next, Next: past.String(), Class: bus.ClassTransient,
		Claimed: 4, Deferred: 4, Unreached: 4, Error: "smtp connect: dial tcp 127.0.0.1:2727: connect: connection refused"}
	if err := a.applyReport(ctx, down, clk.Now()); err != nil {
		t.Fatal(err)
	}
	if !a.notBefore[0].After(clk.Now()) {
		t.Fatalf("range 0 after a refused page: next at %v; want a backoff", a.notBefore[0])
	}
	// Status says so at once, whatever else it waits for (tester: it
	// named a provider's share of deferrals for minutes).
	a.dispatch(ctx)
	if w := a.waiting(); !strings.Contains(w, "every page since 09:00:00 UTC sent nothing: smtp connect") || !strings.Contains(w, "1 of 8") {
		t.Errorf("waiting for %q; want the run of refused pages named first", w)
	}
	next, _ := ranges.Next(ulid.MustParseStrict(a.recs[1].Next))
	sent := bus.Report{Broadcast: a.id.String(), Range: 1, From: a.recs[1].Next, Next: next.String(), Claimed: 4, Sent: 4, Reached: 4}
	if err := a.applyReport(ctx, sent, clk.Now()); err != nil {
		t.Fatal(err)
	}
	if a.notBefore[0].After(clk.Now()) {
		t.Fatalf("range 0 still backing off until %v after another page sent", a.notBefore[0])
	}
	a.dispatch(ctx)
	if w := a.waiting(); strings.Contains(w, "sent nothing") {
		t.Errorf("waiting for %q after a page sent; want the refusals no longer named", w)
	}
}

// domainPacer is a Pacer of one real governor.Domain, nothing held.
type domainPacer struct{ d *governor.Domain }

func (p *domainPacer) Grant(now time.Time, _ string, n int) (int, governor.Refusal) {
	return p.d.Grant(now, n)
}
func (p *domainPacer) Settle(_ string, granted, sent int)    { p.d.Settle(granted, sent) }
func (p *domainPacer) Observe(time.Time, string, bus.Report) {}
func (p *domainPacer) Holds(time.Time, string, bool, time.Time) ProviderHolds {
	return ProviderHolds{}
}

// TestSweepsAndPagesShareTheDomainRate: while the ranges are walked under
// a binding domain rate (50/s) with deferred rows due all along, both the
// walk's pages and the sweeps (retries, and the breakers' probes, which
// ride on sweeps) get out; once the walk is over, sweeps go on alone.
// Found by review: with pages waiting for a worthwhile page's tokens, a
// sweep asking for a whole page got out 1-9 times in 10 minutes (it
// looked every 5 s and the pages had taken the tokens); asking for the
// rows due, it took the few tokens the pages were gathering and the pages
// got out once in 10 minutes. Sweeps now ask for what is due and give way
// to waiting pages after each grant.
func TestSweepsAndPagesShareTheDomainRate(t *testing.T) {
	for _, c := range []struct {
		latency, perMessage time.Duration
		throttled           bool // by the broadcast's throttle (50/s) instead of the domain's rate
	}{{0, 0, false}, {200 * time.Millisecond, 5 * time.Millisecond, false}, {time.Second, 20 * time.Millisecond, false},
		{0, 0, true}, {200 * time.Millisecond, 5 * time.Millisecond, true}} {
		t.Run(fmt.Sprintf("%v+%v a message, throttled %v", c.latency, c.perMessage, c.throttled), func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			clk := clock.NewFake(time.Date(2031, 3, 14, 9, 0, 0, 0, time.UTC))
			a, jobs := backlogActor(t, clk, 100, 192, func(int) time.Time { return clk.Now() })
			a.c.cfg.Tick = 5 * time.Second
			a.c.cfg.Redispatch = time.Hour
			for i := range a.recs {
				a.recs[i].Done = false
			}
			if c.throttled {
				a.b.ThrottlePerHour = 50 * 3600
				a.throttle = a.newThrottle(clk.Now())
			} else {
				a.c.pace = &domainPacer{governor.NewDomain("example.com", governor.Limits{RatePerSecond: 50, Burst: 200}, nil, clk.Now())}
			}
			type running struct {
				until time.Time
				job   bus.PageJob
			}
			var out []running
			// run plays the actor's loop for d: reports come back after
			// the latency, the actor sweeps and dispatches, and wakes as
			// its run loop would.
			run := func(d time.Duration) (pages, sweeps int) {
				for end := clk.Now().Add(d); clk.Now().Before(end); {
					var still []running
					for _, r := range out {
						if r.until.After(clk.Now()) {
							still = append(still, r)
							continue
						}
						rep := bus.Report{Broadcast: r.job.Broadcast, Range: r.job.Range, Limit: r.job.Limit, Issue: r.job.Issue, Claimed: r.job.Limit, Sent: r.job.Limit}
						if r.job.Sweep {
							rep.Sweep = true
							a.applySweep(ctx, rep)
						} else {
							a.settle(r.job.Limit, rep)
							delete(a.outstanding, r.job.Range)
						}
					}
					out = still
					before := len(jobs.jobs)
					a.sweep(ctx)
					a.dispatch(ctx)
					for _, j := range jobs.jobs[before:] {
						if j.Sweep {
							sweeps++
						} else {
							pages++
						}
						out = append(out, running{clk.Now().Add(c.latency + time.Duration(j.Limit)*c.perMessage), j})
					}
					wake := a.c.cfg.Tick
					for _, r := range out {
						wake = min(wake, max(r.until.Sub(clk.Now()), time.Millisecond))
					}
					if a.throttleWait > 0 {
						wake = min(wake, a.throttleWait)
					}
					if len(a.sweeps) < a.sweepRoom() && !a.nextSweep.IsZero() {
						wake = min(wake, max(a.nextSweep.Sub(clk.Now()), 10*time.Millisecond))
					}
					clk.Advance(wake)
				}
				return pages, sweeps
			}
			pages, sweeps := run(10 * time.Minute)
			t.Logf("walk, 10 min at 50/s: %d pages, %d sweeps", pages, sweeps)
			if pages < 100 || sweeps < 100 {
				t.Errorf("10 minutes of a rate-bound walk with rows due: %d pages, %d sweeps; want both well over 100", pages, sweeps)
			}
			for i := range a.recs {
				a.recs[i].Done = true
			}
			pages, sweeps = run(time.Minute)
			t.Logf("after the walk, 1 min: %d pages, %d sweeps", pages, sweeps)
			// One out at a time (100 due rows fill one), each back after
			// its latency: at the slowest, 3 s a sweep and more.
			if sweeps < 10 {
				t.Errorf("a minute after the walk with rows due: %d sweeps; want them to go on alone, one every few seconds at least", sweeps)
			}
		})
	}
}

// TestResumeStartsTheRangesCountsAfresh: an operator's resume from paused
// writes every range's count of fruitless resumptions back to zero in KV,
// so a leader taking over after it (which knows nothing of this one's
// memory) does not count the resumptions from before it and fail the
// broadcast at a range's first refused page.
func TestResumeStartsTheRangesCountsAfresh(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	clk := clock.NewFake(time.Date(2031, 3, 14, 9, 0, 0, 0, time.UTC))
	a := walkingActor(t, clk)
	for i := range a.recs {
		a.recs[i].Fruitless = 7
		if err := a.write(ctx, i, a.recs[i]); err != nil {
			t.Fatal(err)
		}
	}
	paused, running := a.b, a.b
	paused.State, running.State = store.StatePaused, store.StateRunning
	a.adopt(paused)
	a.adopt(running)
	a.zeroFruitless(ctx)
	recs, _, err := a.c.rangeRecords(ctx, a.b)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if r.Fruitless != 0 {
			t.Fatalf("range %d's count after the resume is %d in KV; want 0", r.Index, r.Fruitless)
		}
	}
	if a.forgetFruitless {
		t.Error("still to be written after every range was")
	}
}
