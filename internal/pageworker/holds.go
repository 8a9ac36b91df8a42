package pageworker

import (
	"strings"
	"sync"
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
	// lanes are the half-open providers whose ramp step this page carries.
	lanes map[string]*lane
	// giveUp: providers held so long that their held recipients fail, with
	// the reason to record (bus.PageJob's GiveUp).
	giveUp map[string]string
}

// lane is one carried ramp step: the provider's recipients in this page are
// sent on at most conns connections at a time, across all of the page's
// windows in flight, until the step's transient refusals are at least
// floor and share of its attempts (governor.StepEnds, the rule the
// coordinator judges the step by): an isolated deferral, which most
// providers give a few percent of the time, does not end it.
type lane struct {
	conns int
	share float64
	floor int
	sem   chan struct{}
	mu    sync.Mutex
	// attempts and refused count the step's sends that had an answer
	// about the provider (a recipient's own refusal is not one).
	attempts, refused int
	ended             bool
	until             time.Time // when the provider's recipients are due once it ended
}

// settle counts one of the step's sends at now, refused for a transient
// reason or accepted, and ends the step once its refusals meet the rule.
func (l *lane) settle(now time.Time, refused bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.attempts++
	if refused {
		l.refused++
	}
	if governor.StepEnds(l.attempts, l.refused, l.share, l.floor) {
		l.end(now)
	}
}

// stop ends the step at once: the provider said more than a deferral (a
// quota, a pause of its own, a channel error).
func (l *lane) stop(now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.end(now)
}

// end ends the step: the rest wait for the hold the page was given (the
// coordinator's open period, as configured), or, if that has passed
// already, the default open period from now. l.mu is held.
func (l *lane) end(now time.Time) {
	if !l.ended {
		l.ended = true
		if !l.until.After(now) {
			l.until = now.Add(governor.BreakerOpen)
		}
	}
}

// over reports whether the step has ended, and until when its provider waits.
func (l *lane) over() (bool, time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ended, l.until
}

func newHolds(job bus.PageJob) *holds {
	h := &holds{until: map[string]time.Time{}, lanes: map[string]*lane{}, giveUp: job.GiveUp}
	for p, until := range job.Defer {
		h.until[p] = until
	}
	for _, p := range job.Probe {
		c := max(job.Conns[p], 1)
		h.lanes[p] = &lane{conns: c, share: job.StepShare, floor: job.StepFloor, sem: make(chan struct{}, c), until: job.Defer[p]}
	}
	return h
}

// lane is the carried step of provider, nil when the page carries none.
func (h *holds) lane(provider string) *lane { return h.lanes[provider] }

// add merges providers held since the page was dispatched (a quota
// rejection another page met): a page queued before it must not send a
// window into a provider that has just refused. A probe the page carries
// stays its to spend.
func (h *holds) add(held map[string]time.Time) {
	for p, until := range held {
		if _, probe := h.lanes[p]; !probe && until.After(h.until[p]) {
			h.until[p] = until
		}
	}
}

// check returns the receiving provider of an address and, if its recipient
// must not be sent now, when to try again. A carried step's recipients are
// let through until the step ends (the pipeline keeps them to its
// connections).
func (h *holds) check(email string) (provider string, deferUntil time.Time) {
	provider = governor.Provider(email[strings.LastIndexByte(email, '@')+1:])
	until, held := h.until[provider]
	if !held {
		return provider, time.Time{}
	}
	if l := h.lanes[provider]; l != nil {
		if ended, after := l.over(); ended {
			return provider, after
		}
		return provider, time.Time{}
	}
	return provider, until
}
