package coordinator

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/rangecast/rangecast/internal/governor"
)

// Metrics is the registry of the coordinator's metrics, which only a
// process that runs a coordinator serves (server: its /metrics). On the
// default registry they were registered in every process that links this
// package, so each page worker exported rangecast_coordinator_leader 0:
// the alert on that metric's absence could never fire, and dashboards
// listed workers as coordinators.
var Metrics = prometheus.NewRegistry()

var auto = promauto.With(Metrics)

// The coordinator's metrics. Its write rate is meant to follow pages, not
// messages: compare kvWrites with the workers' message counters.
var (
	pagesDispatched = auto.NewCounter(prometheus.CounterOpts{
		Name: "rangecast_coordinator_pages_dispatched_total",
		Help: "Page jobs published to the page stream.",
	})
	reportsApplied = auto.NewCounterVec(prometheus.CounterOpts{
		Name: "rangecast_coordinator_reports_total",
		Help: "Page reports received, by result: advanced (the cursor moved) or ignored (behind the cursor, a duplicate).",
	}, []string{"result"})
	kvWrites = auto.NewCounter(prometheus.CounterOpts{
		Name: "rangecast_coordinator_kv_writes_total",
		Help: "Writes to the broadcast KV bucket (cursor CAS, range creation, state).",
	})
	leaderGauge = auto.NewGauge(prometheus.GaugeOpts{
		Name: "rangecast_coordinator_leader",
		Help: "1 while this coordinator holds the leader lease and runs the broadcasts' actors.",
	})
	activeBroadcasts = auto.NewGauge(prometheus.GaugeOpts{
		Name: "rangecast_coordinator_active_broadcasts",
		Help: "Running or paused broadcasts with an actor on this coordinator.",
	})
	inDoubtSettled = auto.NewCounterVec(prometheus.CounterOpts{
		Name: "rangecast_coordinator_in_doubt_settled_total",
		Help: "In-doubt claims settled by the reconciler: sent (the transport confirmed acceptance), unknown (no way to tell; not resent by policy) or released (walked and sent again).",
	}, []string{"result"})
	governorGrants = auto.NewCounterVec(prometheus.CounterOpts{
		Name: "rangecast_governor_grants_total",
		Help: "Page grants asked of the sending domains' governors, by result: granted, shrunk (less than asked), or refused by the limit that bound (ceiling, hourly, rate, unavailable).",
	}, []string{"result"})
	quotaRejections = auto.NewCounterVec(prometheus.CounterOpts{
		Name: "rangecast_governor_quota_rejections_total",
		Help: "Quota rejections (e.g. 452 4.5.3) by sending domain and receiving provider; each halves the ceiling and holds the provider.",
	}, []string{"domain", "provider"})
	governorCeiling = auto.NewGaugeVec(prometheus.GaugeOpts{
		Name: "rangecast_governor_daily_ceiling",
		Help: "The learned daily ceiling of each sending domain.",
	}, []string{"domain"})
	governorSentToday = auto.NewGaugeVec(prometheus.GaugeOpts{
		Name: "rangecast_governor_sent_today",
		Help: "Messages each sending domain has sent since 00:00 UTC.",
	}, []string{"domain"})
	governorBreaker = auto.NewGaugeVec(prometheus.GaugeOpts{
		Name: "rangecast_governor_provider_state",
		Help: "Receiving providers that are not plainly open to a sending domain: 1 half-open (ramping back up), 2 open (breaker), 3 held (a quota rejection, or a pause the provider asked for). Providers with no series are closed.",
	}, []string{"domain", "provider"})
	providerHolds = auto.NewCounterVec(prometheus.CounterOpts{
		Name: "rangecast_governor_provider_holds_total",
		Help: "Pauses a receiving provider asked for in its own words (Gmail 421 4.7.28: 10 minutes, then ramped back one connection at a time), by sending domain, provider and reply. The ceiling is left alone.",
	}, []string{"domain", "provider", "reply"})
	providerDeferred = auto.NewGaugeVec(prometheus.GaugeOpts{
		Name: "rangecast_governor_provider_deferred_ratio",
		Help: "Share of a receiving provider's attempts refused for a transient reason in the breaker's 5-minute window, while its breaker is closed and it has refused some; no series otherwise.",
	}, []string{"domain", "provider"})
	providersSlowing = auto.NewGaugeVec(prometheus.GaugeOpts{
		Name: "rangecast_governor_providers_slowing",
		Help: "Receiving providers that slow a sending domain: held, open, ramping back, or refusing some attempts. The per-provider series show the first 20 of them (held and open first, then the big providers), not one per small recipient domain.",
	}, []string{"domain"})
	providerRamp = auto.NewGaugeVec(prometheus.GaugeOpts{
		Name: "rangecast_governor_provider_ramp_connections",
		Help: "Connections a half-open receiving provider's next ramp step may use (1 is the probe; the breaker closes past the ramp's top); no series when not ramping.",
	}, []string{"domain", "provider"})
	broadcastTransitions = auto.NewCounterVec(prometheus.CounterOpts{
		Name: "rangecast_coordinator_broadcast_transitions_total",
		Help: "Broadcast state changes made by the coordinator itself (completed, paused on a channel error, failed).",
	}, []string{"state"})
	scheduledStarts = auto.NewCounter(prometheus.CounterOpts{
		Name: "rangecast_coordinator_scheduled_starts_total",
		Help: "Scheduled drafts the leader started at their time (broadcasts schedule).",
	})
)

// Labelled counters get a series only once a label value is used, and
// increase() cannot see that first step; create the series at zero so the
// first failed broadcast or in-doubt settlement raises an alert.
func init() {
	for _, r := range []string{"advanced", "ignored"} {
		reportsApplied.WithLabelValues(r)
	}
	for _, r := range []string{"sent", "unknown", "released"} {
		inDoubtSettled.WithLabelValues(r)
	}
	for _, r := range []string{"granted", "shrunk", string(governor.LimitCeiling), string(governor.LimitHourly), string(governor.LimitRate), string(limitUnavailable)} {
		governorGrants.WithLabelValues(r)
	}
	for _, s := range []string{"completed", "paused", "failed"} {
		broadcastTransitions.WithLabelValues(s)
	}
}

// publishGovernorMetrics sets a sending domain's gauges from its status.
func publishGovernorMetrics(s governor.Status) {
	governorCeiling.WithLabelValues(s.Domain).Set(float64(s.Ceiling))
	governorSentToday.WithLabelValues(s.Domain).Set(float64(s.SentToday))
	governorBreaker.DeletePartialMatch(prometheus.Labels{"domain": s.Domain})
	providerDeferred.DeletePartialMatch(prometheus.Labels{"domain": s.Domain})
	providerRamp.DeletePartialMatch(prometheus.Labels{"domain": s.Domain})
	// s is a Brief: its Providers are the first metricProviders slowing.
	providersSlowing.WithLabelValues(s.Domain).Set(float64(s.ProvidersSlowing))
	for _, p := range s.Providers {
		var v float64
		switch p.Phase {
		case governor.PhaseHalfOpen:
			v = 1
			providerRamp.WithLabelValues(s.Domain, p.Provider).Set(float64(p.Connections))
		case governor.PhaseOpen:
			v = 2
		case governor.PhaseHeld:
			v = 3
		default:
			if p.Failures > 0 {
				providerDeferred.WithLabelValues(s.Domain, p.Provider).Set(p.Deferred)
			}
			continue
		}
		governorBreaker.WithLabelValues(s.Domain, p.Provider).Set(v)
	}
}

// metricProviders bounds the per-provider series of a sending domain: a
// list of many small recipient domains would give one each.
const metricProviders = 20

// resetGovernorMetrics drops every domain's gauges (the term ended).
func resetGovernorMetrics() {
	governorCeiling.Reset()
	governorSentToday.Reset()
	governorBreaker.Reset()
	providerDeferred.Reset()
	providerRamp.Reset()
	providersSlowing.Reset()
}
