package govstate

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/rangecast/rangecast/internal/governor"
)

// ViewTTL bounds how stale a View's answer may be, after the leader has
// written the state.
const ViewTTL = time.Second

// View reads the governor state the leading coordinator writes, for
// processes that must follow it without running it (page workers,
// transactional senders). Reads are cached for a second per domain.
type View struct {
	kv *KV

	mu    sync.Mutex
	cache map[string]viewEntry
}

type viewEntry struct {
	st   *governor.DomainState
	read time.Time
}

// NewView returns a view of the governor bucket kv (bus.Bus.Governors).
func NewView(kv jetstream.KeyValue) *View {
	return &View{kv: New(kv), cache: map[string]viewEntry{}}
}

// State returns a sending domain's last written state, nil when it has none.
func (v *View) State(ctx context.Context, domain string, now time.Time) (*governor.DomainState, error) {
	domain = strings.ToLower(domain)
	v.mu.Lock()
	e, ok := v.cache[domain]
	v.mu.Unlock()
	if ok && !now.Before(e.read) && now.Sub(e.read) < ViewTTL {
		return e.st, nil
	}
	st, _, err := v.kv.State(ctx, domain)
	if err != nil {
		return nil, err
	}
	v.mu.Lock()
	v.cache[domain] = viewEntry{st: st, read: now}
	v.mu.Unlock()
	return st, nil
}

// Held returns the receiving providers a sending domain must not send to at
// now (held after a quota rejection, or breaker open), with until when.
// Half-open providers are not in it: their probe is the leader's to give.
func (v *View) Held(ctx context.Context, domain string, now time.Time) (map[string]time.Time, error) {
	held, _, err := v.Ramping(ctx, domain, now)
	return held, err
}

// Ramping returns, besides Held, the receiving providers a sending
// domain's governor ramps back up at now (half-open: their hold or open
// breaker is over, ran out or lifted by an operator), from one reading of
// the state.
func (v *View) Ramping(ctx context.Context, domain string, now time.Time) (held map[string]time.Time, ramping map[string]bool, err error) {
	st, err := v.State(ctx, domain, now)
	if err != nil || st == nil {
		return nil, nil, err
	}
	for _, p := range governor.NewDomain(domain, governor.Limits{}, st, now).Holding(now) {
		switch p.Phase {
		case governor.PhaseHeld, governor.PhaseOpen:
			if held == nil {
				held = map[string]time.Time{}
			}
			held[p.Provider] = p.Until
		case governor.PhaseHalfOpen:
			if ramping == nil {
				ramping = map[string]bool{}
			}
			ramping[p.Provider] = true
		}
	}
	return held, ramping, nil
}

// Refusals is Held with why each provider is held: governor.LimitHeld after
// a quota rejection, governor.LimitBreaker while its breaker is open.
func (v *View) Refusals(ctx context.Context, domain string, now time.Time) (map[string]governor.Refusal, error) {
	st, err := v.State(ctx, domain, now)
	if err != nil || st == nil {
		return nil, err
	}
	var held map[string]governor.Refusal
	for _, p := range governor.NewDomain(domain, governor.Limits{}, st, now).Holding(now) {
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
