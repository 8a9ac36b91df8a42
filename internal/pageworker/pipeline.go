package pageworker

import (
	"context"
	"sync"
)

// InDoubtWindows bounds what one page run holds claimed without an
// outcome, in in-flight windows (Config.Concurrency): the window being sent
// and the one claimed behind it. A kill -9 leaves at most this many windows
// per page run in doubt.
const InDoubtWindows = 2

// pipeline sends a page's windows one after another through a fixed number
// of slots (the worker's Concurrency): a window's first sends start as the
// slots of the one before free up, instead of after its slowest send. Only
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
	slots   chan struct{}
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
	p := &pipeline{w: w, ctx: ctx, l: l, slots: make(chan struct{}, w.cfg.Concurrency),
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
		for i, c := range b.window {
			if !b.mine[c.ID] || !b.deferUntil[i].IsZero() {
				continue
			}
			p.slots <- struct{}{}
			wg.Add(1)
			p.sends.Add(1)
			go func() {
				defer func() { <-p.slots; wg.Done(); p.sends.Done() }()
				b.errs[i] = p.w.send(p.ctx, p.l, c, b.now)
			}()
		}
		go func() { wg.Wait(); close(b.done) }()
	}
	p.sends.Wait()
}
