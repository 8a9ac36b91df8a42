package pageworker

import (
	"context"
	"sync"
	"time"
)

// InDoubtWindows bounds what one page run holds claimed without an
// outcome, in in-flight windows (Config.Concurrency): the window being sent
// and the one claimed behind it. A page run that has claimed its last
// window hands its turn on once only that window is without an outcome
// (Worker.Run), so a worker holds at most InDoubtBound claims in doubt.
const InDoubtWindows = 2

// InDoubtBound is the most claims without an outcome a worker running
// pages at once, window contacts at a time, holds at any moment, and so
// the most a kill -9 of it leaves in doubt: InDoubtWindows windows for each
// of its turns, and one window of the page that is finishing while the
// next one starts.
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
	l       *loaded
	batches chan *batch
	sends   sync.WaitGroup
	done    chan struct{}
	// started is what start was given and wait has not returned, in order
	// (the page loop's alone).
	started []*batch
}

// newPipeline starts the sender; ahead is how many windows may wait to be
// sent behind the one being sent (the page loop never hands more).
func newPipeline(w *Worker, ctx context.Context, l *loaded, ahead int) *pipeline {
	p := &pipeline{w: w, ctx: ctx, l: l,
		batches: make(chan *batch, ahead+1), done: make(chan struct{})}
	go p.run()
	return p
}

func (p *pipeline) start(b *batch) {
	p.started = append(p.started, b)
	p.batches <- b
}

// wait returns the oldest window started and not yet waited for, once all
// its sends have finished.
func (p *pipeline) wait() *batch {
	b := p.started[0]
	p.started = p.started[1:]
	<-b.done
	return b
}

// close sends what was started and returns when every send has finished.
func (p *pipeline) close() {
	close(p.batches)
	<-p.done
}

func (p *pipeline) run() {
	defer close(p.done)
	for b := range p.batches {
		var wg sync.WaitGroup
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
			p.sends.Add(1)
			p.w.senders.run(func() {
				defer func() { <-p.w.slots; wg.Done(); p.sends.Done() }()
				b.errs[i] = p.w.send(p.ctx, p.l, c, b.now)
			})
		}
		for ln, idx := range laned {
			p.sendLane(b, ln, idx, &wg)
		}
		go func() { wg.Wait(); close(b.done) }()
	}
	p.sends.Wait()
}

// sendLane sends a window's recipients idx of a carried ramp step: each send
// takes one of the step's connections (shared by every window of the page)
// and then a slot, and once the step's transient refusals meet the
// breaker's rule (lane.settle), or the provider answers with more than a
// deferral (lane.stop), the step ends and the rest get errStepEnded.
func (p *pipeline) sendLane(b *batch, ln *lane, idx []int, wg *sync.WaitGroup) {
	var mu sync.Mutex
	next := 0
	take := func() (int, bool) {
		mu.Lock()
		defer mu.Unlock()
		if next == len(idx) {
			return 0, false
		}
		next++
		return idx[next-1], true
	}
	for range min(ln.conns, len(idx)) {
		wg.Add(1)
		p.sends.Add(1)
		go func() {
			defer func() { wg.Done(); p.sends.Done() }()
			for i, ok := take(); ok; i, ok = take() {
				ln.sem <- struct{}{}
				if ended, _ := ln.over(); ended {
					<-ln.sem
					b.errs[i] = errStepEnded
					continue
				}
				p.w.slots <- struct{}{}
				err := p.w.send(p.ctx, p.l, b.window[i], b.now)
				<-p.w.slots
				<-ln.sem
				switch b.errs[i] = err; {
				case err == nil:
					ln.settle(b.now, false)
				case isRecipientError(err), aboutOneMailbox(err):
					// The recipient's own: says nothing of the provider.
				case isDeferral(err):
					ln.settle(b.now, true)
				default:
					ln.stop(b.now)
				}
			}
		}()
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
