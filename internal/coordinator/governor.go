package coordinator

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/rangecast/rangecast/internal/bus"
	"github.com/rangecast/rangecast/internal/clock"
	"github.com/rangecast/rangecast/internal/governor"
	"github.com/rangecast/rangecast/internal/govstate"
	"github.com/rangecast/rangecast/internal/store"
)

// GovernorConfig turns on the per-sending-domain governors.
type GovernorConfig struct {
	// Limits apply to every sending domain an operator has not set limits
	// for (SetDomainLimits); zero fields take the governor's defaults.
	Limits governor.Limits
	// Flush is how often changed governor state is written to KV. Quota
	// rejections and breaker changes are written at once; counts of sent
	// mail within Flush can be lost with the leader (the new leader then
	// allows that many more today).
	Flush time.Duration
	// GiveUpAfter is how long a receiving provider may accept nothing, its
	// breaker open, held or ramping back (governor.BreakerState's
	// RefusingSince), before the recipients it holds fail with the reason
	// ("gave up after …", which a retry sends again). Held recipients are
	// never attempted, and a provider that refuses for good lets one ramp
	// step a breaker period through, so without it they waited until the
	// probes had used up each one's attempts: months for a large list.
	// 0 is DefaultGiveUpAfter.
	GiveUpAfter time.Duration
}

// DefaultGiveUpAfter is GovernorConfig's GiveUpAfter when unset: a day, as
// long as the retries of a large sender's MTA for a provider that defers
// everything, short enough that a broadcast does not run on for weeks.
const DefaultGiveUpAfter = 24 * time.Hour

// MinGiveUpAfter is the shortest --give-up-after an operator may set: well
// past the 10 to 20 minutes of refused pages that fail a broadcast whose
// relay refuses everyone. Shorter, a relay outage would show as every
// provider given up (recipients failed, the broadcast completed) instead
// of the broadcast failing with the relay's error. Tests set less through
// GovernorConfig directly.
const MinGiveUpAfter = time.Hour

// domainHost hosts one governor.Domain per sending domain for the leader's
// term: it loads each domain's learned state from KV (govstate) on first
// use, writes it back by compare-and-set as it changes, and follows the
// limits and resets operators set through any coordinator. It is the
// coordinator's Pacer.
type domainHost struct {
	kv       *govstate.KV
	clock    clock.Clock
	log      *slog.Logger
	defaults governor.Limits
	flush    time.Duration
	giveUp   time.Duration
	ctx      context.Context

	mu      sync.Mutex
	domains map[string]*hosted
	servers map[string]*hostedServer
	kick    chan struct{} // asks the flush loop to write now
}

// hostedServer is an SMTP server's hourly limit, shared by its domains.
type hostedServer struct {
	s     *governor.Server
	rev   uint64
	dirty bool
}

type hosted struct {
	d     *governor.Domain
	rev   uint64 // KV revision of the state key; 0 before the first write
	dirty bool
	// leftOut is how many providers a write left out of the stored state
	// (govstate.StateBudget), as last logged: when it starts, each time it
	// doubles, and when it ends.
	leftOut int
}

func newDomainHost(ctx context.Context, kv jetstream.KeyValue, cfg GovernorConfig, clk clock.Clock, log *slog.Logger) *domainHost {
	if cfg.Flush <= 0 {
		cfg.Flush = time.Second
	}
	if cfg.GiveUpAfter <= 0 {
		cfg.GiveUpAfter = DefaultGiveUpAfter
	}
	return &domainHost{
		kv: govstate.New(kv), clock: clk, log: log, defaults: cfg.Limits, flush: cfg.Flush, giveUp: cfg.GiveUpAfter, ctx: ctx,
		domains: map[string]*hosted{}, servers: map[string]*hostedServer{}, kick: make(chan struct{}, 1),
	}
}

// run writes dirty state every flush interval (and when kicked) and follows
// operators' limits and resets, until the term ends; then it writes once
// more, so a clean handover loses nothing.
func (g *domainHost) run() {
	updates, err := g.kv.Watch(g.ctx, func(key string, err error) {
		g.log.Error("malformed governor change ignored", "key", key, "err", err)
	})
	if err != nil {
		g.log.Error("cannot watch governor limits; changes apply at the next leader term", "err", err)
	}
	// One timer for every pass of the loop: made anew in the select, it
	// restarted at each kick and each operator change, and under a steady
	// stream of kicks (a breaker change, a rejection) the metrics went
	// unpublished for most of a minute.
	tick := g.clock.After(g.flush)
	for {
		select {
		case <-g.ctx.Done():
			g.flushDirty(context.WithoutCancel(g.ctx))
			// A follower shows no governor: its numbers would go stale.
			resetGovernorMetrics()
			return
		case ch, ok := <-updates:
			if !ok {
				updates = nil
				continue
			}
			g.follow(ch)
		case <-g.kick:
			g.flushDirty(g.ctx)
		case <-tick:
			tick = g.clock.After(g.flush)
			g.flushDirty(g.ctx)
			g.publishMetrics()
		}
	}
}

// domain returns the hosted governor of a sending domain, loading it.
func (g *domainHost) domain(name string) (*hosted, error) {
	name = strings.ToLower(name)
	g.mu.Lock()
	defer g.mu.Unlock()
	if h, ok := g.domains[name]; ok {
		return h, nil
	}
	st, rev, err := g.kv.State(g.ctx, name)
	if err != nil {
		return nil, err
	}
	ol, err := g.kv.Limits(g.ctx, name)
	if err != nil {
		return nil, err
	}
	srv, err := g.serverLocked(serverOf(g.defaults))
	if err != nil {
		return nil, err
	}
	now := g.clock.Now()
	limits := ol.Over(g.defaults)
	h := &hosted{d: governor.NewDomain(name, limits, st, now), rev: rev, dirty: st == nil}
	h.d.ShareServer(srv.s)
	if ol != nil && ol.Ceiling > 0 {
		h.d.SetCeiling(now, ol.CeilingSetAt, ol.Ceiling)
	}
	g.domains[name] = h
	return h, nil
}

// serverLocked returns the hosted SMTP server, loading its window and last
// reset from KV; g.mu is held.
func (g *domainHost) serverLocked(name string) (*hostedServer, error) {
	if hs, ok := g.servers[name]; ok {
		return hs, nil
	}
	w, rev, err := g.kv.Hourly(g.ctx, name)
	if err != nil {
		return nil, err
	}
	hs := &hostedServer{s: governor.NewServer(name, g.defaults.EmailsPerHour, w), rev: rev}
	if r, err := g.kv.Reset(g.ctx, name); err != nil {
		return nil, err
	} else if !r.At.IsZero() {
		hs.s.Reset(r.At)
	}
	g.servers[name] = hs
	return hs, nil
}

// follow applies an operator's change seen in KV to the hosted domains. A
// release is applied to its domain loaded from KV if no broadcast has used
// it since this leader began: the hold it lifts is in the stored state.
func (g *domainHost) follow(ch govstate.Change) {
	if ch.Release != nil {
		if _, err := g.domain(ch.Domain); err != nil {
			g.log.Warn("cannot apply an operator's release of a provider: the domain's governor state is unavailable", "domain", ch.Domain, "provider", ch.Release.Provider, "err", err)
			return
		}
	}
	now := g.clock.Now()
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case ch.Limits != nil:
		h, ok := g.domains[ch.Domain]
		if !ok {
			return // applied when the domain is first used
		}
		h.d.SetLimits(now, ch.Limits.Over(g.defaults))
		if ch.Limits.Ceiling > 0 {
			h.d.SetCeiling(now, ch.Limits.CeilingSetAt, ch.Limits.Ceiling)
		}
		h.dirty = true
	case ch.Release != nil:
		if h, ok := g.domains[ch.Domain]; ok {
			h.d.ReleaseProvider(now, ch.Release.Provider)
			h.dirty = true
		}
	case ch.Reset != nil:
		if hs, ok := g.servers[ch.Server]; ok {
			hs.s.Reset(ch.Reset.At)
			hs.dirty = true
		}
	}
	g.kickFlush()
}

func (g *domainHost) kickFlush() {
	select {
	case g.kick <- struct{}{}:
	default:
	}
}

// limitUnavailable is the refusal of a governor whose state cannot be read:
// pages wait rather than go out unpaced.
const limitUnavailable governor.Limit = "unavailable"

// Grant implements Pacer.
func (g *domainHost) Grant(now time.Time, domain string, n int) (int, governor.Refusal) {
	h, err := g.domain(domain)
	if err != nil {
		g.log.Warn("governor state unavailable; holding pages", "domain", domain, "err", err)
		governorGrants.WithLabelValues(string(limitUnavailable)).Inc()
		return 0, governor.Refusal{Limit: limitUnavailable, Text: "governor of " + domain + " unavailable: " + err.Error()}
	}
	granted, why := h.d.Grant(now, n)
	switch {
	case granted == n:
		governorGrants.WithLabelValues("granted").Inc()
	case granted > 0:
		governorGrants.WithLabelValues("shrunk").Inc()
	default:
		governorGrants.WithLabelValues(string(why.Limit)).Inc()
	}
	return granted, why
}

// Settle implements Pacer.
func (g *domainHost) Settle(domain string, granted, sent int) {
	if h, err := g.domain(domain); err == nil {
		h.d.Settle(granted, sent)
	}
}

// Observe implements Pacer: what a page sent counts toward the day and the
// hour, and what each receiving provider answered feeds its breaker and
// quota hold.
func (g *domainHost) Observe(now time.Time, domain string, rep bus.Report) {
	h, err := g.domain(domain)
	if err != nil {
		g.log.Warn("governor state unavailable; page outcome not counted", "domain", domain, "err", err)
		return
	}
	h.d.Count(now, rep.Sent)
	if rep.Sent > 0 {
		g.mu.Lock()
		if hs, ok := g.servers[serverOf(g.defaults)]; ok {
			hs.dirty = true
		}
		g.mu.Unlock()
	}
	urgent := false
	// A carried ramp step is judged as a whole (RecordStep). Otherwise
	// successes first: a half-open breaker's probe that went through
	// closes it before any later failure in the same page counts.
	carried := map[string]bool{}
	for _, p := range rep.Probed {
		carried[p] = true
	}
	for _, p := range slices.Sorted(maps.Keys(rep.Providers)) {
		if r := rep.Providers[p]; r.Sent > 0 && !carried[p] {
			h.d.RecordSuccess(now, p, r.Sent)
		}
	}
	for _, p := range slices.Sorted(maps.Keys(rep.Providers)) {
		r := rep.Providers[p]
		if carried[p] {
			if r.Sent > 0 || r.Transient > 0 || r.StepEnded {
				h.d.RecordStep(now, p, r.Sent, r.Transient, r.StepEnded, r.Reply)
				urgent = urgent || r.Transient > 0
			}
		} else {
			for range r.Transient {
				h.d.RecordTransientReply(now, p, r.Reply)
				urgent = true
			}
		}
		if r.Hold > 0 {
			// The provider's own guidance (Gmail's 421 4.7.28): held as
			// long as it asks, then ramped back; the ceiling stays.
			h.d.HoldProvider(now, p, r.Hold, r.Reply, r.Linear)
			providerHolds.WithLabelValues(domain, p, r.Reply).Inc()
			g.log.Warn("provider asked for a pause; held", "domain", domain, "provider", p, "reply", r.Reply, "for", r.Hold)
			urgent = true
		}
		if r.Quota {
			h.d.RecordQuotaRejection(now, p)
			quotaRejections.WithLabelValues(domain, p).Inc()
			g.log.Warn("quota rejection; ceiling lowered and provider held", "domain", domain, "provider", p, "ceiling", h.d.State().Ceiling)
			urgent = true
		}
	}
	// A carried ramp step with none of the provider's recipients frees
	// the step for the next page at once.
	for _, p := range rep.Probed {
		if r := rep.Providers[p]; r.Sent == 0 && r.Transient == 0 && !r.Quota && r.Hold == 0 {
			h.d.ReleaseProbe(now, p)
		}
	}
	g.mu.Lock()
	h.dirty = true
	g.mu.Unlock()
	if urgent {
		g.kickFlush()
	}
}

// rampRetry is when a page that does not carry a half-open provider's ramp
// step defers that provider's recipients to: soon, since the sweep that
// carries the next step sends them. (A given-up provider's recipients fail
// instead, and pages carry its steps.)
const rampRetry = 5 * time.Second

// Holds implements Pacer: the providers whose recipients a page of domain
// must defer, and for a sweep the half-open ones whose ramp step it carries,
// with the step's connections. A page defers a half-open provider's
// recipients without taking its step, so the step goes with the sweep of
// that provider's deferred rows; for a provider given up, a page may take
// the step too.
func (g *domainHost) Holds(now time.Time, domain string, sweep bool, started time.Time) ProviderHolds {
	h, err := g.domain(domain)
	if err != nil {
		return ProviderHolds{}
	}
	var hold map[string]time.Time
	var probe []string
	var conns map[string]int
	var giveUp map[string]string
	holding := h.d.Holding(now)
	if jobHoldBytes(holding) > maxJobHoldBytes {
		// The job must fit a NATS message (1 MB by default), or no page
		// of the broadcast is dispatched at all. It names those that
		// hold back most (RankProviders); the rest are tried as if not
		// held (the stored state, which ranks them the same way, names
		// no more of them for a worker's refreshHolds): a provider still
		// refusing defers their rows again with the attempt counted, and
		// one ramping back gets no step until it is among the first.
		ranked := governor.RankProviders(holding)
		n, size := 0, 0
		for ; n < len(ranked); n++ {
			if size += jobHoldBytes(ranked[n : n+1]); size > maxJobHoldBytes {
				break
			}
		}
		holding = ranked[:n]
	}
	for _, p := range holding {
		if hold == nil {
			hold = map[string]time.Time{}
		}
		if why := g.giveUpReason(now, p, started); why != "" {
			if giveUp == nil {
				giveUp = map[string]string{}
			}
			giveUp[p.Provider] = why
		}
		// A page leaves a half-open provider's step to the sweep of its
		// deferred rows, unless the provider is given up: then its held
		// rows fail instead of staying deferred, only those refused on an
		// attempt wait for a sweep (none, once their attempts are used),
		// and without steps on the pages the provider could go untried.
		if p.Phase == governor.PhaseHalfOpen && !sweep && giveUp[p.Provider] == "" {
			hold[p.Provider] = now.Add(min(rampRetry, h.d.Limits().BreakerOpen))
			continue
		}
		open, retryAt := h.d.ProviderOpen(now, p.Provider)
		if open {
			hold[p.Provider] = retryAt
			continue
		}
		if p.Phase == governor.PhaseHalfOpen {
			// This page carries the probe; the provider's other
			// recipients wait for its outcome.
			probe = append(probe, p.Provider)
			if conns == nil {
				conns = map[string]int{}
			}
			conns[p.Provider] = h.d.Connections(now, p.Provider)
			hold[p.Provider] = now.Add(h.d.Limits().BreakerOpen)
			g.mu.Lock()
			h.dirty = true
			g.mu.Unlock()
		}
	}
	l := h.d.Limits()
	return ProviderHolds{Defer: hold, GiveUp: giveUp, Probe: probe, Conns: conns, StepShare: l.BreakerShare, StepFloor: l.BreakerFailures}
}

// maxJobHoldBytes bounds what a page job's holds take (Defer, GiveUp,
// Probe, Conns), half a NATS message at the default max payload.
// Thousands of providers held at once takes a list of many small
// recipient domains and a relay refusing a share of everything for
// minutes.
const maxJobHoldBytes = 512 << 10

// jobHoldBytes is at most what providers take in a page job's JSON: the
// name in Defer with its time, and in GiveUp with its reason (which names
// the provider again), or in Probe and Conns.
func jobHoldBytes(providers []governor.ProviderStatus) int {
	n := 0
	for _, p := range providers {
		n += 3*len(p.Provider) + 220
	}
	return n
}

// giveUpReason is what a held recipient of p fails with once p has accepted
// nothing for g.giveUp since its broadcast started, "" before then: a
// broadcast started while a provider has been refusing for a day still
// gives it a day. It names the run of refusals, not the latest reply, so
// that every recipient given up in one run shares one reason (the failure
// groups of status and report).
func (g *domainHost) giveUpReason(now time.Time, p governor.ProviderStatus, started time.Time) string {
	if p.RefusingSince.IsZero() {
		return ""
	}
	since := p.RefusingSince
	if started.After(since) {
		since = started
	}
	if now.Sub(since) < g.giveUp {
		return ""
	}
	return fmt.Sprintf("%s%s of refusals: %s has accepted nothing since %s UTC (breaker or hold)",
		store.GaveUpPrefix, g.giveUp, p.Provider, since.UTC().Format("2006-01-02 15:04"))
}

// status reports a hosted domain, or nil when it is not hosted here.
func (g *domainHost) status(now time.Time, name string) *governor.Status {
	g.mu.Lock()
	h, ok := g.domains[strings.ToLower(name)]
	g.mu.Unlock()
	if !ok {
		return nil
	}
	s := h.d.Status(now)
	return &s
}

// brief is status with only the first top slowing providers listed
// (governor.Domain.Brief), nil when the domain is not hosted here.
func (g *domainHost) brief(now time.Time, name string, top int) *governor.Status {
	g.mu.Lock()
	h, ok := g.domains[strings.ToLower(name)]
	g.mu.Unlock()
	if !ok {
		return nil
	}
	s := h.d.Brief(now, top)
	return &s
}

// flushDirty writes every changed domain's state by compare-and-set. Only
// the leader writes state, but around a handover the previous leader may
// have written last: govstate merges the two versions (governor.Merge keeps
// the more cautious of each), and the merge is adopted and written.
func (g *domainHost) flushDirty(ctx context.Context) {
	g.mu.Lock()
	var todo []*hosted
	for _, h := range g.domains {
		if h.dirty {
			h.dirty = false
			todo = append(todo, h)
		}
	}
	var servers []*hostedServer
	for _, hs := range g.servers {
		if hs.dirty {
			hs.dirty = false
			servers = append(servers, hs)
		}
	}
	g.mu.Unlock()
	for _, hs := range servers {
		rev, err := g.kv.WriteHourly(ctx, hs.s, hs.rev)
		g.mu.Lock()
		if err != nil {
			hs.dirty = true
		} else {
			hs.rev = rev
		}
		g.mu.Unlock()
		if err != nil {
			g.log.Warn("hourly window not written; retried", "server", hs.s.Name(), "err", err)
		}
	}
	for _, h := range todo {
		g.mu.Lock()
		rev := h.rev
		g.mu.Unlock()
		rev, leftOut, err := g.kv.WriteState(ctx, h.d, rev, g.clock.Now())
		if err != nil {
			g.log.Warn("governor state not written; retried", "domain", h.d.State().Domain, "err", err)
			g.mu.Lock()
			h.dirty = true
			g.mu.Unlock()
			continue
		}
		g.mu.Lock()
		h.rev = rev
		logged := h.leftOut
		grew := leftOut > 0 && (logged == 0 || leftOut >= 2*logged)
		if grew || leftOut == 0 {
			h.leftOut = leftOut
		}
		g.mu.Unlock()
		switch {
		case grew:
			// Once, and again each time the number doubles: it grows
			// with the list's domains as the broadcast goes on.
			g.log.Warn("governor state too large to store whole: the providers that matter least are kept by this coordinator only, and forgotten if another one takes over",
				"domain", h.d.State().Domain, "providers_left_out", leftOut, "budget_bytes", govstate.StateBudget)
		case leftOut == 0 && logged > 0:
			g.log.Info("governor state stored whole again", "domain", h.d.State().Domain)
		}
	}
}

// publishMetrics sets every hosted domain's gauges, changed or not: a
// breaker turns half-open and a day rolls over with no write.
func (g *domainHost) publishMetrics() {
	g.mu.Lock()
	ds := make([]*governor.Domain, 0, len(g.domains))
	for _, h := range g.domains {
		ds = append(ds, h.d)
	}
	g.mu.Unlock()
	now := g.clock.Now()
	for _, d := range ds {
		publishGovernorMetrics(d.Brief(now, metricProviders))
	}
}

// DefaultServer names the SMTP server of domains configured without one.
const DefaultServer = "default"

func serverOf(l governor.Limits) string {
	if l.Server == "" {
		return DefaultServer
	}
	return l.Server
}
