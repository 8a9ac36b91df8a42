package maintenance

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/rangecast/rangecast/internal/clock"
	"github.com/rangecast/rangecast/internal/store"
)

// AlarmConfig configures the reputation alarm: a running broadcast whose
// hard-bounce rate or complaint rate passes its threshold pauses itself, with
// the reason shown, before it damages the sending domain's reputation
// further. Mailbox providers judge a sender by exactly these two numbers.
type AlarmConfig struct {
	// BounceRate is the hard-bounce share of attempts that pauses a
	// broadcast (default 0.02): bounces reported after acceptance plus
	// hard refusals at send, over accepted messages plus those refusals.
	// Negative turns the alarm off.
	BounceRate float64
	// ComplaintRate is the complaint share of delivered messages that
	// pauses a broadcast (default 0.001). Negative turns the alarm off.
	ComplaintRate float64
	// MinSample is how many attempts (for bounces: accepted or refused
	// for good) or delivered messages (for complaints) a rate needs before it counts (default 1000):
	// one complaint in the first ten messages is not a trend.
	MinSample int64
	// Interval is how often the leader checks running broadcasts (default
	// 30 s).
	Interval time.Duration
}

// Validate refuses a negative sample or interval and a rate that is not a
// share below 1 (a negative rate turns its alarm off; 1 or more could
// never be passed, so it would be off without saying so).
func (a AlarmConfig) Validate() error {
	var errs []error
	if r := a.BounceRate; math.IsNaN(r) || math.IsInf(r, 0) || r >= 1 {
		errs = append(errs, fmt.Errorf("--bounce-alarm (RANGECAST_BOUNCE_ALARM) is %v; give a share of messages tried (accepted, or refused for good at send) above 0 and below 1 (0.02 is 2 %%), or -1 to turn it off", r))
	}
	if r := a.ComplaintRate; math.IsNaN(r) || math.IsInf(r, 0) || r >= 1 {
		errs = append(errs, fmt.Errorf("--complaint-alarm (RANGECAST_COMPLAINT_ALARM) is %v; give a share of delivered messages above 0 and below 1 (0.001 is 0.1 %%), or -1 to turn it off", r))
	}
	if a.MinSample < 0 {
		errs = append(errs, fmt.Errorf("--alarm-min-sample is %d; it cannot be negative", a.MinSample))
	}
	if a.Interval < 0 {
		errs = append(errs, fmt.Errorf("AlarmConfig.Interval is %s; a duration cannot be negative", a.Interval))
	}
	return errors.Join(errs...)
}

// Enabled reports whether either alarm is on.
func (a AlarmConfig) Enabled() bool { return a.BounceRate >= 0 || a.ComplaintRate >= 0 }

// Alarm defaults.
const (
	DefaultBounceAlarm    = 0.02
	DefaultComplaintAlarm = 0.001
	DefaultAlarmSample    = 1000
	DefaultAlarmInterval  = 30 * time.Second
)

func (a AlarmConfig) withDefaults() AlarmConfig {
	if a.BounceRate == 0 {
		a.BounceRate = DefaultBounceAlarm
	}
	if a.ComplaintRate == 0 {
		a.ComplaintRate = DefaultComplaintAlarm
	}
	if a.MinSample <= 0 {
		a.MinSample = DefaultAlarmSample
	}
	if a.Interval <= 0 {
		a.Interval = DefaultAlarmInterval
	}
	return a
}

// Check returns why a broadcast with reputation r must pause, or "" when it
// may carry on. since is the reputation when the alarm last paused it (zero
// when it never did): after an operator resumes, only what happened since
// counts, so the same bounces do not pause it again.
func (a AlarmConfig) Check(r, since store.Reputation) string {
	a = a.withDefaults()
	d := r.Minus(since)
	// A hard refusal at send is a bounce the receiving server gave at
	// once instead of later: it counts among the bounces and among the
	// messages they are a share of (a list of dead addresses sent straight
	// to their servers is refused, never accepted, and would otherwise
	// never pass the threshold).
	attempts, bounced := d.Accepted+d.Refused, d.Bounced+d.Refused
	delivered, complained := d.Delivered, d.Complained
	if a.BounceRate >= 0 && attempts >= a.MinSample && bounced > 0 && float64(bounced) > a.BounceRate*float64(attempts) {
		return fmt.Sprintf("auto-paused: hard-bounce rate %s (%s) passed %s; clean the list, then resume",
			percent(float64(bounced)/float64(attempts)), bounceCounts(d), percent(a.BounceRate))
	}
	if a.ComplaintRate >= 0 && delivered >= a.MinSample && complained > 0 && float64(complained) > a.ComplaintRate*float64(delivered) {
		return fmt.Sprintf("auto-paused: complaint rate %s (%d of %d delivered) passed %s; check who this audience is and what they were promised, then resume",
			percent(float64(complained)/float64(delivered)), complained, delivered, percent(a.ComplaintRate))
	}
	return ""
}

// bounceCounts says what the bounce rate is made of: "3 of 1000
// accepted" when every bounce was reported after acceptance, and the
// refusals at send apart when there are any.
func bounceCounts(d store.Reputation) string {
	if d.Refused == 0 {
		return fmt.Sprintf("%d of %d accepted", d.Bounced, d.Accepted)
	}
	return fmt.Sprintf("%d of %d attempts: %d refused at send, %d bounced after %d accepted",
		d.Bounced+d.Refused, d.Accepted+d.Refused, d.Refused, d.Bounced, d.Accepted)
}

func percent(f float64) string {
	s := fmt.Sprintf("%.2f", f*100)
	for len(s) > 1 && s[len(s)-1] == '0' {
		s = s[:len(s)-1]
	}
	if s[len(s)-1] == '.' {
		s = s[:len(s)-1]
	}
	return s + "%"
}

// AlarmStore is what the alarm reads of the store.
type AlarmStore interface {
	GetBroadcast(ctx context.Context, id ulid.ULID) (store.Broadcast, error)
	// Reputation is the broadcast's running sums (migration 008), so a
	// check costs the same for 1,000 contacts as for 1,000,000.
	Reputation(ctx context.Context, id ulid.ULID) (store.Reputation, error)
}

// Baselines keep the reputation at which the alarm last paused each
// broadcast, past a leader's term.
type Baselines interface {
	// Baseline is the stored reputation, zero when the alarm never paused
	// the broadcast (or it cannot be read: counting from zero).
	Baseline(ctx context.Context, id ulid.ULID) store.Reputation
	SetBaseline(ctx context.Context, id ulid.ULID, r store.Reputation) error
}

// Alarm is the reputation alarm as a service: every Interval it checks the
// running broadcasts and pauses those past a threshold.
type Alarm struct {
	cfg       AlarmConfig
	store     AlarmStore
	baselines Baselines
	// running lists the broadcasts to check; pause pauses one through the
	// path PauseBroadcast takes (store state, KV state record, actor kick),
	// so workers stop within one in-flight window.
	running func() []ulid.ULID
	pause   func(ctx context.Context, id ulid.ULID, reason string) error
	clock   clock.Clock
	log     *slog.Logger

	// paused is the reputation when the alarm paused each broadcast, for
	// this Run.
	paused map[ulid.ULID]store.Reputation
}

// AlarmDeps are what an Alarm works on.
type AlarmDeps struct {
	Store     AlarmStore
	Baselines Baselines
	Running   func() []ulid.ULID
	Pause     func(ctx context.Context, id ulid.ULID, reason string) error
	Clock     clock.Clock
	Log       *slog.Logger
}

// NewAlarm returns the alarm; Run starts it.
func NewAlarm(cfg AlarmConfig, d AlarmDeps) *Alarm {
	if d.Clock == nil {
		d.Clock = clock.Real{}
	}
	if d.Log == nil {
		d.Log = slog.Default()
	}
	return &Alarm{cfg: cfg.withDefaults(), store: d.Store, baselines: d.Baselines, running: d.Running, pause: d.Pause,
		clock: d.Clock, log: d.Log, paused: map[ulid.ULID]store.Reputation{}}
}

// Run checks every Interval until ctx ends; it returns at once when both
// alarms are off.
func (a *Alarm) Run(ctx context.Context) {
	if !a.cfg.Enabled() {
		return
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.clock.After(a.cfg.Interval):
		}
		a.CheckOnce(ctx)
	}
}

// CheckOnce checks every running broadcast once and pauses those past a
// threshold.
func (a *Alarm) CheckOnce(ctx context.Context) {
	for _, id := range a.running() {
		if ctx.Err() != nil {
			return
		}
		b, err := a.store.GetBroadcast(ctx, id)
		if err != nil || b.State != store.StateRunning {
			continue
		}
		r, err := a.store.Reputation(ctx, id)
		if err != nil {
			a.log.Warn("reputation alarm check failed", "broadcast", id, "err", err)
			continue
		}
		base, ok := a.paused[id]
		if !ok {
			// A pause of an earlier term (or another leader) still sets
			// the baseline: the bounces it paused for have been seen.
			base = a.baselines.Baseline(ctx, id)
			a.paused[id] = base
		}
		reason := a.cfg.Check(r, base)
		if reason == "" {
			continue
		}
		if err := a.pause(ctx, id, reason); err != nil {
			a.log.Warn("reputation alarm could not pause the broadcast", "broadcast", id, "err", err)
			continue
		}
		a.paused[id] = r
		if err := a.baselines.SetBaseline(ctx, id, r); err != nil {
			a.log.Warn("alarm baseline not stored; a new leader may pause this broadcast again for the same events", "broadcast", id, "err", err)
		}
		a.log.Warn("broadcast auto-paused by a reputation alarm", "broadcast", id, "reason", reason,
			"accepted", r.Accepted, "delivered", r.Delivered, "bounced", r.Bounced, "complained", r.Complained)
	}
}
