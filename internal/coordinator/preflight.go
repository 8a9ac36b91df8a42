package coordinator

import (
	"context"
	"errors"
	"fmt"

	"github.com/oklog/ulid/v2"

	"github.com/rangecast/rangecast/internal/message"
	"github.com/rangecast/rangecast/internal/preflight"
	"github.com/rangecast/rangecast/internal/store"
)

// Preflight renders b's content against a sample of the real contacts it
// would go to. An InvalidContent error when the content cannot compile, a
// PreflightFailed one when a sample contact fails to render (the content
// may be fine, the list is not what it expects); a store error as it is.
func (c *Coordinator) Preflight(ctx context.Context, b store.Broadcast) error {
	compiled, err := message.Compile(message.Template(b.Content))
	if err != nil {
		return &Error{Kind: InvalidContent, Msg: fmt.Sprintf("content: %v", err), Err: err}
	}
	err = preflight.Check(ctx, c.cfg.Store, b, compiled, c.cfg.Clock.Now())
	var f *preflight.Failure
	switch {
	case errors.As(err, &f):
		return &Error{Kind: PreflightFailed, Msg: fmt.Sprintf("%v; fix the template (or the contact), then try again", f), Err: err}
	case err != nil:
		return err
	}
	return nil
}

// preflightStart repeats the check for a draft about to start: the list
// may have changed since it was created. Anything but a draft is left to
// AcceptBroadcast to refuse.
func (c *Coordinator) preflightStart(ctx context.Context, id ulid.ULID) error {
	b, err := c.cfg.Store.GetBroadcast(ctx, id)
	if err != nil || b.State != store.StateDraft {
		return nil
	}
	return c.Preflight(ctx, b)
}
