package pageworker

import (
	"math/rand/v2"
	"strings"
	"sync"
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

// later is a minute after the time it last gave: windows judged further
// apart than the hold after a halt.
var later = func() func() time.Time {
	var mu sync.Mutex
	at := time.Date(2031, 3, 14, 9, 0, 0, 0, time.UTC)
	return func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		at = at.Add(time.Minute)
		return at
	}
}()

func TestRefusalTallyHaltsOnAShareNotOnOne(t *testing.T) {
	t.Run("windows in flight at a halt halt too", func(t *testing.T) {
		var tl refusalTally
		at := later()
		tl.judge(window(16), at, 0)
		if !tl.judge(window(4, 0, 1, 2, 3), at, 0) {
			t.Fatal("a window refused whole did not halt")
		}
		if !tl.judge(window(16, 5), at.Add(time.Second), 0) {
			t.Fatal("a window in flight at the halt failed its refusal alone")
		}
		if tl.judge(window(16, 5), at.Add(refusalHold+time.Second), 0) {
			t.Fatal("the hold outlasted refusalHold")
		}
	})
	t.Run("one in a window of 16", func(t *testing.T) {
		var tl refusalTally
		if tl.judge(window(16, 3), later(), 0) {
			t.Fatal("one refusal among 16 accepted halted")
		}
	})
	t.Run("every one of a window", func(t *testing.T) {
		var tl refusalTally
		tl.judge(window(16), later(), 0)
		if !tl.judge(window(4, 0, 1, 2, 3), later(), 0) {
			t.Fatal("a window refused whole did not halt")
		}
	})
	t.Run("sends that reached nobody do not dilute a window", func(t *testing.T) {
		var tl refusalTally
		tl.judge(window(16), later(), 0)
		if !tl.judge([]sendKind{sendLone, sendEarly, sendLone, sendUnsent}, later(), 0) {
			t.Fatal("a window whose every reached send was refused did not halt")
		}
	})
	t.Run("the first two, in windows of one", func(t *testing.T) {
		var tl refusalTally
		if tl.judge(window(1, 0), later(), 0) {
			t.Fatal("the first refusal halted")
		}
		if !tl.judge(window(1, 0), later(), 0) {
			t.Fatal("two refusals and nothing else did not halt")
		}
	})
	t.Run("five in a row after many accepted", func(t *testing.T) {
		var tl refusalTally
		for range 100 {
			tl.judge(window(1), later(), 0)
		}
		for i := range refusalRun {
			if halt := tl.judge(window(1, 0), later(), 0); halt != (i == refusalRun-1) {
				t.Fatalf("refusal %d in a row: halt %v", i+1, halt)
			}
		}
		if tl.judge(window(1, 0), later(), 0) {
			t.Fatal("the tally did not start afresh after a halt")
		}
	})
	t.Run("a deferral does not break a run", func(t *testing.T) {
		var tl refusalTally
		for range 100 {
			tl.judge(window(1), later(), 0)
		}
		halted := false
		for range refusalRun {
			halted = tl.judge(window(1, 0), later(), 0)
			tl.judge([]sendKind{sendOther}, later(), 0)
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
			if tl.judge(k, later(), 0) {
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

// TestResumeWithTheRelayStillRefusingFailsNobody: a window of four
// refused "550 5.7.1" whole halts the broadcast; resumed without a fix,
// the sweep meets the same refusals and halts again, failing nobody. (A
// rule that failed such rows alone at the second refusal, so that a few
// mailboxes refusing for good would not halt every resume, failed 48
// recipients per resume of a relay refusing everyone; found by a tester.)
func TestResumeWithTheRelayStillRefusingFailsNobody(t *testing.T) {
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
			if rep, err = f.w.RunPage(ctx, sweep, "w/S"); err != nil {
				t.Fatal(err)
			}
			if rep.Class != bus.ClassChannel || rep.Failed != 0 {
				t.Fatalf("sweep after the resume: class %q (%s), %d failed; want a halt again with nobody failed", rep.Class, rep.Error, rep.Failed)
			}
			for _, c := range f.contacts[:4] {
				row, err := st.GetSend(ctx, f.b.ID, c.ID)
				if err != nil || row.Status != store.SendDeferred || !strings.Contains(row.Error, "550 5.7.1") {
					t.Errorf("%s: %+v (%v); want deferred with the reply", c.Email, row, err)
				}
			}
		})
	}
}

// TestBounceTally: hard bounces at send halt only on what a list never
// shows: a whole window of four or more, the first four, ten in a row. A
// list a tenth dead, at random, never halts in a million sends.
func TestBounceTally(t *testing.T) {
	bounce := func(n int, at ...int) []sendKind {
		k := window(n)
		for _, i := range at {
			k[i] = sendBounce
		}
		return k
	}
	var tl bounceTally
	if tl.judge(bounce(3, 0, 1, 2), later(), 0) {
		t.Error("a first window of three bounces halted; four are needed")
	}
	if !tl.judge(bounce(1, 0), later(), 0) {
		t.Error("the first four sends all bounced and it did not halt")
	}
	tl = bounceTally{}
	tl.judge(window(16), later(), 0)
	if !tl.judge(bounce(4, 0, 1, 2, 3), later(), 0) {
		t.Error("a window of four all bounced did not halt")
	}
	tl = bounceTally{}
	tl.judge(window(16), later(), 0)
	for i := range bounceRun {
		if halt := tl.judge(bounce(1, 0), later(), 0); halt != (i == bounceRun-1) {
			t.Fatalf("bounce %d in a row: halt %v", i+1, halt)
		}
	}
	rng := rand.New(rand.NewPCG(3, 4))
	tl = bounceTally{}
	for n := 0; n < 1_000_000; n += 16 {
		k := window(16)
		for i := range k {
			if rng.Float64() < 0.1 {
				k[i] = sendBounce
			}
		}
		if tl.judge(k, later(), 0) {
			t.Fatalf("a list a tenth dead halted after %d sends", n)
		}
	}
}

// TestOneRecipientsSizeLimit: "552 5.3.4" at DATA for one address of 40
// (its server's limit below the relay's) fails that recipient alone, with
// the reply, and the page goes on; the same reply for every address (the
// relay's own limit) halts at the first window, failing nobody. One
// address halted a tester's broadcast, again after every resume, and
// resume --fail-refused could not clear it.
func TestOneRecipientsSizeLimit(t *testing.T) {
	t.Parallel()
	tooLarge := &transport.SendError{Code: 552, Enhanced: "5.3.4", Text: "Message size exceeds fixed limit", Stage: transport.StageData}
	for _, all := range []bool{false, true} {
		st := bothStores["sqlite"](t)
		tr := &scripted{accepted: map[string]int{}}
		f := newCopiesFixture(t, st, 40, tr)
		small := f.contacts[7].Email
		tr.answer = func(to string) error {
			if all || to == small {
				return tooLarge
			}
			return nil
		}
		rep, err := f.w.RunPage(t.Context(), f.job(), "w/1")
		if err != nil {
			t.Fatal(err)
		}
		if all {
			if rep.Class != bus.ClassChannel || rep.Failed != 0 || !strings.Contains(rep.Error, "552 5.3.4") {
				t.Errorf("every copy refused as too large: class %q (%s), %d failed; want a halt, nobody failed", rep.Class, rep.Error, rep.Failed)
			}
			continue
		}
		row, err := st.GetSend(t.Context(), f.b.ID, f.contacts[7].ID)
		if rep.Class != bus.ClassNone || rep.Sent != 39 || err != nil || row.Status != store.SendFailed || !strings.Contains(row.Error, "552 5.3.4") {
			t.Errorf("one recipient's size limit: class %q (%s), sent %d; its row %+v (%v); want the page done, 39 sent, it failed with the reply", rep.Class, rep.Error, rep.Sent, row, err)
		}
	}
}
