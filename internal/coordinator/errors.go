package coordinator

import (
	"errors"
	"fmt"
	"strings"

	"github.com/oklog/ulid/v2"

	"github.com/rangecast/rangecast/internal/store"
)

// Kind says what an engine refusal means for a program; the API maps each
// to its own code. Store errors pass through unchanged (store.ErrNotFound,
// store.ErrConflict).
type Kind uint8

const (
	// Unavailable: KV or NATS could not be reached; the same call may
	// succeed when it can.
	Unavailable Kind = iota + 1
	// WrongState: the broadcast is not in a state the change can start from.
	WrongState
	// NotFound: nothing is known of what was named.
	NotFound
	// Contended: someone else changed the same thing at the same time, every
	// time it was tried; try again.
	Contended
	// Disabled: this coordinator runs without the part the call needs.
	Disabled
	// InvalidContent: a broadcast's content cannot compile.
	InvalidContent
	// PreflightFailed: a sample contact of the audience fails to render;
	// at Start the broadcast stays a draft.
	PreflightFailed
)

// Error is a refusal by the engine: Kind for decisions, the message for a
// person, the cause (if any) for errors.Is and errors.As.
type Error struct {
	Kind Kind
	// Msg is the sentence shown; empty means the cause's own words.
	Msg string
	Err error
}

func (e *Error) Error() string {
	if e.Msg == "" && e.Err != nil {
		return e.Err.Error()
	}
	return e.Msg
}

func (e *Error) Unwrap() error { return e.Err }

// KindOf is the Kind of the engine Error in err's chain, 0 if there is none.
func KindOf(err error) Kind {
	var e *Error
	var se *StateError
	switch {
	case errors.As(err, &e):
		return e.Kind
	case errors.As(err, &se):
		return WrongState
	}
	return 0
}

// unavailable marks err (a KV or NATS failure) as worth retrying, and says
// so: without it a caller cannot tell "NATS did not answer the
// coordinator" from "the coordinator did not answer" (the CLI said the
// coordinator could not be reached).
func unavailable(err error) error {
	return &Error{Kind: Unavailable, Err: err,
		Msg: fmt.Sprintf("NATS did not answer the coordinator (%v); repeat the call once it is back", err)}
}

// notMirrored is a state change the store committed whose copy in KV (the
// one workers follow) could not be written, or whose actor could not be
// told. The change holds: claims read the store's state, and the leader
// brings KV level with the store once NATS answers (as does repeating the
// call). Said as such, so an operator does not take a pause that stands
// for one that failed.
func notMirrored(id ulid.ULID, to store.State, err error) error {
	return &Error{Kind: Unavailable, Err: err,
		Msg: fmt.Sprintf("broadcast %s is %s in the database, and that holds (claims read it there); NATS did not answer when the coordinator passed it on to the workers (%v): the coordinator does so once NATS is back, and repeating the call does it too", id, to, err)}
}

// StateError refuses a change a broadcast's state does not allow; its Kind
// is WrongState.
type StateError struct {
	ID    ulid.ULID
	State store.State
	// From are the states the change can start from; Verb is what it does
	// ("paused").
	From []store.State
	Verb string
	// Scheduled: a draft with a start time. Pausing it was refused
	// without saying what keeps it from starting (tester).
	Scheduled bool
}

func (e *StateError) Error() string {
	names := make([]string, len(e.From))
	for i, f := range e.From {
		names[i] = string(f)
	}
	msg := fmt.Sprintf("broadcast %s is %s; only a %s broadcast can be %s", e.ID, e.State, strings.Join(names, " or "), e.Verb)
	if e.Scheduled && e.State == store.StateDraft {
		msg += fmt.Sprintf("; it is scheduled to start: 'rangecast broadcasts unschedule %s' keeps it a draft, 'broadcasts cancel' ends it", e.ID)
	}
	return msg
}
