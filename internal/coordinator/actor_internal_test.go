package coordinator

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rangecast/rangecast/internal/bus"
	"github.com/rangecast/rangecast/internal/clock"
)

// TestReportToStoppedActor: a report handed to an actor that stopped after
// the consumer looked it up comes back at once. Reports are consumed one at
// a time, so waiting there for the "actor busy" timeout (30 s) held back
// every broadcast's reports behind one that had just finished.
func TestReportToStoppedActor(t *testing.T) {
	t.Parallel()
	a := &actor{
		c:       &Coordinator{cfg: Config{Clock: clock.NewFake(time.Unix(0, 0))}},
		reports: make(chan reportReq),
		done:    make(chan struct{}),
	}
	close(a.done)
	errc := make(chan error, 1)
	go func() { errc <- a.report(context.Background(), bus.Report{}) }()
	select {
	case err := <-errc:
		if !errors.Is(err, errActorGone) {
			t.Fatalf("report = %v, want errActorGone", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a report to a stopped actor waits (for a clock that is not moving)")
	}
}
