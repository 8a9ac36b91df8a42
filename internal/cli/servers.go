package cli

import (
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/rangecast/rangecast/internal/api"
	"github.com/rangecast/rangecast/internal/coordinator"
	"github.com/rangecast/rangecast/internal/demo"
	"github.com/rangecast/rangecast/internal/gcpolicy"
	"github.com/rangecast/rangecast/internal/governor"
	"github.com/rangecast/rangecast/internal/maintenance"
	"github.com/rangecast/rangecast/internal/pageworker"
	"github.com/rangecast/rangecast/internal/redact"
	"github.com/rangecast/rangecast/internal/server"
	"github.com/rangecast/rangecast/internal/store/postgres"
	"github.com/rangecast/rangecast/internal/version"
)

// Coordinator is the `coordinator` server command.
func Coordinator() *cobra.Command {
	var o server.CoordinatorOptions
	var gov coordinator.GovernorConfig
	var keysFile string
	var level, format string
	cmd := &cobra.Command{
		Use:     "coordinator",
		Version: version.String(),
		Short:   "Serve the rangecast API and coordinate broadcasts' ranges",
		Long: `The coordinator serves gRPC (BroadcastService, AudienceService, health,
reflection), keeps one cursor per range of every running broadcast in NATS
JetStream KV, dispatches page jobs and applies workers' reports.
Every flag can be set by the environment variable named in its help.`,
		Args:              cobra.NoArgs,
		SilenceUsage:      true,
		SilenceErrors:     true,
		PersistentPreRunE: envHook,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := logger(level, format)
			if err != nil {
				return err
			}
			o.Log = log
			o.Tokens = api.ParseTokens(os.Getenv("RANGECAST_TOKENS"))
			o.Governor = &gov
			o.Secrets = publicSecrets(keysFile)
			o.Mail.DKIMKeys = append(o.Mail.DKIMKeys, server.DKIMKeysFromEnv()...)
			return server.RunCoordinator(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	serverFlags(cmd, &o.DatabaseURL, &o.NATSURL, &o.MetricsAddr, &level, &format, server.DefaultMetricsAddr)
	natsReplicasFlag(cmd, &o.NATSReplicas)
	f.StringVar(&o.GRPCAddr, "grpc-addr", server.DefaultGRPCAddr, "gRPC listen address (env RANGECAST_GRPC_ADDR)")
	f.StringVar(&o.HTTPAddr, "http-addr", server.DefaultHTTPAddr, "public HTTP listen address: unsubscribe, webhooks (env RANGECAST_HTTP_ADDR)")
	f.DurationVar(&o.InDoubtAfter, "in-doubt-after", 20*time.Second, "a claim whose worker has been gone this long (liveness record lapsed, or its page run stalled) is in doubt and settled (env RANGECAST_IN_DOUBT_AFTER)")
	// Tokens themselves are never flags (they would show in ps); the file
	// or RANGECAST_TOKENS holds them.
	f.StringVar(&o.TokensFile, "tokens-file", "", "file of accepted gRPC bearer tokens, one per line, # comments; re-read when it changes, so a mounted Kubernetes Secret rotates without a restart. RANGECAST_TOKENS adds comma-separated tokens. With neither, the API is unauthenticated; health and reflection are always open (env RANGECAST_TOKENS_FILE)")
	f.StringVar(&o.TLSCert, "tls-cert", "", "PEM certificate (chain) file: with --tls-key, gRPC speaks TLS only and refuses plaintext; both files are re-read when they change, so a renewed cert-manager Secret needs no restart (env RANGECAST_TLS_CERT)")
	f.StringVar(&o.TLSKey, "tls-key", "", "PEM private key file of --tls-cert (env RANGECAST_TLS_KEY)")
	governorFlags(cmd, &gov.Limits)
	f.DurationVar(&gov.GiveUpAfter, "give-up-after", coordinator.DefaultGiveUpAfter,
		"a receiving provider that has accepted nothing for this long (its breaker open, held or ramping back) gives up its held recipients: they fail with the reason, and 'rangecast broadcasts retry' sends them again; at least 1h, under 14 days (env RANGECAST_GIVE_UP_AFTER)")
	publicFlags(cmd, &keysFile, &o.Alarms)
	f.DurationVar(&o.Retention.Events, "event-retention", maintenance.DefaultEventRetention,
		"how long delivery webhook events are kept after they arrive; at least 168h; the ledger keeps each recipient's status without them (env RANGECAST_EVENT_RETENTION)")
	f.DurationVar(&o.Retention.Receipts, "transactional-retention", maintenance.DefaultReceiptRetention,
		"how long a finished transactional message (payload, attempts, idempotency key) is kept after its last attempt; at least 24h. A retry with its key after that is a new message (env RANGECAST_TRANSACTIONAL_RETENTION)")
	f.StringVar(&o.InDoubtPolicy, "in-doubt-policy", "skip", "what to do with in-doubt claims the transport cannot look up: skip (mark unknown, never risk a second copy) or resend (env RANGECAST_IN_DOUBT_POLICY)")
	coordinatorMailFlags(cmd, &o.Mail)
	return cmd
}

// coordinatorMailFlags are the page workers' mail settings, given to the
// coordinator for broadcasts preview (public URL, DKIM keys) and broadcasts
// test (and the SMTP relay). The environment variables are the workers'
// own, so one ConfigMap or env file serves both.
func coordinatorMailFlags(cmd *cobra.Command, m *server.MailOptions) {
	f := cmd.Flags()
	f.StringVar(&m.SMTPURL, "smtp-url", "", "the page workers' SMTP relay, the same URL: broadcasts test sends its copies through it; without it test copies are refused (env RANGECAST_SMTP_URL)")
	f.StringVar(&m.PublicURL, "public-url", "", "the public URL the page workers put in unsubscribe links: broadcasts preview and test render with it (and the unsubscribe keys); without it previews are refused (env RANGECAST_PUBLIC_URL)")
	dkimKeyFlag(cmd, &m.DKIMKeys)
}

// PageWorker is the `pageworker` server command.
func PageWorker() *cobra.Command {
	var o server.WorkerOptions
	var level, format, keysFile string
	cmd := &cobra.Command{
		Use:     "pageworker",
		Version: version.String(),
		Short:   "Run page jobs: claim, send, record, report",
		Long: `A page worker pulls page jobs from NATS JetStream, reads the page's eligible
contacts, claims them in the ledger, sends through SMTP and reports back.
Workers are stateless: run as many as you like. On SIGTERM a worker stops
fetching, lets in-flight sends finish, records them, reports and exits.
Every flag can be set by the environment variable named in its help.`,
		Args:              cobra.NoArgs,
		SilenceUsage:      true,
		SilenceErrors:     true,
		PersistentPreRunE: envHook,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := logger(level, format)
			if err != nil {
				return err
			}
			o.Log = log
			applyGCPolicy(log)
			o.Secrets = publicSecrets(keysFile)
			o.DKIMKeys = append(o.DKIMKeys, server.DKIMKeysFromEnv()...)
			return server.RunWorker(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	serverFlags(cmd, &o.DatabaseURL, &o.NATSURL, &o.MetricsAddr, &level, &format, server.DefaultWorkerMetricsAddr)
	natsReplicasFlag(cmd, &o.NATSReplicas)
	f.StringVar(&o.SMTPURL, "smtp-url", "", "smtp://[user:pass@]host:port (STARTTLS when offered), smtps://… (implicit TLS); parameters ?tls=none|starttls, ?pool=N (idle connections, default --concurrency), ?timeout=30s (each command), ?data_timeout=10m (the reply to the message's end), ?idle=3s (the default: a pooled connection unused for longer is closed, not reused), ?helo=NAME, ?auth=plain|login|xoauth2 (default: what the server offers), ?token_file=PATH (XOAUTH2 token, re-read when it changes), ?chunking=0 (DATA even where BDAT is offered) (env RANGECAST_SMTP_URL)")
	f.IntVar(&o.Concurrency, "concurrency", 16, "in-flight window: messages claimed and being sent at once (env RANGECAST_CONCURRENCY)")
	f.IntVar(&o.Pages, "pages", 1, "pages run at once, each claiming its own windows: in flight is at most pages × concurrency, and a kill -9 leaves at most (pages × 3 + 1) × concurrency in doubt (env RANGECAST_PAGES)")
	f.DurationVar(&o.RetryFor, "retry-for", pageworker.DefaultRetryFor, "a recipient refused for a transient reason (451, greylisting, a timeout) is tried again, at delays doubling from 1 s to 10 min (a greylisting server: after the wait it names, or 5 min), for at least this long and at least 10 attempts, then fails as given up ('rangecast broadcasts retry' sends it again); sends that fail before the recipient is named (connect, TLS, AUTH, MAIL FROM) are not its attempts; 10m to 168h (env RANGECAST_RETRY_FOR)")
	f.IntVar(&o.TxSlots, "tx-slots", 4, "transactional messages sent at once, apart from the page window, so they never wait behind a broadcast (env RANGECAST_TX_SLOTS)")
	workerPublicFlags(cmd, &o.PublicURL, &keysFile)
	dkimKeyFlag(cmd, &o.DKIMKeys)
	return cmd
}

// applyGCPolicy sets a page worker's garbage collector (gcpolicy) and logs
// what it set.
func applyGCPolicy(log *slog.Logger) {
	g := gcpolicy.Apply()
	if g.Percent > 0 || g.MemoryLimit > 0 {
		log.Debug("garbage collector set for a page worker (GOGC and GOMEMLIMIT override it)", "gc_percent", g.Percent, "memory_limit_bytes", g.MemoryLimit)
	}
}

// dkimKeyFlag is --dkim-key, repeatable; RANGECAST_DKIM_KEYS adds more.
func dkimKeyFlag(cmd *cobra.Command, keys *[]string) {
	cmd.Flags().StringArrayVar(keys, "dkim-key", nil,
		"DOMAIN=SELECTOR:KEYFILE: sign mail from DOMAIN (and its subdomains) with this PEM key, RSA of 2048 bits or more (1,024 starts with a warning) or Ed25519; repeat it, e.g. for two selectors of one domain while rotating (both sign). "+
			"'rangecast domains records DOMAIN --dkim-key …' prints the DNS records to publish (env "+server.EnvDKIMKeys+", comma-separated)")
}

// governorFlags configure the per-sending-domain governor's defaults; an
// operator's SetDomainLimits overrides them per domain.
func governorFlags(cmd *cobra.Command, l *governor.Limits) {
	f := cmd.Flags()
	f.Var(within(&l.InitialCeiling, governor.DefaultCeiling, governor.MinCeiling, governor.MaxCeiling), "initial-daily-ceiling",
		fmt.Sprintf("daily ceiling a sending domain with no history starts at, %d to %d; learning doubles it after clean days (env RANGECAST_INITIAL_DAILY_CEILING)", governor.MinCeiling, governor.MaxCeiling))
	f.Var(perSecond(&l.RatePerSecond, governor.DefaultRatePerSecond), "domain-rate",
		"messages per second each sending domain may send (token bucket), above 0 (env RANGECAST_DOMAIN_RATE)")
	f.Var(atLeast(&l.Burst, governor.DefaultBurst, 1), "domain-burst",
		"burst of each sending domain's token bucket, at least 1 (env RANGECAST_DOMAIN_BURST)")
	f.StringVar(&l.Server, "smtp-server-name", coordinator.DefaultServer,
		"name of the SMTP server the workers send through, for its hourly limit and 'rangecast governor reset-rate-limit' (env RANGECAST_SMTP_SERVER_NAME)")
	f.IntVar(&l.EmailsPerHour, "emails-per-hour", 0,
		"hourly limit of that SMTP server, 0 for none (env RANGECAST_EMAILS_PER_HOUR)")
	breakerFlags(cmd, l)
}

// breakerFlags configure the receiving providers' breakers and ramps, which
// rangecast dev runs as the coordinator does (its relay, --smtp-url, may
// refuse like a real one).
func breakerFlags(cmd *cobra.Command, l *governor.Limits) {
	f := cmd.Flags()
	f.Var(atLeast(&l.BreakerFailures, governor.BreakerFailures, 1), "breaker-failures",
		"a receiving provider's breaker opens after at least this many transient failures in 5 minutes (at least 1)... (env RANGECAST_BREAKER_FAILURES)")
	f.Var(share(&l.BreakerShare, governor.BreakerShare, "a provider's attempts", "0.2 is 20 %"), "breaker-share",
		"...that are at least this share of its attempts in the window (0.2: 20 %; above 0, at most 1), so ordinary deferrals at volume never open it (env RANGECAST_BREAKER_SHARE)")
	f.Var(atLeast(&l.RampConnections, governor.RampConnections, 1), "ramp-connections",
		"a provider coming back from a breaker or a hold ramps up from one connection to this many before its breaker closes, at least 1 (env RANGECAST_RAMP_CONNECTIONS)")
}

// serverFlags are the flags every server process has.
func serverFlags(cmd *cobra.Command, databaseURL, natsURL, metricsAddr, level, format *string, defaultMetrics string) {
	f := cmd.Flags()
	f.StringVar(databaseURL, "database-url", "", "postgres://… or, for a single machine, sqlite:PATH (env RANGECAST_DATABASE_URL)")
	f.StringVar(natsURL, "nats-url", server.DefaultNATSURL, "NATS server with JetStream, 2.12.3 or newer (env RANGECAST_NATS_URL)")
	f.StringVar(metricsAddr, "metrics-addr", defaultMetrics, "/metrics, /healthz, /readyz listen address (env RANGECAST_METRICS_ADDR)")
	f.Var(logLevel(level, "info"), "log-level", "debug, info, warn or error (env RANGECAST_LOG_LEVEL)")
	f.StringVar(format, "log-format", "text", "text or json (one JSON object per line) (env RANGECAST_LOG_FORMAT)")
}

// natsReplicasFlag sets how many NATS servers hold each stream and bucket.
func natsReplicasFlag(cmd *cobra.Command, replicas *int) {
	cmd.Flags().IntVar(replicas, "nats-replicas", 1,
		"replicas of every JetStream stream and KV bucket: 3 on a NATS cluster; every coordinator and worker must use the same value (env RANGECAST_NATS_REPLICAS)")
}

// stackFlags are shared by dev and demo.
type stackFlags struct {
	o        server.StackOptions
	postgres string
	level    string
	format   string
}

func (s *stackFlags) register(cmd *cobra.Command, level string) {
	f := cmd.Flags()
	f.StringVar(&s.o.Dir, "dir", ".rangecast", "folder for the embedded JetStream store and captured mail")
	f.StringVar(&s.postgres, "postgres", "", "use this Postgres (postgres://…) instead of a SQLite file in --dir; rangecast keeps to a schema of its own")
	f.StringVar(&s.o.SMTPURL, "smtp-url", "", "send through this SMTP server instead of capturing mail in-process (parameters as the pageworker's --smtp-url)")
	dkimKeyFlag(cmd, &s.o.DKIMKeys)
	// StartStack takes 0 for its defaults; from a flag, 0 is refused as
	// the page worker refuses --concurrency 0.
	f.Var(atLeast(&s.o.Workers, 2, 1), "workers", "page workers to run, at least 1")
	f.Var(atLeast(&s.o.Concurrency, 16, 1), "concurrency", "each worker's in-flight window, at least 1")
	f.DurationVar(&s.o.RetryFor, "retry-for", pageworker.DefaultRetryFor, "a recipient refused for a transient reason is tried again for at least this long and 10 attempts before it fails (as the pageworker's --retry-for); 10m to 168h")
	f.DurationVar(&s.o.InDoubtAfter, "in-doubt-after", 20*time.Second, "a claim whose worker has been gone this long is in doubt and is settled against the capture server")
	f.Var(logLevel(&s.level, level), "log-level", "debug, info, warn or error (env RANGECAST_LOG_LEVEL)")
	f.StringVar(&s.format, "log-format", "text", "text or json (one JSON object per line) (env RANGECAST_LOG_FORMAT)")
}

// devSchema is the schema rangecast dev --postgres works in: the URL's
// search_path when it names one (how a second dev stack on one database
// gets a schema of its own, as its refusal says), else rangecast_dev. It
// was always rangecast_dev, whatever the URL said.
func devSchema(dbURL string) (string, error) {
	u, err := url.Parse(dbURL)
	if err != nil {
		return "", fmt.Errorf("--postgres: %w", redact.Error(err))
	}
	sp := u.Query().Get("search_path")
	if sp == "" {
		return "rangecast_dev", nil
	}
	if !postgres.SchemaName(sp) {
		return "", fmt.Errorf("--postgres: search_path %q: give one schema name of lowercase letters, digits and _ (rangecast dev creates it)", sp)
	}
	return sp, nil
}

func devCommand() *cobra.Command {
	var s stackFlags
	gov := server.DevGovernor()
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run the whole system in one process: NATS, coordinator, workers, capture SMTP",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			log, err := logger(s.level, s.format)
			if err != nil {
				return err
			}
			s.o.Log, s.o.MailFiles, s.o.Governor = log, true, gov
			applyGCPolicy(log) // it runs page workers too
			where := "SQLite"
			if s.postgres != "" {
				schema, err := devSchema(s.postgres)
				if err != nil {
					return err
				}
				url, err := postgres.WithSchema(ctx, s.postgres, schema)
				if err != nil {
					return err
				}
				s.o.DatabaseURL, where = url, "Postgres schema "+schema
			}
			s.o.DKIMKeys = append(s.o.DKIMKeys, server.DKIMKeysFromEnv()...)
			st, err := server.StartStack(ctx, s.o)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "rangecast dev is running (Ctrl-C stops it; state is kept in %s; store: %s)\n", s.o.Dir, where)
			if s.o.TLSCert != "" {
				fmt.Fprintf(out, "  gRPC     %s   TLS only (rangecast --addr %s --ca CA.crt broadcasts list)\n", st.GRPCAddr, st.GRPCAddr)
			} else {
				fmt.Fprintf(out, "  gRPC     %s   (rangecast --addr %s broadcasts list)\n", st.GRPCAddr, st.GRPCAddr)
			}
			fmt.Fprintf(out, "  HTTP     %s   (unsubscribe links, webhooks)\n", st.PublicURL)
			fmt.Fprintf(out, "  metrics  http://%s/metrics\n", s.o.MetricsAddr)
			if st.Capture != nil {
				fmt.Fprintf(out, "  mail     captured by %s, written to %s/mail\n", st.Capture.Addr(), s.o.Dir)
			}
			<-ctx.Done()
			fmt.Fprintln(out, "stopping: letting in-flight sends finish…")
			if err := st.Stop(); err != nil {
				return err
			}
			fmt.Fprintln(out, "stopped")
			return nil
		},
	}
	s.register(cmd, "info")
	cmd.Flags().StringVar(&s.o.GRPCAddr, "grpc-addr", server.DefaultGRPCAddr, "gRPC listen address")
	cmd.Flags().StringVar(&s.o.HTTPAddr, "http-addr", server.DefaultHTTPAddr, "public HTTP listen address")
	cmd.Flags().StringVar(&s.o.MetricsAddr, "metrics-addr", server.DefaultMetricsAddr, "metrics listen address")
	cmd.Flags().StringVar(&s.o.CaptureAddr, "capture-addr", "", "listen address of the capture SMTP server (default a free port on 127.0.0.1); unused with --smtp-url")
	cmd.Flags().StringVar(&s.o.TLSCert, "tls-cert", "", "serve gRPC over TLS only with this PEM certificate (re-read when it changes), as the coordinator does")
	cmd.Flags().StringVar(&s.o.TLSKey, "tls-key", "", "PEM private key of --tls-cert")
	breakerFlags(cmd, &gov.Limits)
	return cmd
}

func demoCommand() *cobra.Command {
	var s stackFlags
	var o demo.Options
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Send a real broadcast to generated contacts in one process and check the result",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := logger(s.level, s.format)
			if err != nil {
				return err
			}
			s.o.Log = log
			s.o.GRPCAddr = "127.0.0.1:0"
			s.o.DKIMKeys = append(s.o.DKIMKeys, server.DKIMKeysFromEnv()...)
			o.Stack, o.Postgres = s.o, s.postgres
			if s.o.Dir == ".rangecast" && !o.Keep {
				dir, err := os.MkdirTemp("", "rangecast-demo-")
				if err != nil {
					return err
				}
				defer os.RemoveAll(dir)
				o.Stack.Dir = dir
			}
			return demo.Run(cmd.Context(), o, cmd.OutOrStdout())
		},
	}
	s.register(cmd, "warn")
	cmd.Flags().IntVar(&o.Contacts, "contacts", 10000, "contacts to generate (5% unsubscribed, 2% do-not-contact)")
	cmd.Flags().BoolVar(&o.Keep, "keep", false, "keep the demo's data afterwards (the --dir folder, or the Postgres schema)")
	return cmd
}
