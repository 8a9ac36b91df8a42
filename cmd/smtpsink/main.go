// Command smtpsink is an SMTP server that accepts every message and appends
// each accepted recipient and Message-ID to a log it fsyncs before replying
// 250 (or, with -log "", only counts). The chaos harness (test/chaos) and the
// benchmark (bench) run it; see internal/sinkproc.
package main

import (
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/rangecast/rangecast/internal/sinkproc"
)

func main() {
	var o sinkproc.Options
	flag.StringVar(&o.Addr, "addr", "127.0.0.1:2525", "listen address (127.0.0.1:0 picks a free port)")
	flag.StringVar(&o.LogPath, "log", "sink.log", `append-only delivery log: one line per accepted recipient ("" keeps none and only counts)`)
	flag.DurationVar(&o.Latency, "latency", 0, "delay before each DATA reply, like a real relay")
	flag.Float64Var(&o.RefuseRcpt, "refuse-rcpt", 0, "share of RCPTs answered 451 4.3.0 at random (0.03: 3 %), like providers' deferrals")
	flag.Float64Var(&o.Tarpit, "tarpit", 0, "share of messages whose DATA reply is held -tarpit-delay instead (0.01: 1 %), like a server that tarpits or scans slowly")
	flag.DurationVar(&o.TarpitDelay, "tarpit-delay", 5*time.Second, "how long a tarpitted DATA reply is held")
	stats := flag.String("stats", "", "serve the counters as JSON on http://ADDR/stats (messages, recipients, first and last acceptance)")
	flag.Parse()
	s, err := sinkproc.Start(o)
	if err != nil {
		log.Fatal(err)
	}
	// The first line of stdout is the address, for whoever started us.
	fmt.Printf("listening %s\n", s.Addr())
	if *stats != "" {
		ln, err := net.Listen("tcp", *stats)
		if err != nil {
			log.Fatal(err)
		}
		srv := &http.Server{Handler: s.StatsHandler(), ReadHeaderTimeout: 10 * time.Second}
		go srv.Serve(ln) //nolint:errcheck // ends with the process
		fmt.Printf("stats http://%s/stats\n", ln.Addr())
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	<-sig
	if err := s.Close(); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("stopped after %d messages\n", s.Accepted())
}
