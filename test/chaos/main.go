// Command chaos runs rangecast as separate processes (nats-server with a
// file store, an SMTP sink, coordinators, page workers, on Postgres) and
// breaks them while a broadcast runs: kill -9 of workers every 1–3 s and of
// the leading coordinator, a nats-server restart, Postgres backends
// terminated, a measured pause and a pause storm (pause and resume every few
// seconds) and erasures of contacts, while the SMTP sink refuses 3 % of
// RCPTs with 451 at random. Then it checks, one line per check, what the
// in-doubt policy promises (skip: nobody got two copies and nobody eligible
// was skipped unless counted as in doubt; resend: nobody was skipped, and
// only rows released in doubt got a second copy) and what erasure promises,
// and exits non-zero on any breach.
//
//	go run ./test/chaos                      # 50,000 contacts (make chaos)
//	go run ./test/chaos -contacts 5000 -duration 30s
//	go run ./test/chaos -short -pg-outage 8s # the short form, every other flag still applies
//
// Postgres comes from TEST_DATABASE_URL (default
// postgres://postgres@127.0.0.1:5432/test?sslmode=disable); the run keeps to
// a schema of its own, dropped at the end.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	cfg, _ := parseConfig(os.Args[1:], flag.ExitOnError)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg.Out = os.Stdout
	res, err := Run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		os.Exit(2)
	}
	res.Print(os.Stdout)
	if !res.OK() {
		os.Exit(1)
	}
}

// parseConfig reads the command line. -short picks the defaults the other
// flags start from, so that "-short -pg-outage 8s" is the short form with an
// outage: a first parse reads it (as the flag package reads it), the second
// the rest.
func parseConfig(args []string, onError flag.ErrorHandling) (Config, error) {
	cfg := LongConfig()
	probe, scratch := flag.NewFlagSet("chaos", flag.ContinueOnError), cfg
	probe.SetOutput(io.Discard)
	if short := register(probe, &scratch); probe.Parse(args) == nil && *short {
		cfg = ShortConfig()
	}
	fs := flag.NewFlagSet("chaos", onError)
	register(fs, &cfg)
	return cfg, fs.Parse(args)
}

// register defines the command's flags on fs, defaulting to cfg's values,
// and returns -short.
func register(fs *flag.FlagSet, cfg *Config) *bool {
	short := fs.Bool("short", false, "start from the short form make test runs (5,000 contacts, 30 s, fewer kills); other flags still apply")
	fs.IntVar(&cfg.Contacts, "contacts", cfg.Contacts, "contacts to import (5% unsubscribed, 2% do-not-contact)")
	fs.DurationVar(&cfg.Duration, "duration", cfg.Duration, "chaos phase; the broadcast is throttled to take about this long")
	fs.Int64Var(&cfg.Throttle, "throttle", 0, "broadcast throttle per hour (0: pace the audience over -duration)")
	fs.IntVar(&cfg.Workers, "workers", cfg.Workers, "page workers")
	fs.IntVar(&cfg.Coordinators, "coordinators", cfg.Coordinators, "coordinators")
	fs.IntVar(&cfg.Concurrency, "concurrency", cfg.Concurrency, "each worker's in-flight window")
	fs.DurationVar(&cfg.WorkerKillMin, "worker-kill-min", cfg.WorkerKillMin, "shortest wait between worker kills")
	fs.DurationVar(&cfg.WorkerKillMax, "worker-kill-max", cfg.WorkerKillMax, "longest wait between worker kills")
	fs.IntVar(&cfg.CoordinatorKills, "coordinator-kills", cfg.CoordinatorKills, "kill -9 of the leading coordinator")
	fs.IntVar(&cfg.NATSRestarts, "nats-restarts", cfg.NATSRestarts, "nats-server restarts")
	fs.BoolVar(&cfg.NATSKill, "nats-kill", cfg.NATSKill, "restart nats-server with kill -9 rather than SIGTERM")
	fs.IntVar(&cfg.PGTerminations, "pg-terminations", cfg.PGTerminations, "times every Postgres backend of the run is terminated")
	fs.DurationVar(&cfg.PGOutage, "pg-outage", cfg.PGOutage, "cut every process off Postgres for this long, once, a third into the chaos phase (0: never)")
	fs.BoolVar(&cfg.PauseResume, "pause", cfg.PauseResume, "pause and resume the broadcast once, measuring what is still sent")
	fs.BoolVar(&cfg.PauseStorm, "pause-storm", cfg.PauseStorm, "pause and resume the broadcast every few seconds during the chaos phase")
	fs.IntVar(&cfg.StormPauses, "storm-pauses", cfg.StormPauses, "end the pause storm after this many pauses (0: no end)")
	fs.Float64Var(&cfg.RefuseRcpt, "refuse-rcpt", cfg.RefuseRcpt, "share of RCPTs the sink answers 451 at random (0.03: 3 %)")
	fs.DurationVar(&cfg.RelayOutage, "relay-outage", cfg.RelayOutage, "stop the SMTP sink for this long, once, a fifth into the chaos phase (0: never)")
	fs.IntVar(&cfg.Erasures, "erasures", cfg.Erasures, "times contacts are erased (GDPR Art. 17) while the broadcast runs")
	fs.IntVar(&cfg.ErasePerEvent, "erase-per-event", cfg.ErasePerEvent, "contacts erased each time: half among those claimed or deferred then, half at random")
	fs.DurationVar(&cfg.SinkLatency, "sink-latency", cfg.SinkLatency, "the sink's delay before each 250, like a real relay")
	fs.StringVar(&cfg.InDoubtPolicy, "in-doubt-policy", cfg.InDoubtPolicy, "coordinators' --in-doubt-policy: skip (a killed worker's claims end unknown) or resend (sent again; second copies of those only)")
	fs.DurationVar(&cfg.InDoubtAfter, "in-doubt-after", cfg.InDoubtAfter, "coordinators' --in-doubt-after")
	fs.DurationVar(&cfg.CompleteTimeout, "complete-timeout", cfg.CompleteTimeout, "how long to wait for completion after the chaos phase")
	fs.StringVar(&cfg.Dir, "dir", "", "work folder (binaries, logs, JetStream store, sink log); default a temporary one")
	fs.BoolVar(&cfg.Keep, "keep", false, "keep the work folder and the Postgres schema")
	fs.StringVar(&cfg.BinDir, "bin", "", "folder with prebuilt coordinator, pageworker, smtpsink and nats-server (default: build them)")
	fs.Uint64Var(&cfg.Seed, "seed", 0, "random seed (0: from the clock)")
	return short
}
