package pageworker

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// The page worker's metrics.
var (
	pagesRun = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "rangecast_pageworker_pages_total",
		Help: "Page jobs handled, by outcome: done (range finished), walked (more to come), stopped (an error or pause ended it early), parked (broadcast paused), dropped (broadcast finished), failed (not walked; retried).",
	}, []string{"outcome"})
	messages = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "rangecast_pageworker_messages_total",
		Help: "Claimed messages by outcome: sent, failed (the recipient's fault), released (a transient or channel error; retried later), in_doubt (connection lost after the data was sent).",
	}, []string{"outcome"})
	pageSeconds = promauto.NewHistogram(prometheus.HistogramOpts{
		Name:    "rangecast_pageworker_page_seconds",
		Help:    "Time to walk one page, from fetch to report.",
		Buckets: prometheus.ExponentialBuckets(0.01, 2, 14),
	})
)

// Create every labelled series at zero (see the coordinator's metrics.go).
func init() {
	for _, o := range []string{"done", "walked", "stopped", "parked", "dropped", "failed"} {
		pagesRun.WithLabelValues(o)
	}
	for _, o := range []string{"sent", "failed", "released", "in_doubt"} {
		messages.WithLabelValues(o)
	}
}
