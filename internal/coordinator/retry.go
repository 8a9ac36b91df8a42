package coordinator

import (
	"context"
	"errors"
	"fmt"

	"github.com/oklog/ulid/v2"

	"github.com/rangecast/rangecast/internal/store"
)

// Retried is what Retry did.
type Retried struct {
	// Failed and Unknown count the rows given a new round of attempts.
	Failed, Unknown int64
	Status          BroadcastStatus
}

// Retry gives the rows of a completed broadcast that failed after their
// transient attempts ran out (and, with unknown, the rows marked unknown) a
// new round of attempts. The store moves them back to deferred, due now
// with their attempts reset, and the broadcast back to running, in one
// transaction; the broadcast's actor then sweeps them through ClaimDue,
// the claim rules every deferred row goes through, and completes the
// broadcast again once none is left. No accepted row is touched, so nobody
// already sent gets a second copy.
//
// Only a completed broadcast: a running or paused one still has its own
// sweeps and could complete between the reopen and its next look at the
// ledger; a cancelled one stopped for a reason a retry would override, and
// a failed one is resumed (Resume), not retried.
func (c *Coordinator) Retry(ctx context.Context, id ulid.ULID, unknown bool) (Retried, error) {
	reason := "retrying messages that failed after their attempts ran out"
	if unknown {
		reason = "retrying failed messages and those marked unknown"
	}
	r, err := c.cfg.Store.Reopen(ctx, id, unknown, reason, c.cfg.Clock.Now())
	if errors.Is(err, store.ErrConflict) {
		return Retried{}, &Error{Kind: WrongState, Err: err, Msg: retryRefusal(id, r.Broadcast.State)}
	}
	if err != nil {
		return Retried{}, err
	}
	out := Retried{Failed: r.Failed, Unknown: r.Unknown}
	if r.Failed+r.Unknown > 0 {
		c.cfg.Log.Info("broadcast retried", "broadcast", id, "failed", r.Failed, "unknown", r.Unknown)
		// As Resume does: the store says running; KV and the actor follow.
		if err := c.putState(ctx, r.Broadcast); err != nil {
			return out, unavailable(err)
		}
		if err := c.kick(ctx, r.Broadcast); err != nil {
			return out, unavailable(err)
		}
	}
	out.Status, err = c.Status(ctx, id)
	return out, err
}

func retryRefusal(id ulid.ULID, s store.State) string {
	switch s {
	case store.StateRunning, store.StatePaused:
		return fmt.Sprintf("broadcast %s is %s; its deferred messages are still being retried: wait until it completes, then retry", id, s)
	case store.StateDraft:
		return fmt.Sprintf("broadcast %s is a draft; nothing has been sent to retry", id)
	case store.StateFailed:
		return fmt.Sprintf("broadcast %s failed; once its cause is fixed, resume it to send the rest, and retry its failed messages after it completes", id)
	}
	return fmt.Sprintf("broadcast %s is %s; only a completed broadcast can be retried", id, s)
}
