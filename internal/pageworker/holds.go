package pageworker

import (
	"context"
	"slices"
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
	// freed is signalled (without blocking) whenever a lane's connection
	// is given back: a sweep with nothing to claim but rows of busy lanes
	// waits on it (waitFreed).
	freed chan struct{}
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
	// domains are the recipient domains (lower case) of the provider's
	// recipients the page has met: what ClaimDue leaves due while every
	// connection of the step is busy (holds.busy). The page loop's alone.
	domains map[string]bool
	freed   chan struct{} // holds.freed
}

// acquire takes one of the step's connections for a send of a window. A
// recipient waits for one only while the window's other sends run
// (others, closed once they have all ended): a step's few connections
// into a slow provider (a tarpit answering in half a minute) would
// otherwise hold the window, and every other provider's recipient behind
// it, for as long as the provider's queue takes. false: none came free in
// time; the recipient is given back (errLaneBusy).
func (l *lane) acquire(others <-chan struct{}) bool {
	select {
	case l.sem <- struct{}{}:
		return true
	default:
	}
	select {
	case l.sem <- struct{}{}:
		return true
	case <-others:
		return false
	}
}

// release gives a connection back and says so to a sweep waiting for one.
func (l *lane) release() {
	<-l.sem
	select {
	case l.freed <- struct{}{}:
	default:
	}
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
	h := &holds{until: map[string]time.Time{}, lanes: map[string]*lane{}, giveUp: job.GiveUp, freed: make(chan struct{}, 1)}
	for p, until := range job.Defer {
		h.until[p] = until
	}
	for _, p := range job.Probe {
		c := max(job.Conns[p], 1)
		h.lanes[p] = &lane{conns: c, share: job.StepShare, floor: job.StepFloor, sem: make(chan struct{}, c), until: job.Defer[p],
			domains: map[string]bool{}, freed: h.freed}
	}
	return h
}

// busy returns the recipient domains of the carried steps whose every
// connection is taken, for ClaimDue to leave due (sorted), and how many
// connections the other steps have free. A step that has ended takes no
// more sends, and leaves nothing: its recipients wait for its hold.
func (h *holds) busy() (leave []string, free int) {
	for _, l := range h.lanes {
		if ended, _ := l.over(); ended {
			continue
		}
		if n := len(l.sem); n < l.conns {
			free += l.conns - n
			continue
		}
		for d := range l.domains {
			leave = append(leave, d)
		}
	}
	slices.Sort(leave)
	return leave, free
}

// waitFreed waits until a carried step's connection is given back or
// recheck fires (true), or ctx or pageCtx ends (false).
func (h *holds) waitFreed(ctx, pageCtx context.Context, recheck <-chan time.Time) bool {
	select {
	case <-h.freed:
		return true
	case <-recheck:
		return true
	case <-ctx.Done():
		return false
	case <-pageCtx.Done():
		return false
	}
}

// lane is the carried step of provider, nil when the page carries none.
func (h *holds) lane(provider string) *lane { return h.lanes[provider] }

// releasedWait is how long a recipient waits whose provider the page was
// dispatched holding and the governor now ramps back up: about when the
// sweep carrying its ramp step comes (the coordinator's own wait for a
// page's half-open provider).
const releasedWait = 5 * time.Second

// refresh follows the governor's holds at now (held: the providers it
// holds, with until when; ramping: those it ramps back up). Providers held
// since the page was dispatched (a quota rejection another page met) are
// added: a page queued before it must not send a window into a provider
// that has just refused. A provider the page was given held that the
// governor ramps back up (an operator lifted it, or its hold ran out) is
// still not sent to, but its recipients wait releasedWait, not the hold
// the page was given: a page dispatched before an operator's release
// otherwise deferred them to the lifted hold's end. Only a provider the
// governor's state says is ramping is shortened: one missing from it (not
// written yet, or left out of a large state) keeps the page's hold. A probe
// the page carries stays its to spend.
func (h *holds) refresh(held map[string]time.Time, ramping map[string]bool, now time.Time) {
	for p, until := range held {
		if _, probe := h.lanes[p]; !probe && until.After(h.until[p]) {
			h.until[p] = until
		}
	}
	soon := now.Add(releasedWait)
	for p, until := range h.until {
		if _, probe := h.lanes[p]; !probe && ramping[p] && until.After(soon) {
			h.until[p] = soon
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
