package pageworker

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Metrics is the registry of the page worker's metrics, which only a
// process that runs page workers serves (server: its /metrics). On the
// default registry every coordinator exported them too, at zero: a series
// per coordinator that sends nothing, counted in per-instance views of
// workers.
var Metrics = prometheus.NewRegistry()

var auto = promauto.With(Metrics)

// The page worker's metrics.
var (
	pagesRun = auto.NewCounterVec(prometheus.CounterOpts{
		Name: "rangecast_pageworker_pages_total",
		Help: "Page jobs handled, by outcome: done (range finished), walked (more to come), stopped (an error or pause ended it early), parked (broadcast paused), dropped (broadcast finished), failed (not walked; retried), waiting (a dependency outage held the page; counted once per wait).",
	}, []string{"outcome"})
	messages = auto.NewCounterVec(prometheus.CounterOpts{
		Name: "rangecast_pageworker_messages_total",
		Help: "Claimed messages by outcome: sent, failed (the recipient's fault), deferred (the governor held the provider), retry (a transient, quota or channel error; recorded deferred and sent later), in_doubt (connection lost after the data was sent; left to the reconciler).",
	}, []string{"outcome"})
	storeRetries = auto.NewCounter(prometheus.CounterOpts{
		Name: "rangecast_pageworker_store_retries_total",
		Help: "Store writes of known outcomes retried after an error (a failover, a dropped connection, an ambiguous commit).",
	})
	stragglers = auto.NewCounterVec(prometheus.CounterOpts{
		Name: "rangecast_pageworker_stragglers_total",
		Help: "Sends a page (job=page) or a sweep of due retries (job=sweep) went on without: still running, once half their window had ended, three times its median send time (at least 20 ms) after the last of the others (a server tarpitting one recipient, a slow reply to the data). Each outcome is recorded with a later window's.",
	}, []string{"job"})
	rampGivenBack = auto.NewCounter(prometheus.CounterOpts{
		Name: "rangecast_pageworker_ramp_given_back_total",
		Help: "Recipients of a provider ramping back up that a sweep claimed and gave back unsent, due at once and not counted as an attempt, because every connection of the provider's ramp step was busy while the rest of their window was sent.",
	})
	pageSeconds = auto.NewHistogram(prometheus.HistogramOpts{
		Name:    "rangecast_pageworker_page_seconds",
		Help:    "Time to walk one page, from fetch to report.",
		Buckets: prometheus.ExponentialBuckets(0.01, 2, 14),
	})
)

// Create every labelled series at zero (see the coordinator's metrics.go).
func init() {
	for _, o := range []string{"done", "walked", "stopped", "parked", "dropped", "failed", "waiting"} {
		pagesRun.WithLabelValues(o)
	}
	for _, o := range []string{"sent", "failed", "deferred", "retry", "in_doubt"} {
		messages.WithLabelValues(o)
	}
	for _, j := range []string{"page", "sweep"} {
		stragglers.WithLabelValues(j)
	}
}
