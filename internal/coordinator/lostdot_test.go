package coordinator_test

import (
	"bufio"
	"context"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/rangecast/rangecast/internal/store"
	"github.com/rangecast/rangecast/internal/testenv"
	pb "github.com/rangecast/rangecast/proto/rangecast/v1"
)

// eatingRelay is an SMTP server that takes every message and, while eat
// is set, closes the connection after the final dot without a reply: the
// message may have arrived (here it did), and the client cannot know.
type eatingRelay struct {
	addr string
	eat  atomic.Bool
	// every, when set, eats only every nth message (eat unset).
	every atomic.Int64
	n     atomic.Int64
	mu    sync.Mutex
	got   map[string]int // messages taken, by recipient
}

func startEatingRelay(t *testing.T) *eatingRelay {
	t.Helper()
	r := &eatingRelay{got: map[string]int{}}
	r.eat.Store(true)
	r.addr = testenv.ServeTCP(t, r.serve)
	return r
}

func (r *eatingRelay) url() string { return "smtp://" + r.addr + "?tls=none" }

func (r *eatingRelay) taken() (total, most int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, n := range r.got {
		total += n
		most = max(most, n)
	}
	return total, most
}

func (r *eatingRelay) serve(c net.Conn) {
	defer c.Close()
	br := bufio.NewReader(c)
	say := func(s string) bool { _, err := c.Write([]byte(s + "\r\n")); return err == nil }
	if !say("220 eating relay") {
		return
	}
	var rcpt string
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return
		}
		cmd := strings.ToUpper(strings.TrimSpace(line))
		switch {
		case strings.HasPrefix(cmd, "EHLO"), strings.HasPrefix(cmd, "HELO"):
			say("250 eating relay")
		case strings.HasPrefix(cmd, "RCPT TO:"):
			rcpt = strings.Trim(strings.TrimSpace(line)[len("RCPT TO:"):], "<> ")
			say("250 ok")
		case cmd == "DATA":
			say("354 go on")
			for {
				l, err := br.ReadString('\n')
				if err != nil {
					return
				}
				if l == ".\r\n" {
					break
				}
			}
			r.mu.Lock()
			r.got[strings.ToLower(rcpt)]++
			r.mu.Unlock()
			if r.eat.Load() || r.every.Load() > 0 && r.n.Add(1)%r.every.Load() == 0 {
				return // the message is taken; the reply never comes
			}
			say("250 queued")
		case cmd == "QUIT":
			say("221 bye")
			return
		default: // MAIL, RSET, NOOP
			say("250 ok")
		}
	}
}

// TestRelayThatLosesEveryMessageHalts: a relay that takes every message and
// drops the connection before confirming it halts the broadcast (paused,
// with the reason) within a couple of rounds of pages, instead of turning
// the whole audience into unknowns: a 600-contact broadcast completed with
// every message unknown and an empty reason. Nothing is sent twice; once
// the relay confirms again, a resume sends the rest, and the completed
// broadcast's reason counts the unknowns.
func TestRelayThatLosesEveryMessageHalts(t *testing.T) {
	t.Parallel()
	relay := startEatingRelay(t)
	s := newStack(t, stackOptions{workers: 1, concurrency: 8, pageLimit: 40, smtpURL: relay.url()})
	s.stopCoord()
	s.coordCfg.Backoff, s.coordCfg.MaxBackoff, s.coordCfg.Tick = 1500*time.Millisecond, 2*time.Second, 50*time.Millisecond
	s.startCoordinator()
	a := s.seed(3000)
	eligible := a.eligible(false)
	id := s.create("", 0)
	s.start(id)
	b := s.waitState(id, pb.BroadcastState_BROADCAST_STATE_PAUSED, time.Minute)
	if !strings.Contains(b.GetReason(), "after the final dot") || !strings.Contains(b.GetReason(), "resume") {
		t.Errorf("paused with reason %q; want it to say messages were lost after the final dot and what to do", b.GetReason())
	}
	// Not "recorded unknown" before the reconciler has recorded them
	// (a tester read status for a minute that said otherwise).
	if !strings.Contains(b.GetReason(), "the reconciler records them unknown within") {
		t.Errorf("paused with reason %q; want it to say when the reconciler records them unknown", b.GetReason())
	}
	time.Sleep(time.Second) // the windows in flight at the halt conclude
	taken, most := relay.taken()
	if most > 1 {
		t.Fatalf("a recipient was sent %d copies", most)
	}
	if taken >= len(eligible)/2 {
		t.Errorf("the relay took %d of %d before the broadcast halted; want it halted within a couple of rounds", taken, len(eligible))
	}
	t.Logf("halted after %d messages lost after the dot, of %d eligible", taken, len(eligible))

	relay.eat.Store(false)
	if _, err := s.client.ResumeBroadcast(context.Background(), &pb.ResumeBroadcastRequest{Id: id}); err != nil {
		t.Fatal(err)
	}
	b = s.waitState(id, pb.BroadcastState_BROADCAST_STATE_COMPLETED, time.Minute)
	if !strings.Contains(b.GetReason(), "messages unknown") {
		t.Errorf("completed with reason %q; want the unknowns counted", b.GetReason())
	}
	total, most := relay.taken()
	if most > 1 {
		t.Fatalf("a recipient was sent %d copies", most)
	}
	if total != len(eligible) {
		t.Errorf("the relay took %d messages, want each of the %d eligible once", total, len(eligible))
	}
	bid := ulid.MustParse(id)
	unknown := 0
	for _, c := range a.contacts {
		if !eligible[c.Email] {
			continue
		}
		row, err := s.store.GetSend(context.Background(), bid, c.ID)
		if err != nil {
			t.Fatalf("%s: %v", c.Email, err)
		}
		if row.Status == store.SendUnknown {
			unknown++
			// The worker's account of what happened, not "the worker
			// stopped": no worker did.
			if !strings.HasPrefix(row.Error, "in doubt: smtp") || strings.Contains(row.Error, "worker stopped") {
				t.Errorf("%s: unknown with %q; want the send's own error", c.Email, row.Error)
			}
		} else if !row.Status.Accepted() {
			t.Errorf("%s: %s (%s)", c.Email, row.Status, row.Error)
		}
	}
	if unknown != taken {
		t.Errorf("%d rows unknown, want the %d messages lost after the dot", unknown, taken)
	}
}

// TestRelayThatLosesAShareHalts: a relay that confirms most messages but
// drops the connection after the final dot of one in five is halted too
// (it turned a fifth of the audience into unknowns and completed); one
// that loses one in a hundred is not: its losses stay a connection's bad
// luck, each recorded unknown.
func TestRelayThatLosesAShareHalts(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		every int64
		halts bool
	}{{5, true}, {100, false}} {
		relay := startEatingRelay(t)
		relay.eat.Store(false)
		relay.every.Store(c.every)
		s := newStack(t, stackOptions{workers: 1, concurrency: 8, pageLimit: 40, smtpURL: relay.url()})
		s.seed(1500)
		// 400 a second: the samples lossyShare judges span a second each.
		id := s.create("", 1_440_000)
		s.start(id)
		want := pb.BroadcastState_BROADCAST_STATE_COMPLETED
		if c.halts {
			want = pb.BroadcastState_BROADCAST_STATE_PAUSED
		}
		b := s.waitState(id, want, time.Minute)
		if c.halts && !strings.Contains(b.GetReason(), "after the final dot") {
			t.Errorf("one in %d lost: paused with reason %q; want the relay's losses named", c.every, b.GetReason())
		}
		if _, most := relay.taken(); most > 1 {
			t.Fatalf("one in %d lost: a recipient was sent %d copies", c.every, most)
		}
		t.Logf("one in %d lost: %s: %s", c.every, b.GetState(), b.GetReason())
	}
}
