package transactional

import (
	"context"
	"time"

	"github.com/rangecast/rangecast/internal/governor"
)

// Admission is the hook for the sending domain's governor, which
// transactional mail shares with broadcasts (HeldProviders). A nil
// Admission in ConsumerConfig sends without asking.
type Admission interface {
	// Admit asks to send one message from sendingDomain to recipient now.
	// The zero Refusal admits it; otherwise the message waits until
	// refusal.Until without spending one of its attempts.
	Admit(ctx context.Context, sendingDomain, recipient string, now time.Time) (refusal governor.Refusal, err error)
	// Observe reports how an admitted send ended: a nil error for
	// accepted, else the send's error (classified, and checked against the
	// providers' guidance, by the implementation).
	Observe(sendingDomain, recipient string, sendErr error, now time.Time)
}
