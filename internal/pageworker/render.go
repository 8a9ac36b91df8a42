package pageworker

import (
	"errors"
	"fmt"
	"sync"

	"github.com/rangecast/rangecast/internal/message"
)

// renderHaltMin is how many contacts of one window must fail to render
// with the same template error for it to count as the template's mistake
// rather than those contacts' data.
const renderHaltMin = 3

// configError is a render failure that repeats across a window: a
// configuration mistake (a template reading an attribute the list does not
// have). It is not a renderError, so Classify calls it Channel: the claims
// are released and the broadcast pauses with the reason, instead of every
// contact of the list being failed one by one, which is final.
type configError struct {
	n      int
	reason string
}

func (e *configError) Error() string {
	return fmt.Sprintf("the template fails the same way for %d contacts (a configuration mistake, not theirs): %s", e.n, e.reason)
}

// renderTally counts, per template error, the contacts of one broadcast
// that failed with it in this process, so a mistake is recognised even
// when pages are small (a short list spread over 32 ranges has pages of one
// or two contacts). The zero value is ready.
type renderTally struct {
	mu     sync.Mutex
	counts map[string]int
}

func (t *renderTally) add(key string, n int) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.counts == nil {
		t.counts = map[string]int{}
	}
	t.counts[key] += n
	return t.counts[key]
}

// haltRepeatedRenderErrors turns the render errors of a window that share
// one template error into configErrors once renderHaltMin contacts of the
// broadcast have failed with it (counted in tally), or when it fails every
// contact of a window of two or more. Before that they stay each contact's
// own failure: at most renderHaltMin-1 contacts per worker are failed by a
// mistake. Errors about a contact's own address or name are never counted.
func haltRepeatedRenderErrors(errs []error, attempted int, tally *renderTally) {
	counts := map[string]int{}
	for _, err := range errs {
		if k := templateErrorKey(err); k != "" {
			counts[k]++
		}
	}
	for k, n := range counts {
		total := tally.add(k, n)
		if total < renderHaltMin && !(n >= 2 && n == attempted) {
			continue
		}
		for i, err := range errs {
			if templateErrorKey(err) == k {
				errs[i] = &configError{n: total, reason: k}
			}
		}
	}
}

// templateErrorKey is what makes two render failures the same template
// error: the part and the reason, without the contact.
func templateErrorKey(err error) string {
	var re *renderError
	var ve *message.ValidationError
	if !errors.As(err, &re) || !errors.As(err, &ve) {
		return ""
	}
	switch ve.Field {
	case "contact email", "contact name":
		return ""
	}
	return ve.Error()
}
