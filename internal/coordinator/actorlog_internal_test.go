package coordinator

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
)

// TestActorWarningsQuietWhenSteppingDown: an actor's warnings are warnings
// while its leader term lasts, and debug lines once the term has ended (the
// step-down cancels the term's calls; their failures are not faults).
func TestActorWarningsQuietWhenSteppingDown(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	log := slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug}))
	term, end := context.WithCancel(context.Background())
	l := termLog{log, term}
	l.Warn("dispatch failed; retried on the next tick", "err", "nats: timeout")
	end()
	l.Warn("dispatch failed; retried on the next tick", "err", "context canceled")
	l.Error("cannot complete broadcast")
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 || !strings.Contains(lines[0], "level=WARN") || !strings.Contains(lines[0], "nats: timeout") ||
		!strings.Contains(lines[1], "level=DEBUG") || !strings.Contains(lines[1], "(stepping down)") ||
		!strings.Contains(lines[2], "level=ERROR") {
		t.Errorf("logged:\n%s\nwant a warning in the term, a debug line after it, errors as errors", out.String())
	}
}
