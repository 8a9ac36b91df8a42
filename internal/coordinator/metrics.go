package coordinator

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// The coordinator's metrics. Its write rate is meant to follow pages, not
// messages: compare kvWrites with the workers' message counters.
var (
	pagesDispatched = promauto.NewCounter(prometheus.CounterOpts{
		Name: "rangecast_coordinator_pages_dispatched_total",
		Help: "Page jobs published to the page stream.",
	})
	reportsApplied = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "rangecast_coordinator_reports_total",
		Help: "Page reports received, by result: advanced (the cursor moved) or ignored (behind the cursor, a duplicate).",
	}, []string{"result"})
	kvWrites = promauto.NewCounter(prometheus.CounterOpts{
		Name: "rangecast_coordinator_kv_writes_total",
		Help: "Writes to the broadcast KV bucket (cursor CAS, range creation, state).",
	})
	leaderGauge = promauto.NewGauge(prometheus.GaugeOpts{
		Name: "rangecast_coordinator_leader",
		Help: "1 while this coordinator holds the leader lease and runs the broadcasts' actors.",
	})
	activeBroadcasts = promauto.NewGauge(prometheus.GaugeOpts{
		Name: "rangecast_coordinator_active_broadcasts",
		Help: "Running or paused broadcasts with an actor on this coordinator.",
	})
	inDoubtSettled = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "rangecast_coordinator_in_doubt_settled_total",
		Help: "In-doubt claims settled by the reconciler: sent (the transport confirmed acceptance), unknown (no way to tell; not resent by policy) or released (walked and sent again).",
	}, []string{"result"})
	broadcastTransitions = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "rangecast_coordinator_broadcast_transitions_total",
		Help: "Broadcast state changes made by the coordinator itself (completed, paused on a channel error, failed).",
	}, []string{"state"})
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
	for _, s := range []string{"completed", "paused", "failed"} {
		broadcastTransitions.WithLabelValues(s)
	}
}
