package transactional

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Transactional mail's metrics: requests on the coordinator, attempts and
// latency on the page workers.
var (
	requests = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "rangecast_transactional_requests_total",
		Help: "Send calls by result: created (a new message), replayed (the key named an existing message), conflict (the key was reused with a different payload).",
	}, []string{"result"})
	attempts = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "rangecast_transactional_attempts_total",
		Help: "Transactional send attempts by result: sent, transient, quota, recipient, channel, in_doubt, lost, unknown, invalid.",
	}, []string{"result"})
	retriesScheduled = promauto.NewCounter(prometheus.CounterOpts{
		Name: "rangecast_transactional_retries_scheduled_total",
		Help: "Failed transactional attempts that were scheduled to be tried again.",
	})
	channelErrors = promauto.NewCounter(prometheus.CounterOpts{
		Name: "rangecast_transactional_channel_errors_total",
		Help: "Transactional attempts that failed with a channel-wide error (authentication, sender rejected, unrecognised): alert on any increase.",
	})
	sendSeconds = promauto.NewHistogram(prometheus.HistogramOpts{
		Name:    "rangecast_transactional_send_seconds",
		Help:    "Time from a transactional message's acceptance (Send) to the SMTP server accepting it, retries included.",
		Buckets: prometheus.ExponentialBuckets(0.01, 2, 20),
	})
)
