package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rangecast/rangecast/internal/child"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// Binaries are the programs a run starts, built from this module (so
// nats-server is the version go.mod pins).
var Binaries = []string{
	"github.com/rangecast/rangecast/cmd/coordinator",
	"github.com/rangecast/rangecast/cmd/pageworker",
	"github.com/rangecast/rangecast/cmd/smtpsink",
	"github.com/nats-io/nats-server/v2",
}

// BuildBinaries builds what a run needs into dir.
func BuildBinaries(ctx context.Context, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	args := append([]string{"build", "-o", dir + string(filepath.Separator)}, Binaries...)
	cmd := exec.CommandContext(ctx, "go", args...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build: %v\n%s", err, out)
	}
	return nil
}

// GovernorEnv lifts the per-sending-domain governor's limits out of the way
// (a new domain starts at 5,000 a day and 50 a second): the benchmark
// measures what the machinery can do, and the governor is still asked for
// every page. Environment variables rather than flags, so a coordinator
// without one of them still starts.
var GovernorEnv = []string{
	"RANGECAST_INITIAL_DAILY_CEILING=5000000",
	"RANGECAST_DOMAIN_RATE=1000000",
	"RANGECAST_DOMAIN_BURST=1000000",
	"RANGECAST_EMAILS_PER_HOUR=0",
}

// stackSpec is one run's processes.
type stackSpec struct {
	name        string // folder and log prefix
	schema      string // Postgres schema (search_path)
	syncAlways  bool   // nats-server sync_interval: always
	sinkLatency time.Duration
	// tarpit is the share of messages whose DATA reply the sink holds
	// tarpitDelay (smtpsink -tarpit).
	tarpit      float64
	tarpitDelay time.Duration
	workers     int
	concurrency int
	pages       int // pages each worker runs at once (--pages); 0 is 1
	// inDoubtAfter is the coordinator's --in-doubt-after; short in the
	// crash run so the killed workers' claims are settled while we wait.
	inDoubtAfter time.Duration
	// freshLedger starts with an empty broadcast_sends (a new install)
	// rather than one holding an earlier broadcast to the same audience.
	freshLedger bool
}

// inFlight is what the workers can keep in flight at once.
func (s stackSpec) inFlight() int { return s.workers * max(s.pages, 1) * s.concurrency }

// shape is workers × window, or workers × pages × window.
func (s stackSpec) shape() string {
	if s.pages > 1 {
		return fmt.Sprintf("%d × %d pages × %d", s.workers, s.pages, s.concurrency)
	}
	return fmt.Sprintf("%d × %d", s.workers, s.concurrency)
}

// stack is a running set: nats-server, sink, one coordinator, workers.
type stack struct {
	h    *harness
	spec stackSpec
	dir  string

	nats     *child.Proc
	natsURL  string
	sink     *child.Proc
	sinkAddr string
	sinkStat string // http://…/stats
	coord    *child.Proc
	coordMet string // metrics address
	coordWeb string // public HTTP address (unsubscribe links point here)
	workers  []*child.Proc
	workMet  []string
	grpc     *grpc.ClientConn
	nc       *nats.Conn
	js       jetstream.JetStream
}

func (h *harness) startStack(ctx context.Context, spec stackSpec) (_ *stack, err error) {
	s := &stack{h: h, spec: spec, dir: filepath.Join(h.dir, spec.name)}
	defer func() {
		if err != nil {
			s.stop()
		}
	}()
	if err := os.MkdirAll(filepath.Join(s.dir, "logs"), 0o755); err != nil {
		return nil, err
	}
	if err := s.startNATS(ctx); err != nil {
		return nil, err
	}
	if err := s.startSink(ctx); err != nil {
		return nil, err
	}
	if err := s.startCoordinator(ctx); err != nil {
		return nil, err
	}
	for range spec.workers {
		if err := s.addWorker(); err != nil {
			return nil, err
		}
	}
	for i := range s.workers {
		if err := waitReady(ctx, s.workMet[i], s.workers[i], 60*time.Second); err != nil {
			return nil, err
		}
	}
	return s, nil
}

func (s *stack) newProc(binary, name string, args ...string) *child.Proc {
	return &child.Proc{Name: name, Path: filepath.Join(s.h.bin, binary), Args: args, LogPath: filepath.Join(s.dir, "logs", name+".log"), Label: "bench"}
}

func (s *stack) startNATS(ctx context.Context) error {
	addr, err := child.FreeAddr()
	if err != nil {
		return err
	}
	host, port, _ := strings.Cut(addr, ":")
	sync := ""
	if s.spec.syncAlways {
		sync = "  sync_interval: always\n"
	}
	conf := fmt.Sprintf("listen: %s:%s\nserver_name: bench\njetstream {\n  store_dir: %q\n%s}\n", host, port, filepath.Join(s.dir, "jetstream"), sync)
	confPath := filepath.Join(s.dir, "nats.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		return err
	}
	s.nats = s.newProc("nats-server", "nats-server", "-c", confPath)
	if err := s.nats.Start(); err != nil {
		return err
	}
	s.natsURL = "nats://" + addr
	deadline := time.Now().Add(30 * time.Second)
	for {
		nc, err := nats.Connect(s.natsURL, nats.Timeout(time.Second))
		if err == nil {
			js, jerr := jetstream.New(nc)
			if jerr == nil {
				cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				_, jerr = js.AccountInfo(cctx)
				cancel()
				if jerr == nil {
					s.nc, s.js = nc, js
					return nil
				}
			}
			nc.Close()
			err = jerr
		}
		if !s.nats.Running() || time.Now().After(deadline) {
			return fmt.Errorf("nats-server did not come up: %v\n%s", err, s.nats.LogTail(20))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (s *stack) startSink(ctx context.Context) error {
	var err1, err2 error
	s.sinkAddr, err1 = child.FreeAddr()
	statAddr, err2 := child.FreeAddr()
	if err := errors.Join(err1, err2); err != nil {
		return err
	}
	s.sinkStat = "http://" + statAddr + "/stats"
	args := []string{"-addr", s.sinkAddr, "-log", "", "-latency", s.spec.sinkLatency.String(), "-stats", statAddr}
	if s.spec.tarpit > 0 {
		args = append(args, "-tarpit", fmt.Sprint(s.spec.tarpit), "-tarpit-delay", s.spec.tarpitDelay.String())
	}
	s.sink = s.newProc("smtpsink", "smtpsink", args...)
	if err := s.sink.Start(); err != nil {
		return err
	}
	if err := errors.Join(child.WaitTCP(ctx, s.sinkAddr, 10*time.Second), child.WaitTCP(ctx, statAddr, 10*time.Second)); err != nil {
		return fmt.Errorf("smtpsink: %w\n%s", err, s.sink.LogTail(20))
	}
	return nil
}

func (s *stack) startCoordinator(ctx context.Context) error {
	grpcAddr, err1 := child.FreeAddr()
	httpAddr, err2 := child.FreeAddr()
	metricsAddr, err3 := child.FreeAddr()
	if err := errors.Join(err1, err2, err3); err != nil {
		return err
	}
	inDoubt := s.spec.inDoubtAfter
	if inDoubt == 0 {
		inDoubt = 5 * time.Minute
	}
	args := []string{"--database-url", s.h.processURL(s.spec.schema, appCoordinator), "--nats-url", s.natsURL,
		"--grpc-addr", grpcAddr, "--http-addr", httpAddr, "--metrics-addr", metricsAddr,
		"--in-doubt-after", inDoubt.String(), "--in-doubt-policy", "skip"}
	s.coord = s.newProc("coordinator", "coordinator", args...)
	s.coord.Env = append([]string{"RANGECAST_PPROF=1", "RANGECAST_UNSUBSCRIBE_KEYS=" + s.h.unsubscribeKey}, GovernorEnv...)
	s.coordMet, s.coordWeb = metricsAddr, httpAddr
	if err := s.coord.Start(); err != nil {
		return err
	}
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	s.grpc = conn
	deadline := time.Now().Add(60 * time.Second)
	hc := healthpb.NewHealthClient(conn)
	for {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		resp, err := hc.Check(cctx, &healthpb.HealthCheckRequest{})
		cancel()
		if err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return waitReady(ctx, metricsAddr, s.coord, time.Until(deadline))
		}
		if !s.coord.Running() || time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("coordinator did not become healthy: %v\n%s", err, s.coord.LogTail(30))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// addWorker starts one more page worker.
func (s *stack) addWorker() error {
	metricsAddr, err := child.FreeAddr()
	if err != nil {
		return err
	}
	i := len(s.workers) + 1
	p := s.newProc("pageworker", fmt.Sprintf("pageworker-%d", i), "--database-url", s.h.processURL(s.spec.schema, appWorker), "--nats-url", s.natsURL,
		"--smtp-url", "smtp://"+s.sinkAddr+"?tls=none"+os.Getenv("BENCH_SMTP_PARAMS"), "--concurrency", strconv.Itoa(s.spec.concurrency), "--pages", strconv.Itoa(max(s.spec.pages, 1)), "--metrics-addr", metricsAddr)
	// Workers sign every message's one-click unsubscribe link with the
	// coordinators' key; the link points at the coordinator's public HTTP.
	p.Env = []string{"RANGECAST_PPROF=1", "RANGECAST_UNSUBSCRIBE_KEYS=" + s.h.unsubscribeKey, "RANGECAST_PUBLIC_URL=http://" + s.coordWeb, os.Getenv("BENCH_WORKER_ENV")}
	if err := p.Start(); err != nil {
		return err
	}
	s.workers, s.workMet = append(s.workers, p), append(s.workMet, metricsAddr)
	return nil
}

// waitReady polls /readyz on a metrics address.
func waitReady(ctx context.Context, addr string, p *child.Proc, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		req, _ := http.NewRequestWithContext(cctx, http.MethodGet, "http://"+addr+"/readyz", nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			io.Copy(io.Discard, resp.Body) //nolint:errcheck
			resp.Body.Close()
		}
		cancel()
		if err == nil && resp.StatusCode == http.StatusOK {
			return nil
		}
		if !p.Running() || time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%s did not become ready: %v\n%s", p.Name, err, p.LogTail(30))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// rangecastPIDs are the coordinator's and the workers' process ids.
func (s *stack) rangecastPIDs() []int {
	pids := []int{s.coord.Pid()}
	for _, w := range s.workers {
		if w.Running() {
			pids = append(pids, w.Pid())
		}
	}
	return pids
}

// stop ends everything: workers and coordinator first (SIGTERM, so their
// database sessions end and Postgres flushes their statistics), then the
// sink and nats-server.
func (s *stack) stop() {
	for _, w := range s.workers {
		w.Signal(syscall.SIGTERM, 15*time.Second)
	}
	if s.coord != nil {
		s.coord.Signal(syscall.SIGTERM, 15*time.Second)
	}
	if s.grpc != nil {
		s.grpc.Close()
	}
	if s.nc != nil {
		s.nc.Close()
	}
	if s.sink != nil {
		s.sink.Signal(syscall.SIGTERM, 10*time.Second)
	}
	if s.nats != nil {
		s.nats.Signal(syscall.SIGTERM, 10*time.Second)
	}
}
