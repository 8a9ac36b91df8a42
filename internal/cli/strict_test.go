package cli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// TestFlagsRefused: a flag given a value out of its range is refused where
// it is parsed, with what is allowed; its own default (shown in --help) is
// kept only while it is not given. The environment goes through the same
// parser (TestEnvStrict).
func TestFlagsRefused(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		cmd  func() *cobra.Command
		args []string
		want string // in the error; "" when the value is accepted
	}{
		{devCommand, []string{"--workers", "0"}, `"--workers" flag: it must be at least 1`},
		{devCommand, []string{"--workers", "-3"}, `"--workers" flag: it must be at least 1`},
		{devCommand, []string{"--concurrency", "0"}, `"--concurrency" flag: it must be at least 1`},
		{demoCommand, []string{"--concurrency", "0"}, `"--concurrency" flag: it must be at least 1`},
		{devCommand, []string{"--log-level", "loud"}, `"--log-level" flag: use debug, info, warn or error`},
		{devCommand, []string{"--log-level", "info+2"}, `"--log-level" flag: use debug, info, warn or error`},
		{Coordinator, []string{"--log-level", "loud"}, `"--log-level" flag: use debug, info, warn or error`},
		{PageWorker, []string{"--log-level", "verbose"}, `"--log-level" flag: use debug, info, warn or error`},
		{Coordinator, []string{"--breaker-share", "NaN"}, `"--breaker-share" flag: give a share of a provider's attempts above 0 and at most 1`},
		{Coordinator, []string{"--breaker-share", "1.5"}, `"--breaker-share" flag: give a share`},
		{Coordinator, []string{"--breaker-share", "-0.2"}, `"--breaker-share" flag: give a share`},
		{Coordinator, []string{"--breaker-failures", "0"}, `"--breaker-failures" flag: it must be at least 1`},
		{Coordinator, []string{"--ramp-connections", "-1"}, `"--ramp-connections" flag: it must be at least 1`},
		{Coordinator, []string{"--domain-burst", "0"}, `"--domain-burst" flag: it must be at least 1`},
		{Coordinator, []string{"--domain-rate", "0"}, `"--domain-rate" flag: give messages per second above 0`},
		{Coordinator, []string{"--domain-rate", "NaN"}, `"--domain-rate" flag: give messages per second above 0`},
		{Coordinator, []string{"--bounce-alarm", "5"}, `"--bounce-alarm" flag: give a share of messages tried (accepted, or refused for good at send) above 0 and below 1 (0.02 is 2 %), or -1 to turn it off`},
		{Coordinator, []string{"--bounce-alarm", "1"}, `"--bounce-alarm" flag: give a share of messages tried`},
		{Coordinator, []string{"--bounce-alarm", "0"}, `"--bounce-alarm" flag: give a share of messages tried`},
		{Coordinator, []string{"--bounce-alarm", "-Inf"}, `"--bounce-alarm" flag: give a share of messages tried`},
		{Coordinator, []string{"--initial-daily-ceiling", "0"}, `"--initial-daily-ceiling" flag: it must be between 100 and 5000000`},
		{Coordinator, []string{"--initial-daily-ceiling", "99"}, `"--initial-daily-ceiling" flag: it must be between 100 and 5000000`},
		{Coordinator, []string{"--initial-daily-ceiling", "10000000"}, `"--initial-daily-ceiling" flag: it must be between 100 and 5000000`},
		{Coordinator, []string{"--complaint-alarm", "2"}, `"--complaint-alarm" flag: give a share of delivered messages above 0 and below 1 (0.001 is 0.1 %)`},

		{devCommand, []string{"--workers", "1", "--concurrency", "1"}, ""},
		{devCommand, []string{"--log-level", "WARN"}, ""},
		{Coordinator, []string{"--log-level", "debug"}, ""},
		{Coordinator, []string{"--breaker-share", "1", "--breaker-failures", "1", "--ramp-connections", "1", "--domain-burst", "1", "--domain-rate", "0.5"}, ""},
		{Coordinator, []string{"--bounce-alarm", "-1", "--complaint-alarm", "0.0001"}, ""},
		{Coordinator, []string{"--initial-daily-ceiling", "100"}, ""},
		{Coordinator, []string{"--initial-daily-ceiling", "5000000"}, ""},
		{Coordinator, []string{"--bounce-alarm", "0.5", "--complaint-alarm", "-1"}, ""},
	} {
		cmd := c.cmd()
		err := cmd.ParseFlags(c.args)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s %v: %v; want it accepted", cmd.Name(), c.args, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s %v: %v; want an error with %q", cmd.Name(), c.args, err, c.want)
		case c.want == "":
			for i := 0; i < len(c.args); i += 2 {
				if got := cmd.Flags().Lookup(strings.TrimPrefix(c.args[i], "--")).Value.String(); got != c.args[i+1] {
					t.Errorf("%s %v: %s is %s", cmd.Name(), c.args, c.args[i], got)
				}
			}
		}
	}
}

// TestFlagDefaults: flags that refuse their struct's zero still start at
// their documented defaults when not given.
func TestFlagDefaults(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		cmd         func() *cobra.Command
		flag, value string
	}{
		{devCommand, "workers", "2"}, {devCommand, "concurrency", "16"}, {devCommand, "log-level", "info"},
		{demoCommand, "log-level", "warn"},
		{Coordinator, "log-level", "info"}, {PageWorker, "log-level", "info"},
		{Coordinator, "breaker-share", "0.2"}, {Coordinator, "breaker-failures", "5"}, {Coordinator, "ramp-connections", "16"},
		{Coordinator, "domain-burst", "200"}, {Coordinator, "initial-daily-ceiling", "5000"}, {Coordinator, "domain-rate", "50"},
		{Coordinator, "bounce-alarm", "0.02"}, {Coordinator, "complaint-alarm", "0.001"},
	} {
		cmd := c.cmd()
		if err := cmd.ParseFlags(nil); err != nil {
			t.Fatal(err)
		}
		f := cmd.Flags().Lookup(c.flag)
		if f.Value.String() != c.value || f.DefValue != c.value {
			t.Errorf("%s --%s is %s (default shown %s); want %s", cmd.Name(), c.flag, f.Value, f.DefValue, c.value)
		}
	}
}

// TestLogLevel: newLogger takes the four level names, in any case, and
// refuses anything else, naming the flag, rather than logging at info.
func TestLogLevel(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	for _, l := range []string{"debug", "info", "warn", "error", "WARN", " Error "} {
		if _, err := newLogger(&buf, l, "text"); err != nil {
			t.Errorf("--log-level %q: %v", l, err)
		}
	}
	for _, l := range []string{"loud", "", "warning", "info+2", "-4"} {
		if _, err := newLogger(&buf, l, "text"); err == nil || !strings.Contains(err.Error(), "--log-level") || !strings.Contains(err.Error(), "debug, info, warn or error") {
			t.Errorf("--log-level %q: %v; want a refusal naming the flag and the levels", l, err)
		}
	}
}

// TestListFlagsRefuseLineBreaks: a list flag takes values repeated or
// comma-separated, and refuses a line break, where pflag's StringSlice
// (a CSV record) dropped every line after the first without a word
// (--to $'a\nb' sent to a alone; a tester).
func TestListFlagsRefuseLineBreaks(t *testing.T) {
	t.Parallel()
	var got []string
	fs := cobra.Command{}
	fs.Flags().Var(commaList(&got), "to", "")
	if err := fs.ParseFlags([]string{"--to", "a@x.org, b@x.org", "--to", "c@x.org,"}); err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, "|") != "a@x.org|b@x.org|c@x.org" {
		t.Errorf("--to parsed as %q", got)
	}
	for _, v := range []string{"a@x.org\nb@x.org", "a@x.org\r\nRCPT TO:<x@y.org>", "unknown\nsent"} {
		got = nil
		fs := cobra.Command{}
		fs.Flags().Var(commaList(&got), "to", "")
		if err := fs.ParseFlags([]string{"--to", v}); err == nil || !strings.Contains(err.Error(), "has a line break") {
			t.Errorf("--to %q: %v (parsed %q); want it refused", v, err, got)
		}
	}
}
