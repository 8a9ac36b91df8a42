package pageworker

import (
	"errors"
	"fmt"
	"sync"

	"github.com/rangecast/rangecast/internal/message"
	"github.com/rangecast/rangecast/internal/store"
)

// renderHaltMin is how many contacts must fail to render with the same
// template error, and renderHaltShare the share of the contacts rendered
// they must be at least, for it to count as the template's mistake rather
// than those contacts' data. A mistake in the template (a misspelt
// attribute) fails every contact, or a large share of them where an
// attribute is missing from part of the list, and halts within the first
// few; a handful of contacts with odd data in a large list (3 of 1,000
// before this share: the broadcast paused, and paused again at every
// resume) fail alone, each with its reason, and the rest are sent.
//
// renderHaltMax caps the share's count: on a worker that has rendered a
// million contacts 2 % is 20,000, and an error on 1.5 % of a list would
// fail every one of those contacts, which is final, without ever pausing.
// At renderHaltMax contacts failing the same way it is the template's
// mistake whatever their share.
const (
	renderHaltMin   = 3
	renderHaltShare = 0.02
	renderHaltMax   = 25
)

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
	return fmt.Sprintf(store.TemplateMistakePrefix+"%d contacts seen by one worker (a configuration mistake, not theirs): %s; "+
		"correct the content (rangecast broadcasts update, which edits a paused broadcast's content) or those contacts' attributes, then resume", e.n, e.reason)
}

// renderTally counts, per template error, the contacts of one broadcast
// that failed with it in this process, and all the contacts it rendered,
// so a mistake is recognised even when pages are small (a short list
// spread over 32 ranges has pages of one or two contacts). The zero value
// is ready.
type renderTally struct {
	mu       sync.Mutex
	rendered int
	counts   map[string]int
}

// add counts a window's attempted renders and its failures by key, and
// returns the keys that now count as the template's mistake, with their
// totals: at least renderHaltMin contacts and renderHaltShare of those
// rendered, or renderHaltMax contacts, or every contact of a window of two
// or more (pages of one or two contacts, a short list over 32 ranges,
// would otherwise fail two contacts per worker before a mistake that
// fails everyone is recognised).
func (t *renderTally) add(attempted int, failures map[string]int) map[string]int {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.counts == nil {
		t.counts = map[string]int{}
	}
	t.rendered += attempted
	var mistakes map[string]int
	for k, n := range failures {
		t.counts[k] += n
		total := t.counts[k]
		if total >= renderHaltMin && float64(total) >= renderHaltShare*float64(t.rendered) ||
			total >= renderHaltMax || n >= 2 && n == attempted {
			if mistakes == nil {
				mistakes = map[string]int{}
			}
			mistakes[k] = total
		}
	}
	return mistakes
}

// haltRepeatedRenderErrors turns the render errors of a window that share
// one template error into configErrors once it is the template's mistake
// by tally's counts (renderTally.add). Before that, and for errors that
// stay below its bounds, they are each contact's own failure.
// Errors about a contact's own address or name are never counted.
func haltRepeatedRenderErrors(errs []error, attempted int, tally *renderTally) {
	counts := map[string]int{}
	for _, err := range errs {
		if k := templateErrorKey(err); k != "" {
			counts[k]++
		}
	}
	mistakes := tally.add(attempted, counts)
	for i, err := range errs {
		k := templateErrorKey(err)
		if total, ok := mistakes[k]; ok && k != "" {
			errs[i] = &configError{n: total, reason: k}
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
