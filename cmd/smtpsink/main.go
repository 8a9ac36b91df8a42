// Command smtpsink is an SMTP server that accepts every message and appends
// each accepted recipient and Message-ID to a log it fsyncs before replying
// 250. The chaos harness (test/chaos) runs it; see internal/sinkproc.
package main

import (
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"

	"github.com/rangecast/rangecast/internal/sinkproc"
)

func main() {
	var o sinkproc.Options
	flag.StringVar(&o.Addr, "addr", "127.0.0.1:2525", "listen address (127.0.0.1:0 picks a free port)")
	flag.StringVar(&o.LogPath, "log", "sink.log", "append-only delivery log: one line per accepted recipient")
	flag.DurationVar(&o.Latency, "latency", 0, "delay before each DATA reply, like a real relay")
	flag.Parse()
	s, err := sinkproc.Start(o)
	if err != nil {
		log.Fatal(err)
	}
	// The first line of stdout is the address, for whoever started us.
	fmt.Printf("listening %s\n", s.Addr())
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	<-sig
	if err := s.Close(); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("stopped after %d messages\n", s.Accepted())
}
