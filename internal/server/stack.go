package server

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/rangecast/rangecast/internal/capture"
	"github.com/rangecast/rangecast/internal/coordinator"
	"github.com/rangecast/rangecast/internal/governor"
	"github.com/rangecast/rangecast/internal/message"
	"github.com/rangecast/rangecast/internal/store"
	"github.com/rangecast/rangecast/internal/store/postgres"
)

// StackOptions configures the whole system in one process.
type StackOptions struct {
	// Dir holds the embedded JetStream store and captured mail.
	Dir string
	// DatabaseURL is the store; empty means a SQLite file in Dir.
	DatabaseURL string
	// SMTPURL sends through a real server; empty captures every message
	// in-process instead.
	SMTPURL string
	// MailFiles also writes each captured message to Dir/mail as .eml.
	MailFiles bool
	// CaptureAddr is where the capture SMTP server listens ("": a free
	// port on 127.0.0.1).
	CaptureAddr          string
	Workers, Concurrency int
	// RetryFor is the workers' WorkerOptions.RetryFor; 0 is the default.
	RetryFor time.Duration
	// InDoubtAfter is the reconciler's lease (default 1 minute in dev).
	InDoubtAfter time.Duration
	// Governor paces sending per domain; nil means DevGovernor.
	Governor                        *coordinator.GovernorConfig
	GRPCAddr, HTTPAddr, MetricsAddr string
	Log                             *slog.Logger
	// DKIMKeys sign the workers' mail (WorkerOptions.DKIMKeys).
	DKIMKeys []string
	// TLSCert and TLSKey serve gRPC over TLS only
	// (CoordinatorOptions.TLSCert).
	TLSCert, TLSKey string
}

// DevGovernor is the governor of `rangecast dev`: every rule runs as in
// production, but a new sending domain starts at the largest ceiling, since
// the captured mail reaches no provider whose trust must be earned.
func DevGovernor() *coordinator.GovernorConfig {
	return &coordinator.GovernorConfig{Limits: governor.Limits{InitialCeiling: governor.MaxCeiling, RatePerSecond: 100_000, Burst: 100_000}}
}

// Stack is a running in-process rangecast: embedded NATS, store, capture
// SMTP server, coordinator and page workers.
type Stack struct {
	GRPCAddr string
	// PublicURL is the public HTTP (unsubscribe links, webhooks), served on
	// HTTPAddr or a free local port; every message's link points here.
	PublicURL string
	Capture   *capture.Server // nil when sending through SMTPURL
	Store     store.Store

	cancel context.CancelFunc
	wg     sync.WaitGroup
	errMu  sync.Mutex
	err    error
	nats   *natsserver.Server
	nc     *nats.Conn
	lock   *os.File
	// unlockDB releases the Postgres schema (HoldAlone); nil on SQLite.
	unlockDB func()
}

// lockDir takes an exclusive lock on dir for as long as the process runs: a
// second stack on the same folder would share its JetStream store and mail
// numbering with the first.
func lockDir(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", dir, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s is in use by another rangecast dev (stop it, or use another --dir)", dir)
	}
	return f, nil
}

// validate refuses what StartStack would otherwise mend silently.
func (o StackOptions) validate() error {
	var errs []error
	if o.Workers < 0 {
		errs = append(errs, fmt.Errorf("--workers is %d; give at least 1 page worker", o.Workers))
	}
	if o.Concurrency < 0 {
		errs = append(errs, fmt.Errorf("--concurrency is %d; the in-flight window needs at least 1", o.Concurrency))
	}
	// The workers' own check, before anything starts (RANGECAST_PPROF's
	// too).
	errs = append(errs, WorkerOptions{Concurrency: 1, TxSlots: 1, RetryFor: o.RetryFor}.validate())
	return errors.Join(errs...)
}

// StartStack starts everything and returns once the gRPC API is listening.
func StartStack(ctx context.Context, o StackOptions) (*Stack, error) {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	// Zero takes the defaults (2 workers, the page worker's window); the
	// dev command refuses an explicit 0 at its flags.
	if err := o.validate(); err != nil {
		return nil, err
	}
	if o.Workers == 0 {
		o.Workers = 2
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("stack dir: %w", err)
	}
	if _, err := message.LoadDKIM(o.DKIMKeys); err != nil {
		return nil, err // before anything starts: the workers would fail one by one
	}
	certs, err := CoordinatorOptions{TLSCert: o.TLSCert, TLSKey: o.TLSKey, Log: o.Log}.newCerts()
	if err != nil {
		return nil, err
	}
	lock, err := lockDir(o.Dir)
	if err != nil {
		return nil, err
	}
	s := &Stack{lock: lock}
	ok := false
	defer func() {
		if !ok {
			s.Stop() //nolint:errcheck
		}
	}()
	ns, err := natsserver.NewServer(&natsserver.Options{
		ServerName: "rangecast-dev",
		JetStream:  true,
		StoreDir:   o.Dir + "/jetstream",
		DontListen: true,
		NoSigs:     true,
		NoLog:      true,
	})
	if err != nil {
		return nil, fmt.Errorf("embedded nats: %w", err)
	}
	ns.Start()
	s.nats = ns
	if !ns.ReadyForConnections(10 * time.Second) {
		return nil, errors.New("embedded nats did not start within 10s")
	}
	if o.DatabaseURL == "" {
		o.DatabaseURL = "sqlite:" + filepath.Join(o.Dir, "rangecast.db")
	}
	if s.Store, err = OpenStore(ctx, o.DatabaseURL); err != nil {
		return nil, err
	}
	if pg, ok := s.Store.(*postgres.Store); ok {
		// The SQLite file is in --dir, which lockDir holds; a Postgres
		// schema can be shared by two dev stacks with different dirs.
		if s.unlockDB, err = pg.HoldAlone(ctx); err != nil {
			if errors.Is(err, postgres.ErrNotAlone) {
				return nil, fmt.Errorf("another rangecast dev is using this database: %w; stop it, or give this one a schema of its own (?search_path=NAME in the --postgres URL)", err)
			}
			return nil, err
		}
	}
	nc, b, err := ConnectBus(ctx, "", 1, nats.InProcessServer(ns))
	if err != nil {
		return nil, err
	}
	s.nc = nc
	smtpURL := o.SMTPURL
	if smtpURL == "" {
		var opts []capture.Option
		if o.MailFiles {
			opts = append(opts, capture.WithDir(o.Dir+"/mail"))
		}
		if s.Capture, err = capture.Start(cmp.Or(o.CaptureAddr, "127.0.0.1:0"), opts...); err != nil {
			return nil, fmt.Errorf("capture SMTP server: %w", err)
		}
		smtpURL = s.Capture.URL()
	}
	lis, err := net.Listen("tcp", o.GRPCAddr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", o.GRPCAddr, err)
	}
	s.GRPCAddr = lis.Addr().String()
	public, secrets, err := devPublic(o.Dir, o.HTTPAddr)
	if err != nil {
		lis.Close()
		return nil, err
	}
	s.PublicURL = "http://" + public.Addr().String()

	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.cancel = cancel
	s.run(func() error {
		co := CoordinatorOptions{HTTPAddr: o.HTTPAddr, MetricsAddr: o.MetricsAddr, Log: o.Log, InDoubtAfter: o.InDoubtAfter, Governor: o.Governor,
			TLSCert: o.TLSCert, TLSKey: o.TLSKey, certs: certs}
		co.publicLis, co.Secrets, co.servesWorkerMetrics = public, secrets, true
		co.Mail = MailOptions{SMTPURL: smtpURL, PublicURL: s.PublicURL, DKIMKeys: o.DKIMKeys}
		if co.Governor == nil {
			co.Governor = DevGovernor()
		}
		if co.InDoubtAfter == 0 {
			co.InDoubtAfter = time.Minute
		}
		if s.Capture != nil {
			// The capture server can say whether it holds a message, so no
			// in-doubt claim is ever left unresolved in dev.
			co.Lookup = func(_ context.Context, messageID string) (bool, error) { return s.Capture.Accepted(messageID), nil }
		}
		return serveCoordinator(runCtx, s.Store, nc, b, lis, co)
	})
	for i := range o.Workers {
		log := o.Log.With("worker", i)
		s.run(func() error {
			wo := WorkerOptions{SMTPURL: smtpURL, Concurrency: o.Concurrency, Log: log, PublicURL: s.PublicURL, Secrets: secrets, DKIMKeys: o.DKIMKeys,
				RetryFor: o.RetryFor}
			if s.Capture != nil {
				wo.TxLookup = func(_ context.Context, messageID string) (bool, error) { return s.Capture.Accepted(messageID), nil }
			}
			return runWorker(runCtx, s.Store, nc, b, wo)
		})
	}
	ok = true
	return s, nil
}

func (s *Stack) run(f func() error) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := f(); err != nil {
			s.errMu.Lock()
			s.err = errors.Join(s.err, err)
			s.errMu.Unlock()
			s.cancel()
		}
	}()
}

// Stop drains the workers, stops the coordinator and closes everything.
func (s *Stack) Stop() error {
	if s.cancel != nil {
		s.cancel()
	}
	s.wg.Wait()
	if s.nc != nil {
		s.nc.Close()
	}
	if s.Capture != nil {
		s.Capture.Close()
	}
	if s.unlockDB != nil {
		s.unlockDB()
	}
	if s.Store != nil {
		s.Store.Close()
	}
	if s.nats != nil {
		s.nats.Shutdown()
		s.nats.WaitForShutdown()
	}
	if s.lock != nil {
		s.lock.Close() // releases the lock
	}
	s.errMu.Lock()
	defer s.errMu.Unlock()
	return s.err
}
