package pageworker

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// InDoubtWindows bounds, per turn of a worker, the claims held without an
// outcome, in in-flight windows (Config.Concurrency): the window being sent
// and the one claimed behind it, for each page run, and a window of
// stragglers, sends that outlived their window's conclusion
// (pipeline.wait): the worker's straggler tokens, Pages × Concurrency in
// all, each given back only once its straggler's outcome is committed,
// whichever pages hold them (one page may hold them all). A page run that
// has claimed its last window hands its turn on once only that window and
// its stragglers are without an outcome (Worker.Run), so a worker holds at
// most InDoubtBound claims in doubt.
const InDoubtWindows = 3

// InDoubtBound is the most claims without an outcome a worker running
// pages at once, window contacts at a time, holds at any moment, and so
// the most a kill -9 of it leaves in doubt: InDoubtWindows windows for each
// of its turns (the stragglers' window counted there, whichever pages hold
// them), and one window of the page that is finishing while the next one
// starts.
func InDoubtBound(pages, window int) int {
	return (InDoubtWindows*max(pages, 1) + 1) * window
}

// pipeline sends a page's windows one after another through the worker's
// send slots (Pages × Concurrency, shared by every page the worker runs): a
// window's first sends start as the slots of the one before free up,
// instead of after its slowest send, and the next page's first window as
// the last one of this page frees them. Only
// the sends run here; the page loop claims, decides holds and records
// outcomes, so every store call and every decision stays in one goroutine.
//
// A window handed to start is sent whole, whatever the page decides
// afterwards: its contacts are claimed, and a claimed contact left unsent
// would need an outcome of its own. close waits for every send started.
type pipeline struct {
	w       *Worker
	ctx     context.Context
	l       atomic.Pointer[loaded] // the content sends render (setContent)
	batches chan *batch
	sends   sync.WaitGroup
	done    chan struct{}
	// started is what start was given and wait has not returned, in order
	// (the page loop's alone).
	started []*batch
	// job is what runs the windows, "page" or "sweep": the stragglers
	// metric's label.
	job string
}

// newPipeline starts the sender for a job ("page" or "sweep"); ahead is
// how many windows may wait to be sent behind the one being sent (the page
// loop never hands more).
func newPipeline(w *Worker, ctx context.Context, l *loaded, job string, ahead int) *pipeline {
	p := &pipeline{w: w, ctx: ctx, job: job,
		batches: make(chan *batch, ahead+1), done: make(chan struct{})}
	p.l.Store(l)
	go p.run()
	return p
}

// setContent is the content the windows started from now on render: the
// one the store holds once the run's claims are taken (Worker.sendable).
func (p *pipeline) setContent(l *loaded) { p.l.Store(l) }

func (p *pipeline) start(b *batch) {
	p.started = append(p.started, b)
	p.batches <- b
}

// wait returns the oldest window started and not yet waited for, once all
// its sends have finished, or all but its stragglers (pending): sends still
// running, once at least half of them have ended, a grace after the last
// of the others ended: three times the window's median send time, at least
// StragglerAfter. A straggler (a server tarpitting one recipient,
// an end-of-data reply that takes half a minute) would otherwise hold the
// whole page: the window after next is claimed only in the commit that
// records this one. Each straggler takes one of the worker's straggler
// tokens (Worker.late), which bound the claims stragglers keep without an
// outcome; without enough of them the window is waited for whole, as
// before. A straggler reports on b.finished when it ends.
//
// The grace is on the real clock, not Config.Clock: it measures real sends.
func (p *pipeline) wait() (b *batch, pending []int) {
	least := p.w.cfg.StragglerAfter
	if least <= 0 {
		return p.waitAll(), nil
	}
	b = p.started[0]
	p.started = p.started[1:]
	ended := make([]bool, len(b.window))
	// The grace is three times the window's median send, at least
	// StragglerAfter: fixed when half have ended, the slowest of them.
	var grace, median time.Duration
	var timer *time.Timer
	var fire <-chan time.Time // armed while at least half have ended and some run on
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for n := 0; n < b.attempted; {
		select {
		case i := <-b.finished:
			ended[i] = true
			median = max(median, b.took[i])
			if n++; 2*n >= b.attempted && n < b.attempted {
				if grace == 0 {
					grace = max(least, 3*median)
				}
				if timer == nil {
					timer = time.NewTimer(grace)
				} else {
					timer.Reset(grace)
				}
				fire = timer.C
			}
		case <-fire:
			fire = nil // re-armed when the next send ends
			for drained := false; !drained; {
				select {
				case i := <-b.finished: // ended while the timer fired
					ended[i] = true
					n++
				default:
					drained = true
				}
			}
			if n == b.attempted {
				return b, nil
			}
			for i, c := range b.window {
				if b.mine[c.ID] && b.deferUntil[i].IsZero() && !ended[i] {
					pending = append(pending, i)
				}
			}
			if p.w.takeLate(len(pending)) {
				stragglers.WithLabelValues(p.job).Add(float64(len(pending)))
				return b, pending
			}
			// The worker's tokens are held by other pages' stragglers:
			// try again as they conclude, not only when this window's
			// own sends end (a tarpit's end, seconds away).
			pending = nil
			timer.Reset(least)
			fire = timer.C
		}
	}
	return b, nil
}

// waitAll returns the oldest window started and not yet waited for, once
// every one of its sends has finished.
func (p *pipeline) waitAll() *batch {
	b := p.started[0]
	p.started = p.started[1:]
	<-b.done
	return b
}

// takeLate takes n straggler tokens, or none if fewer are free.
func (w *Worker) takeLate(n int) bool {
	for k := range n {
		select {
		case w.late <- struct{}{}:
		default:
			w.giveLate(k)
			return false
		}
	}
	return true
}

// giveLate returns n straggler tokens: their stragglers' outcomes are
// concluded.
func (w *Worker) giveLate(n int) {
	for range n {
		<-w.late
	}
}

// close sends what was started and returns when every send has finished.
func (p *pipeline) close() {
	p.closeLaunched()
	p.sends.Wait()
}

// closeLaunched sends what was started and returns once every send has
// begun; they finish on their own.
func (p *pipeline) closeLaunched() {
	close(p.batches)
	<-p.done
}

func (p *pipeline) run() {
	defer close(p.done)
	for b := range p.batches {
		var wg, others sync.WaitGroup // every send; those not under a carried step
		var laned map[*lane][]int
		for i, c := range b.window {
			if !b.mine[c.ID] || !b.deferUntil[i].IsZero() {
				continue
			}
			if ln := b.lane(i); ln != nil {
				if laned == nil {
					laned = map[*lane][]int{}
				}
				laned[ln] = append(laned[ln], i)
				continue
			}
			p.w.slots <- struct{}{}
			wg.Add(1)
			others.Add(1)
			p.sends.Add(1)
			p.w.senders.run(func() {
				defer func() { <-p.w.slots; b.finished <- i; others.Done(); wg.Done(); p.sends.Done() }()
				if !p.w.live.sendable(b.owner, p.w.cfg.Clock.Now()) {
					b.errs[i] = errLapsed
					return
				}
				began := time.Now()
				b.errs[i] = p.w.send(p.ctx, p.l.Load(), c, b.now)
				b.took[i] = time.Since(began)
			})
		}
		if laned != nil {
			// A sweep gives back what its steps cannot send beside the
			// rest of the window (sendLane). A page (one carrying a given-up
			// provider's step) sends all its recipients through the step,
			// however long that takes: a nil othersDone never closes.
			var othersDone chan struct{}
			if p.job == "sweep" {
				othersDone = make(chan struct{})
				go func() { others.Wait(); close(othersDone) }()
			}
			for ln, idx := range laned {
				p.sendLane(b, ln, idx, &wg, othersDone)
			}
		}
		go func() { wg.Wait(); close(b.done) }()
	}
}

// sendLane sends a window's recipients idx of a carried ramp step: each send
// takes one of the step's connections (shared by every window of the page)
// and then a slot, and once the step's transient refusals meet the
// breaker's rule (lane.settle), or the provider answers with more than a
// deferral (lane.stop), the step ends and the rest get errStepEnded.
//
// In a sweep, the step's recipients are sent only while the window's other
// sends run (othersDone), beyond those that find a connection free at once: the rest
// are given back (errLaneBusy), due at once, so a slow provider's few
// connections never hold its window, nor the other providers' retries
// claimed after it (a tarpit's ramp step held every retry of its broadcast
// for hours: tester I). A sweep leaves the step's domains due while its
// connections are all busy (holds.busy), so it claims others meanwhile.
func (p *pipeline) sendLane(b *batch, ln *lane, idx []int, wg *sync.WaitGroup, othersDone <-chan struct{}) {
	// One goroutine per connection, each with a first recipient of its
	// own; the rest are taken in turn as sends end.
	senders := min(ln.conns, len(idx))
	var mu sync.Mutex
	next := senders
	take := func() (int, bool) {
		mu.Lock()
		defer mu.Unlock()
		if next == len(idx) {
			return 0, false
		}
		next++
		return idx[next-1], true
	}
	if othersDone != nil && len(idx) > senders {
		// Once the window's other sends have ended, those not taken
		// yet are given back, whoever is still sending.
		wg.Add(1)
		p.sends.Add(1)
		go func() {
			defer func() { wg.Done(); p.sends.Done() }()
			<-othersDone
			for i, ok := take(); ok; i, ok = take() {
				b.errs[i] = errLaneBusy
				if ended, _ := ln.over(); ended {
					b.errs[i] = errStepEnded // as the senders would have said
				}
				b.finished <- i
			}
		}()
	}
	for k := range senders {
		wg.Add(1)
		p.sends.Add(1)
		go func() {
			defer func() { wg.Done(); p.sends.Done() }()
			first := true // this goroutine's first recipient: it may take a connection free at once
			for i, ok := idx[k], true; ok; i, ok = take() {
				if ended, _ := ln.over(); ended {
					b.errs[i] = errStepEnded
					b.finished <- i
					continue
				}
				if (!first && closed(othersDone)) || !ln.acquire(othersDone) {
					b.errs[i] = errLaneBusy
					b.finished <- i
					continue
				}
				first = false
				if ended, _ := ln.over(); ended {
					ln.release()
					b.errs[i] = errStepEnded
					b.finished <- i
					continue
				}
				p.w.slots <- struct{}{}
				if !p.w.live.sendable(b.owner, p.w.cfg.Clock.Now()) {
					<-p.w.slots
					ln.release()
					b.errs[i] = errLapsed
					b.finished <- i
					continue
				}
				began := time.Now()
				err := p.w.send(p.ctx, p.l.Load(), b.window[i], b.now)
				b.took[i] = time.Since(began)
				<-p.w.slots
				ln.release()
				switch b.errs[i] = err; {
				case err == nil:
					ln.settle(b.now, false)
				case isRecipientError(err), notTheProviders(err):
					// The recipient's own, one mailbox's, or the relay's:
					// says nothing of the provider.
				case isDeferral(err):
					ln.settle(b.now, true)
				default:
					ln.stop(b.now)
				}
				b.finished <- i
			}
		}()
	}
}

// closed reports whether ch is closed, without waiting.
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// senders runs sends on goroutines that outlive one send. A send renders
// its message through html/template, which grows a new goroutine's stack
// several times over: with a goroutine per send, runtime.newstack and
// copystack were 6–7 % of a worker's CPU in make bench. A sender keeps its
// grown stack for the next send. A new sender starts only when none is
// waiting for work, so there are about as many as the worker's slots (a
// few more where a send came while a sender was between two), and one
// idle for senderIdle exits, so a worker that stops sending holds none.
type senders struct{ tasks chan func() }

const senderIdle = 30 * time.Second

// run runs f on an idle sender, or on a new one if none is waiting.
func (s *senders) run(f func()) {
	select {
	case s.tasks <- f:
	default:
		go s.loop(f)
	}
}

func (s *senders) loop(f func()) {
	idle := time.NewTimer(senderIdle)
	defer idle.Stop()
	for {
		f()
		idle.Reset(senderIdle)
		select {
		case f = <-s.tasks:
		case <-idle.C:
			return
		}
	}
}
