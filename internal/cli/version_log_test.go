package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/rangecast/rangecast/internal/version"
)

// TestVersionFlag: every root command answers --version with version.String()
// and runs nothing else.
func TestVersionFlag(t *testing.T) {
	for _, mk := range []func() *cobra.Command{Rangecast, Coordinator, PageWorker} {
		cmd := mk()
		t.Run(cmd.Name(), func(t *testing.T) {
			var out bytes.Buffer
			cmd.SetOut(&out)
			cmd.SetErr(&out)
			cmd.SetArgs([]string{"--version"})
			if err := cmd.Execute(); err != nil {
				t.Fatal(err)
			}
			want := cmd.Name() + " version " + version.String() + "\n"
			if out.String() != want {
				t.Errorf("--version printed %q, want %q", out.String(), want)
			}
		})
	}
}

// TestJSONLogs: --log-format json writes one JSON object per line, each with
// "msg" and "level", and keeps the attributes the code logs with.
func TestJSONLogs(t *testing.T) {
	var buf bytes.Buffer
	log, err := newLogger(&buf, "debug", "json")
	if err != nil {
		t.Fatal(err)
	}
	log.Info("page dispatched", "broadcast", "b1", "range", 3, "from", "c-0042")
	log.Warn("report ignored", "broadcast", "b1", "err", errors.New("stale epoch\nsecond line"))
	log.With("component", "coordinator").Debug("lease renewed")
	log.Error("store unreachable", slog.Group("db", "url", "sqlite:x"))
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if len(lines) != 4 {
		t.Fatalf("%d lines, want 4:\n%s", len(lines), buf.String())
	}
	for _, line := range lines {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("not a JSON object: %q: %v", line, err)
		}
		for _, k := range []string{"msg", "level", "time"} {
			if _, ok := m[k]; !ok {
				t.Errorf("%q: no %q", line, k)
			}
		}
	}
	var first map[string]any
	_ = json.Unmarshal([]byte(lines[0]), &first)
	if first["msg"] != "page dispatched" || first["level"] != "INFO" || first["broadcast"] != "b1" || first["range"] != float64(3) {
		t.Errorf("first line: %v", first)
	}
}

func TestLogFormat(t *testing.T) {
	var buf bytes.Buffer
	log, err := newLogger(&buf, "warn", "text")
	if err != nil {
		t.Fatal(err)
	}
	log.Info("hidden")
	log.Warn("shown", "broadcast", "b1")
	if s := buf.String(); strings.Contains(s, "hidden") || !strings.Contains(s, "level=WARN msg=shown broadcast=b1") {
		t.Errorf("text log: %q", s)
	}
	for _, f := range []string{"", "TEXT", "json", " JSON "} {
		if _, err := newLogger(&buf, "info", f); err != nil {
			t.Errorf("%q: %v", f, err)
		}
	}
	if _, err := newLogger(&buf, "info", "yaml"); err == nil {
		t.Error("--log-format yaml accepted")
	}
}

// TestLogFormatFlag: the servers and dev/demo take --log-format, take it
// from RANGECAST_LOG_FORMAT, and refuse an unknown format before starting.
func TestLogFormatFlag(t *testing.T) {
	t.Setenv("RANGECAST_LOG_FORMAT", "json")
	dev, demo := devCommand(), demoCommand()
	for _, cmd := range []*cobra.Command{Coordinator(), PageWorker(), dev, demo} {
		f := cmd.Flags().Lookup("log-format")
		if f == nil {
			t.Fatalf("%s: no --log-format", cmd.Name())
		}
		if err := applyEnv(cmd.Flags()); err != nil {
			t.Fatal(err)
		}
		if got := f.Value.String(); got != "json" {
			t.Errorf("%s: --log-format %q with RANGECAST_LOG_FORMAT=json", cmd.Name(), got)
		}
	}
	for _, cmd := range []*cobra.Command{Coordinator(), PageWorker()} {
		cmd.SetArgs([]string{"--log-format", "yaml"})
		cmd.SetOut(new(bytes.Buffer))
		err := cmd.Execute()
		if err == nil || !strings.Contains(err.Error(), "log-format") {
			t.Errorf("%s --log-format yaml: %v", cmd.Name(), err)
		}
	}
}
