// Package server runs rangecast's processes: it turns configuration into a
// store, a bus, listeners, and a coordinator or page worker, and stops them
// in order.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"

	"github.com/rangecast/rangecast/internal/api"
	"github.com/rangecast/rangecast/internal/bus"
	"github.com/rangecast/rangecast/internal/clock"
	"github.com/rangecast/rangecast/internal/coordinator"
	"github.com/rangecast/rangecast/internal/maintenance"
	"github.com/rangecast/rangecast/internal/message"
	"github.com/rangecast/rangecast/internal/pageworker"
	"github.com/rangecast/rangecast/internal/redact"
	"github.com/rangecast/rangecast/internal/store"
	"github.com/rangecast/rangecast/internal/store/postgres"
	"github.com/rangecast/rangecast/internal/store/sqlite"
	"github.com/rangecast/rangecast/internal/transactional"
	"github.com/rangecast/rangecast/internal/transport"
	pb "github.com/rangecast/rangecast/proto/rangecast/v1"
)

// Defaults shared by flags and documentation.
const (
	DefaultGRPCAddr    = "127.0.0.1:7070"
	DefaultHTTPAddr    = "127.0.0.1:8080"
	DefaultMetricsAddr = "127.0.0.1:9090"
	// DefaultWorkerMetricsAddr differs so a coordinator and a worker can
	// run side by side with defaults.
	DefaultWorkerMetricsAddr = "127.0.0.1:9091"
	DefaultNATSURL           = "nats://127.0.0.1:4222"
)

// OpenStore opens the store named by url: postgres://… (or postgresql://)
// for Postgres, sqlite:PATH (or sqlite://PATH) for a SQLite file.
func OpenStore(ctx context.Context, url string) (store.Store, error) {
	switch {
	case url == "":
		return nil, errors.New("no database: set RANGECAST_DATABASE_URL or --database-url (postgres://user@host:5432/db, or sqlite:/var/lib/rangecast/rangecast.db)")
	case strings.HasPrefix(url, "postgres://"), strings.HasPrefix(url, "postgresql://"):
		return postgres.Open(ctx, url)
	case strings.HasPrefix(url, "sqlite:"):
		return sqlite.Open(ctx, strings.TrimPrefix(strings.TrimPrefix(url, "sqlite:"), "//"))
	}
	return nil, fmt.Errorf("database url %q: use postgres://… or sqlite:PATH", redact.String(url))
}

// ConnectBus connects to NATS and creates the streams and buckets. A NATS
// that is down (restarting) is waited for rather than treated as fatal, so a
// process started during an outage comes up when NATS does.
func ConnectBus(ctx context.Context, url string, replicas int, opts ...nats.Option) (*nats.Conn, *bus.Bus, error) {
	opts = append([]nats.Option{
		nats.Name("rangecast"), nats.MaxReconnects(-1), nats.RetryOnFailedConnect(true), nats.ReconnectWait(time.Second),
	}, opts...)
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, nil, redact.Error(fmt.Errorf("connect to NATS at %s: %w", redact.String(url), err))
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	for attempt := 1; ; attempt++ {
		setupCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		b, err := bus.Setup(setupCtx, js, bus.Options{Replicas: replicas})
		cancel()
		if err == nil {
			return nc, b, nil
		}
		if ctx.Err() != nil {
			nc.Close()
			return nil, nil, redact.Error(fmt.Errorf("NATS at %s: %w", redact.String(url), err))
		}
		slog.Warn("NATS not ready; retrying", "url", redact.String(url), "attempt", attempt, "err", redact.Error(err))
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// PprofEnv turns on /debug/pprof/ on the metrics listener (not the public
// one) when set to 1 (or true): profiles are for the operator's network
// only, and off unless asked for, because a CPU profile costs while it
// runs.
const PprofEnv = "RANGECAST_PPROF"

// pprofEnabled reads PprofEnv as strictly as a boolean flag: unset or
// empty is off, and a value strconv.ParseBool does not take ("yes", "on")
// is an error rather than off without a word.
func pprofEnabled() (bool, error) {
	v := os.Getenv(PprofEnv)
	if v == "" {
		return false, nil
	}
	on, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("%s=%q: use 1 or true to serve /debug/pprof/ on the metrics address, 0 or false for none", PprofEnv, v)
	}
	return on, nil
}

// withPprof adds the pprof handlers to mux when RANGECAST_PPROF is on
// (validate has refused a malformed value already).
func withPprof(h http.Handler) http.Handler {
	if on, _ := pprofEnabled(); !on {
		return h
	}
	mux := http.NewServeMux()
	mux.Handle("/", h)
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

// ops serves /metrics, /healthz (the process is up and can recover by
// itself: not so once NATS closed its connection for good) and /readyz (it can do
// its work: NATS connected and the component started).
type ops struct {
	nc    *nats.Conn
	store store.Store
	ready atomic.Bool
	// registries are served on /metrics with the default one: those of the
	// components the process runs (coordinatorOps, workerOps).
	registries []prometheus.Gatherer
	// coordinator: the process runs a coordinator, so it is ready without
	// NATS: its public HTTP (one-click unsubscribes, delivery webhooks) and
	// its pause and status answer from the store; unready, every
	// coordinator left the Service during a NATS outage, and unsubscribes
	// and webhooks got 503.
	coordinator bool
}

// coordinatorOps is the ops of a process that runs a coordinator, and
// page workers too when withWorkers (rangecast dev's one /metrics).
func coordinatorOps(nc *nats.Conn, st store.Store, withWorkers bool) *ops {
	o := &ops{nc: nc, store: st, coordinator: true, registries: []prometheus.Gatherer{coordinator.Metrics, maintenance.Metrics}}
	if withWorkers {
		o.registries = append(o.registries, pageworker.Metrics)
	}
	return o
}

// workerOps is the ops of a page worker process.
func workerOps(nc *nats.Conn, st store.Store) *ops {
	return &ops{nc: nc, store: st, registries: []prometheus.Gatherer{pageworker.Metrics}}
}

func (o *ops) handler() http.Handler {
	mux := http.NewServeMux()
	gatherer := append(prometheus.Gatherers{prometheus.DefaultGatherer}, o.registries...)
	mux.Handle("GET /metrics", promhttp.InstrumentMetricHandler(prometheus.DefaultRegisterer, promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{})))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		if o.nc != nil && o.nc.IsClosed() {
			// Closed for good, not reconnecting: only a restart helps.
			http.Error(w, "unhealthy: the NATS connection closed and will not reconnect", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		switch {
		case !o.ready.Load():
			http.Error(w, "not ready: starting", http.StatusServiceUnavailable)
		case !o.coordinator && (o.nc == nil || !o.nc.IsConnected()):
			http.Error(w, "not ready: NATS disconnected", http.StatusServiceUnavailable)
		case o.pingStore(r.Context()) != nil:
			http.Error(w, "not ready: database unreachable", http.StatusServiceUnavailable)
		default:
			fmt.Fprintln(w, "ready")
		}
	})
	return mux
}

func (o *ops) pingStore(ctx context.Context) error {
	if o.store == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return o.store.Ping(ctx)
}

// listenHTTP serves h on addr until ctx ends. It returns the bound address.
func listenHTTP(ctx context.Context, addr string, h http.Handler, log *slog.Logger) (string, error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("listen on %s: %w", addr, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("http server stopped", "addr", addr, "err", err)
		}
	}()
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		srv.Shutdown(shutdown) //nolint:errcheck
	}()
	return lis.Addr().String(), nil
}

// CoordinatorOptions configures a coordinator process.
type CoordinatorOptions struct {
	DatabaseURL, NATSURL string
	// NATSReplicas is the replica count of every stream and bucket; every
	// process must agree (each creates or updates them at start).
	NATSReplicas                    int
	GRPCAddr, HTTPAddr, MetricsAddr string
	// InDoubtAfter and InDoubtPolicy configure the reconciler; Lookup is
	// set when the transport can say whether a message was accepted.
	InDoubtAfter  time.Duration
	InDoubtPolicy string
	Lookup        coordinator.Lookup
	// Tokens (RANGECAST_TOKENS) and TokensFile (one per line, re-read when
	// it changes) are the bearer tokens gRPC accepts. With neither, the
	// API is unauthenticated.
	Tokens     []string
	TokensFile string
	// TLSCert and TLSKey (PEM files) make gRPC speak TLS only, the pair
	// re-read when the files change (api.CertReloader); both or neither.
	TLSCert, TLSKey string
	Log             *slog.Logger
	// Governor configures the per-sending-domain governors; nil runs
	// without one (no daily ceiling, rate or provider holds).
	Governor *coordinator.GovernorConfig
	// Secrets configure the public HTTP on HTTPAddr (public.go); Alarms
	// the reputation alarms that pause a broadcast.
	Secrets Secrets
	Alarms  maintenance.AlarmConfig
	// Retention bounds how long delivery events and finished
	// transactional messages are kept.
	Retention maintenance.RetentionConfig
	// Mail are the workers' mail settings, for previews and test copies
	// (mail.go).
	Mail MailOptions

	auth      *api.Auth         // built by RunCoordinator before connecting
	certs     *api.CertReloader // likewise, when TLS is configured
	publicLis net.Listener      // bound by StartStack, which needs its address first
	// servesWorkerMetrics: StartStack runs the page workers in this
	// process, without a /metrics of their own.
	servesWorkerMetrics bool
}

// newCerts returns the certificate reloader o asks for, or nil for
// plaintext.
func (o CoordinatorOptions) newCerts() (*api.CertReloader, error) {
	switch {
	case o.TLSCert == "" && o.TLSKey == "":
		return nil, nil
	case o.TLSCert == "" || o.TLSKey == "":
		return nil, errors.New("give both --tls-cert and --tls-key (RANGECAST_TLS_CERT, RANGECAST_TLS_KEY), or neither for plaintext gRPC")
	}
	return api.NewCertReloader(o.TLSCert, o.TLSKey, o.Log)
}

// newAuth returns the token checker o asks for, or nil when it asks for
// none.
func (o CoordinatorOptions) newAuth() (*api.Auth, error) {
	cfg := api.AuthConfig{Tokens: o.Tokens, TokensFile: o.TokensFile, Log: o.Log}
	if !cfg.Enabled() {
		return nil, nil
	}
	return api.NewAuth(cfg)
}

// connect opens the store and the bus a server process needs and returns a
// function that closes both.
func connect(ctx context.Context, databaseURL, natsURL string, natsReplicas int, log *slog.Logger) (context.Context, store.Store, *nats.Conn, *bus.Bus, func(), error) {
	st, err := openStoreWaiting(ctx, databaseURL)
	if err != nil {
		return nil, nil, nil, nil, nil, redact.Error(err)
	}
	// The returned context ends when the NATS connection closes for good:
	// the client reconnects after a network failure or a server restart,
	// but not after some protocol errors (a subject past the server's
	// control line closed a coordinator's connection, and it ran on
	// without leading or sending, healthy to its liveness probe). The
	// process then stops, with errNATSClosed, and is restarted.
	ctx, cancel := context.WithCancelCause(ctx)
	nc, b, err := ConnectBus(ctx, natsURL, natsReplicas, nats.ClosedHandler(func(*nats.Conn) { cancel(errNATSClosed) }),
		// The client's asynchronous errors ("consumer not active", a slow
		// consumer) went to stderr in its own words, outside the log
		// (tester).
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			subject := ""
			if sub != nil {
				subject = sub.Subject
			}
			log.Warn("NATS client error", "subject", subject, "err", err)
		}),
		// A lost connection left no line in any log (a tester's 3 s kill
		// of nats-server): say when it goes and when it is back.
		nats.DisconnectErrHandler(func(nc *nats.Conn, err error) {
			log.Warn("NATS connection lost; reconnecting", "err", err)
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			log.Info("NATS connection back", "server", nc.ConnectedUrlRedacted())
		}))
	if err != nil {
		cancel(nil)
		st.Close()
		return nil, nil, nil, nil, nil, err
	}
	return ctx, st, nc, b, func() { nc.Close(); st.Close(); cancel(nil) }, nil
}

// openStoreWaiting opens the store, waiting for a database that cannot be
// reached yet (store.ErrUnavailable: a Postgres still starting beside the
// process, as on a first install), as ConnectBus waits for NATS: exiting
// at once put the pods in CrashLoopBackOff, up to 5 minutes between tries.
// Any other error (a malformed URL, refused credentials, a failed
// migration) is returned at once.
func openStoreWaiting(ctx context.Context, url string) (store.Store, error) {
	for attempt := 1; ; attempt++ {
		st, err := OpenStore(ctx, url)
		if err == nil || !errors.Is(err, store.ErrUnavailable) || ctx.Err() != nil {
			return st, err
		}
		slog.Warn("database not reachable; retrying", "attempt", attempt, "err", redact.Error(err))
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(min(time.Second<<min(attempt, 4), 10*time.Second)):
		}
	}
}

// errNATSClosed is why a process stops when its NATS connection closed
// and will not reconnect (connect).
var errNATSClosed = errors.New("the NATS connection closed and will not reconnect; stopping so the process is restarted")

// stoppedFor adds errNATSClosed to a run's error when that is why ctx (from
// connect) ended.
func stoppedFor(ctx context.Context, err error) error {
	if errors.Is(context.Cause(ctx), errNATSClosed) {
		return errors.Join(errNATSClosed, err)
	}
	return err
}

// validate refuses flags the coordinator cannot run with, before anything
// is connected.
func (o CoordinatorOptions) validate() error {
	var errs []error
	switch coordinator.InDoubtPolicy(o.InDoubtPolicy) {
	case "", coordinator.InDoubtSkip, coordinator.InDoubtResend:
	default:
		errs = append(errs, fmt.Errorf("in-doubt policy %q: use skip or resend", o.InDoubtPolicy))
	}
	if o.InDoubtAfter < 0 {
		errs = append(errs, fmt.Errorf("--in-doubt-after is %s; a duration cannot be negative", o.InDoubtAfter))
	}
	if o.NATSReplicas < 0 {
		errs = append(errs, fmt.Errorf("--nats-replicas is %d; it cannot be negative", o.NATSReplicas))
	}
	if o.Governor != nil {
		errs = append(errs, o.Governor.Validate())
		if g := o.Governor.GiveUpAfter; g > 0 && g < coordinator.MinGiveUpAfter {
			errs = append(errs, fmt.Errorf("--give-up-after is %s; give at least %s, so that a relay refusing everyone fails the broadcast first instead of every provider being given up", g, coordinator.MinGiveUpAfter))
		}
	}
	_, pprofErr := pprofEnabled()
	errs = append(errs, o.Alarms.Validate(), o.Retention.Validate(), o.Mail.validate(o.Secrets), pprofErr)
	return errors.Join(errs...)
}

// RunCoordinator serves the coordinator until ctx ends.
func RunCoordinator(ctx context.Context, o CoordinatorOptions) error {
	if err := o.validate(); err != nil {
		return err
	}
	// Tokens are checked before connecting, so a bad tokens file fails at
	// once rather than after waiting for NATS.
	auth, err := o.newAuth()
	if err != nil {
		return err
	}
	if auth == nil {
		o.Log.Warn("gRPC API is unauthenticated: anyone who can reach it can send broadcasts; set --tokens-file / RANGECAST_TOKENS_FILE or RANGECAST_TOKENS")
	}
	o.auth = auth
	if o.certs, err = o.newCerts(); err != nil {
		return err
	}
	if o.certs == nil {
		o.Log.Warn("gRPC API is plaintext: bearer tokens cross the network readable; set --tls-cert and --tls-key (RANGECAST_TLS_CERT, RANGECAST_TLS_KEY) unless a proxy or mesh terminates TLS")
	}
	ctx, st, nc, b, closeAll, err := connect(ctx, o.DatabaseURL, o.NATSURL, o.NATSReplicas, o.Log)
	if err != nil {
		return err
	}
	defer closeAll()
	lis, err := net.Listen("tcp", o.GRPCAddr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", o.GRPCAddr, err)
	}
	return stoppedFor(ctx, serveCoordinator(ctx, st, nc, b, lis, o))
}

func serveCoordinator(ctx context.Context, st store.Store, nc *nats.Conn, b *bus.Bus, lis net.Listener, o CoordinatorOptions) error {
	health := coordinatorOps(nc, st, o.servesWorkerMetrics)
	if o.MetricsAddr != "" {
		addr, err := listenHTTP(ctx, o.MetricsAddr, withPprof(health.handler()), o.Log)
		if err != nil {
			return err
		}
		o.Log.Info("metrics listening", "addr", addr)
	}
	unpublish, err := servePublic(ctx, st, b, o)
	if err != nil {
		return err
	}
	defer unpublish()
	c := coordinator.New(coordinator.Config{
		Store: st, Bus: b, Clock: clock.Real{}, Log: o.Log,
		InDoubtAfter: o.InDoubtAfter, InDoubtPolicy: coordinator.InDoubtPolicy(o.InDoubtPolicy), Lookup: o.Lookup,
		Governor: o.Governor, Alarms: o.Alarms, Retention: o.Retention,
	})
	auth := o.auth
	if auth == nil {
		var err error
		if auth, err = o.newAuth(); err != nil {
			return err
		}
	}
	mail, closeMail, err := o.mail(b)
	if err != nil {
		return err
	}
	defer closeMail()
	certs := o.certs
	if certs == nil {
		if certs, err = o.newCerts(); err != nil {
			return err
		}
	}
	opts := auth.ServerOptions()
	if certs != nil {
		opts = append(opts, certs.ServerOption())
	}
	srv := api.NewGRPCServer(api.Config{Engine: c, Store: st, Clock: clock.Real{}, Log: o.Log, Mail: mail}, opts...)
	pb.RegisterTransactionalServiceServer(srv, transactional.NewService(transactional.ServiceConfig{Store: st, JS: b.JS, Clock: clock.Real{}, Log: o.Log}))
	go srv.Serve(lis) //nolint:errcheck
	o.Log.Info("grpc listening", "addr", lis.Addr().String())
	health.ready.Store(true)
	err = c.Run(ctx)
	stopGRPC(srv, grpcDrain)
	return err
}

// grpcDrain is how long a stopping coordinator lets calls in progress
// finish before it closes them: a watch (broadcasts watch) or an export
// streams for as long as its client stays, and GracefulStop alone waited
// for it, so a watched coordinator outlived its grace period and was
// killed (a review of the manifests measured 60 s and more).
const grpcDrain = 5 * time.Second

// stopGRPC stops srv gracefully, then, after drain, closes what is left.
func stopGRPC(srv *grpc.Server, drain time.Duration) {
	done := make(chan struct{})
	go func() {
		srv.GracefulStop()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(drain):
		srv.Stop() // ends the streams still open; GracefulStop returns
		<-done
	}
}

// WorkerOptions configures a page worker process.
type WorkerOptions struct {
	DatabaseURL, NATSURL, SMTPURL, MetricsAddr string
	NATSReplicas                               int
	Concurrency                                int
	// Pages is how many pages the worker runs at once, each with its own
	// window of Concurrency; 0 is 1.
	Pages int
	Log   *slog.Logger
	// TxSlots is how many transactional messages are sent at once, apart
	// from the page window; TxLookup settles in-doubt ones where the
	// transport can tell.
	TxSlots  int
	TxLookup transactional.Lookup
	// PublicURL is the coordinators' public HTTP (https://…) and Secrets
	// its unsubscribe keys: every message's one-click link (public.go).
	PublicURL string
	Secrets   Secrets
	// DKIMKeys are DOMAIN=SELECTOR:KEYFILE specs; broadcast and
	// transactional mail is signed with its From domain's keys.
	DKIMKeys []string
	// RetryFor is how long a recipient refused for a transient reason is
	// tried before it fails as given up (pageworker.Config.RetryFor);
	// 0 is the worker's default.
	RetryFor time.Duration
}

// Bounds of --retry-for: greylisting alone holds a new sender back for
// minutes, and a broadcast still retrying after a week is news nobody
// reads any more.
const (
	MinRetryFor = 10 * time.Minute
	MaxRetryFor = 7 * 24 * time.Hour
)

// validate refuses flags the worker cannot run with: a zero window sends
// nothing, so it is refused rather than taken for the default.
func (o WorkerOptions) validate() error {
	var errs []error
	if o.Concurrency < 1 {
		errs = append(errs, fmt.Errorf("--concurrency is %d; the in-flight window needs at least 1", o.Concurrency))
	}
	if o.Pages < 0 {
		errs = append(errs, fmt.Errorf("--pages is %d; it cannot be negative", o.Pages))
	}
	if o.TxSlots < 1 {
		errs = append(errs, fmt.Errorf("--tx-slots is %d; transactional mail needs at least 1", o.TxSlots))
	}
	if o.NATSReplicas < 0 {
		errs = append(errs, fmt.Errorf("--nats-replicas is %d; it cannot be negative", o.NATSReplicas))
	}
	switch {
	case o.RetryFor != 0 && o.RetryFor < MinRetryFor:
		errs = append(errs, fmt.Errorf("--retry-for is %s; give %s to %s: shorter fails greylisted recipients who would have taken the message", o.RetryFor, MinRetryFor, MaxRetryFor))
	case o.RetryFor > MaxRetryFor:
		errs = append(errs, fmt.Errorf("--retry-for is %s; give %s to %s: a broadcast still retrying after a week sends news nobody reads any more", o.RetryFor, MinRetryFor, MaxRetryFor))
	}
	_, pprofErr := pprofEnabled()
	errs = append(errs, pprofErr)
	return errors.Join(errs...)
}

// RunWorker runs a page worker until ctx ends, then drains: the page in
// progress finishes its in-flight sends, records and reports before return.
func RunWorker(ctx context.Context, o WorkerOptions) error {
	if err := o.validate(); err != nil {
		return err
	}
	if _, err := unsubscribeLinks(o.PublicURL, o.Secrets); err != nil {
		return err // before waiting for NATS: a configuration error
	}
	if _, err := message.LoadDKIM(o.DKIMKeys); err != nil {
		return err // likewise
	}
	ctx, st, nc, b, closeAll, err := connect(ctx, o.DatabaseURL, o.NATSURL, o.NATSReplicas, o.Log)
	if err != nil {
		return err
	}
	defer closeAll()
	return stoppedFor(ctx, runWorker(ctx, st, nc, b, o))
}

func runWorker(ctx context.Context, st store.Store, nc *nats.Conn, b *bus.Bus, o WorkerOptions) error {
	if o.SMTPURL == "" {
		return errors.New("no SMTP server: set RANGECAST_SMTP_URL or --smtp-url (smtp://user:pass@host:587)")
	}
	links, err := unsubscribeLinks(o.PublicURL, o.Secrets)
	if err != nil {
		return err
	}
	followVerifiers(ctx, b.Verifiers, links, o.Log)
	warnPlainHTTP(o.PublicURL, o.Log)
	signer, err := loadDKIM(o.DKIMKeys, o.Log)
	if err != nil {
		return err
	}
	warnUnusedDKIM(ctx, st, signer, o.Log)
	tr, err := transport.NewSMTP(withPool(o.SMTPURL, o.Concurrency*max(o.Pages, 1)))
	if err != nil {
		return err
	}
	defer tr.Close()
	health := workerOps(nc, st)
	if o.MetricsAddr != "" {
		addr, err := listenHTTP(ctx, o.MetricsAddr, withPprof(health.handler()), o.Log)
		if err != nil {
			return err
		}
		o.Log.Info("metrics listening", "addr", addr)
	}
	w := pageworker.New(pageworker.Config{Store: st, Bus: b, Transport: tr, Clock: clock.Real{}, Log: o.Log, Concurrency: o.Concurrency, Pages: o.Pages, Unsubscribe: links, DKIM: signer,
		RetryFor: o.RetryFor})
	health.ready.Store(true)
	o.Log.Info("page worker running", "id", w.ID(), "concurrency", o.Concurrency, "pages", max(o.Pages, 1), "smtp", tr.String())
	tx := transactional.NewConsumer(transactional.ConsumerConfig{Store: st, JS: b.JS, Transport: tr, DKIM: signer, Clock: clock.Real{}, Log: o.Log.With("component", "transactional"), Slots: o.TxSlots, Lookup: o.TxLookup,
		Admission: transactional.NewHeldProviders(b, o.Log.With("component", "transactional"))})
	txDone := make(chan error, 1)
	go func() { txDone <- tx.Run(ctx) }()
	err = w.Run(ctx)
	return errors.Join(err, <-txDone)
}

// withPool sizes the SMTP connection pool to the in-flight window unless the
// URL says otherwise.
func withPool(raw string, concurrency int) string {
	u, err := url.Parse(raw)
	if err != nil || concurrency <= 0 || u.Query().Has("pool") {
		return raw // a bad URL is reported by transport.NewSMTP
	}
	q := u.Query()
	q.Set("pool", strconv.Itoa(concurrency))
	u.RawQuery = q.Encode()
	return u.String()
}
