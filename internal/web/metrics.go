package web

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// The public HTTP's metrics (served by the coordinator process).
var (
	webhookEvents = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "rangecast_webhook_events_total",
		Help: "Delivery events received from authenticated webhooks, by provider, event type and result: applied (moved the ledger row or suppressed the contact), unchanged (the rank guard kept a higher status), duplicate (event id seen before), unmatched (Message-ID names no ledger row, nor a transactional message to a known contact), ignored (an event type rangecast does not track).",
	}, []string{"provider", "type", "result"})
	webhookRejected = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "rangecast_webhook_rejected_total",
		Help: "Webhook requests refused, changing nothing, by provider and reason: unsigned, bad_signature, stale (outside the replay window), malformed, too_large.",
	}, []string{"provider", "reason"})
	unsubscribeRequests = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "rangecast_unsubscribe_requests_total",
		Help: "One-click unsubscribe requests, by result: form (GET, nothing changed), unsubscribed (valid token, contact unsubscribed), invalid (token did not verify; same answer), unknown_contact (valid token, contact gone), bad_request (POST without List-Unsubscribe=One-Click), error (store failed; 503).",
	}, []string{"result"})
)
