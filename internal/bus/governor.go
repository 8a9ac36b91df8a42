package bus

// GovernorBucket holds the governors of the sending domains: per domain, the
// learned state (written only by the leading coordinator) and the limits an
// operator set (written by whichever coordinator took the API call, watched
// by the leader). Its keys and records are internal/govstate's.
const GovernorBucket = "rangecast_governor"

// UsageSubject carries mail sent outside broadcast pages (transactional) to
// the leading coordinator, whose governors count it: the providers see it
// too. It is on the report stream, so a coordinator failover loses none.
const UsageSubject = "rangecast.reports.usage"

// Usage is what one or more sends outside pages did, for one sending domain.
type Usage struct {
	Domain    string                    `json:"domain"`
	Sent      int                       `json:"sent,omitempty"`
	Providers map[string]ProviderResult `json:"providers,omitempty"`
}
