package pageworker

import (
	"runtime"
	"sync"
	"testing"
	"time"
)

// TestSendersReuseGoroutines: sends one after another run on one sender,
// sends at once each get one, and idle senders take the next sends
// instead of new goroutines being started.
func TestSendersReuseGoroutines(t *testing.T) {
	s := senders{tasks: make(chan func())}
	before := runtime.NumGoroutine()
	for range 1000 {
		done := make(chan struct{})
		s.run(func() { close(done) })
		<-done
	}
	// One, or a few where the next send came before the last sender was
	// back waiting: never one per send.
	if n := runtime.NumGoroutine() - before; n > 4 {
		t.Fatalf("1000 sends one after another left %d goroutines, want 1 (a few at most)", n)
	}

	const wide = 20
	release := make(chan struct{})
	var running sync.WaitGroup
	running.Add(wide)
	var ran sync.WaitGroup
	ran.Add(wide)
	for range wide {
		s.run(func() { running.Done(); <-release; ran.Done() })
	}
	running.Wait() // all 20 at once: none waits for another
	close(release)
	ran.Wait()
	// Upper bounds only: goroutines of earlier tests may end meanwhile.
	peak := runtime.NumGoroutine() - before
	if peak > wide+4 {
		t.Fatalf("%d sends at once: %d senders, want %d", wide, peak, wide)
	}
	time.Sleep(50 * time.Millisecond) // the senders are back waiting
	var again sync.WaitGroup
	again.Add(wide)
	for range wide {
		s.run(again.Done)
	}
	again.Wait()
	if n := runtime.NumGoroutine() - before; n > peak+2 {
		t.Fatalf("the next %d sends started new senders: %d, were %d", wide, n, peak)
	}
}
