package coordinator_test

import (
	"math"
	"strings"
	"testing"

	"github.com/rangecast/rangecast/internal/coordinator"
	"github.com/rangecast/rangecast/internal/governor"
	"github.com/rangecast/rangecast/internal/store"
)

// TestGovernorConfigValidate: a zero limit takes the governor's default
// (tests and library callers leave them unset; the flags refuse an
// explicit 0); a negative, NaN or infinite one, or a breaker share above
// 1, is refused naming the flag and its variable.
func TestGovernorConfigValidate(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		l    governor.Limits
		want string
	}{
		{governor.Limits{}, ""},
		{governor.Limits{BreakerFailures: 1, BreakerShare: 1, RampConnections: 1, Burst: 1, RatePerSecond: 0.1}, ""},
		{governor.Limits{BreakerShare: 0.01}, ""},
		{governor.Limits{BreakerFailures: -1}, "--breaker-failures (RANGECAST_BREAKER_FAILURES) is -1; give at least 1"},
		{governor.Limits{BreakerShare: 1.01}, "--breaker-share (RANGECAST_BREAKER_SHARE) is 1.01; give a share of a provider's attempts above 0 and at most 1"},
		{governor.Limits{BreakerShare: -1}, "--breaker-share (RANGECAST_BREAKER_SHARE) is -1"},
		{governor.Limits{BreakerShare: math.NaN()}, "--breaker-share (RANGECAST_BREAKER_SHARE) is NaN"},
		{governor.Limits{BreakerShare: math.Inf(-1)}, "--breaker-share (RANGECAST_BREAKER_SHARE) is -Inf"},
		{governor.Limits{RampConnections: -2}, "--ramp-connections (RANGECAST_RAMP_CONNECTIONS) is -2; give at least 1"},
		{governor.Limits{Burst: -1}, "--domain-burst is -1"},
		{governor.Limits{RatePerSecond: math.Inf(1)}, "--domain-rate is +Inf"},
	} {
		err := coordinator.GovernorConfig{Limits: c.l}.Validate()
		if (c.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.want)) {
			t.Errorf("Validate(%+v) = %v, want %q", c.l, err, c.want)
		}
	}
}

// TestLeftOutOfAFinishedBroadcast: the audience without an outcome is
// counted once a broadcast has finished, however it finished (a cancelled
// one's never reached included), floored at zero, and not while it runs.
func TestLeftOutOfAFinishedBroadcast(t *testing.T) {
	t.Parallel()
	counts := store.Counts{Sent: 1476, Deferred: 12}
	for state, want := range map[store.State]int64{
		store.StateCompleted: 5500, store.StateCancelled: 5500, store.StateFailed: 5500, store.StateRunning: 0, store.StatePaused: 0,
	} {
		if got := coordinator.LeftOut(store.Broadcast{State: state, SnapshotTotal: 6988}, counts); got != want {
			t.Errorf("%s: left out %d, want %d", state, got, want)
		}
	}
	if got := coordinator.LeftOut(store.Broadcast{State: store.StateCompleted, SnapshotTotal: 10}, store.Counts{Sent: 12}); got != 0 {
		t.Errorf("more sent than the audience at start (joined since): left out %d, want 0", got)
	}
}
