// Package maintenance holds the leader's background services that keep the
// store in shape, each with its Config and Run, testable against a store
// alone (River's maintenance services): Retention purges what is kept only
// for a while; Alarm pauses broadcasts whose bounce or complaint rate
// passes its threshold.
package maintenance

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Metrics is the registry of the maintenance services' metrics, which run
// on the leading coordinator: a process serves it only if it runs a
// coordinator (as coordinator.Metrics).
var Metrics = prometheus.NewRegistry()

var purged = promauto.With(Metrics).NewCounterVec(prometheus.CounterOpts{
	Name: "rangecast_coordinator_purged_rows_total",
	Help: "Rows deleted past their retention, by table: delivery_events (webhook events) and outbound_receipts (finished transactional messages, with their attempts); broadcast_reputation_deltas counts pending reputation changes folded into their broadcast's sums.",
}, []string{"table"})

func init() {
	for _, t := range []string{"delivery_events", "outbound_receipts", "broadcast_reputation_deltas"} {
		purged.WithLabelValues(t)
	}
}
