package pageworker

import (
	"errors"
	"fmt"
	"testing"

	"github.com/rangecast/rangecast/internal/message"
	"github.com/rangecast/rangecast/internal/transport"
)

func renderErr(field, reason string) error {
	return &renderError{fmt.Errorf("message: render for contact X: %w", &message.ValidationError{Field: field, Reason: reason})}
}

// One contact's bad data fails that contact; the same template error on
// several is a configuration mistake, which Classify calls Channel.
func TestHaltRepeatedRenderErrors(t *testing.T) {
	t.Parallel()
	missing := func() error { return renderErr("html", `the contact has no attribute "cty"`) }
	for _, tc := range []struct {
		name      string
		errs      []error
		attempted int
		halted    int
	}{
		{"one bad contact", []error{nil, missing(), nil, nil}, 4, 0},
		{"two of four", []error{missing(), missing(), nil, nil}, 4, 0},
		{"three of four", []error{missing(), missing(), nil, missing()}, 4, 3},
		{"every contact of a window of two", []error{missing(), missing()}, 2, 2},
		{"a window of one", []error{missing()}, 1, 0},
		{"bad addresses are the contacts' own", []error{renderErr("contact email", "x"), renderErr("contact email", "x"), renderErr("contact email", "x")}, 3, 0},
		{"different errors", []error{missing(), renderErr("html", "other"), renderErr("subject", "third")}, 3, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			haltRepeatedRenderErrors(tc.errs, tc.attempted, &renderTally{})
			if halted := halted(t, tc.errs); halted != tc.halted {
				t.Errorf("%d errors halted, want %d", halted, tc.halted)
			}
		})
	}

	// Across windows of one broadcast: a template error on every contact
	// halts at its third occurrence.
	var tally renderTally
	for i, want := range []bool{false, false, true, true} {
		errs := []error{missing()}
		haltRepeatedRenderErrors(errs, 1, &tally)
		if got := halted(t, errs) == 1; got != want {
			t.Errorf("window %d: halted %v, want %v", i, got, want)
		}
	}

	// A few contacts with odd data in a large list fail alone, the others
	// go on, even where they come together in one window: 3 of 1,000 (a
	// tester's list paused at 559 sent and again at every resume).
	tally = renderTally{}
	for window := range 1000 / 16 {
		errs := make([]error, 16)
		if window == 34 {
			errs[3], errs[4], errs[9] = missing(), missing(), missing()
		}
		haltRepeatedRenderErrors(errs, 16, &tally)
		if n := halted(t, errs); n != 0 {
			t.Fatalf("window %d: %d halted; 3 odd contacts among %d rendered are theirs", window, n, tally.rendered)
		}
	}

	// An error on a small share of a large list still halts once it has
	// failed renderHaltMax contacts: 1.5 % of a worker's million renders
	// would otherwise fail 15,000 contacts, for good, one by one.
	tally = renderTally{rendered: 1_000_000}
	failedAlone := 0
	for window := range 1000 {
		errs := make([]error, 64)
		errs[window%64] = missing()
		haltRepeatedRenderErrors(errs, 64, &tally)
		if halted(t, errs) > 0 {
			break
		}
		failedAlone++
	}
	if failedAlone != renderHaltMax-1 {
		t.Errorf("%d contacts failed alone before the error halted; want %d", failedAlone, renderHaltMax-1)
	}

	// An attribute missing from a fifth of the list is the template's
	// mistake: it halts within the first windows.
	tally = renderTally{}
	for window := range 10 {
		errs := make([]error, 16)
		for i := range errs {
			if i%5 == 0 {
				errs[i] = missing()
			}
		}
		haltRepeatedRenderErrors(errs, 16, &tally)
		if halted(t, errs) > 0 {
			if window > 0 {
				t.Errorf("halted at window %d, want the first", window)
			}
			return
		}
	}
	t.Error("an attribute missing from a fifth of the list never halted")
}

// halted counts errs that are configErrors, checking each is classified
// a channel error (the broadcast pauses).
func halted(t *testing.T, errs []error) int {
	t.Helper()
	n := 0
	for _, err := range errs {
		var ce *configError
		if errors.As(err, &ce) {
			n++
			if transport.Classify(err) != transport.Channel {
				t.Errorf("%v classified %v, want channel", err, transport.Classify(err))
			}
		}
	}
	return n
}
