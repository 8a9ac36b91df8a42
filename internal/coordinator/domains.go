package coordinator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rangecast/rangecast/internal/governor"
	"github.com/rangecast/rangecast/internal/govstate"
)

// What operators read and change of the sending domains' governors. Any
// coordinator answers: the leader from the governors it runs, a follower
// from the state last written to KV. Changes go through KV, where the leader
// follows them.

// DomainStatus is a sending domain's governor as one coordinator sees it.
type DomainStatus struct {
	governor.Status
	// Server is the SMTP server whose hourly limit the domain shares.
	Server string
	// Live: read from the governor the leader runs, not from KV.
	Live bool
}

// LimitChange is what an operator sets of a domain's limits; nil fields
// stay as they are.
type LimitChange struct {
	RatePerSecond *float64
	Burst         *int
	DailyCeiling  *int
}

// govState reads and writes the governors' state in KV.
func (c *Coordinator) govState() *govstate.KV { return govstate.New(c.cfg.Bus.Governors) }

var errNoGovernor = &Error{Kind: Disabled, Msg: "this coordinator runs without a governor (no per-domain limits are enforced); start it with the governor enabled"}

// GovernorServer names the SMTP server the sending domains send through;
// a Disabled error when this coordinator runs no governor.
func (c *Coordinator) GovernorServer() (string, error) {
	if c.cfg.Governor == nil {
		return "", errNoGovernor
	}
	return serverOf(c.cfg.Governor.Limits), nil
}

// SendingDomains lists the sending domains with stored governor state.
func (c *Coordinator) SendingDomains(ctx context.Context) ([]string, error) {
	if c.cfg.Governor == nil {
		return nil, errNoGovernor
	}
	names, err := c.govState().Domains(ctx)
	if err != nil {
		return nil, unavailable(err)
	}
	return names, nil
}

// DomainStatus reports a domain: live from the leader's governor, else from
// KV. NotFound for a domain nothing has been sent from.
func (c *Coordinator) DomainStatus(ctx context.Context, domain string) (DomainStatus, error) {
	if c.cfg.Governor == nil {
		return DomainStatus{}, errNoGovernor
	}
	now := c.cfg.Clock.Now()
	if g := c.domainHost(); g != nil {
		if s := g.status(now, domain); s != nil {
			return DomainStatus{Status: *s, Server: serverOf(g.defaults), Live: true}, nil
		}
	}
	return c.storedDomain(ctx, domain, false)
}

// SetDomainLimits lays ch over the limits operators set for domain before
// and returns the domain's status with them.
func (c *Coordinator) SetDomainLimits(ctx context.Context, domain string, ch LimitChange) (DomainStatus, error) {
	if c.cfg.Governor == nil {
		return DomainStatus{}, errNoGovernor
	}
	now := c.cfg.Clock.Now().UTC()
	change, err := c.govState().ChangeLimits(ctx, domain, func(l *govstate.Limits) {
		if ch.RatePerSecond != nil {
			l.RatePerSecond = *ch.RatePerSecond
		}
		if ch.Burst != nil {
			l.Burst = *ch.Burst
		}
		if ch.DailyCeiling != nil {
			l.Ceiling, l.CeilingSetAt = *ch.DailyCeiling, now
		}
	})
	if errors.Is(err, govstate.ErrContended) {
		return DomainStatus{}, &Error{Kind: Contended, Msg: fmt.Sprintf("limits of %s are being changed by someone else at the same time; try again", domain), Err: err}
	}
	if err != nil {
		return DomainStatus{}, unavailable(err)
	}
	if g := c.domainHost(); g != nil {
		// The leader's watch will see it too; applying it now makes the
		// answer below show it.
		if _, err := g.domain(domain); err == nil {
			g.follow(change)
		}
	}
	s, err := c.DomainStatus(ctx, domain)
	if KindOf(err) == NotFound {
		s, err = c.storedDomain(ctx, domain, true)
	}
	return s, err
}

// ProviderRelease is what lifting a provider's hold did.
type ProviderRelease struct {
	Status DomainStatus
	// Provider is the provider lifted, as status names it; Was its phase
	// before (held, open or half-open).
	Provider, Was string
	// Due counts the recipients held for it that were made due now.
	Due int64
}

// ReleaseProvider lifts a receiving provider's hold or open breaker for a
// sending domain (governor.Domain.ReleaseProvider), through the leader,
// and makes the recipients held for it in the domain's running and paused
// broadcasts due now. A provider ramping back already is left as it is,
// its held recipients made due (a release repeated after an answer lost).
// WrongState when the provider is neither held nor ramping.
func (c *Coordinator) ReleaseProvider(ctx context.Context, domain, provider string) (ProviderRelease, error) {
	if c.cfg.Governor == nil {
		return ProviderRelease{}, errNoGovernor
	}
	p := governor.Provider(provider)
	st, err := c.DomainStatus(ctx, domain)
	if err != nil {
		return ProviderRelease{}, err
	}
	was := governor.PhaseClosed
	for _, ps := range st.Providers {
		if ps.Provider == p {
			was = ps.Phase
		}
	}
	if was == governor.PhaseClosed {
		return ProviderRelease{}, &Error{Kind: WrongState, Msg: fmt.Sprintf("%s is not held for %s: nothing to lift ('rangecast governor status %s' lists the providers held, open or ramping)", p, domain, domain)}
	}
	now := c.cfg.Clock.Now().UTC()
	if was != governor.PhaseHalfOpen {
		// The leader applies it now, so the status below shows it; its
		// watch sees the record too, and finds it ramping. Loaded first,
		// the domain cannot fail to load in follow, which only logs.
		g := c.domainHost()
		if g != nil {
			if _, err := g.domain(domain); err != nil {
				return ProviderRelease{}, unavailable(err)
			}
		}
		change, err := c.govState().PutRelease(ctx, domain, p, now)
		if err != nil {
			return ProviderRelease{}, unavailable(err)
		}
		if g != nil {
			g.follow(change)
		}
		// Pages and sweeps given the hold before it follow the state
		// the leader writes, at most ViewTTL stale: made due before
		// they see it ramping, a window of theirs deferred the held
		// rows again to the lifted hold's end (holds.refresh).
		select {
		case <-c.cfg.Clock.After(2 * govstate.ViewTTL):
		case <-ctx.Done():
			return ProviderRelease{}, &Error{Kind: Unavailable, Msg: fmt.Sprintf("%s is lifted for %s, but the call ended before the recipients held for it were made due (they go at their retry times; release it again to make them due)", p, domain), Err: ctx.Err()}
		}
	}
	due, err := c.cfg.Store.HastenHeld(ctx, domain, p, now)
	if err != nil {
		return ProviderRelease{}, &Error{Kind: Unavailable, Msg: fmt.Sprintf("%s is lifted for %s, but the recipients held for it could not be made due now (they go at their retry times): %v", p, domain, err), Err: err}
	}
	s, err := c.DomainStatus(ctx, domain)
	if err != nil {
		return ProviderRelease{}, err
	}
	return ProviderRelease{Status: s, Provider: p, Was: was, Due: due}, nil
}

// ResetHourly starts an SMTP server's hourly count over at now (deleting
// nothing) and returns when, with the sending domains it applies to.
func (c *Coordinator) ResetHourly(ctx context.Context, server string) (time.Time, []string, error) {
	if c.cfg.Governor == nil {
		return time.Time{}, nil, errNoGovernor
	}
	now := c.cfg.Clock.Now().UTC()
	change, err := c.govState().PutReset(ctx, server, now)
	if err != nil {
		return time.Time{}, nil, unavailable(err)
	}
	if g := c.domainHost(); g != nil {
		g.follow(change)
	}
	names, err := c.SendingDomains(ctx)
	if err != nil {
		return time.Time{}, nil, err
	}
	return now, names, nil
}

// storedDomain builds a domain's status from what KV holds. A domain with
// no state is NotFound unless orNew, which shows what it would start with.
func (c *Coordinator) storedDomain(ctx context.Context, d string, orNew bool) (DomainStatus, error) {
	kv := c.govState()
	st, _, err := kv.State(ctx, d)
	if err != nil {
		return DomainStatus{}, unavailable(err)
	}
	ol, err := kv.Limits(ctx, d)
	if err != nil {
		return DomainStatus{}, unavailable(err)
	}
	if st == nil && ol == nil && !orNew {
		return DomainStatus{}, &Error{Kind: NotFound, Msg: fmt.Sprintf("no governor state for %s: nothing has been sent from it yet", d)}
	}
	now := c.cfg.Clock.Now()
	limits := ol.Over(c.cfg.Governor.Limits)
	dom := governor.NewDomain(d, limits, st, now)
	if ol != nil && ol.Ceiling > 0 {
		dom.SetCeiling(now, ol.CeilingSetAt, ol.Ceiling)
	}
	server := serverOf(c.cfg.Governor.Limits)
	w, _, err := kv.Hourly(ctx, server)
	if err != nil {
		return DomainStatus{}, unavailable(err)
	}
	srv := governor.NewServer(server, c.cfg.Governor.Limits.EmailsPerHour, w)
	if r, err := kv.Reset(ctx, server); err == nil && !r.At.IsZero() {
		srv.Reset(r.At)
	}
	dom.ShareServer(srv)
	return DomainStatus{Status: dom.Status(now), Server: server}, nil
}
