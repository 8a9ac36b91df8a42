package transactional

import (
	"context"
	"time"

	"github.com/rangecast/rangecast/internal/transport"
)

// Governor is the hook for the sending domain's governor, which
// transactional mail shares with broadcasts. A nil Governor in
// ConsumerConfig sends without asking: nothing implements this yet.
type Governor interface {
	// Admit asks to send one message from sendingDomain to recipient now.
	// A zero retryAt admits it; otherwise the message waits until retryAt
	// (reason says why) without spending one of its attempts.
	Admit(ctx context.Context, sendingDomain, recipient string, now time.Time) (retryAt time.Time, reason string, err error)
	// Observe reports how an admitted send ended: zero Class for accepted,
	// else what transport.Classify said.
	Observe(sendingDomain, recipient string, c transport.Class, now time.Time)
}
