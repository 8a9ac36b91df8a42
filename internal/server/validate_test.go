package server_test

import (
	"context"
	"log/slog"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/rangecast/rangecast/internal/coordinator"
	"github.com/rangecast/rangecast/internal/governor"
	"github.com/rangecast/rangecast/internal/maintenance"
	"github.com/rangecast/rangecast/internal/server"
	"github.com/rangecast/rangecast/internal/testenv"
)

// TestOptionsRefusedByFlag: a negative duration, a zero window or an
// impossible limit stops the process before it connects to anything, and
// the error names the flag to fix.
func TestOptionsRefusedByFlag(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, c := range []struct {
		name string
		o    server.CoordinatorOptions
		flag string
	}{
		{"negative lease", server.CoordinatorOptions{InDoubtAfter: -time.Minute}, "--in-doubt-after"},
		{"short retention", server.CoordinatorOptions{Retention: maintenance.RetentionConfig{Events: time.Hour}}, "--event-retention"},
		{"negative sample", server.CoordinatorOptions{Alarms: maintenance.AlarmConfig{MinSample: -1}}, "--alarm-min-sample"},
		{"negative rate", server.CoordinatorOptions{Governor: &coordinator.GovernorConfig{Limits: governor.Limits{RatePerSecond: -1}}}, "--domain-rate"},
		{"negative hourly limit", server.CoordinatorOptions{Governor: &coordinator.GovernorConfig{Limits: governor.Limits{EmailsPerHour: -5}}}, "--emails-per-hour"},
		{"negative give-up", server.CoordinatorOptions{Governor: &coordinator.GovernorConfig{GiveUpAfter: -time.Hour}}, "--give-up-after"},
		{"give-up shorter than a relay outage is caught", server.CoordinatorOptions{Governor: &coordinator.GovernorConfig{GiveUpAfter: 10 * time.Minute}}, "--give-up-after is 10m0s; give at least 1h0m0s"},
		{"give-up past the governor's memory", server.CoordinatorOptions{Governor: &coordinator.GovernorConfig{GiveUpAfter: 30 * 24 * time.Hour}}, "--give-up-after is 720h0m0s; it must be under 336h0m0s"},
		{"negative breaker failures", server.CoordinatorOptions{Governor: &coordinator.GovernorConfig{Limits: governor.Limits{BreakerFailures: -1}}}, "--breaker-failures (RANGECAST_BREAKER_FAILURES) is -1"},
		{"breaker share above 1", server.CoordinatorOptions{Governor: &coordinator.GovernorConfig{Limits: governor.Limits{BreakerShare: 2}}}, "--breaker-share (RANGECAST_BREAKER_SHARE) is 2; give a share"},
		{"breaker share NaN", server.CoordinatorOptions{Governor: &coordinator.GovernorConfig{Limits: governor.Limits{BreakerShare: math.NaN()}}}, "--breaker-share (RANGECAST_BREAKER_SHARE) is NaN"},
		{"breaker share infinite", server.CoordinatorOptions{Governor: &coordinator.GovernorConfig{Limits: governor.Limits{BreakerShare: math.Inf(1)}}}, "--breaker-share (RANGECAST_BREAKER_SHARE) is +Inf"},
		{"negative breaker share", server.CoordinatorOptions{Governor: &coordinator.GovernorConfig{Limits: governor.Limits{BreakerShare: -0.2}}}, "--breaker-share (RANGECAST_BREAKER_SHARE) is -0.2"},
		{"negative ramp", server.CoordinatorOptions{Governor: &coordinator.GovernorConfig{Limits: governor.Limits{RampConnections: -1}}}, "--ramp-connections (RANGECAST_RAMP_CONNECTIONS) is -1"},
		{"ceiling above the governor's cap", server.CoordinatorOptions{Governor: &coordinator.GovernorConfig{Limits: governor.Limits{InitialCeiling: 10_000_000}}}, "--initial-daily-ceiling is 10000000; give 100 to 5000000"},
		{"ceiling below the floor", server.CoordinatorOptions{Governor: &coordinator.GovernorConfig{Limits: governor.Limits{InitialCeiling: 10}}}, "--initial-daily-ceiling is 10; give 100 to 5000000"},
		{"negative burst", server.CoordinatorOptions{Governor: &coordinator.GovernorConfig{Limits: governor.Limits{Burst: -1}}}, "--domain-burst is -1"},
		{"bounce alarm that can never be passed", server.CoordinatorOptions{Alarms: maintenance.AlarmConfig{BounceRate: 5}}, "--bounce-alarm (RANGECAST_BOUNCE_ALARM) is 5; give a share of messages tried (accepted, or refused for good at send) above 0 and below 1"},
		{"bounce alarm of every message", server.CoordinatorOptions{Alarms: maintenance.AlarmConfig{BounceRate: 1}}, "--bounce-alarm (RANGECAST_BOUNCE_ALARM) is 1"},
		{"complaint alarm as a percentage", server.CoordinatorOptions{Alarms: maintenance.AlarmConfig{ComplaintRate: 2}}, "--complaint-alarm (RANGECAST_COMPLAINT_ALARM) is 2; give a share of delivered messages"},
	} {
		err := server.RunCoordinator(ctx, c.o)
		if err == nil || !strings.Contains(err.Error(), c.flag) {
			t.Errorf("%s: RunCoordinator = %v; want a refusal naming %s", c.name, err, c.flag)
		}
	}
	for _, c := range []struct {
		name string
		o    server.WorkerOptions
		flag string
	}{
		{"zero window", server.WorkerOptions{Concurrency: 0, TxSlots: 4}, "--concurrency"},
		{"no transactional slot", server.WorkerOptions{Concurrency: 16, TxSlots: 0}, "--tx-slots"},
		{"retries shorter than greylisting", server.WorkerOptions{Concurrency: 16, TxSlots: 4, RetryFor: 5 * time.Minute}, "--retry-for"},
		{"retries for a month", server.WorkerOptions{Concurrency: 16, TxSlots: 4, RetryFor: 30 * 24 * time.Hour}, "--retry-for"},
	} {
		err := server.RunWorker(ctx, c.o)
		if err == nil || !strings.Contains(err.Error(), c.flag) {
			t.Errorf("%s: RunWorker = %v; want a refusal naming %s", c.name, err, c.flag)
		}
	}
}

// TestPprofStrict: RANGECAST_PPROF takes what a boolean flag takes; any
// other value ("yes") stops the coordinator, a page worker and the dev
// stack before they connect, naming the variable, instead of leaving
// profiling off without a word.
func TestPprofStrict(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		v       string
		refused bool
	}{
		{"yes", true}, {"on", true}, {"2", true},
		{"1", false}, {"true", false}, {"0", false}, {"false", false}, {"", false},
	} {
		t.Run(c.v, func(t *testing.T) {
			t.Setenv(server.PprofEnv, c.v)
			// Each run is refused for its zero window anyway, so none
			// connects; only whether the variable is named differs.
			errs := map[string]error{
				"RunCoordinator": server.RunCoordinator(ctx, server.CoordinatorOptions{InDoubtAfter: -time.Minute}),
				"RunWorker":      server.RunWorker(ctx, server.WorkerOptions{}),
			}
			_, errs["StartStack"] = server.StartStack(ctx, server.StackOptions{Dir: t.TempDir(), Workers: -1})
			for name, err := range errs {
				named := err != nil && strings.Contains(err.Error(), server.PprofEnv)
				if named != c.refused {
					t.Errorf("%s=%q: %s = %v; want it refused for the variable: %v", server.PprofEnv, c.v, name, err, c.refused)
				}
			}
		})
	}
}

// TestStackOptionsRefused: a negative count of workers or window is
// refused before anything starts; zero still takes the defaults (tests and
// the demo rely on it, and the dev command refuses an explicit 0 itself).
func TestStackOptionsRefused(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		o    server.StackOptions
		flag string
	}{
		{server.StackOptions{Workers: -1}, "--workers is -1"},
		{server.StackOptions{Concurrency: -4}, "--concurrency is -4"},
		{server.StackOptions{RetryFor: time.Minute}, "--retry-for is 1m0s"},
	} {
		c.o.Dir = t.TempDir()
		if _, err := server.StartStack(context.Background(), c.o); err == nil || !strings.Contains(err.Error(), c.flag) {
			t.Errorf("StartStack(%+v) = %v; want a refusal naming %s", c.o, err, c.flag)
		}
	}
}

// TestSecondDevStackOnOneSchemaRefused: two `rangecast dev --postgres` on
// one schema (different --dir, so the folder lock does not see it) would
// each run a coordinator over the same broadcasts, doubling every rate
// limit and daily ceiling. The second is refused, saying what to do, and
// starts once the first has stopped.
func TestSecondDevStackOnOneSchemaRefused(t *testing.T) {
	t.Parallel()
	db := testenv.DatabaseURL(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	start := func() (*server.Stack, error) {
		return server.StartStack(ctx, server.StackOptions{Dir: t.TempDir(), DatabaseURL: db, GRPCAddr: "127.0.0.1:0",
			HTTPAddr: "127.0.0.1:0", MetricsAddr: "127.0.0.1:0", Workers: 1, Log: slog.New(slog.DiscardHandler)})
	}
	first, err := start()
	if err != nil {
		t.Fatal(err)
	}
	second, err := start()
	if err == nil {
		second.Stop() //nolint:errcheck
		first.Stop()  //nolint:errcheck
		t.Fatal("a second dev stack started on the schema the first one uses")
	}
	if !strings.Contains(err.Error(), "another rangecast dev is using this database") || !strings.Contains(err.Error(), "search_path") {
		t.Errorf("second stack: %v; want it refused, saying another dev uses the database and how to give it a schema of its own", err)
	}
	if err := first.Stop(); err != nil {
		t.Fatal(err)
	}
	third, err := start()
	if err != nil {
		t.Fatalf("a stack after the first stopped: %v; want it to start", err)
	}
	if err := third.Stop(); err != nil {
		t.Fatal(err)
	}
}
