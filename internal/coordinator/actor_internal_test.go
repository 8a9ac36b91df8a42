package coordinator

import (
	"context"
	"errors"
	"strings"
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

// TestUnknownReasonSaysWhatIsKnown: an in-doubt claim with no account of
// its own says the worker stopped before recording whether it was sent (a
// relay hanging at connect left claims never sent), and how to send it;
// one the worker handed over keeps its own account.
func TestUnknownReasonSaysWhatIsKnown(t *testing.T) {
	if r := unknownReason(""); !strings.Contains(r, "before recording whether it was sent") || !strings.Contains(r, "--include-unknown") {
		t.Errorf("unknownReason(\"\") = %q; want it to say the outcome was never recorded, and how to send it", r)
	}
	if r := unknownReason("in doubt: smtp data: connection reset after the final dot"); !strings.HasPrefix(r, "in doubt: smtp data: connection reset") ||
		!strings.Contains(r, "not sent again") {
		t.Errorf("unknownReason of a handed-over claim = %q; want its own account first", r)
	}
}
