package pageworker

import "github.com/oklog/ulid/v2"

// straggler is a send that outlived its window's conclusion
// (pipeline.wait): its row stays claimed by the page run until its outcome
// is concluded with a later window's, or at the page's end.
type straggler struct {
	b *batch
	i int
}

// ended splits stragglers into those whose sends have ended since they were
// last looked at (over) and those still running.
func ended(late []straggler) (over, running []straggler) {
	seen := map[*batch]map[int]bool{}
	for _, s := range late {
		done, ok := seen[s.b]
		if !ok {
			done = map[int]bool{}
			for drained := false; !drained; {
				select {
				case i := <-s.b.finished:
					done[i] = true
				default:
					drained = true
				}
			}
			seen[s.b] = done
		}
		if done[s.i] {
			over = append(over, s)
		} else {
			running = append(running, s)
		}
	}
	return over, running
}

// regroup is what a run's stragglers are once window b has been waited
// for with pending sends still running: those of late that have ended
// (over, concluded with b) and those still running, b's pending among them.
func regroup(late []straggler, b *batch, pending []int) (over, running []straggler) {
	over, running = ended(late)
	for _, i := range pending {
		running = append(running, straggler{b, i})
	}
	return over, running
}

// awaitAll waits until every straggler's send has ended.
func awaitAll(late []straggler) {
	left := map[*batch]int{}
	for _, s := range late {
		left[s.b]++
	}
	for b, n := range left {
		for range n {
			<-b.finished
		}
	}
}

// view is the batch conclude judges in place of window b: b's sends but the
// pending ones, which stay claimed, and the stragglers of earlier windows
// that have ended (over), as one window, so the refusal rules weigh a late
// refusal among the sends it ended with. Without either it is b.
func view(b *batch, pending []int, over []straggler) *batch {
	if len(pending) == 0 && len(over) == 0 {
		return b
	}
	skip := make(map[int]bool, len(pending))
	for _, i := range pending {
		skip[i] = true
	}
	sends := make([]straggler, 0, len(b.window)+len(over))
	for i := range b.window {
		if !skip[i] {
			sends = append(sends, straggler{b, i})
		}
	}
	return assemble(append(sends, over...))
}

// assemble is a batch of sends from any of a page's windows (at least one),
// in the given order.
func assemble(sends []straggler) *batch {
	first := sends[0].b
	v := &batch{now: first.now, giveUp: first.giveUp, mine: make(map[ulid.ULID]bool, len(sends))}
	laned := false
	for _, s := range sends {
		src, i := s.b, s.i
		c := src.window[i]
		v.window = append(v.window, c)
		v.providers = append(v.providers, src.providers[i])
		v.deferUntil = append(v.deferUntil, src.deferUntil[i])
		v.errs = append(v.errs, src.errs[i])
		v.lanes = append(v.lanes, src.lane(i))
		laned = laned || src.lane(i) != nil
		if src.mine[c.ID] {
			v.mine[c.ID] = true
			if src.deferUntil[i].IsZero() {
				v.attempted++
			}
		}
	}
	if !laned {
		v.lanes = nil
	}
	return v
}

// before is the cursor a page may report at most (next, a ULID string),
// when the sends' outcomes were not recorded: not past any of them.
func before(next string, sends []straggler) string {
	at, err := ulid.ParseStrict(next)
	if err != nil {
		return next
	}
	for _, s := range sends {
		if id := s.b.window[s.i].ID; id.Compare(at) < 0 {
			at = id
		}
	}
	return at.String()
}
