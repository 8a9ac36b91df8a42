package coordinator

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/rangecast/rangecast/internal/governor"
)

// validate refuses what withDefaults would not mend: a negative duration
// or count (zero takes the default). Each is named by the flag that sets it
// where one does, else by its field.
func (c Config) validate() error {
	var errs []error
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"--in-doubt-after", c.InDoubtAfter},
		{"Config.Tick", c.Tick}, {"Config.PausedTick", c.PausedTick}, {"Config.Redispatch", c.Redispatch},
		{"Config.Backoff", c.Backoff}, {"Config.MaxBackoff", c.MaxBackoff},
	} {
		errs = append(errs, nonNegative(d.name, d.v))
	}
	if c.PageLimit < 0 {
		errs = append(errs, fmt.Errorf("Config.PageLimit is %d; it cannot be negative", c.PageLimit))
	}
	if c.MaxFruitless < 0 {
		errs = append(errs, fmt.Errorf("Config.MaxFruitless is %d; it cannot be negative", c.MaxFruitless))
	}
	if c.Governor != nil {
		errs = append(errs, c.Governor.Validate())
	}
	errs = append(errs, c.Alarms.Validate(), c.Retention.Validate())
	return errors.Join(errs...)
}

// Validate refuses governor limits no sending domain could keep, named by
// their flags.
func (g GovernorConfig) Validate() error {
	l := g.Limits
	var errs []error
	if l.RatePerSecond < 0 || math.IsNaN(l.RatePerSecond) || math.IsInf(l.RatePerSecond, 0) {
		errs = append(errs, fmt.Errorf("--domain-rate is %v; give messages per second above 0", l.RatePerSecond))
	}
	if l.Burst < 0 {
		errs = append(errs, fmt.Errorf("--domain-burst is %d; it cannot be negative", l.Burst))
	}
	// The breaker's settings take their defaults at zero, as the rest do;
	// the flags refuse an explicit zero (internal/cli).
	if l.BreakerFailures < 0 {
		errs = append(errs, fmt.Errorf("--breaker-failures (RANGECAST_BREAKER_FAILURES) is %d; give at least 1 transient failure", l.BreakerFailures))
	}
	if s := l.BreakerShare; s < 0 || s > 1 || math.IsNaN(s) {
		errs = append(errs, fmt.Errorf("--breaker-share (RANGECAST_BREAKER_SHARE) is %v; give a share of a provider's attempts above 0 and at most 1 (0.2 is 20 %%)", s))
	}
	if l.RampConnections < 0 {
		errs = append(errs, fmt.Errorf("--ramp-connections (RANGECAST_RAMP_CONNECTIONS) is %d; give at least 1 connection", l.RampConnections))
	}
	if c := l.InitialCeiling; c < 0 || c > 0 && (c < governor.MinCeiling || c > governor.MaxCeiling) {
		// The governor would clamp it silently (and the API refuses such a
		// daily_ceiling): a sender of 10 million a day must not learn at
		// midday that it was 5 million.
		errs = append(errs, fmt.Errorf("--initial-daily-ceiling is %d; give %d to %d", c, governor.MinCeiling, governor.MaxCeiling))
	}
	if l.EmailsPerHour < 0 {
		errs = append(errs, fmt.Errorf("--emails-per-hour is %d; give 0 for no hourly limit", l.EmailsPerHour))
	}
	errs = append(errs, nonNegative("GovernorConfig.Flush", g.Flush))
	if g.GiveUpAfter < 0 {
		errs = append(errs, fmt.Errorf("--give-up-after is %s; give how long a provider may refuse everything before its held recipients fail (0 for the default, %s)", g.GiveUpAfter, DefaultGiveUpAfter))
	}
	if g.GiveUpAfter >= governor.RefusalMemory {
		// The governor forgets a run of refusals after RefusalMemory once
		// its ramp is idle (a pause, a ceiling reached); a longer horizon
		// would be reached only while the provider is being probed.
		errs = append(errs, fmt.Errorf("--give-up-after is %s; it must be under %s, how long the governor remembers a provider's refusals", g.GiveUpAfter, governor.RefusalMemory))
	}
	return errors.Join(errs...)
}

func nonNegative(name string, d time.Duration) error {
	if d < 0 {
		return fmt.Errorf("%s is %s; a duration cannot be negative", name, d)
	}
	return nil
}
