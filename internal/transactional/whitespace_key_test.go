package transactional_test

import (
	"testing"
	"time"
)

// TestReplayIgnoresSurroundingWhitespaceInTo: a retry whose `to` carries
// surrounding white space (a client that does not trim a form field) is the
// same message, replayed: it was taken for another recipient, and one
// idempotency key sent the same mailbox several copies (tester).
func TestReplayIgnoresSurroundingWhitespaceInTo(t *testing.T) {
	t.Parallel()
	e := setup(t, envOptions{})
	e.consumer(nil)
	first := e.send(request("welcome:ws", "ann@example.org"))
	id := first.GetMessage().GetId()
	e.waitStatus(id, statusSent, 10*time.Second)
	for _, to := range []string{" ann@example.org", "ann@example.org ", "\tann@example.org"} {
		again := e.send(request("welcome:ws", to))
		if !again.GetReplayed() || again.GetMessage().GetId() != id {
			t.Errorf("to %q: replayed=%v id=%s; want a replay of %s", to, again.GetReplayed(), again.GetMessage().GetId(), id)
		}
	}
	settle(2 * time.Second)
	if got := e.sink.CountByRecipient(); got["ann@example.org"] != 1 {
		t.Fatalf("ann@example.org received %d copies under one idempotency key; want 1 (%v)", got["ann@example.org"], got)
	}
}
