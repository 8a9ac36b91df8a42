package cli

import (
	"strings"
	"testing"

	pb "github.com/rangecast/rangecast/proto/rangecast/v1"
)

// TestStatusSaysWhoMayHaveTwoCopies: under the resend policy, the people
// sent again after an attempt that may have arrived are shown (they may
// have two copies); under skip, where there are none, no line is.
func TestStatusSaysWhoMayHaveTwoCopies(t *testing.T) {
	t.Parallel()
	for _, n := range []int64{0, 28} {
		var out strings.Builder
		printStatus(&out, &pb.Broadcast{Id: "b", State: pb.BroadcastState_BROADCAST_STATE_COMPLETED,
			Progress: &pb.Progress{Sent: 12000, SentAgainInDoubt: n}})
		shown := strings.Contains(out.String(), "sent again 28 of the sent after an attempt that may have arrived")
		if shown != (n > 0) {
			t.Errorf("status with %d sent again in doubt:\n%s", n, out.String())
		}
	}
}
