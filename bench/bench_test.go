package bench

import (
	"os"
	"testing"
	"time"

	"github.com/rangecast/rangecast/internal/procstat"
)

func TestNum(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in   float64
		want string
	}{{0, "0"}, {999, "999"}, {1000, "1,000"}, {950000, "950,000"}, {1234567.4, "1,234,567"}, {-12345, "-12,345"}} {
		if got := num(c.in); got != c.want {
			t.Errorf("num(%v) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestStatementKind(t *testing.T) {
	t.Parallel()
	for q, want := range map[string]string{
		"\nINSERT INTO broadcast_sends (broadcast_id, contact_id":       "claim (INSERT … ON CONFLICT)",
		"\nUPDATE broadcast_sends SET status = $3, error = $4":          "outcome (UPDATE by key)",
		"SELECT c.id, c.email, c.name, c.attributes FROM":               "eligible page (SELECT)",
		"\nINSERT INTO broadcast_reputation_deltas (broadcast_id":       "reputation delta (INSERT)",
		"\nWITH gone AS (\n    DELETE FROM broadcast_reputation_deltas": "reputation fold (alarm read)",
		"commit":   "COMMIT",
		"SELECT 1": "SELECT 1",
	} {
		if got := statementKind(q); got != want {
			t.Errorf("statementKind(%q) = %q, want %q", q, got, want)
		}
	}
}

// rateOver and fullSpeed read the sink's timeline: 1,000 msg/s, a stop at
// the kill, nothing for 2 s, then 1,000 msg/s again.
func TestCrashTimeline(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1000, 0)
	var tl []sample
	var n int64
	for ms := 0; ms <= 10_000; ms += 100 {
		at := t0.Add(time.Duration(ms) * time.Millisecond)
		if ms < 5_000 || ms >= 7_000 {
			n += 100
		}
		tl = append(tl, sample{at: at, n: n})
	}
	if r := rateOver(tl[:50], 3*time.Second); r < 990 || r > 1010 {
		t.Fatalf("rate before the kill %.0f, want 1000", r)
	}
	c := &crashResult{preRate: 1000, killedAt: t0.Add(5 * time.Second), restartAfter: 500 * time.Millisecond}
	got := fullSpeed(tl, c)
	if c.firstAfter != 2*time.Second {
		t.Errorf("first message after the kill at %s, want 2s", c.firstAfter)
	}
	// The window ending at 7.8 s holds 900 messages: the first at 90 %.
	if got != 2800*time.Millisecond {
		t.Errorf("full speed after %s, want 2.8s (the first 1 s window at 90 %% of the old rate)", got)
	}
}

// procstat.CPU and statusKB read this process's own /proc entries.
func TestProcReaders(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc")
	}
	pid := os.Getpid()
	if _, err := procstat.CPU(pid); err != nil {
		t.Fatal(err)
	}
	hwm, err := statusKB(pid, "VmHWM")
	if err != nil || hwm <= 0 {
		t.Fatalf("VmHWM %d, %v", hwm, err)
	}
}

// TestPhasesOf: a run that starts 100 ms late, sends 1,000 a second and
// slows to half that pace for its last 10 % is split as such.
func TestPhasesOf(t *testing.T) {
	t0 := time.Unix(1000, 0)
	first := t0.Add(100 * time.Millisecond)
	var tl []sample
	for ms := 0; ms <= 900; ms += 50 { // 0 → 900 at 1,000/s
		tl = append(tl, sample{at: first.Add(time.Duration(ms) * time.Millisecond), n: int64(ms)})
	}
	for ms := 100; ms <= 200; ms += 50 { // 900 → 1,000 at 500/s
		tl = append(tl, sample{at: first.Add(time.Duration(900+2*ms-100) * time.Millisecond), n: int64(900 + ms/2)})
	}
	last := tl[len(tl)-1].at
	p := phasesOf(tl, t0, first, last, 1000)
	if p.start != 100*time.Millisecond {
		t.Errorf("start = %v, want 100ms", p.start)
	}
	if p.bodyRate < 990 || p.bodyRate > 1010 {
		t.Errorf("body rate = %.0f, want 1,000", p.bodyRate)
	}
	if p.tailAtPace < 99*time.Millisecond || p.tailAtPace > 101*time.Millisecond {
		t.Errorf("tail at the body's pace = %v, want 100ms", p.tailAtPace)
	}
	if p.tail <= p.tailAtPace {
		t.Errorf("tail = %v, want longer than at the body's pace (%v)", p.tail, p.tailAtPace)
	}
}

// TestAdjacentBare: a run's ratio is against the bare client measured
// beside it (both runs pooled), not the matrix's first ceiling.
func TestAdjacentBare(t *testing.T) {
	first := ceilingResult{messages: 1000, elapsed: 100 * time.Millisecond, clientCPU: 50 * time.Millisecond}
	b := &adjacentBare{
		before: ceilingResult{messages: 1000, elapsed: time.Second, clientCPU: 100 * time.Millisecond},
		after:  ceilingResult{messages: 1000, elapsed: 3 * time.Second, clientCPU: 300 * time.Millisecond},
	}
	alone := &runResult{}
	if got := alone.bareRate(first); got != 10_000 {
		t.Errorf("a run without its own bare client: rate %v, want the first ceiling's 10,000", got)
	}
	beside := &runResult{bare: b}
	if got := beside.bareRate(first); got != 500 {
		t.Errorf("rate beside the run %v, want 2,000 messages in 4 s = 500", got)
	}
	if got := beside.bareCPUPerMsg(first); got != float64(200*time.Microsecond) {
		t.Errorf("CPU per message beside the run %v ns, want 200 µs", got)
	}
}

func TestParseLatencyPoints(t *testing.T) {
	got, err := ParseLatencyPoints("2x64, 4x2x32")
	if err != nil || len(got) != 2 || got[0] != [3]int{2, 1, 64} || got[1] != [3]int{4, 2, 32} {
		t.Fatalf("ParseLatencyPoints = %v, %v; want [2 1 64] [4 2 32]", got, err)
	}
	for _, bad := range []string{"", "2", "2x0", "2xx4", "1x2x3x4", "ax4"} {
		if _, err := ParseLatencyPoints(bad); err == nil {
			t.Errorf("ParseLatencyPoints(%q) took it; want an error", bad)
		}
	}
}
