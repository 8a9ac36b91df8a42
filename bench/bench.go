// Package bench is rangecast's benchmark harness (`make bench`). It starts
// its own parts on 127.0.0.1 as separate processes — a database of its own
// on the test Postgres, nats-server with a file store, an SMTP sink,
// a coordinator and page workers — runs broadcasts through them and
// measures what operators ask: messages per second against a bare SMTP
// client in the same run, CPU per message, what the coordinator and
// Postgres do per message as the audience grows from 10k to 1M, and what a
// crash of every worker costs. The result is one markdown table (see
// Report), printed and written to docs/benchmarks.md.
package bench

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/rangecast/rangecast/internal/child"
)

// Config is one bench run.
type Config struct {
	// Short is the quick form (bench-short): 10k contacts, fewer points.
	Short bool
	// DatabaseURL names the Postgres server; the bench creates and drops
	// a database rangecast_bench_<random> on it. Default TEST_DATABASE_URL,
	// then child.DefaultDatabaseURL.
	DatabaseURL string
	// Dir holds binaries, logs, JetStream stores and profiles; "" makes a
	// temporary folder, removed at the end unless Keep.
	Dir  string
	Keep bool
	// BinDir holds prebuilt coordinator, pageworker, smtpsink and
	// nats-server; "" builds them.
	BinDir string
	// Micro also runs the Go micro-benchmarks of the hot paths.
	Micro bool
	// Note is added to the report (what else ran on the machine).
	Note string
	// Only, when set, runs only the scenarios whose name it matches
	// (e2e-2w-sync-default, latency-4x64, size-1000000, crash, …); the
	// bare client always runs.
	Only *regexp.Regexp
	// LatencyPoints, when set, replace the plan's latency-bound runs:
	// workers, pages per worker, window each (ParseLatencyPoints).
	LatencyPoints [][3]int
	// Out receives progress lines.
	Out io.Writer
}

// ParseLatencyPoints reads latency-bound runs as cmd/bench's -latency takes
// them: a comma-separated list of WORKERSxWINDOW or WORKERSxPAGESxWINDOW
// ("2x64,2x2x32").
func ParseLatencyPoints(s string) ([][3]int, error) {
	var out [][3]int
	for _, f := range strings.Split(s, ",") {
		parts := strings.Split(strings.TrimSpace(f), "x")
		var n []int
		for _, p := range parts {
			v, err := strconv.Atoi(p)
			if err != nil || v < 1 {
				return nil, fmt.Errorf("latency point %q: want WORKERSxWINDOW or WORKERSxPAGESxWINDOW of positive numbers", f)
			}
			n = append(n, v)
		}
		switch len(n) {
		case 2:
			out = append(out, [3]int{n[0], 1, n[1]})
		case 3:
			out = append(out, [3]int{n[0], n[1], n[2]})
		default:
			return nil, fmt.Errorf("latency point %q: want WORKERSxWINDOW or WORKERSxPAGESxWINDOW", f)
		}
	}
	return out, nil
}

// plan is what a run measures; Short and full differ only here.
type plan struct {
	ceilingConns    int
	ceilingMessages int64
	e2eContacts     int
	e2eWorkers      []int
	syncWorkers     []int // e2e worker counts repeated with sync_interval: always
	concurrency     int
	latency         time.Duration
	latencyPoints   [][3]int // workers, pages per worker, window
	// inFlight is the run that shows a broadcast's in flight past 32
	// pages' worth of the default window: workers, pages per worker,
	// window, at a sink latency long enough that the CPU is not the limit.
	inFlight        [3]int
	inFlightLatency time.Duration
	inFlightN       int
	tarpitContacts  int
	sizes           []int
	crashContacts   int
	profileSeconds  int
}

func planFor(short bool) plan {
	if short {
		return plan{
			ceilingConns: 32, ceilingMessages: 20_000,
			e2eContacts: 10_000, e2eWorkers: []int{2}, syncWorkers: []int{2}, concurrency: 16,
			latency: 50 * time.Millisecond, latencyPoints: [][3]int{{2, 1, 32}, {4, 1, 64}},
			sizes: []int{2_000, 10_000}, crashContacts: 10_000, profileSeconds: 2,
			inFlight: [3]int{4, 8, 64}, inFlightLatency: time.Second, inFlightN: 10_000, tarpitContacts: 10_000,
		}
	}
	return plan{
		ceilingConns: 32, ceilingMessages: 100_000,
		e2eContacts: 100_000, e2eWorkers: []int{1, 2, 4}, syncWorkers: []int{1, 2, 4}, concurrency: 16,
		latency: 50 * time.Millisecond, latencyPoints: [][3]int{{2, 1, 32}, {2, 1, 64}, {4, 1, 64}, {4, 1, 128}},
		sizes: []int{10_000, 100_000, 1_000_000}, crashContacts: 100_000, profileSeconds: 10,
		inFlight: [3]int{4, 8, 64}, inFlightLatency: time.Second, inFlightN: 30_000, tarpitContacts: 20_000,
	}
}

// harness is one run's state.
type harness struct {
	cfg   Config
	plan  plan
	out   io.Writer
	outMu sync.Mutex
	runID string
	dir   string
	bin   string

	adminURL, benchURL, dbName, pgVersion string
	admin                                 *pgxpool.Pool
	audiences                             map[int]audience

	unsubscribeKey string
}

func (h *harness) logf(format string, args ...any) {
	h.outMu.Lock()
	defer h.outMu.Unlock()
	fmt.Fprintf(h.out, "bench: "+format+"\n", args...)
}

// Run runs the whole plan and returns the report.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if cfg.Out == nil {
		cfg.Out = os.Stdout
	}
	p := planFor(cfg.Short)
	if cfg.LatencyPoints != nil {
		p.latencyPoints = cfg.LatencyPoints
	}
	h := &harness{cfg: cfg, plan: p, out: cfg.Out, runID: randomHex(4), audiences: map[int]audience{}, unsubscribeKey: randomHex(32)}
	dir, cleanup, err := child.WorkDir(cfg.Dir, "rangecast-bench-", cfg.Keep)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	h.dir = dir
	h.logf("run %s, work folder %s", h.runID, h.dir)
	if err := h.build(ctx); err != nil {
		return nil, err
	}
	if err := h.database(ctx); err != nil {
		return nil, err
	}
	defer h.dropDatabase()
	rep := &Report{Short: cfg.Short, Started: time.Now().UTC(), Machine: describeMachine(h.pgVersion), Note: cfg.Note}
	if err := h.measure(ctx, rep); err != nil {
		return rep, err
	}
	if cfg.Micro {
		out, err := h.micro(ctx)
		if err != nil {
			// The figures above are still worth having.
			rep.Failures = append(rep.Failures, "micro-benchmarks: "+err.Error())
		}
		rep.Micro = out
	}
	rep.Finished = time.Now().UTC()
	return rep, nil
}

func (h *harness) build(ctx context.Context) error {
	if h.cfg.BinDir != "" {
		h.bin = h.cfg.BinDir
	} else {
		h.bin = filepath.Join(h.dir, "bin")
		began := time.Now()
		if err := BuildBinaries(ctx, h.bin); err != nil {
			return err
		}
		h.logf("built coordinator, pageworker, smtpsink, nats-server in %s", time.Since(began).Round(100*time.Millisecond))
	}
	for _, b := range []string{"coordinator", "pageworker", "smtpsink", "nats-server"} {
		if _, err := os.Stat(filepath.Join(h.bin, b)); err != nil {
			return fmt.Errorf("bin dir: %w", err)
		}
	}
	return nil
}

// measure runs every scenario of the plan, in the order the report lists
// them.
func (h *harness) measure(ctx context.Context, rep *Report) error {
	p := h.plan
	ceil, err := h.measureCeiling(ctx, fmt.Sprintf("ceiling-%d", p.ceilingConns), p.ceilingConns, p.ceilingMessages)
	if err != nil {
		return err
	}
	rep.Ceiling = ceil
	h.logf("bare SMTP client: %d connections, %d messages of %d bytes: %.0f msg/s", ceil.conns, ceil.messages, ceil.bytes, ceil.rate())

	var e2e2 *runResult
	for _, always := range []bool{false, true} {
		workers := p.e2eWorkers
		if always {
			workers = p.syncWorkers
		}
		for _, w := range workers {
			spec := stackSpec{name: fmt.Sprintf("e2e-%dw-sync-%s", w, syncName(always)), syncAlways: always, workers: w, concurrency: p.concurrency}
			profile := !always && w == 2
			// The targets' runs: the bare client beside them too.
			var bare adjacentBare
			beside := w == 2 && h.selected(spec.name)
			if beside {
				if bare.before, err = h.measureCeiling(ctx, "bare-before-"+spec.name, p.ceilingConns, p.ceilingMessages); err != nil {
					return err
				}
			}
			r, err := h.scenario(ctx, rep, spec, p.e2eContacts, runOptions{profile: profile}, kindE2E)
			if err != nil {
				return err
			}
			if beside {
				if bare.after, err = h.measureCeiling(ctx, "bare-after-"+spec.name, p.ceilingConns, p.ceilingMessages); err != nil {
					return err
				}
				if r != nil {
					r.bare = &bare
				}
			}
			if profile && r != nil {
				e2e2 = r
			}
		}
	}
	for _, pt := range p.latencyPoints {
		w, pages, window := pt[0], pt[1], pt[2]
		inflight := w * pages * window
		ideal := float64(inflight) / p.latency.Seconds()
		n := p.e2eContacts
		if !h.cfg.Short {
			// About 15 s at the ideal rate, whole tens of thousands so
			// schemas are shared.
			n = min(100_000, max(20_000, int(ideal*15)/10_000*10_000))
		}
		name := fmt.Sprintf("latency-%dx%d", w, window)
		if pages > 1 {
			name = fmt.Sprintf("latency-%dx%dx%d", w, pages, window)
		}
		spec := stackSpec{name: name, sinkLatency: p.latency, workers: w, pages: pages, concurrency: window}
		if _, err := h.scenario(ctx, rep, spec, n, runOptions{}, kindLatency); err != nil {
			return err
		}
	}
	if f := p.inFlight; f[0] > 0 {
		spec := stackSpec{name: fmt.Sprintf("inflight-%dx%dx%d", f[0], f[1], f[2]), sinkLatency: p.inFlightLatency, workers: f[0], pages: f[1], concurrency: f[2]}
		if _, err := h.scenario(ctx, rep, spec, p.inFlightN, runOptions{}, kindInFlight); err != nil {
			return err
		}
	}
	// A server that holds a few replies for seconds (a tarpit, a slow
	// scan): the pages must go on without them (pageworker's stragglers),
	// not wait for the slowest send of each window.
	tarpit := stackSpec{name: "tarpit-2x16", workers: 2, concurrency: p.concurrency, tarpit: 0.01, tarpitDelay: 5 * time.Second}
	if _, err := h.scenario(ctx, rep, tarpit, p.tarpitContacts, runOptions{}, kindTarpit); err != nil {
		return err
	}
	for _, n := range p.sizes {
		if n == p.e2eContacts && e2e2 != nil {
			rep.Runs = append(rep.Runs, e2e2.asSize())
			continue
		}
		spec := stackSpec{name: fmt.Sprintf("size-%d", n), workers: 2, concurrency: p.concurrency}
		if _, err := h.scenario(ctx, rep, spec, n, runOptions{}, kindSize); err != nil {
			return err
		}
	}
	// The first broadcast of a new install: the same run as end-to-end with
	// 2 workers, on an empty ledger (10k contacts in both forms: the cost
	// it shows grows with the square of the audience).
	fresh := stackSpec{name: "fresh-ledger", workers: 2, concurrency: p.concurrency, freshLedger: true}
	if _, err := h.scenario(ctx, rep, fresh, 10_000, runOptions{}, kindFresh); err != nil {
		return err
	}
	crash := stackSpec{name: "crash", workers: 2, concurrency: p.concurrency, inDoubtAfter: 15 * time.Second}
	_, err = h.scenario(ctx, rep, crash, p.crashContacts, runOptions{crashAt: 0.5}, kindCrash)
	return err
}

// scenario runs one measured broadcast, unless -only leaves it out, and
// adds it to rep. A scenario that could not be measured is recorded as a
// failure and the run goes on; only a cancelled ctx ends it (the error).
// The result is nil when nothing was measured.
func (h *harness) scenario(ctx context.Context, rep *Report, spec stackSpec, n int, opts runOptions, kind runKind) (*runResult, error) {
	if !h.selected(spec.name) {
		return nil, nil
	}
	r, err := h.runBroadcast(ctx, spec, n, opts)
	if err != nil {
		return nil, h.failed(ctx, rep, spec, err)
	}
	r.kind = kind
	rep.Runs = append(rep.Runs, r)
	return r, nil
}

// failed records a scenario that could not be measured, so the rest of the
// matrix still runs; it returns an error only when the run was interrupted.
func (h *harness) failed(ctx context.Context, rep *Report, spec stackSpec, err error) error {
	if ctx.Err() != nil {
		return err
	}
	h.logf("%s failed: %v", spec.name, err)
	rep.Failures = append(rep.Failures, spec.name+": "+err.Error())
	return nil
}

func (h *harness) selected(name string) bool {
	return h.cfg.Only == nil || h.cfg.Only.MatchString(name)
}

func syncName(always bool) string {
	if always {
		return "always"
	}
	return "default"
}

func randomHex(n int) string {
	b := make([]byte, n)
	crand.Read(b) //nolint:errcheck // never fails
	return hex.EncodeToString(b)
}
