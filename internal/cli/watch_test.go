package cli

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/rangecast/rangecast/proto/rangecast/v1"
)

type fakeStream struct{ statuses []*pb.Broadcast }

func (f *fakeStream) Recv() (*pb.WatchBroadcastResponse, error) {
	if len(f.statuses) == 0 {
		return nil, io.EOF
	}
	b := f.statuses[0]
	f.statuses = f.statuses[1:]
	return &pb.WatchBroadcastResponse{Broadcast: b}, nil
}

func sampleStatus(state pb.BroadcastState, sent int64) *pb.Broadcast {
	p := &pb.Progress{RangesTotal: 32, Sent: sent, InDoubt: 16, WaitingFor: "throttle of 3600/hour; next page in 4s"}
	for i := range 32 {
		r := &pb.RangeProgress{Index: int32(i), Position: float64(i%4) / 4}
		if i < 5 {
			r.Done, r.Position = true, 1
			p.RangesDone++
		}
		p.Ranges = append(p.Ranges, r)
	}
	return &pb.Broadcast{Id: "01J00000000000000000000000", Name: "November news", State: state, SnapshotTotal: 9300, Progress: p}
}

func TestRenderWatch(t *testing.T) {
	t.Parallel()
	view := renderWatch(sampleStatus(pb.BroadcastState_BROADCAST_STATE_RUNNING, 4000), 1234, nil)
	for _, want := range []string{"November news", "running", "ranges 5/32 done", "1234 msg/s", "31 ", "100%", " 50%",
		"sent 4000", "in flight or in doubt 16", "waiting for: throttle of 3600/hour"} {
		if !strings.Contains(view, want) {
			t.Errorf("view lacks %q:\n%s", want, view)
		}
	}
	if rows := strings.Count(view, "%  "); rows < 24 {
		t.Errorf("expected 32 range bars in 4 columns, found %d separators:\n%s", rows, view)
	}
}

func TestWatchPlainAndJSON(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	last, err := watchPlain(&out, &fakeStream{statuses: []*pb.Broadcast{
		sampleStatus(pb.BroadcastState_BROADCAST_STATE_RUNNING, 10),
		sampleStatus(pb.BroadcastState_BROADCAST_STATE_COMPLETED, 9300),
	}})
	if err != nil || last.GetState() != pb.BroadcastState_BROADCAST_STATE_COMPLETED {
		t.Fatalf("watchPlain: %v, last %v", err, last.GetState())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[1], "completed") || !strings.Contains(lines[1], "sent 9300") || strings.Contains(out.String(), "\x1b[") {
		t.Fatalf("plain watch output (no escape codes, one line per status):\n%s", out.String())
	}
	out.Reset()
	if _, err := watchJSON(&out, &fakeStream{statuses: []*pb.Broadcast{sampleStatus(pb.BroadcastState_BROADCAST_STATE_RUNNING, 10)}}); err != nil {
		t.Fatal(err)
	}
	var decoded map[string]any
	if err := json.Unmarshal(out.Bytes(), &decoded); err != nil || decoded["name"] != "November news" {
		t.Fatalf("--json line %q: %v", out.String(), err)
	}
}

// TestWatchExitStatus: a watch that follows its broadcast to a failed or
// cancelled end exits non-zero, so "watch ID && next" stops (tester); a
// completion, or a watch left early, is no error.
func TestWatchExitStatus(t *testing.T) {
	t.Parallel()
	for state, bad := range map[pb.BroadcastState]bool{
		pb.BroadcastState_BROADCAST_STATE_COMPLETED: false,
		pb.BroadcastState_BROADCAST_STATE_RUNNING:   false, // left early
		pb.BroadcastState_BROADCAST_STATE_FAILED:    true,
		pb.BroadcastState_BROADCAST_STATE_CANCELLED: true,
	} {
		var out bytes.Buffer
		err := endedBadly(watchJSON(&out, &fakeStream{statuses: []*pb.Broadcast{sampleStatus(state, 10)}}))
		if (err != nil) != bad || bad && !strings.Contains(err.Error(), "ended "+stateWord(state)) {
			t.Errorf("watch ending %v: %v; want an error: %v", state, err, bad)
		}
	}
}

// failingStream yields its statuses, then err.
type failingStream struct {
	fakeStream
	err error
}

func (f *failingStream) Recv() (*pb.WatchBroadcastResponse, error) {
	if len(f.statuses) == 0 {
		return nil, f.err
	}
	return f.fakeStream.Recv()
}

// TestWatchOutlivesItsCoordinator: a watch whose coordinator goes away
// (Unavailable: a rollout restarted it) opens the watch again and follows
// the broadcast to its end, saying so; it ended at every rollout
// (tester). Any other error ends it, as before.
func TestWatchOutlivesItsCoordinator(t *testing.T) {
	t.Parallel()
	lost := status.Error(codes.Unavailable, "error reading from server: EOF")
	opens := 0
	streams := []statusStream{
		nil, // the first open fails: the coordinator is not back yet
		&fakeStream{statuses: []*pb.Broadcast{sampleStatus(pb.BroadcastState_BROADCAST_STATE_RUNNING, 20),
			sampleStatus(pb.BroadcastState_BROADCAST_STATE_COMPLETED, 9300)}},
	}
	var notice, out bytes.Buffer
	s := &resumingStream{ctx: t.Context(), notice: &notice, retryEvery: time.Millisecond,
		cur: &failingStream{fakeStream{statuses: []*pb.Broadcast{sampleStatus(pb.BroadcastState_BROADCAST_STATE_RUNNING, 10)}}, lost},
		open: func() (statusStream, error) {
			st := streams[opens]
			opens++
			if st == nil {
				return nil, lost
			}
			return st, nil
		}}
	last, err := watchPlain(&out, s)
	if err != nil || last.GetState() != pb.BroadcastState_BROADCAST_STATE_COMPLETED || strings.Count(out.String(), "\n") != 3 {
		t.Fatalf("watch across a lost coordinator: %v, last %v:\n%s", err, last.GetState(), out.String())
	}
	if !strings.Contains(notice.String(), "lost the coordinator") || !strings.Contains(notice.String(), "watching again") {
		t.Errorf("notice %q; want it to say the coordinator was lost and the watch is back", notice.String())
	}
	// NotFound is no lost connection.
	gone := status.Error(codes.NotFound, "no broadcast has id X")
	s = &resumingStream{ctx: t.Context(), notice: io.Discard, cur: &failingStream{err: gone},
		open: func() (statusStream, error) { t.Fatal("opened again after NotFound"); return nil, nil }}
	if _, err := watchPlain(io.Discard, s); status.Code(err) != codes.NotFound {
		t.Errorf("NotFound: %v", err)
	}
}
