package coordinator

import (
	"context"
	"errors"

	"github.com/oklog/ulid/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rangecast/rangecast/internal/message"
	"github.com/rangecast/rangecast/internal/preflight"
	"github.com/rangecast/rangecast/internal/store"
)

// preflightDraft renders content against a sample of the real contacts b
// would go to; code is the answer's code when one fails (InvalidArgument
// at create, FailedPrecondition at start: the content is fine, the list
// is not what it expects).
func (c *Coordinator) preflightDraft(ctx context.Context, b store.Broadcast, code codes.Code) error {
	compiled, err := message.Compile(message.Template(b.Content))
	if err != nil {
		return status.Errorf(codes.InvalidArgument, "content: %v", err)
	}
	err = preflight.Check(ctx, c.cfg.Store, b, compiled, c.cfg.Clock.Now())
	var f *preflight.Failure
	switch {
	case errors.As(err, &f):
		return status.Errorf(code, "%v; fix the template (or the contact), then try again", f)
	case err != nil:
		return storeError(err)
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
	return c.preflightDraft(ctx, b, codes.FailedPrecondition)
}
