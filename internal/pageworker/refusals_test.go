package pageworker

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/rangecast/rangecast/internal/bus"
	"github.com/rangecast/rangecast/internal/store"
	"github.com/rangecast/rangecast/internal/transport"
)

// window is n sends of which those at the given indexes were lone
// refusals, the rest accepted.
func window(n int, lone ...int) []sendKind {
	k := make([]sendKind, n)
	for i := range k {
		k[i] = sendAccepted
	}
	for _, i := range lone {
		k[i] = sendLone
	}
	return k
}

func TestRefusalTallyHaltsOnAShareNotOnOne(t *testing.T) {
	t.Run("one in a window of 16", func(t *testing.T) {
		var tl refusalTally
		if tl.judge(window(16, 3)) {
			t.Fatal("one refusal among 16 accepted halted")
		}
	})
	t.Run("every one of a window", func(t *testing.T) {
		var tl refusalTally
		tl.judge(window(16))
		if !tl.judge(window(4, 0, 1, 2, 3)) {
			t.Fatal("a window refused whole did not halt")
		}
	})
	t.Run("unreached sends do not dilute a window", func(t *testing.T) {
		var tl refusalTally
		tl.judge(window(16))
		if !tl.judge([]sendKind{sendLone, sendUnreached, sendLone, sendUnreached}) {
			t.Fatal("a window whose every reached send was refused did not halt")
		}
	})
	t.Run("the first two, in windows of one", func(t *testing.T) {
		var tl refusalTally
		if tl.judge(window(1, 0)) {
			t.Fatal("the first refusal halted")
		}
		if !tl.judge(window(1, 0)) {
			t.Fatal("two refusals and nothing else did not halt")
		}
	})
	t.Run("five in a row after many accepted", func(t *testing.T) {
		var tl refusalTally
		for range 100 {
			tl.judge(window(1))
		}
		for i := range refusalRun {
			if halt := tl.judge(window(1, 0)); halt != (i == refusalRun-1) {
				t.Fatalf("refusal %d in a row: halt %v", i+1, halt)
			}
		}
		if tl.judge(window(1, 0)) {
			t.Fatal("the tally did not start afresh after a halt")
		}
	})
	t.Run("a deferral does not break a run", func(t *testing.T) {
		var tl refusalTally
		for range 100 {
			tl.judge(window(1))
		}
		halted := false
		for range refusalRun {
			halted = tl.judge(window(1, 0))
			tl.judge([]sendKind{sendOther})
		}
		if !halted {
			t.Fatal("five refusals in a row, with a deferral between each, did not halt")
		}
	})
}

// TestRefusalTallyAtVolume: a worker sending a million messages, windows
// of 16, through a relay refusing 1 % at random never halts; one refusing
// a tenth, after a million accepted, halts within its first few hundred,
// having failed at most refusalSampleMin-1 alone.
func TestRefusalTallyAtVolume(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	stream := func(tl *refusalTally, share float64, windows int) (halted bool, lone int) {
		for range windows {
			k := window(16)
			n := 0
			for i := range k {
				if rng.Float64() < share {
					k[i] = sendLone
					n++
				}
			}
			if tl.judge(k) {
				return true, lone
			}
			lone += n
		}
		return false, lone
	}
	var tl refusalTally
	if halted, lone := stream(&tl, 0.01, 1_000_000/16); halted {
		t.Fatalf("1 %% at random halted after %d refused", lone)
	}
	halted, lone := stream(&tl, 0.10, 300/16+1)
	if !halted || lone >= refusalSampleMin {
		t.Fatalf("a tenth refused: halted %v after %d failed alone; want a halt with fewer than %d", halted, lone, refusalSampleMin)
	}
}

// TestHaltedRefusalsFailAloneAfterTheResume: a window of four recipients
// whose servers refuse them "550 5.7.1" every time halts the broadcast
// (the whole window refused so); after the resume the sweep meets the
// same refusals and fails the four alone, with the reply, instead of
// halting again (it did at every resume until each row had used its
// attempts, found by review).
func TestHaltedRefusalsFailAloneAfterTheResume(t *testing.T) {
	t.Parallel()
	for name, open := range bothStores {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			st := open(t)
			tr := &scripted{accepted: map[string]int{}}
			f := newCopiesFixture(t, st, 6, tr)
			refused := map[string]bool{}
			for _, c := range f.contacts[:4] {
				refused[c.Email] = true
			}
			tr.answer = func(to string) error {
				if refused[to] {
					return &transport.SendError{Code: 550, Enhanced: "5.7.1", Text: "message rejected by the recipient's filter", Stage: transport.StageData}
				}
				return nil
			}
			ctx := t.Context()
			rep, err := f.w.RunPage(ctx, f.job(), "w/1")
			if err != nil {
				t.Fatal(err)
			}
			if rep.Class != bus.ClassChannel {
				t.Fatalf("page of a window refused whole: class %q (%s); want a halt", rep.Class, rep.Error)
			}
			f.clk.Advance(time.Hour) // the operator resumed
			sweep := bus.PageJob{Broadcast: f.b.ID.String(), Range: bus.SweepRange, Limit: 100, Sweep: true}
			if rep, err = f.w.runSweep(ctx, ctx, sweep, "w/S"); err != nil {
				t.Fatal(err)
			}
			if rep.Class != bus.ClassNone || rep.Failed != 4 {
				t.Fatalf("sweep after the resume: class %q (%s), %d failed; want the four failed alone and no halt", rep.Class, rep.Error, rep.Failed)
			}
			for _, c := range f.contacts[:4] {
				row, err := st.GetSend(ctx, f.b.ID, c.ID)
				if err != nil || row.Status != store.SendFailed || !strings.Contains(row.Error, "550 5.7.1") {
					t.Errorf("%s: %+v (%v); want failed with the reply", c.Email, row, err)
				}
			}
		})
	}
}
