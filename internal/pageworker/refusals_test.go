package pageworker

import (
	"math/rand/v2"
	"testing"
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
