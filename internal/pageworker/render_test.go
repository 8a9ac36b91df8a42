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
			halted := 0
			for _, err := range tc.errs {
				var ce *configError
				if errors.As(err, &ce) {
					halted++
					if transport.Classify(err) != transport.Channel {
						t.Errorf("%v classified %v, want channel", err, transport.Classify(err))
					}
				}
			}
			if halted != tc.halted {
				t.Errorf("%d errors halted, want %d", halted, tc.halted)
			}
		})
	}

	// Across windows of one broadcast: the third occurrence halts.
	var tally renderTally
	for i, want := range []bool{false, false, true, true} {
		errs := []error{missing(), nil}
		haltRepeatedRenderErrors(errs, 2, &tally)
		var ce *configError
		if got := errors.As(errs[0], &ce); got != want {
			t.Errorf("window %d: halted %v, want %v", i, got, want)
		}
	}
}
