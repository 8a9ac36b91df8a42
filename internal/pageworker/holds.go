package pageworker

import (
	"strings"
	"time"

	"github.com/rangecast/rangecast/internal/bus"
	"github.com/rangecast/rangecast/internal/governor"
)

// holds is one page's view of the governor: the receiving providers whose
// recipients must be deferred, and the breaker probes the page may spend.
// The coordinator decides both when it dispatches the page; the worker only
// follows them, so every worker agrees without reading governor state.
type holds struct {
	until map[string]time.Time
	// probes are the half-open providers whose ramp step this page
	// carries, with the connections it may use for them.
	probes map[string]int
}

func newHolds(job bus.PageJob) *holds {
	h := &holds{until: map[string]time.Time{}, probes: map[string]int{}}
	for p, until := range job.Defer {
		h.until[p] = until
	}
	for _, p := range job.Probe {
		h.probes[p] = max(job.Conns[p], 1)
	}
	return h
}

// conns is how many of provider's recipients may be sent at once: 0 for no
// limit (not a carried probe).
func (h *holds) conns(provider string) int { return h.probes[provider] }

// refused ends a carried step at its first refusal: the provider's other
// recipients wait until its hold time, and the report's refusal re-opens
// its breaker.
func (h *holds) refused(provider string, now time.Time) {
	if _, ok := h.probes[provider]; ok {
		delete(h.probes, provider)
		if h.until[provider].Before(now) {
			h.until[provider] = now.Add(governor.BreakerOpen)
		}
	}
}

// add merges providers held since the page was dispatched (a quota
// rejection another page met): a page queued before it must not send a
// window into a provider that has just refused. A probe the page carries
// stays its to spend.
func (h *holds) add(held map[string]time.Time) {
	for p, until := range held {
		if _, probe := h.probes[p]; !probe && until.After(h.until[p]) {
			h.until[p] = until
		}
	}
}

// check returns the receiving provider of an address and, if its recipient
// must not be sent now, when to try again. A carried probe's recipients are
// let through (deliver keeps them to the step's connections).
func (h *holds) check(email string) (provider string, deferUntil time.Time) {
	provider = governor.Provider(email[strings.LastIndexByte(email, '@')+1:])
	until, held := h.until[provider]
	if !held {
		return provider, time.Time{}
	}
	if _, probe := h.probes[provider]; probe {
		return provider, time.Time{}
	}
	return provider, until
}
