package maintenance_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/rangecast/rangecast/internal/maintenance"
	"github.com/rangecast/rangecast/internal/store"
	"github.com/rangecast/rangecast/internal/testenv"
)

// TestAlarmValidate: a rate is a share below 1 (one of 1 or more could
// never be passed, turning the alarm off without saying so), negative to
// turn it off, or zero for the default.
func TestAlarmValidate(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		a    maintenance.AlarmConfig
		want string
	}{
		{maintenance.AlarmConfig{}, ""},
		{maintenance.AlarmConfig{BounceRate: -1, ComplaintRate: -1}, ""},
		{maintenance.AlarmConfig{BounceRate: 0.5, ComplaintRate: 0.0001}, ""},
		{maintenance.AlarmConfig{BounceRate: 5}, "--bounce-alarm (RANGECAST_BOUNCE_ALARM) is 5; give a share of messages tried (accepted, or refused for good at send) above 0 and below 1 (0.02 is 2 %)"},
		{maintenance.AlarmConfig{BounceRate: 1}, "--bounce-alarm (RANGECAST_BOUNCE_ALARM) is 1"},
		{maintenance.AlarmConfig{BounceRate: math.NaN()}, "--bounce-alarm (RANGECAST_BOUNCE_ALARM) is NaN"},
		{maintenance.AlarmConfig{ComplaintRate: 2}, "--complaint-alarm (RANGECAST_COMPLAINT_ALARM) is 2; give a share of delivered messages above 0 and below 1 (0.001 is 0.1 %)"},
		{maintenance.AlarmConfig{ComplaintRate: math.Inf(-1)}, "--complaint-alarm (RANGECAST_COMPLAINT_ALARM) is -Inf"},
		{maintenance.AlarmConfig{MinSample: -1}, "--alarm-min-sample is -1"},
	} {
		err := c.a.Validate()
		if (c.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.want)) {
			t.Errorf("Validate(%+v) = %v, want %q", c.a, err, c.want)
		}
	}
}

func TestAlarmsCheck(t *testing.T) {
	t.Parallel()
	def := maintenance.AlarmConfig{}
	small := maintenance.AlarmConfig{MinSample: 100}
	off := maintenance.AlarmConfig{BounceRate: -1, ComplaintRate: -1, MinSample: 1}
	rep := func(accepted, delivered, bounced, complained int64) store.Reputation {
		return store.Reputation{Accepted: accepted, Delivered: delivered, Bounced: bounced, Complained: complained}
	}
	refused := func(r store.Reputation, n int64) store.Reputation { r.Refused = n; return r }
	cases := []struct {
		name   string
		a      maintenance.AlarmConfig
		r      store.Reputation
		since  store.Reputation
		reason string // substring; "" means carry on
	}{
		{"clean", def, rep(100000, 90000, 100, 10), store.Reputation{}, ""},
		{"bounces at exactly 2%", def, rep(1000, 900, 20, 0), store.Reputation{}, ""},
		{"bounces past 2%", def, rep(1000, 900, 21, 0), store.Reputation{}, "hard-bounce rate 2.1% (21 of 1000 accepted) passed 2%"},
		{"bounces past 2% below the sample", def, rep(999, 900, 100, 0), store.Reputation{}, ""},
		{"complaints at 0.1%", def, rep(5000, 3000, 0, 3), store.Reputation{}, ""},
		{"complaints past 0.1%", def, rep(5000, 3000, 0, 4), store.Reputation{}, "complaint rate 0.13% (4 of 3000 delivered) passed 0.1%"},
		{"complaints without enough deliveries", def, rep(5000, 999, 0, 500), store.Reputation{}, ""},
		{"configured sample", small, rep(100, 0, 3, 0), store.Reputation{}, "hard-bounce rate 3%"},
		{"off", off, rep(100, 100, 100, 100), store.Reputation{}, ""},
		// Resumed after an alarm: only what happened since counts.
		{"resumed, nothing new", small, rep(150, 0, 30, 0), rep(100, 0, 30, 0), ""},
		{"resumed, clean since", small, rep(300, 0, 31, 0), rep(100, 0, 30, 0), ""},
		{"resumed, bad again", small, rep(300, 0, 36, 0), rep(100, 0, 30, 0), "hard-bounce rate 3% (6 of 200 accepted)"},
		// Refused for good at send (550 5.1.1 from the recipient's own
		// server): bounces that are never accepted. They count among the
		// bounces and among the attempts, and the sample is of attempts.
		{"refused at send only", def, refused(rep(0, 0, 0, 0), 1000), store.Reputation{}, "hard-bounce rate 100% (1000 of 1000 attempts: 1000 refused at send, 0 bounced after 0 accepted)"},
		{"refused at send, the sample reached with them", def, refused(rep(960, 0, 0, 0), 40), store.Reputation{}, "hard-bounce rate 4% (40 of 1000 attempts: 40 refused at send, 0 bounced after 960 accepted)"},
		{"refused and reported together", def, refused(rep(980, 0, 10, 0), 20), store.Reputation{}, "hard-bounce rate 3% (30 of 1000 attempts: 20 refused at send, 10 bounced after 980 accepted)"},
		{"refused at send at exactly 2%", def, refused(rep(980, 0, 0, 0), 20), store.Reputation{}, ""},
		{"refused at send, resumed, clean since", small, refused(rep(400, 0, 0, 0), 50), refused(rep(100, 0, 0, 0), 50), ""},
		{"refused at send, resumed, bad again", small, refused(rep(300, 0, 0, 0), 60), refused(rep(100, 0, 0, 0), 50), "(10 of 210 attempts: 10 refused at send"},
	}
	for _, c := range cases {
		got := c.a.Check(c.r, c.since)
		if (c.reason == "") != (got == "") || !strings.Contains(got, c.reason) {
			t.Errorf("%s: Check(%+v, since %+v) = %q, want %q", c.name, c.r, c.since, got, c.reason)
		}
	}
}

// fakeEngine is what the alarm pauses through, and its baselines.
type fakeEngine struct {
	mu        sync.Mutex
	running   []ulid.ULID
	paused    map[ulid.ULID]string
	baselines map[ulid.ULID]store.Reputation
	failPause bool
}

func (e *fakeEngine) Running() []ulid.ULID { e.mu.Lock(); defer e.mu.Unlock(); return e.running }

func (e *fakeEngine) Pause(_ context.Context, id ulid.ULID, reason string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.failPause {
		return errors.New("store unavailable")
	}
	e.paused[id] = reason
	return nil
}

func (e *fakeEngine) Baseline(_ context.Context, id ulid.ULID) store.Reputation {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.baselines[id]
}

func (e *fakeEngine) SetBaseline(_ context.Context, id ulid.ULID, r store.Reputation) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.baselines[id] = r
	return nil
}

// sums is an AlarmStore: the broadcasts' states and running sums.
type sums map[ulid.ULID]store.Reputation

func (s sums) GetBroadcast(_ context.Context, id ulid.ULID) (store.Broadcast, error) {
	if _, ok := s[id]; !ok {
		return store.Broadcast{}, store.ErrNotFound
	}
	return store.Broadcast{ID: id, State: store.StateRunning}, nil
}

func (s sums) Reputation(_ context.Context, id ulid.ULID) (store.Reputation, error) {
	return s[id], nil
}

// TestAlarmPauses: the alarm pauses a running broadcast whose bounces pass
// the threshold, leaves a clean one alone, stores no baseline for a pause
// that failed, and once its baseline is stored a new term's alarm does not
// pause again for the same bounces.
func TestAlarmPauses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	bad, clean, gone := ulid.Make(), ulid.Make(), ulid.Make()
	st := sums{bad: {Accepted: 40, Bounced: 4}, clean: {Accepted: 40, Delivered: 40}}
	e := &fakeEngine{running: []ulid.ULID{bad, clean, gone}, paused: map[ulid.ULID]string{}, baselines: map[ulid.ULID]store.Reputation{}}
	deps := maintenance.AlarmDeps{Store: st, Baselines: e, Running: e.Running, Pause: e.Pause}
	cfg := maintenance.AlarmConfig{MinSample: 20}

	e.failPause = true
	a := maintenance.NewAlarm(cfg, deps)
	a.CheckOnce(ctx)
	if len(e.baselines) != 0 {
		t.Fatalf("a pause that failed stored a baseline: %v", e.baselines)
	}
	e.failPause = false
	a.CheckOnce(ctx)
	if r := e.paused[bad]; !strings.Contains(r, "hard-bounce rate 10% (4 of 40 accepted)") {
		t.Fatalf("the bouncing broadcast paused with %q", r)
	}
	if r, ok := e.paused[clean]; ok {
		t.Fatalf("the clean broadcast paused: %q", r)
	}
	if got := e.baselines[bad]; got != st[bad] {
		t.Fatalf("baseline stored %+v; want the reputation it paused at, %+v", got, st[bad])
	}
	// A new term's alarm (a new leader) reads the baseline: nothing new, no pause.
	delete(e.paused, bad)
	maintenance.NewAlarm(cfg, deps).CheckOnce(ctx)
	if r, ok := e.paused[bad]; ok {
		t.Fatalf("paused again for the same bounces: %q", r)
	}
	// Bad again since: paused again.
	st[bad] = store.Reputation{Accepted: 80, Bounced: 9}
	maintenance.NewAlarm(cfg, deps).CheckOnce(ctx)
	if r := e.paused[bad]; !strings.Contains(r, "(5 of 40 accepted)") {
		t.Fatalf("after more bounces paused with %q", r)
	}
}

// TestAlarmRun: Run checks every Interval on its clock, and not at all when
// both alarms are off.
func TestAlarmRun(t *testing.T) {
	t.Parallel()
	bad := ulid.Make()
	st := sums{bad: {Accepted: 40, Bounced: 4}}
	for _, c := range []struct {
		cfg       maintenance.AlarmConfig
		wantPause bool
	}{
		{maintenance.AlarmConfig{MinSample: 20, Interval: time.Millisecond}, true},
		{maintenance.AlarmConfig{MinSample: 20, Interval: time.Millisecond, BounceRate: -1, ComplaintRate: -1}, false},
	} {
		e := &fakeEngine{running: []ulid.ULID{bad}, paused: map[ulid.ULID]string{}, baselines: map[ulid.ULID]store.Reputation{}}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			maintenance.NewAlarm(c.cfg, maintenance.AlarmDeps{Store: st, Baselines: e, Running: e.Running, Pause: e.Pause}).Run(ctx)
		}()
		if !c.wantPause {
			<-done // off: returns at once
			cancel()
			if len(e.paused) != 0 {
				t.Fatalf("an alarm turned off paused %v", e.paused)
			}
			continue
		}
		testenv.Eventually(t, "the alarm pauses", 5*time.Second, func() bool {
			e.mu.Lock()
			defer e.mu.Unlock()
			return e.paused[bad] != ""
		})
		cancel()
		<-done
	}
}
