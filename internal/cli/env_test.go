package cli

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
)

// A malformed environment value is an error naming the variable, not a
// silent default; a well-formed one sets the flag; a flag given on the
// command line wins.
func TestEnvStrict(t *testing.T) {
	for _, tc := range []struct {
		cmd      func() *cobra.Command
		name, v  string
		wantFlag string
	}{
		{PageWorker, "RANGECAST_CONCURRENCY", "abc", "concurrency"},
		{Coordinator, "RANGECAST_IN_DOUBT_AFTER", "30", "in-doubt-after"},
		{Coordinator, "RANGECAST_BOUNCE_ALARM", "2%", "bounce-alarm"},
		{Coordinator, "RANGECAST_NATS_REPLICAS", "three", "nats-replicas"},
		// Well-formed but out of range: refused, not taken for the default.
		{Coordinator, "RANGECAST_LOG_LEVEL", "loud", "log-level"},
		{PageWorker, "RANGECAST_LOG_LEVEL", "loud", "log-level"},
		{Coordinator, "RANGECAST_BREAKER_SHARE", "2", "breaker-share"},
		{Coordinator, "RANGECAST_BREAKER_SHARE", "NaN", "breaker-share"},
		{Coordinator, "RANGECAST_BREAKER_SHARE", "0", "breaker-share"},
		{Coordinator, "RANGECAST_BREAKER_FAILURES", "0", "breaker-failures"},
		{Coordinator, "RANGECAST_RAMP_CONNECTIONS", "0", "ramp-connections"},
		{Coordinator, "RANGECAST_DOMAIN_BURST", "0", "domain-burst"},
		{Coordinator, "RANGECAST_DOMAIN_RATE", "0", "domain-rate"},
		{Coordinator, "RANGECAST_DOMAIN_RATE", "+Inf", "domain-rate"},
		{Coordinator, "RANGECAST_BOUNCE_ALARM", "5", "bounce-alarm"},
		{Coordinator, "RANGECAST_BOUNCE_ALARM", "0", "bounce-alarm"},
		{Coordinator, "RANGECAST_COMPLAINT_ALARM", "1", "complaint-alarm"},
	} {
		t.Run(tc.name+"="+tc.v, func(t *testing.T) {
			t.Setenv(tc.name, tc.v)
			cmd := tc.cmd()
			cmd.SetArgs(nil)
			cmd.SetOut(new(bytes.Buffer))
			err := cmd.Execute()
			if err == nil || !strings.Contains(err.Error(), tc.name) || !strings.Contains(err.Error(), "--"+tc.wantFlag) {
				t.Errorf("%s=%q: error %v; want one naming the variable and the flag", tc.name, tc.v, err)
			}
		})
	}

	t.Run("valid and overridden", func(t *testing.T) {
		t.Setenv("RANGECAST_CONCURRENCY", "64")
		t.Setenv("RANGECAST_TX_SLOTS", "abc")
		cmd := PageWorker()
		if err := cmd.ParseFlags([]string{"--tx-slots", "2"}); err != nil {
			t.Fatal(err)
		}
		if err := applyEnv(cmd.Flags()); err != nil {
			t.Fatalf("applyEnv: %v (a flag on the command line must win over the environment)", err)
		}
		if got := cmd.Flags().Lookup("concurrency").Value.String(); got != "64" {
			t.Errorf("--concurrency = %s with RANGECAST_CONCURRENCY=64", got)
		}
	})
}

// --help never shows a value from the environment: an SMTP URL's password
// stayed in the pod's logs and terminals.
func TestHelpShowsNoSecrets(t *testing.T) {
	t.Setenv("RANGECAST_SMTP_URL", "smtp://u:s3cret@relay.example.com:587")
	t.Setenv("RANGECAST_DATABASE_URL", "postgres://app:s3cret@db/rc")
	t.Setenv("RANGECAST_NATS_URL", "nats://n:s3cret@nats:4222")
	for _, cmd := range []*cobra.Command{PageWorker(), Coordinator()} {
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetArgs([]string{"--help"})
		if err := cmd.Execute(); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(out.String(), "s3cret") {
			t.Errorf("%s --help shows a secret:\n%s", cmd.Name(), out.String())
		}
	}
}

// TestEnvStrictDev: rangecast dev and demo read RANGECAST_LOG_LEVEL as the
// servers do (they used to ignore it), and refuse a malformed one before
// starting anything; dev reads the breaker's variables as the coordinator
// does (it had no way to set them).
func TestEnvStrictDev(t *testing.T) {
	for _, c := range []struct{ sub, env, value, flag string }{
		{"dev", "RANGECAST_LOG_LEVEL", "loud", "log-level"},
		{"demo", "RANGECAST_LOG_LEVEL", "loud", "log-level"},
		{"dev", "RANGECAST_BREAKER_SHARE", "1.5", "breaker-share"},
	} {
		sub := c.sub
		t.Run(sub+" "+c.env, func(t *testing.T) {
			t.Setenv(c.env, c.value)
			cmd := Rangecast()
			cmd.SetArgs([]string{sub, "--dir", t.TempDir()})
			cmd.SetOut(new(bytes.Buffer))
			cmd.SetErr(new(bytes.Buffer))
			// Bounded: a dev that took the variable for nothing would run
			// until cancelled.
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			err := cmd.ExecuteContext(ctx)
			if err == nil || !strings.Contains(err.Error(), c.env) || !strings.Contains(err.Error(), c.flag) {
				t.Fatalf("%s with %s=%s: %v; want it refused, naming the variable and the flag", sub, c.env, c.value, err)
			}
		})
	}
}

// TestTokenMustBePrintable: a token gRPC could not send is refused naming
// the flag and the variable, not as an Internal error at the first call.
func TestTokenMustBePrintable(t *testing.T) {
	for _, token := range []string{"tök", "a\nb", "two words"} {
		cmd := Rangecast()
		cmd.SetArgs([]string{"--addr", "127.0.0.1:1", "--token", token, "broadcasts", "list"})
		cmd.SetOut(new(bytes.Buffer))
		cmd.SetErr(new(bytes.Buffer))
		err := cmd.Execute()
		if err == nil || !strings.Contains(err.Error(), "RANGECAST_TOKEN") || strings.Contains(err.Error(), "Internal") {
			t.Errorf("--token %q: %v; want it refused naming the flag and variable", token, err)
		}
	}
}

// TestPrintErrorOneLinePerError: errors joined (several malformed
// variables) are printed one per line, each escaped, not as one line with
// "\n" in it.
func TestPrintErrorOneLinePerError(t *testing.T) {
	var b bytes.Buffer
	printError(&b, errors.Join(errors.New("RANGECAST_A=\"x\" is not valid"), errors.New("RANGECAST_B=\"\x1b[31m\" is not valid")))
	want := "error: RANGECAST_A=\"x\" is not valid\n       RANGECAST_B=\"\\x1b[31m\" is not valid\n"
	if b.String() != want {
		t.Errorf("printed %q, want %q", b.String(), want)
	}
}
