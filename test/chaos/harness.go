package main

import (
	"bufio"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/oklog/ulid/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/rangecast/rangecast/internal/child"
	"github.com/rangecast/rangecast/internal/pageworker"
	"github.com/rangecast/rangecast/internal/sinkproc"
	"github.com/rangecast/rangecast/internal/store"
	pb "github.com/rangecast/rangecast/proto/rangecast/v1"
)

// Config is one chaos run.
type Config struct {
	// Contacts to import; every 20th is unsubscribed and every 50th
	// do-not-contact, so the harness knows the eligible set itself.
	Contacts int
	// Duration is the chaos phase: faults are injected from the start of
	// the broadcast until then (or until it finishes, if sooner).
	Duration time.Duration
	// Throttle is the broadcast's throttle per hour; 0 paces the eligible
	// audience over Duration, so the faults land while it runs.
	Throttle int64

	Coordinators, Workers, Concurrency int
	// WorkerKillMin/Max bound the wait between two worker kills.
	WorkerKillMin, WorkerKillMax time.Duration
	CoordinatorKills             int
	NATSRestarts                 int
	// NATSKill restarts nats-server with kill -9 instead of SIGTERM.
	NATSKill       bool
	PGTerminations int
	// PGOutage takes Postgres away from the processes for this long, once,
	// at a third of the chaos phase (0: never): every connection is cut
	// and new ones refused, as in a failover or a partition.
	PGOutage    time.Duration
	PauseResume bool
	PauseFor    time.Duration
	// PauseStorm pauses and resumes the broadcast every few seconds for
	// the whole chaos phase (besides the one measured pause).
	PauseStorm bool
	// StormPauses, when above 0, ends the storm after that many pauses
	// (the governor issue's "paused and resumed twice").
	StormPauses int
	// RefuseRcpt is the share of RCPTs the sink answers 451 at random, as
	// providers' deferrals and greylisting do.
	RefuseRcpt float64
	// RelayOutage stops the SMTP sink for this long, once, a fifth into
	// the chaos phase (0: never): every send is refused at connect, so the
	// receiving provider's breaker opens, and it must ramp back up and
	// close while the sink goes on refusing RefuseRcpt at random.
	RelayOutage time.Duration
	// Erasures is how many times contacts are erased (GDPR Art. 17) while
	// the broadcast runs, ErasePerEvent of them each time: half among the
	// rows claimed or deferred at that moment, half at random.
	Erasures, ErasePerEvent int

	SinkLatency  time.Duration
	InDoubtAfter time.Duration
	// InDoubtPolicy is the coordinators' --in-doubt-policy: "skip" (a
	// killed worker's claims end unknown: a gap, never a second copy) or
	// "resend" (they are sent again: a second copy, only of those, never a
	// gap). The verdict holds the run to the policy's own promise.
	InDoubtPolicy string
	// CompleteTimeout bounds the wait for completion after the chaos phase.
	CompleteTimeout time.Duration

	// DatabaseURL is the Postgres server. If it carries search_path the
	// schema is used as is (and left to its owner); otherwise a schema
	// chaos_<random> is created and dropped at the end.
	DatabaseURL string
	// Dir holds binaries, logs, the JetStream store and the sink's log; ""
	// makes a temporary folder, removed at the end unless Keep.
	Dir  string
	Keep bool
	// BinDir holds prebuilt coordinator, pageworker, smtpsink and
	// nats-server binaries; "" builds them into Dir/bin.
	BinDir string
	// Out receives progress lines and the result.
	Out  io.Writer
	Seed uint64
}

// LongConfig is `make chaos`.
func LongConfig() Config {
	return Config{
		Contacts: 50000, Duration: 90 * time.Second,
		Coordinators: 2, Workers: 4, Concurrency: 16,
		WorkerKillMin: time.Second, WorkerKillMax: 3 * time.Second,
		CoordinatorKills: 3, NATSRestarts: 1, PGTerminations: 1, PauseResume: true, PauseFor: 4 * time.Second,
		PauseStorm: true, RefuseRcpt: 0.03, RelayOutage: 10 * time.Second, Erasures: 3, ErasePerEvent: 20,
		SinkLatency: 20 * time.Millisecond, InDoubtAfter: 5 * time.Second, InDoubtPolicy: "skip", CompleteTimeout: 5 * time.Minute,
	}
}

// ShortConfig is the form `make test` runs: fewer contacts, a shorter
// chaos phase, fewer kills.
func ShortConfig() Config {
	c := LongConfig()
	c.Contacts, c.Duration = 5000, 30*time.Second
	c.WorkerKillMin, c.WorkerKillMax = 2*time.Second, 5*time.Second
	c.CoordinatorKills, c.PauseFor = 2, 3*time.Second
	c.Erasures, c.RelayOutage = 2, 5*time.Second
	// The relay outage opens the provider's breaker for 30 s and its ramp
	// takes a few more; the throttle then catches up.
	c.CompleteTimeout = 90 * time.Second
	return c
}

// Check is one line of the verdict.
type Check struct {
	OK     bool
	Name   string
	Detail string
}

func (c Check) String() string {
	v := "PASS"
	if !c.OK {
		v = "FAIL"
	}
	return v + " " + c.Name + ": " + c.Detail
}

// Result is what a run found.
type Result struct {
	Checks  []Check
	Figures string
	// Notes are things worth a look that are not breaches by themselves.
	Notes []string
}

// OK reports whether every check passed.
func (r *Result) OK() bool {
	for _, c := range r.Checks {
		if !c.OK {
			return false
		}
	}
	return len(r.Checks) > 0
}

// harness is one run's state.
type harness struct {
	cfg       Config
	out       io.Writer
	outMu     sync.Mutex
	rng       *rand.Rand
	rngMu     sync.Mutex
	dir       string
	bin       string
	runID     string
	dbURL     string    // what the processes get: schema and application_name
	pgProxy   *tcpProxy // between the processes and Postgres, when PGOutage
	appName   string
	schema    string
	ownSchema bool
	baseURL   string

	nats        *child.Proc
	natsAddr    string
	sink        *child.Proc
	sinkAddr    string
	coords      []*child.Proc
	coordGRPC   []string
	coordMetric []string
	workers     []*child.Proc
	conns       []*grpc.ClientConn

	broadcastID string
	started     time.Time
	eligible    []string // the eligible addresses, for picks at random
	erased      erasures

	// Chaos counters.
	workerKills, coordKills, natsRestarts atomic.Int64
	pgTerminated, pgTerminations          atomic.Int64
	leaderKills                           atomic.Int64 // coordinator kills aimed by the leader gauge
	pausedFor                             time.Duration
	// pauseMu keeps the pause storm out of the measured pause; storms
	// counts the storm's pauses.
	pauseMu sync.Mutex
	storms  atomic.Int64
	// lastKill is when the last worker was killed (Unix ns), for the time
	// from a kill to completion.
	lastKill           atomic.Int64
	sentWhilePaused    int64
	supervisorRestarts atomic.Int64

	procsMu sync.Mutex
	procs   []*child.Proc
}

func (h *harness) logf(format string, args ...any) {
	h.outMu.Lock()
	defer h.outMu.Unlock()
	fmt.Fprintf(h.out, "chaos: "+format+"\n", args...)
}

func (h *harness) randDur(lo, hi time.Duration) time.Duration {
	h.rngMu.Lock()
	defer h.rngMu.Unlock()
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(h.rng.Int64N(int64(hi-lo)))
}

func (h *harness) randInt(n int) int {
	h.rngMu.Lock()
	defer h.rngMu.Unlock()
	return h.rng.IntN(n)
}

func (h *harness) elapsed() time.Duration { return time.Since(h.started).Round(100 * time.Millisecond) }

// Run runs the chaos scenario. An error means the harness could not do its
// job (nothing started, a tool missing); breaches are in the Result.
func Run(ctx context.Context, cfg Config) (res *Result, err error) {
	if cfg.Out == nil {
		cfg.Out = os.Stdout
	}
	if cfg.Seed == 0 {
		cfg.Seed = uint64(time.Now().UnixNano())
	}
	h := &harness{cfg: cfg, out: cfg.Out, rng: rand.New(rand.NewPCG(cfg.Seed, cfg.Seed>>1|1)), runID: randomHex(4)}
	h.erased.of = map[string]int{}
	dir, cleanup, err := child.WorkDir(cfg.Dir, "rangecast-chaos-", cfg.Keep)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	h.dir = dir
	defer h.stopAll()
	defer func() {
		for _, c := range h.conns {
			c.Close()
		}
	}()
	h.logf("run %s, seed %d, work folder %s", h.runID, cfg.Seed, h.dir)

	if err := h.build(ctx); err != nil {
		return nil, err
	}
	if err := h.database(ctx); err != nil {
		return nil, err
	}
	if h.ownSchema && !cfg.Keep {
		defer h.dropSchema()
	}
	if err := h.startAll(ctx); err != nil {
		return nil, err
	}
	eligible, err := h.importContacts(ctx)
	if err != nil {
		return nil, err
	}
	h.eligible = keysOf(eligible)
	sort.Strings(h.eligible) // a pick depends on the random draw, not on map order
	if err := h.startBroadcast(ctx, len(eligible)); err != nil {
		return nil, err
	}
	final, err := h.chaosAndWait(ctx)
	if err != nil {
		return nil, err
	}
	finished := time.Since(h.started)
	h.stopAll()
	return h.verdict(ctx, eligible, final, finished)
}

// build compiles the binaries, nats-server from the module's own dependency.
func (h *harness) build(ctx context.Context) error {
	if h.cfg.BinDir != "" {
		h.bin = h.cfg.BinDir
		for _, b := range []string{"coordinator", "pageworker", "smtpsink", "nats-server"} {
			if _, err := os.Stat(filepath.Join(h.bin, b)); err != nil {
				return fmt.Errorf("bin dir: %w", err)
			}
		}
		return nil
	}
	h.bin = filepath.Join(h.dir, "bin")
	began := time.Now()
	if err := BuildBinaries(ctx, h.bin); err != nil {
		return err
	}
	h.logf("built coordinator, pageworker, smtpsink, nats-server in %s", time.Since(began).Round(100*time.Millisecond))
	return nil
}

// BuildBinaries builds what a run needs into dir.
func BuildBinaries(ctx context.Context, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, "go", "build", "-o", dir+string(filepath.Separator),
		"github.com/rangecast/rangecast/cmd/coordinator",
		"github.com/rangecast/rangecast/cmd/pageworker",
		"github.com/rangecast/rangecast/cmd/smtpsink",
		"github.com/nats-io/nats-server/v2")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build: %v\n%s", err, out)
	}
	return nil
}

var schemaRe = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// database picks the schema and builds the URL the processes use: its own
// search_path, and an application_name only this run's processes carry, so
// terminating "our" backends touches nothing else on the server.
func (h *harness) database(ctx context.Context) error {
	u, err := url.Parse(child.DatabaseURL(h.cfg.DatabaseURL))
	if err != nil {
		return fmt.Errorf("database url: %w", err)
	}
	q := u.Query()
	h.schema = q.Get("search_path")
	if h.schema == "" {
		h.schema, h.ownSchema = "chaos_"+h.runID, true
	}
	if !schemaRe.MatchString(h.schema) {
		return fmt.Errorf("schema %q: use lowercase letters, digits and _", h.schema)
	}
	q.Del("search_path")
	q.Del("application_name")
	u.RawQuery = q.Encode()
	h.baseURL = u.String()
	conn, err := h.pg(ctx)
	if err != nil {
		return fmt.Errorf("postgres at %s: %w", u.Redacted(), err)
	}
	defer conn.Close(ctx)
	if h.ownSchema {
		if _, err := conn.Exec(ctx, "CREATE SCHEMA "+h.schema); err != nil {
			return fmt.Errorf("create schema: %w", err)
		}
	}
	h.appName = "rangecast_chaos_" + h.runID
	q.Set("search_path", h.schema)
	q.Set("application_name", h.appName)
	u.RawQuery = q.Encode()
	if h.cfg.PGOutage > 0 {
		// The processes reach Postgres through a proxy the harness can cut.
		host := u.Host
		if u.Port() == "" {
			host = net.JoinHostPort(u.Hostname(), "5432")
		}
		if h.pgProxy, err = startProxy(host); err != nil {
			return fmt.Errorf("postgres proxy: %w", err)
		}
		u.Host = h.pgProxy.Addr()
	}
	h.dbURL = u.String()
	h.logf("postgres schema %s, processes connect as application_name=%s", h.schema, h.appName)
	return nil
}

// pg is the harness's own connection: a different application_name, so it
// survives the backend termination it performs.
func (h *harness) pg(ctx context.Context) (*pgx.Conn, error) {
	u, _ := url.Parse(h.baseURL)
	q := u.Query()
	if h.schema != "" {
		q.Set("search_path", h.schema)
	}
	q.Set("application_name", "rangecast_chaos_harness")
	u.RawQuery = q.Encode()
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return pgx.Connect(cctx, u.String())
}

func (h *harness) dropSchema() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := h.pg(ctx)
	if err != nil {
		h.logf("could not drop schema %s: %v", h.schema, err)
		return
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+h.schema+" CASCADE"); err != nil {
		h.logf("could not drop schema %s: %v", h.schema, err)
	}
}

func (h *harness) newProc(binary, name string, args ...string) *child.Proc {
	p := &child.Proc{Name: name, Path: filepath.Join(h.bin, binary), Args: args, LogPath: filepath.Join(h.dir, "logs", name+".log"), Label: "chaos"}
	h.procsMu.Lock()
	h.procs = append(h.procs, p)
	h.procsMu.Unlock()
	return p
}

// stopAll kills every process the harness started; safe to call twice.
func (h *harness) stopAll() {
	h.procsMu.Lock()
	procs := append([]*child.Proc(nil), h.procs...)
	h.procsMu.Unlock()
	var wg sync.WaitGroup
	for _, p := range procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if p == h.sink {
				p.Signal(syscall.SIGTERM, 10*time.Second) // flushes nothing it has not fsynced; just tidy
				return
			}
			p.Kill9()
		}()
	}
	wg.Wait()
	if h.pgProxy != nil {
		h.pgProxy.Close()
	}
}

func (h *harness) startAll(ctx context.Context) error {
	if err := os.MkdirAll(filepath.Join(h.dir, "logs"), 0o755); err != nil {
		return err
	}
	var err error
	if h.natsAddr, err = child.FreeAddr(); err != nil {
		return err
	}
	_, port, _ := strings.Cut(h.natsAddr, ":")
	h.nats = h.newProc("nats-server", "nats-server", "-a", "127.0.0.1", "-p", port, "-js", "-sd", filepath.Join(h.dir, "jetstream"), "-n", "chaos-"+h.runID)
	if err := h.startNATS(ctx); err != nil {
		return err
	}
	if h.sinkAddr, err = child.FreeAddr(); err != nil {
		return err
	}
	h.sink = h.newProc("smtpsink", "smtpsink", "-addr", h.sinkAddr, "-log", h.sinkLog(), "-latency", h.cfg.SinkLatency.String(),
		"-refuse-rcpt", strconv.FormatFloat(h.cfg.RefuseRcpt, 'f', -1, 64))
	if err := h.sink.Start(); err != nil {
		return err
	}
	if err := child.WaitTCP(ctx, h.sinkAddr, 10*time.Second); err != nil {
		return fmt.Errorf("smtpsink: %w\n%s", err, h.sink.LogTail(20))
	}
	natsURL := "nats://" + h.natsAddr
	// Coordinators verify and workers sign one-click unsubscribe links
	// with the same key; the links point at the first coordinator.
	keys := filepath.Join(h.dir, "unsubscribe.keys")
	if err := os.WriteFile(keys, []byte("chaos-unsubscribe-key-0123456789abcdef0123456789\n"), 0o600); err != nil {
		return err
	}
	var publicURL string
	for i := range h.cfg.Coordinators {
		grpcAddr, err1 := child.FreeAddr()
		httpAddr, err2 := child.FreeAddr()
		metricsAddr, err3 := child.FreeAddr()
		if err := errors.Join(err1, err2, err3); err != nil {
			return err
		}
		p := h.newProc("coordinator", fmt.Sprintf("coordinator-%d", i+1), "--database-url", h.dbURL, "--nats-url", natsURL,
			"--grpc-addr", grpcAddr, "--http-addr", httpAddr, "--metrics-addr", metricsAddr,
			"--in-doubt-after", h.cfg.InDoubtAfter.String(), "--in-doubt-policy", h.cfg.InDoubtPolicy,
			// The sink is no provider whose trust must be earned: the
			// governor runs, but its ceiling and rate do not bind.
			"--initial-daily-ceiling", "5000000", "--domain-rate", "1000000", "--domain-burst", "1000000",
			"--unsubscribe-keys-file", keys)
		if publicURL == "" {
			publicURL = "http://" + httpAddr
		}
		h.coords, h.coordGRPC, h.coordMetric = append(h.coords, p), append(h.coordGRPC, grpcAddr), append(h.coordMetric, metricsAddr)
		conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return err
		}
		h.conns = append(h.conns, conn)
	}
	for i := range h.coords {
		if err := h.coords[i].Start(); err != nil {
			return err
		}
	}
	for i := range h.coords {
		if err := h.waitCoordinator(ctx, i, 60*time.Second); err != nil {
			return err
		}
	}
	smtpURL := "smtp://" + h.sinkAddr + "?tls=none"
	for i := range h.cfg.Workers {
		metricsAddr, err := child.FreeAddr()
		if err != nil {
			return err
		}
		p := h.newProc("pageworker", fmt.Sprintf("pageworker-%d", i+1), "--database-url", h.dbURL, "--nats-url", natsURL,
			"--smtp-url", smtpURL, "--concurrency", fmt.Sprint(h.cfg.Concurrency), "--metrics-addr", metricsAddr,
			"--public-url", publicURL, "--unsubscribe-keys-file", keys)
		h.workers = append(h.workers, p)
		if err := p.Start(); err != nil {
			return err
		}
	}
	h.logf("nats-server %s (JetStream in %s), sink %s, %d coordinators, %d workers × %d in flight",
		h.natsAddr, filepath.Join(h.dir, "jetstream"), h.sinkAddr, len(h.coords), len(h.workers), h.cfg.Concurrency)
	return nil
}

func (h *harness) sinkLog() string { return filepath.Join(h.dir, "sink.log") }

// startNATS starts nats-server and waits until JetStream answers.
func (h *harness) startNATS(ctx context.Context) error {
	if err := h.nats.Start(); err != nil {
		return err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := func() error {
			nc, err := nats.Connect("nats://"+h.natsAddr, nats.Timeout(time.Second))
			if err != nil {
				return err
			}
			defer nc.Close()
			js, err := jetstream.New(nc)
			if err != nil {
				return err
			}
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			_, err = js.AccountInfo(cctx)
			return err
		}()
		if err == nil {
			return nil
		}
		if !h.nats.Running() || time.Now().After(deadline) {
			return fmt.Errorf("nats-server did not come up: %v\n%s", err, h.nats.LogTail(20))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitCoordinator waits until coordinator i serves gRPC health.
func (h *harness) waitCoordinator(ctx context.Context, i int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	hc := healthpb.NewHealthClient(h.conns[i])
	for {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		resp, err := hc.Check(cctx, &healthpb.HealthCheckRequest{})
		cancel()
		if err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%s did not become healthy: %v\n%s", h.coords[i].Name, err, h.coords[i].LogTail(30))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// call runs f against a live coordinator, trying each in turn while they
// are down or restarting.
func (h *harness) call(ctx context.Context, timeout time.Duration, f func(ctx context.Context, conn *grpc.ClientConn) error) error {
	deadline := time.Now().Add(timeout)
	start := h.randInt(len(h.conns))
	var last error
	for attempt := 0; ; attempt++ {
		i := (start + attempt) % len(h.conns)
		if h.coords[i].Running() {
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			last = f(cctx, h.conns[i])
			cancel()
			if last == nil {
				return nil
			}
			switch status.Code(last) {
			case codes.Unavailable, codes.DeadlineExceeded, codes.Internal, codes.Canceled, codes.Unknown:
			default:
				return last // an answer, not an outage
			}
		}
		if ctx.Err() != nil {
			return fmt.Errorf("gave up before a coordinator answered: %w (last answer: %v)", ctx.Err(), last)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no coordinator answered within %s: %w", timeout, last)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// contactEmail names contact i.
func contactEmail(i int) string { return fmt.Sprintf("c%06d@chaos.example", i) }

// importContacts streams the audience through AudienceService and returns
// the eligible addresses (lowercased).
func (h *harness) importContacts(ctx context.Context) (map[string]bool, error) {
	began := time.Now()
	eligible := map[string]bool{}
	var imported int64
	err := h.call(ctx, time.Minute, func(_ context.Context, conn *grpc.ClientConn) error {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		defer cancel()
		stream, err := pb.NewAudienceServiceClient(conn).ImportContacts(cctx)
		if err != nil {
			return err
		}
		var rows []*pb.ContactRow
		for i := range h.cfg.Contacts {
			row := &pb.ContactRow{Email: contactEmail(i), Name: fmt.Sprintf("Contact %d", i),
				Unsubscribed: i%20 == 7, DoNotContact: i%50 == 3}
			rows = append(rows, row)
			if len(rows) == 1000 || i == h.cfg.Contacts-1 {
				if err := stream.Send(&pb.ImportContactsRequest{Rows: rows}); err != nil {
					return err
				}
				rows = nil
			}
		}
		resp, err := stream.CloseAndRecv()
		if err != nil {
			return err
		}
		if len(resp.GetErrors()) > 0 {
			return fmt.Errorf("import rejected %d rows, first: %v", len(resp.GetErrors()), resp.GetErrors()[0])
		}
		imported = resp.GetImported()
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("import contacts: %w", err)
	}
	for i := range h.cfg.Contacts {
		if i%20 != 7 && i%50 != 3 {
			eligible[contactEmail(i)] = true
		}
	}
	h.logf("imported %d contacts (%d eligible) in %s", imported, len(eligible), time.Since(began).Round(100*time.Millisecond))
	return eligible, nil
}

func (h *harness) startBroadcast(ctx context.Context, eligible int) error {
	throttle := h.cfg.Throttle
	if throttle == 0 {
		throttle = int64(float64(eligible) * 3600 / h.cfg.Duration.Seconds())
	}
	var id string
	err := h.call(ctx, time.Minute, func(cctx context.Context, conn *grpc.ClientConn) error {
		resp, err := pb.NewBroadcastServiceClient(conn).CreateBroadcast(cctx, &pb.CreateBroadcastRequest{
			Name: "chaos " + h.runID, RequestId: "chaos-" + h.runID, ThrottlePerHour: throttle,
			Content: &pb.BroadcastContent{FromName: "Chaos", FromAddress: "news@chaos.example",
				Subject: "Chaos {{.Name}}", Html: "<p>Hello {{.Name}}, this is run " + h.runID + ".</p><p><a href=\"{{.UnsubscribeURL}}\">Unsubscribe</a></p>"},
		})
		if err != nil {
			return err
		}
		id = resp.GetBroadcast().GetId()
		return nil
	})
	if err != nil {
		return fmt.Errorf("create broadcast: %w", err)
	}
	h.broadcastID = id
	err = h.call(ctx, time.Minute, func(cctx context.Context, conn *grpc.ClientConn) error {
		_, err := pb.NewBroadcastServiceClient(conn).StartBroadcast(cctx, &pb.StartBroadcastRequest{Id: id})
		if status.Code(err) == codes.FailedPrecondition {
			return nil // a retried start after the first one went through
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("start broadcast: %w", err)
	}
	h.started = time.Now()
	h.logf("broadcast %s started, throttle %d/hour (%.0f msg/s), chaos for %s", id, throttle, float64(throttle)/3600, h.cfg.Duration)
	return nil
}

func (h *harness) get(ctx context.Context) (*pb.Broadcast, error) {
	var b *pb.Broadcast
	err := h.call(ctx, 30*time.Second, func(cctx context.Context, conn *grpc.ClientConn) error {
		resp, err := pb.NewBroadcastServiceClient(conn).GetBroadcast(cctx, &pb.GetBroadcastRequest{Id: h.broadcastID})
		if err != nil {
			return err
		}
		b = resp.GetBroadcast()
		return nil
	})
	return b, err
}

func finished(b *pb.Broadcast) bool {
	switch b.GetState() {
	case pb.BroadcastState_BROADCAST_STATE_COMPLETED, pb.BroadcastState_BROADCAST_STATE_CANCELLED, pb.BroadcastState_BROADCAST_STATE_FAILED:
		return true
	}
	return false
}

func stateName(s pb.BroadcastState) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "BROADCAST_STATE_"))
}

// sinkCount is how many recipients the sink has logged so far.
func (h *harness) sinkCount() int64 {
	f, err := os.Open(h.sinkLog())
	if err != nil {
		return 0
	}
	defer f.Close()
	var n int64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		n++
	}
	return n
}

// chaosAndWait injects the faults for the chaos phase, then waits for the
// broadcast to finish. It returns the last status read.
func (h *harness) chaosAndWait(ctx context.Context) (*pb.Broadcast, error) {
	chaosCtx, stopChaos := context.WithTimeout(ctx, h.cfg.Duration)
	defer stopChaos()
	var wg sync.WaitGroup
	var last atomic.Pointer[pb.Broadcast]

	// The supervisor restarts what exited by itself (a worker started while
	// NATS was down gives up at once), as Kubernetes would.
	superCtx, stopSuper := context.WithCancel(ctx)
	defer stopSuper()
	wg.Add(1)
	go func() { defer wg.Done(); h.supervise(superCtx) }()

	wg.Add(1)
	go func() {
		defer wg.Done()
		<-chaosCtx.Done()
		if ctx.Err() == nil {
			h.logf("t=%s chaos phase over", h.elapsed())
		}
	}()
	wg.Add(1)
	go func() { defer wg.Done(); h.killWorkers(chaosCtx) }()
	wg.Add(1)
	go func() { defer wg.Done(); h.schedule(chaosCtx) }()
	if h.cfg.PauseStorm {
		wg.Add(1)
		go func() { defer wg.Done(); h.pauseStorm(chaosCtx) }()
	}

	// Progress, and the end of the chaos phase once the broadcast is done.
	deadline := time.Now().Add(h.cfg.Duration + h.cfg.CompleteTimeout)
	nextLine := time.Now()
	var final *pb.Broadcast
	var err error
	for {
		b, gerr := h.get(ctx)
		if gerr == nil {
			last.Store(b)
			final = b
			if time.Now().After(nextLine) || finished(b) {
				p := b.GetProgress()
				h.logf("t=%-6s %-9s ranges %2d/%d  sent %6d  in doubt %3d  unknown %3d  sink %6d  %s", h.elapsed(), stateName(b.GetState()),
					p.GetRangesDone(), p.GetRangesTotal(), p.GetSent(), p.GetInDoubt(), p.GetUnknown(), h.sinkCount(), p.GetWaitingFor())
				nextLine = time.Now().Add(5 * time.Second)
			}
			if finished(b) {
				break
			}
		} else {
			h.logf("t=%s status unavailable: %v", h.elapsed(), gerr)
		}
		if time.Now().After(deadline) {
			err = nil
			h.logf("t=%s gave up waiting: the broadcast did not finish within the chaos phase + %s", h.elapsed(), h.cfg.CompleteTimeout)
			break
		}
		if ctx.Err() != nil {
			err = ctx.Err()
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	stopChaos()
	stopSuper()
	wg.Wait()
	if final == nil && err == nil {
		err = errors.New("no status was ever read")
	}
	return final, err
}

// supervise restarts processes that exited without the harness killing
// them, after a second.
func (h *harness) supervise(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
		for _, p := range append(append([]*child.Proc(nil), h.coords...), h.workers...) {
			if p.DiedByItself() {
				h.logf("t=%s %s exited by itself; restarting it: %s", h.elapsed(), p.Name, lastLine(p.LogTail(3)))
				h.supervisorRestarts.Add(1)
				if err := p.Start(); err != nil {
					h.logf("restart %s: %v", p.Name, err)
				}
			}
		}
	}
}

// lastLine is the last line of s that is not the harness's own banner.
func lastLine(s string) string {
	lines := strings.Split(s, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if l := strings.TrimSpace(lines[i]); l != "" && !strings.HasPrefix(l, "=== chaos:") {
			return l
		}
	}
	return "(no output)"
}

// killWorkers kills -9 a random worker every WorkerKillMin..Max and starts
// it again at once.
func (h *harness) killWorkers(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(h.randDur(h.cfg.WorkerKillMin, h.cfg.WorkerKillMax)):
		}
		w := h.workers[h.randInt(len(h.workers))]
		if !w.Running() {
			continue
		}
		w.Kill9()
		h.workerKills.Add(1)
		h.lastKill.Store(time.Now().UnixNano())
		h.logf("t=%s kill -9 %s", h.elapsed(), w.Name)
		if err := w.Start(); err != nil {
			h.logf("restart %s: %v", w.Name, err)
		}
	}
}

type event struct {
	at   float64 // fraction of the chaos phase
	name string
	run  func(ctx context.Context) error
	// alongside runs it beside the events after it, which would otherwise
	// wait for it (a long outage would push them past the chaos phase).
	alongside bool
}

// schedule runs the one-off faults at fixed fractions of the chaos phase,
// one after another.
func (h *harness) schedule(ctx context.Context) {
	var evs []event
	for k := range h.cfg.CoordinatorKills {
		evs = append(evs, event{at: 0.1 + 0.75*float64(k)/float64(max(1, h.cfg.CoordinatorKills-1)), name: fmt.Sprintf("coordinator kill %d", k+1), run: h.killCoordinator})
	}
	for k := range h.cfg.NATSRestarts {
		evs = append(evs, event{at: 0.25 + 0.1*float64(k), name: "nats-server restart", run: h.restartNATS})
	}
	for k := range h.cfg.PGTerminations {
		evs = append(evs, event{at: 0.5 + 0.1*float64(k), name: "postgres backends terminated", run: h.terminateBackends})
	}
	if h.cfg.PauseResume {
		evs = append(evs, event{at: 0.6, name: "pause and resume", run: h.pauseResume})
	}
	if h.cfg.PGOutage > 0 {
		evs = append(evs, event{at: 0.33, name: "postgres outage", run: h.pgOutage})
	}
	if h.cfg.RelayOutage > 0 {
		evs = append(evs, event{at: 0.2, name: "relay outage", run: h.relayOutage, alongside: true})
	}
	for k := range h.cfg.Erasures {
		evs = append(evs, event{at: 0.4 + 0.3*float64(k)/float64(max(1, h.cfg.Erasures-1)), name: fmt.Sprintf("erasure %d", k+1), run: h.eraseContacts})
	}
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].at < evs[j].at })
	var alongside sync.WaitGroup
	defer alongside.Wait()
	for _, ev := range evs {
		at := h.started.Add(time.Duration(ev.at * float64(h.cfg.Duration)))
		select {
		case <-ctx.Done():
			h.logf("skipped %s: the chaos phase ended first", ev.name)
			continue
		case <-time.After(time.Until(at)):
		}
		run := func() {
			if err := ev.run(ctx); err != nil {
				h.logf("t=%s %s: %v", h.elapsed(), ev.name, err)
			}
		}
		if ev.alongside {
			alongside.Go(run)
		} else {
			run()
		}
	}
}

// pgOutage cuts the processes off Postgres for PGOutage.
func (h *harness) pgOutage(ctx context.Context) error {
	h.pgProxy.setDown(true)
	h.logf("t=%s postgres outage begins: every connection cut, new ones refused, for %s", h.elapsed(), h.cfg.PGOutage)
	select {
	case <-time.After(h.cfg.PGOutage):
	case <-ctx.Done():
		// The chaos phase is over; the outage runs its course all the same.
		time.Sleep(time.Until(h.started.Add(time.Duration(0.33*float64(h.cfg.Duration)) + h.cfg.PGOutage)))
	}
	h.pgProxy.setDown(false)
	h.logf("t=%s postgres outage over", h.elapsed())
	return nil
}

// leader returns the coordinator whose /metrics says it holds the leader
// lease (rangecast_coordinator_leader 1), or -1 when none says so.
func (h *harness) leader() int {
	client := http.Client{Timeout: 2 * time.Second}
	for i, addr := range h.coordMetric {
		if !h.coords[i].Running() {
			continue
		}
		resp, err := client.Get("http://" + addr + "/metrics")
		if err != nil {
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, line := range strings.Split(string(body), "\n") {
			if f := strings.Fields(line); len(f) == 2 && f[0] == "rangecast_coordinator_leader" && f[1] == "1" {
				return i
			}
		}
	}
	return -1
}

// killCoordinator kills -9 the leading coordinator (alternating when no
// coordinator says it leads) and starts it again a second later.
func (h *harness) killCoordinator(ctx context.Context) error {
	i := h.leader()
	how := "the leader"
	if i < 0 {
		i, how = int(h.coordKills.Load())%len(h.coords), "no leader gauge set; alternating"
	} else {
		h.leaderKills.Add(1)
	}
	p := h.coords[i]
	p.Kill9()
	h.coordKills.Add(1)
	h.logf("t=%s kill -9 %s (%s)", h.elapsed(), p.Name, how)
	time.Sleep(time.Second)
	if err := p.Start(); err != nil {
		return err
	}
	return h.waitCoordinator(context.WithoutCancel(ctx), i, 60*time.Second)
}

// restartNATS stops nats-server (SIGTERM, or kill -9 with NATSKill), keeps
// it down for two seconds and starts it again on the same port and store.
func (h *harness) restartNATS(ctx context.Context) error {
	began := time.Now()
	if h.cfg.NATSKill {
		h.nats.Kill9()
	} else {
		h.nats.Signal(syscall.SIGTERM, 20*time.Second)
	}
	time.Sleep(2 * time.Second)
	if err := h.startNATS(context.WithoutCancel(ctx)); err != nil {
		return err
	}
	h.natsRestarts.Add(1)
	how := "SIGTERM"
	if h.cfg.NATSKill {
		how = "kill -9"
	}
	h.logf("t=%s nats-server restarted (%s), down for %s", h.elapsed(), how, time.Since(began).Round(100*time.Millisecond))
	return nil
}

// relayOutage stops the SMTP sink for RelayOutage and starts it again on
// the same address.
func (h *harness) relayOutage(ctx context.Context) error {
	h.sink.Signal(syscall.SIGTERM, 10*time.Second)
	h.logf("t=%s relay outage begins: the SMTP sink is down for %s", h.elapsed(), h.cfg.RelayOutage)
	time.Sleep(h.cfg.RelayOutage)
	if err := h.sink.Start(); err != nil {
		return err
	}
	if err := child.WaitTCP(context.WithoutCancel(ctx), h.sinkAddr, 10*time.Second); err != nil {
		return fmt.Errorf("smtpsink: %w", err)
	}
	h.logf("t=%s relay outage over", h.elapsed())
	return nil
}

// terminateBackends ends every Postgres connection of this run's processes.
func (h *harness) terminateBackends(ctx context.Context) error {
	conn, err := h.pg(ctx)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var n int64
	err = conn.QueryRow(ctx, `SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid() AND application_name = $1`, h.appName).Scan(&n)
	if err != nil {
		return err
	}
	h.pgTerminations.Add(1)
	h.pgTerminated.Add(n)
	h.logf("t=%s terminated %d Postgres backends of application_name=%s", h.elapsed(), n, h.appName)
	return nil
}

// pauseStorm pauses and resumes the broadcast every few seconds until the
// chaos phase ends, leaving it running; it stands aside during the measured
// pause (pauseMu).
func (h *harness) pauseStorm(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(h.randDur(2*time.Second, 5*time.Second)):
		}
		h.pauseMu.Lock()
		// Neither call is cut off when the chaos phase ends: a pause whose
		// answer was lost may still have gone through, so a resume always
		// follows it (a resume of a running broadcast is FailedPrecondition,
		// which counts as done). Otherwise the storm could leave the
		// broadcast paused for good.
		detached := context.WithoutCancel(ctx)
		var n int64
		began := time.Now()
		err := h.transition(detached, true)
		if took := time.Since(began); took > 2*time.Second {
			h.logf("t=%s storm: the pause took %s to answer", h.elapsed(), took.Round(100*time.Millisecond))
		}
		if err != nil {
			h.logf("t=%s storm: pause failed: %v", h.elapsed(), err)
		} else {
			n = h.storms.Add(1)
			time.Sleep(h.randDur(500*time.Millisecond, 2*time.Second))
		}
		if err := h.transition(detached, false); err != nil {
			h.logf("t=%s storm: resume failed: %v", h.elapsed(), err)
		}
		if h.cfg.StormPauses > 0 && int(n) >= h.cfg.StormPauses {
			h.pauseMu.Unlock()
			return
		}
		h.pauseMu.Unlock()
	}
}

// transition pauses or resumes the broadcast; a FailedPrecondition (a retry
// of a call that went through, or already finished) counts as done.
func (h *harness) transition(ctx context.Context, pause bool) error {
	return h.call(ctx, 30*time.Second, func(cctx context.Context, conn *grpc.ClientConn) error {
		c := pb.NewBroadcastServiceClient(conn)
		var err error
		if pause {
			_, err = c.PauseBroadcast(cctx, &pb.PauseBroadcastRequest{Id: h.broadcastID})
		} else {
			_, err = c.ResumeBroadcast(cctx, &pb.ResumeBroadcastRequest{Id: h.broadcastID})
		}
		if status.Code(err) == codes.FailedPrecondition {
			return nil
		}
		return err
	})
}

// pauseResume pauses the broadcast, measures what the sink still accepts
// once in-flight windows have had a second to drain, and resumes.
func (h *harness) pauseResume(ctx context.Context) error {
	ctx = context.WithoutCancel(ctx)
	h.pauseMu.Lock() // the storm stands aside
	defer h.pauseMu.Unlock()
	transition := func(pause bool) error { return h.transition(ctx, pause) }
	began := time.Now()
	if err := transition(true); err != nil {
		return fmt.Errorf("pause: %w", err)
	}
	h.logf("t=%s paused", h.elapsed())
	time.Sleep(time.Second)
	before := h.sinkCount()
	time.Sleep(h.cfg.PauseFor - time.Second)
	h.sentWhilePaused = h.sinkCount() - before
	if err := transition(false); err != nil {
		return fmt.Errorf("resume: %w", err)
	}
	h.pausedFor = time.Since(began)
	h.logf("t=%s resumed after %s; the sink accepted %d messages while paused (after a 1 s grace)", h.elapsed(), h.pausedFor.Round(100*time.Millisecond), h.sentWhilePaused)
	return nil
}

// ledgerRow is one broadcast_sends row.
type ledgerRow struct {
	status string
	// inDoubt: released for a resend after an attempt that may have been
	// delivered (the resend policy): the one kind of row a second copy may
	// go to.
	inDoubt   bool
	error     string
	claimedAt time.Time
}

func (h *harness) ledger(ctx context.Context) (map[string]ledgerRow, error) {
	id, err := ulid.ParseStrict(h.broadcastID)
	if err != nil {
		return nil, err
	}
	conn, err := h.pg(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT contact_id, lower(email), status, in_doubt, error, claimed_at FROM broadcast_sends WHERE broadcast_id = $1`, [16]byte(id))
	if err != nil {
		return nil, err
	}
	out := map[string]ledgerRow{}
	erased := h.erased.byContact()
	var cid [16]byte
	var email string
	var r ledgerRow
	_, err = pgx.ForEachRow(rows, []any{&cid, &email, &r.status, &r.inDoubt, &r.error, &r.claimedAt}, func() error {
		// An erased contact's rows carry a token, not the address: the
		// harness knows whom it erased.
		if strings.HasPrefix(email, store.ErasedToken) {
			if e, ok := erased[cid]; ok {
				email = e
			}
		}
		out[email] = r
		return nil
	})
	return out, err
}

// verdict compares what the sink received with the eligible audience and
// the ledger.
func (h *harness) verdict(ctx context.Context, eligible map[string]bool, b *pb.Broadcast, took time.Duration) (*Result, error) {
	recs, err := sinkproc.ReadLog(h.sinkLog())
	if err != nil {
		return nil, fmt.Errorf("read sink log: %w", err)
	}
	ledger, err := h.ledger(ctx)
	if err != nil {
		return nil, fmt.Errorf("read ledger: %w", err)
	}
	byRcpt := map[string]int{}
	byMID := map[string]int{}
	for _, r := range recs {
		byRcpt[r.Recipient]++
		byMID[r.MessageID]++
	}
	// Under the resend policy a second copy may go to a row released in
	// doubt, and only there; under skip, nowhere.
	resend := h.cfg.InDoubtPolicy == "resend"
	var dupRcpt, dupCopies, resentCopies, dupMID int
	var dupExamples []string
	for rcpt, n := range byRcpt {
		if n <= 1 {
			continue
		}
		if resend && ledger[rcpt].inDoubt {
			resentCopies += n - 1
			continue
		}
		dupRcpt++
		dupCopies += n - 1
		if len(dupExamples) < 5 {
			dupExamples = append(dupExamples, fmt.Sprintf("%s ×%d (ledger %s)", rcpt, n, ledger[rcpt].status))
		}
	}
	for _, n := range byMID {
		if n > 1 {
			dupMID++
		}
	}
	var missing, ineligible, sentNotAtSink, unknownDelivered int
	var missingExamples, ineligibleExamples, lieExamples []string
	for email := range eligible {
		if _, gone := h.erased.of[email]; gone || byRcpt[email] > 0 {
			continue // an erased contact is held to checkErasures's rules
		}
		st := ledger[email].status
		if !resend && (st == "unknown" || st == "claimed") {
			continue // in doubt: counted and shown, never resent
		}
		missing++
		if len(missingExamples) < 5 {
			if st == "" {
				st = "no ledger row"
			}
			missingExamples = append(missingExamples, email+" ("+st+")")
		}
	}
	for rcpt := range byRcpt {
		if !eligible[rcpt] {
			ineligible++
			if len(ineligibleExamples) < 5 {
				ineligibleExamples = append(ineligibleExamples, rcpt)
			}
		}
	}
	for email, row := range ledger {
		if _, gone := h.erased.of[email]; gone {
			continue // checkErasures
		}
		switch row.status {
		case "sent":
			if byRcpt[email] == 0 {
				sentNotAtSink++
				if len(lieExamples) < 5 {
					lieExamples = append(lieExamples, email)
				}
			}
		case "unknown":
			if byRcpt[email] > 0 {
				unknownDelivered++
			}
		}
	}
	p := b.GetProgress()
	inDoubt := p.GetUnknown() + p.GetInDoubt()
	// A worker holds at most pageworker.InDoubtBound claims without an
	// outcome (two windows for its page and one of the page before, still
	// sending its last window).
	perKill := int64(pageworker.InDoubtBound(1, h.cfg.Concurrency))
	bound := perKill * h.workerKills.Load()
	state := stateName(b.GetState())
	completed := b.GetState() == pb.BroadcastState_BROADCAST_STATE_COMPLETED
	if completed && b.GetStartedAt() != nil && b.GetFinishedAt() != nil {
		took = b.GetFinishedAt().AsTime().Sub(b.GetStartedAt().AsTime())
	}
	rate := float64(len(byRcpt)) / took.Seconds()

	res := &Result{}
	add := func(ok bool, name, format string, args ...any) {
		res.Checks = append(res.Checks, Check{OK: ok, Name: name, Detail: fmt.Sprintf(format, args...)})
	}
	withExamples := func(n int, ex []string) string {
		if n == 0 {
			return "0"
		}
		return fmt.Sprintf("%d, e.g. %s", n, strings.Join(ex, ", "))
	}
	if resend {
		add(dupCopies == 0, "duplicates at the sink, but for rows released in doubt (resend policy)", "%s (Message-IDs seen twice %d, with the resends)", withExamples(dupCopies, dupExamples), dupMID)
		add(resentCopies <= int(bound), "second copies of rows released in doubt ≤ pageworker.InDoubtBound × worker kills", "%d ≤ %d", resentCopies, bound)
		add(missing == 0, "eligible never received (resend policy: never a gap, erased contacts aside)", "%s", withExamples(missing, missingExamples))
	} else {
		add(dupCopies == 0, "duplicates at the sink", "%s (recipients with more than one copy %d, Message-IDs seen twice %d)", withExamples(dupCopies, dupExamples), dupRcpt, dupMID)
		add(missing == 0, "eligible never received and not in doubt", "%s", withExamples(missing, missingExamples))
	}
	add(inDoubt <= bound, "in doubt (unknown + claimed) ≤ pageworker.InDoubtBound (4 windows) × worker kills",
		"%d (unknown %d, of which the sink has %d; still claimed %d) ≤ %d × %d = %d", inDoubt, p.GetUnknown(), unknownDelivered, p.GetInDoubt(), perKill, h.workerKills.Load(), bound)
	reason := ""
	if b.GetReason() != "" {
		reason = " (" + b.GetReason() + ")"
	}
	add(completed, "final state", "%s%s", state, reason)
	add(ineligible == 0, "ineligible or unknown recipients at the sink", "%s", withExamples(ineligible, ineligibleExamples))
	add(sentNotAtSink == 0, "ledger says sent but the sink never accepted it", "%s", withExamples(sentNotAtSink, lieExamples))
	failed := 0
	for email, row := range ledger {
		if _, gone := h.erased.of[email]; gone {
			continue
		}
		if row.status == "failed" {
			failed++
		}
	}
	// Every address is good: a 451 at random is no reason to fail anyone
	// (ten in a row for one address is about one in 10^15).
	erasure, err := h.checkErasures(ctx, recs, ledger)
	if err != nil {
		return nil, fmt.Errorf("check erasures: %w", err)
	}
	res.Checks = append(res.Checks, erasure)
	add(failed == 0, "failed (random 451s are deferrals, not failures; erased contacts aside)", "%d; the sink refused %.0f%% of RCPTs at random; pause storm: %d pauses", failed, h.cfg.RefuseRcpt*100, h.storms.Load())
	if completed && h.lastKill.Load() != 0 && b.GetFinishedAt() != nil {
		add(true, "from the last worker kill -9 to completion", "%s (--in-doubt-after %s)",
			b.GetFinishedAt().AsTime().Sub(time.Unix(0, h.lastKill.Load())).Round(100*time.Millisecond), h.cfg.InDoubtAfter)
	}
	if completed {
		add(true, "time to complete", "%s (%.0f msg/s, including a %s pause)", took.Round(100*time.Millisecond), rate, h.pausedFor.Round(100*time.Millisecond))
	} else {
		add(false, "time to complete", "did not complete; gave up after %s", took.Round(100*time.Millisecond))
	}

	var exits []string
	if g := h.gaps(recs, 3, 2*time.Second); g != "" {
		res.Notes = append(res.Notes, "longest stretches with nothing accepted at the sink: "+g)
	}
	for _, pr := range append(append([]*child.Proc{h.nats, h.sink}, h.coords...), h.workers...) {
		exits = append(exits, pr.OwnExits()...)
	}
	res.Figures = fmt.Sprintf("contacts=%d eligible=%d received=%d sent=%d failed=%d unknown=%d in_doubt=%d "+
		"worker_kills=%d coordinator_kills=%d (by leader gauge %d) nats_restarts=%d pg_terminations=%d (backends %d) "+
		"paused=%s sent_while_paused=%d self_exits=%d duration=%s msgs_per_s=%.0f",
		h.cfg.Contacts, len(eligible), len(byRcpt), p.GetSent(), p.GetFailed(), p.GetUnknown(), p.GetInDoubt(),
		h.workerKills.Load(), h.coordKills.Load(), h.leaderKills.Load(), h.natsRestarts.Load(), h.pgTerminations.Load(), h.pgTerminated.Load(),
		h.pausedFor.Round(100*time.Millisecond), h.sentWhilePaused, len(exits), took.Round(100*time.Millisecond), rate)
	if len(exits) > 0 {
		res.Notes = append(res.Notes, fmt.Sprintf("processes that exited without being killed (restarted by the harness): %s", strings.Join(exits, "; ")))
	}
	if h.ownSchema && h.cfg.Keep {
		res.Notes = append(res.Notes, "kept schema "+h.schema+" and folder "+h.dir)
	}
	return res, nil
}

// gaps names the n longest stretches of at least least with no message
// accepted at the sink, by when they began (time since the start).
func (h *harness) gaps(recs []sinkproc.Record, n int, least time.Duration) string {
	ts := make([]time.Time, len(recs))
	for i, r := range recs {
		ts[i] = r.Time
	}
	sort.Slice(ts, func(i, j int) bool { return ts[i].Before(ts[j]) })
	type gap struct{ at, d time.Duration }
	var gs []gap
	for i := 1; i < len(ts); i++ {
		if d := ts[i].Sub(ts[i-1]); d >= least {
			gs = append(gs, gap{at: ts[i-1].Sub(h.started), d: d})
		}
	}
	sort.Slice(gs, func(i, j int) bool { return gs[i].d > gs[j].d })
	var out []string
	for _, g := range gs[:min(len(gs), n)] {
		out = append(out, fmt.Sprintf("%s from t=%s", g.d.Round(100*time.Millisecond), g.at.Round(100*time.Millisecond)))
	}
	return strings.Join(out, ", ")
}

// Print writes the verdict: one line per check, then the figures.
func (r *Result) Print(w io.Writer) {
	for _, c := range r.Checks {
		fmt.Fprintln(w, c.String())
	}
	fmt.Fprintln(w, "figures:", r.Figures)
	for _, n := range r.Notes {
		fmt.Fprintln(w, "note:", n)
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	crand.Read(b) //nolint:errcheck
	return hex.EncodeToString(b)
}
