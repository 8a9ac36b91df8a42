package server_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/rangecast/rangecast/internal/coordinator"
	"github.com/rangecast/rangecast/internal/governor"
	"github.com/rangecast/rangecast/internal/maintenance"
	"github.com/rangecast/rangecast/internal/server"
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
	} {
		err := server.RunWorker(ctx, c.o)
		if err == nil || !strings.Contains(err.Error(), c.flag) {
			t.Errorf("%s: RunWorker = %v; want a refusal naming %s", c.name, err, c.flag)
		}
	}
}
