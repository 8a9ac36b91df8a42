package main

import (
	"context"
	"flag"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rangecast/rangecast/internal/testenv"
)

// lineWriter passes whole lines to t.Log.
type lineWriter struct {
	t   *testing.T
	buf strings.Builder
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.buf.Write(p)
	s := w.buf.String()
	for {
		i := strings.IndexByte(s, '\n')
		if i < 0 {
			break
		}
		w.t.Log(s[:i])
		s = s[i+1:]
	}
	w.buf.Reset()
	w.buf.WriteString(s)
	return len(p), nil
}

// TestChaosShort is the short form of `make chaos`: 5,000 contacts, 30 s of
// faults (worker kills every 2–5 s, two coordinator kills, a nats-server
// restart, Postgres backends terminated, a measured pause and a pause storm,
// an SMTP sink refusing 3 % of RCPTs with 451 at random, two erasures of
// contacts in flight and at random), real processes throughout, under the
// skip in-doubt policy: no second copy to anyone. Every check must pass.
func TestChaosShort(t *testing.T) { runShort(t, "skip") }

// TestChaosShortResend is the same run under the resend in-doubt policy:
// no gap, and a second copy only to a row released in doubt.
func TestChaosShortResend(t *testing.T) { runShort(t, "resend") }

func runShort(t *testing.T, policy string) {
	if testing.Short() {
		t.Skip("builds and runs nats-server, coordinators, workers and an SMTP sink as processes")
	}
	dbURL := testenv.DatabaseURL(t) // skips without Postgres unless RANGECAST_REQUIRE_PG=1
	bin := filepath.Join(t.TempDir(), "bin")
	// Building, importing, 30 s of faults and up to 90 s to complete.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := BuildBinaries(ctx, bin); err != nil {
		t.Fatal(err)
	}
	cfg := ShortConfig()
	cfg.DatabaseURL, cfg.BinDir, cfg.Dir, cfg.InDoubtPolicy = dbURL, bin, t.TempDir(), policy
	out := &lineWriter{t: t}
	cfg.Out = out
	res, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	res.Print(out)
	for _, c := range res.Checks {
		if !c.OK {
			t.Errorf("breach: %s", c)
		}
	}
}

// TestShortKeepsTheOtherFlags: -short sets the defaults, wherever it stands,
// and every other flag still applies.
func TestShortKeepsTheOtherFlags(t *testing.T) {
	t.Parallel()
	cfg, err := parseConfig([]string{"-in-doubt-policy", "resend", "-short", "-relay-outage", "7s"}, flag.ContinueOnError)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Contacts != ShortConfig().Contacts || cfg.InDoubtPolicy != "resend" || cfg.RelayOutage != 7*time.Second {
		t.Errorf("-in-doubt-policy resend -short -relay-outage 7s: contacts %d, policy %q, relay outage %s; want %d, resend, 7s",
			cfg.Contacts, cfg.InDoubtPolicy, cfg.RelayOutage, ShortConfig().Contacts)
	}
	for _, args := range [][]string{{"-short=false"}, {"-seed", "4"}} {
		if cfg, err := parseConfig(args, flag.ContinueOnError); err != nil || cfg.Contacts != LongConfig().Contacts {
			t.Errorf("%v: contacts %d, %v; want the long form's %d", args, cfg.Contacts, err, LongConfig().Contacts)
		}
	}
}
