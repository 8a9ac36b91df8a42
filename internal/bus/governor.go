package bus

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/rangecast/rangecast/internal/governor"
)

// GovernorBucket holds the governors of the sending domains: per domain, the
// learned state (written only by the leading coordinator) and the limits an
// operator set (written by whichever coordinator took the API call, watched
// by the leader).
const GovernorBucket = "rangecast_governor"

// GovernorStateKey is the KV key of a sending domain's learned state.
func GovernorStateKey(domain string) string { return "state." + domain }

// GovernorLimitsKey is the KV key of a sending domain's operator limits.
func GovernorLimitsKey(domain string) string { return "limits." + domain }

// GovernorResetKey is the KV key of an SMTP server's last hourly reset.
func GovernorResetKey(server string) string { return "reset." + server }

// GovernorHourlyKey is the KV key of an SMTP server's hourly window, shared
// by the sending domains that send through it (written by the leader).
func GovernorHourlyKey(server string) string { return "hourly." + server }

// Key patterns for the leader's watch and for listing.
const (
	GovernorStateKeys  = "state.>"
	GovernorLimitsKeys = "limits.>"
	GovernorResetKeys  = "reset.>"
)

// GovernorLimits is what an operator set for a sending domain. A zero field
// keeps the configured default.
type GovernorLimits struct {
	RatePerSecond float64 `json:"rate_per_second,omitempty"`
	Burst         int     `json:"burst,omitempty"`
	// Ceiling sets the daily ceiling by hand once; CeilingSetAt tells the
	// leader whether it has applied this one.
	Ceiling      int       `json:"ceiling,omitempty"`
	CeilingSetAt time.Time `json:"ceiling_set_at,omitzero"`
}

// GovernorReset records a manual reset of an SMTP server's hourly limit.
type GovernorReset struct {
	At time.Time `json:"at"`
}

// UsageSubject carries mail sent outside broadcast pages (transactional) to
// the leading coordinator, whose governors count it: the providers see it
// too. It is on the report stream, so a coordinator failover loses none.
const UsageSubject = "rangecast.reports.usage"

// Usage is what one or more sends outside pages did, for one sending domain.
type Usage struct {
	Domain    string                    `json:"domain"`
	Sent      int                       `json:"sent,omitempty"`
	Providers map[string]ProviderResult `json:"providers,omitempty"`
}

// viewTTL bounds how stale a GovernorView's answer may be.
const viewTTL = time.Second

// GovernorView reads the governor state the leading coordinator writes, for
// processes that must follow it without running it (page workers,
// transactional senders). Reads are cached for a second per domain.
type GovernorView struct {
	kv jetstream.KeyValue

	mu    sync.Mutex
	cache map[string]viewEntry
}

type viewEntry struct {
	st   *governor.DomainState
	read time.Time
}

// NewGovernorView returns a view of the governor bucket kv.
func NewGovernorView(kv jetstream.KeyValue) *GovernorView {
	return &GovernorView{kv: kv, cache: map[string]viewEntry{}}
}

// State returns a sending domain's last written state, nil when it has none.
func (v *GovernorView) State(ctx context.Context, domain string, now time.Time) (*governor.DomainState, error) {
	domain = strings.ToLower(domain)
	v.mu.Lock()
	e, ok := v.cache[domain]
	v.mu.Unlock()
	if ok && !now.Before(e.read) && now.Sub(e.read) < viewTTL {
		return e.st, nil
	}
	st := new(governor.DomainState)
	_, found, err := GetJSON(ctx, v.kv, GovernorStateKey(domain), st)
	if err != nil {
		return nil, fmt.Errorf("read governor state of %s: %w", domain, err)
	}
	if !found {
		st = nil
	}
	v.mu.Lock()
	v.cache[domain] = viewEntry{st: st, read: now}
	v.mu.Unlock()
	return st, nil
}

// Held returns the receiving providers a sending domain must not send to at
// now (held after a quota rejection, or breaker open), with until when.
// Half-open providers are not in it: their probe is the leader's to give.
func (v *GovernorView) Held(ctx context.Context, domain string, now time.Time) (map[string]time.Time, error) {
	refusals, err := v.Refusals(ctx, domain, now)
	if err != nil || refusals == nil {
		return nil, err
	}
	held := make(map[string]time.Time, len(refusals))
	for p, r := range refusals {
		held[p] = r.Until
	}
	return held, nil
}

// Refusals is Held with why each provider is held: governor.LimitHeld after
// a quota rejection, governor.LimitBreaker while its breaker is open.
func (v *GovernorView) Refusals(ctx context.Context, domain string, now time.Time) (map[string]governor.Refusal, error) {
	st, err := v.State(ctx, domain, now)
	if err != nil || st == nil {
		return nil, err
	}
	var held map[string]governor.Refusal
	for _, p := range governor.NewDomain(domain, governor.Limits{}, st, now).Status(now).Providers {
		if p.Phase != governor.PhaseHeld && p.Phase != governor.PhaseOpen {
			continue
		}
		if held == nil {
			held = map[string]governor.Refusal{}
		}
		held[p.Provider] = governor.Refusal{Limit: governor.ProviderLimit(p.Phase), Until: p.Until,
			Text: fmt.Sprintf("%s is held for %s by the governor", p.Provider, domain)}
	}
	return held, nil
}
