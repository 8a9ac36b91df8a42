// Command bench measures rangecast end to end (make bench): throughput
// against a bare SMTP client, CPU per message, cost as the audience grows,
// and the cost of a crash. See package bench.
//
//	go run ./cmd/bench            # full matrix, writes docs/benchmarks.md
//	go run ./cmd/bench -short     # 10k contacts, fewer points (make bench-short)
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"regexp"
	"syscall"

	"github.com/rangecast/rangecast/bench"
	"github.com/rangecast/rangecast/internal/child"
)

func main() {
	var cfg bench.Config
	flag.BoolVar(&cfg.Short, "short", os.Getenv("BENCH_SHORT") == "1", "quick form: 10k contacts, fewer points (also BENCH_SHORT=1)")
	flag.StringVar(&cfg.DatabaseURL, "database-url", "", "Postgres server to create the bench database on (default TEST_DATABASE_URL, then "+child.DefaultDatabaseURL+")")
	flag.StringVar(&cfg.Dir, "dir", "", "work folder: binaries, logs, JetStream stores, profiles (default a temporary one)")
	flag.BoolVar(&cfg.Keep, "keep", false, "keep the work folder")
	flag.StringVar(&cfg.BinDir, "bin", "", "folder with prebuilt coordinator, pageworker, smtpsink and nats-server (default: build them)")
	flag.BoolVar(&cfg.Micro, "micro", true, "also run the Go micro-benchmarks of the hot paths")
	flag.StringVar(&cfg.Note, "note", "", "sentence added to the report's machine description (e.g. what else was running)")
	only := flag.String("only", "", "run only the scenarios whose name matches this regexp (e2e-2w-sync-default, latency-4x64, size-1000000, crash, …)")
	latency := flag.String("latency", "", "latency-bound runs instead of the plan's: WORKERSxWINDOW or WORKERSxPAGESxWINDOW, comma-separated (2x64,2x2x32)")
	out := flag.String("out", "", `write the report here too (default: docs/benchmarks.md for the full matrix, nowhere for -short or -only)`)
	flag.Parse()
	if *only != "" {
		re, err := regexp.Compile(*only)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench: -only:", err)
			os.Exit(2)
		}
		cfg.Only = re
	}
	if *latency != "" {
		points, err := bench.ParseLatencyPoints(*latency)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench: -latency:", err)
			os.Exit(2)
		}
		cfg.LatencyPoints = points
	}
	// Only the full matrix replaces the committed report: a partial run
	// written there would drop every other scenario's figures.
	if *out == "" && !cfg.Short && cfg.Only == nil && cfg.LatencyPoints == nil {
		*out = "docs/benchmarks.md"
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg.Out = os.Stderr
	rep, err := bench.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
	rep.Markdown(os.Stdout)
	if *out != "" {
		if err := rep.WriteFile(*out); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		fmt.Fprintln(os.Stderr, "bench: report written to", *out)
	}
}
