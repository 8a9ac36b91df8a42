package governor

import "time"

// Limit names what held a send back. Decisions and metric labels read it;
// Refusal.Text is the sentence for people.
type Limit string

const (
	// LimitCeiling: the sending domain's daily ceiling is used up.
	LimitCeiling Limit = "ceiling"
	// LimitHourly: the SMTP server's hourly limit is used up.
	LimitHourly Limit = "hourly"
	// LimitRate: the domain's token bucket is empty for now.
	LimitRate Limit = "rate"
	// LimitHeld: the receiving provider is held after a quota rejection.
	LimitHeld Limit = "provider_held"
	// LimitBreaker: the receiving provider's breaker is open.
	LimitBreaker Limit = "breaker_open"
)

// Refusal is why a grant fell short: the limit that binds, when it frees
// up, and the sentence an operator reads ("daily ceiling of 5,000 for
// example.com reached; resumes 00:00 UTC"). The zero Refusal refuses
// nothing.
type Refusal struct {
	Limit Limit
	Until time.Time
	Text  string
}

// Refused reports whether r holds anything back.
func (r Refusal) Refused() bool { return r.Limit != "" }

func (r Refusal) String() string { return r.Text }

// ProviderLimit is the Limit a provider in phase holds a send back by:
// LimitHeld, LimitBreaker (open or half-open), or "" for a closed one.
func ProviderLimit(phase string) Limit {
	switch phase {
	case PhaseHeld:
		return LimitHeld
	case PhaseOpen, PhaseHalfOpen:
		return LimitBreaker
	}
	return ""
}
