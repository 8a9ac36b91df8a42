package pageworker

import (
	"slices"
	"sync"
	"time"
)

// A permanent refusal at RCPT or DATA that may be about one recipient
// alone (transport.MaybeOneRecipient: "550 5.7.1 message rejected" by one
// mailbox's filter) halted the broadcast at its first occurrence, so a
// relay refusing 1 % of messages that way paused a 5,000-contact broadcast
// 36 times (found by a tester): one address halted everyone. Now such a
// refusal fails that recipient alone, with the reply, while it stays rare
// on this worker for this broadcast; the same refusal on a large share
// halts as before, the refused rows of the halting window deferred and
// sent after a resume. The rules, each of which halts:
//   - every attempt of a window of two or more that reached its recipient
//     was refused so (a relay refusing everyone halts at its first window,
//     failing nobody);
//   - every attempt so far on this worker was, and there were two (a
//     window of one: one recipient fails alone first);
//   - refusalRun of them in a row, with no message accepted in between
//     (a relay that starts refusing everyone mid-run, windows of one);
//   - at least refusalSampleMin of them that are refusalShare or more of
//     the attempts of the current sample, a sample ending after
//     refusalSample attempts (a relay refusing a tenth: samples, not the
//     whole run, so a share that rises late is seen however much was sent
//     before, and a worker that sent a million never lets 1.5 % fail
//     unseen).
//
// At 1 % at random none of them comes near (15 in a sample of 300 is
// about one chance in two million per sample: about one halt in 500 runs
// of a million messages on one worker); a steady 2 % is likely to halt
// within some tens of thousands of messages, and a tenth within the first
// 150 or so attempts, with at most 14 recipients failed alone on each
// worker before it.
//
// After a halt, refusalHold more: the windows still in flight when the
// page stopped are judged after the tally began afresh, and their lone
// refusals failed alone, 17 to 53 on top of the halt's (found by a
// tester); within the hold any lone refusal halts (is deferred) too.
const (
	refusalHold      = 30 * time.Second
	refusalRun       = 5
	refusalSample    = 300
	refusalSampleMin = 15
	refusalShare     = 0.05
)

// refusalTally counts, for one broadcast in this process, the attempts
// that reached their recipient and those refused in a way that may be
// about that recipient alone. The zero value is ready.
type refusalTally struct {
	mu              sync.Mutex
	reached, lone   int // since the tally began (or last halted)
	run             int // lone refusals in a row
	sampled, inSamp int // the current sample's attempts and lone refusals
	holdUntil       time.Time
}

// sendKind is what one send of a window counts as for the tally.
type sendKind int

const (
	sendUnsent sendKind = iota // held, step ended, or failed to render: nothing went out
	sendEarly                  // refused before the recipient was named (transport.BeforeRecipient)
	sendAccepted
	sendLone  // refused so that it may be about the recipient alone
	sendOther // reached the recipient, refused otherwise
	// sendBounce: refused as an address that does not exist (a hard
	// bounce at send), which fails and suppresses the contact.
	sendBounce
)

// reached reports a send that got as far as naming its recipient.
func (k sendKind) reached() bool { return k >= sendAccepted }

// judge counts a window's sends, in order, and reports whether the lone
// refusals among them halt the broadcast. A halt starts the tally afresh,
// for after the resume. undecided is how many of the window's sends are
// not among kinds (stragglers still running, or kinds are stragglers
// judged apart from their windows): the rule on a whole window refused
// then does not apply, as the sends judged are not the window (the slow
// ones are the likeliest to be refused).
func (t *refusalTally) judge(kinds []sendKind, now time.Time, undecided int) (halt bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if now.Before(t.holdUntil) && slices.Contains(kinds, sendLone) {
		return true
	}
	reached, lone := 0, 0
	for _, k := range kinds {
		switch k {
		case sendAccepted:
			reached++
			t.run = 0
		case sendLone:
			reached++
			lone++
			t.run++
			halt = halt || t.run >= refusalRun
		case sendOther, sendBounce:
			reached++
		}
	}
	t.reached, t.lone = t.reached+reached, t.lone+lone
	t.sampled, t.inSamp = t.sampled+reached, t.inSamp+lone
	halt = halt || lone > 0 && ((undecided == 0 && reached >= 2 && lone == reached) || (t.lone >= 2 && t.lone == t.reached) ||
		(t.inSamp >= refusalSampleMin && float64(t.inSamp) >= refusalShare*float64(t.sampled)))
	if halt {
		t.reached, t.lone, t.run, t.sampled, t.inSamp = 0, 0, 0, 0, 0
		t.holdUntil = now.Add(refusalHold)
		return true
	}
	if t.sampled >= refusalSample {
		t.sampled, t.inSamp = 0, 0
	}
	return false
}

// A relay that answers "550 5.1.1 User unknown in local recipient table"
// to everyone (Postfix taking the recipients' domain for its own) failed
// and suppressed a whole list in seconds, the bounce alarm counting too
// late (found by a tester). A list has dead addresses, often a tenth of
// an old one, so no share rule: bounceTally halts only on what a list
// never shows, each rule about one chance in ten thousand or less for a
// list a tenth dead:
//   - every reached send of a window of bounceWindow or more;
//   - the first bounceWindow reached sends of the broadcast on this
//     worker;
//   - bounceRun in a row with nothing accepted in between.
//
// The halting window's rows are deferred, unsuppressed, and sent after
// the resume; a relay refusing everyone this way fails at most
// bounceRun-1 contacts per worker before the halt.
const (
	bounceWindow = 4
	bounceRun    = 10
)

// bounceTally counts one broadcast's hard bounces at send in this
// process. The zero value is ready.
type bounceTally struct {
	mu               sync.Mutex
	reached, bounced int
	run              int
	holdUntil        time.Time
}

// judge counts a window's sends and reports whether its hard bounces
// halt the broadcast (refusalHold after a halt, any does). undecided is as
// for refusalTally.judge: the whole-window rule needs the whole window.
func (t *bounceTally) judge(kinds []sendKind, now time.Time, undecided int) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if now.Before(t.holdUntil) && slices.Contains(kinds, sendBounce) {
		return true
	}
	reached, bounced, halt := 0, 0, false
	for _, k := range kinds {
		switch {
		case !k.reached():
			continue
		case k == sendAccepted:
			t.run = 0
		case k == sendBounce:
			bounced++
			t.run++
			halt = halt || t.run >= bounceRun
		}
		reached++
	}
	t.reached, t.bounced = t.reached+reached, t.bounced+bounced
	if bounced == 0 {
		return false
	}
	halt = halt || undecided == 0 && reached >= bounceWindow && bounced == reached ||
		t.reached >= bounceWindow && t.bounced == t.reached && t.reached-reached < bounceWindow
	if halt {
		t.reached, t.bounced, t.run = 0, 0, 0
		t.holdUntil = now.Add(refusalHold)
	}
	return halt
}
