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
	until  map[string]time.Time
	probes map[string]bool
}

func newHolds(job bus.PageJob) *holds {
	h := &holds{until: map[string]time.Time{}, probes: map[string]bool{}}
	for p, until := range job.Defer {
		h.until[p] = until
	}
	for _, p := range job.Probe {
		h.probes[p] = true
	}
	return h
}

// add merges providers held since the page was dispatched (a quota
// rejection another page met): a page queued before it must not send a
// window into a provider that has just refused. A probe the page carries
// stays its to spend.
func (h *holds) add(held map[string]time.Time) {
	for p, until := range held {
		if !h.probes[p] && until.After(h.until[p]) {
			h.until[p] = until
		}
	}
}

// check returns the receiving provider of an address and, if its recipient
// must not be sent now, when to try again. The first recipient of a probed
// provider is let through (the probe) and the rest wait.
func (h *holds) check(email string) (provider string, deferUntil time.Time) {
	provider = governor.Provider(email[strings.LastIndexByte(email, '@')+1:])
	until, held := h.until[provider]
	if !held {
		return provider, time.Time{}
	}
	if h.probes[provider] {
		delete(h.probes, provider)
		return provider, time.Time{}
	}
	return provider, until
}
