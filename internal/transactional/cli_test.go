package transactional_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rangecast/rangecast/internal/cli"
	"github.com/rangecast/rangecast/internal/server"
)

// The CLI against the shipped dev stack (SQLite, capture SMTP): send with
// --wait, a repeat under the same key, status --json, and a stored template.
func TestCLI(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := server.StartStack(ctx, server.StackOptions{Dir: t.TempDir(), GRPCAddr: "127.0.0.1:0", Workers: 1, Log: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := st.Stop(); err != nil {
			t.Errorf("stack stop: %v", err)
		}
	})
	dir := t.TempDir()
	file := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	run := func(args ...string) (string, error) {
		cmd := cli.Rangecast()
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		cmd.SetArgs(append([]string{"--addr", st.GRPCAddr}, args...))
		err := cmd.ExecuteContext(ctx)
		return out.String(), err
	}

	text := file("code.txt", "Your code is 123456.\n")
	args := []string{"send", "--to", "ann@example.org", "--from", "no-reply@rangecast.test", "--subject", "Your code",
		"--text", text, "--header", "X-Request-ID: r-1", "--idempotency-key", "cli:1"}
	out, err := run(append(args, "--wait")...)
	if err != nil {
		t.Fatalf("send --wait: %v\n%s", err, out)
	}
	id, _, _ := strings.Cut(out, " ")
	if len(id) != 26 || !strings.Contains(out, "sent") || !strings.Contains(out, "#1") || !strings.Contains(out, "250 2.0.0") {
		t.Fatalf("send --wait printed:\n%s\nwant the id, sent, and attempt #1", out)
	}
	out, err = run(args...)
	if err != nil || !strings.HasPrefix(out, id+" sent") || !strings.Contains(out, "already accepted") {
		t.Fatalf("repeat printed %q (%v); want the same id, sent, marked as already accepted", out, err)
	}
	if _, err := run("send", "--to", "ann@example.org", "--from", "no-reply@rangecast.test", "--subject", "Another",
		"--text", text, "--idempotency-key", "cli:1"); err == nil || !strings.Contains(err.Error(), "its subject differs") {
		t.Fatalf("reused key: %v; want the refusal naming the subject", err)
	}
	out, err = run("send", "status", id, "--json")
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Status   string `json:"status"`
		Attempts []struct {
			Result string `json:"result"`
		} `json:"attempts"`
	}
	if err := json.Unmarshal([]byte(out), &m); err != nil || m.Status != "TRANSACTIONAL_STATUS_SENT" || len(m.Attempts) != 1 || m.Attempts[0].Result != "sent" {
		t.Fatalf("status --json = %s (%v)", out, err)
	}
	if st.Capture.Count() != 1 || !strings.Contains(string(st.Capture.Messages()[0].Raw), "X-Request-ID: r-1") {
		t.Fatalf("captured %d messages; want one with the extra header", st.Capture.Count())
	}

	if out, err = run("send", "template", "put", "signin", "--from", "no-reply@rangecast.test", "--subject", "Code for {{.name}}",
		"--text", file("t.txt", "Hi {{.name}}, your code is {{.code}}.")); err != nil || !strings.Contains(out, "signin version 1") {
		t.Fatalf("template put: %q %v", out, err)
	}
	out, err = run("send", "--to", "bob@example.org", "--template", "signin", "--data", `{"name":"Bob","code":"4242"}`,
		"--idempotency-key", "cli:2", "--wait")
	if err != nil || !strings.Contains(out, `subject "Code for Bob"`) || !strings.Contains(out, "template signin version 1") {
		t.Fatalf("templated send printed %q (%v)", out, err)
	}
	if _, err = run("send", "--to", "bob@example.org", "--template", "signin", "--data", `{"name":"Bob"}`, "--idempotency-key", "cli:3"); err == nil ||
		!strings.Contains(err.Error(), `data has no field "code"`) {
		t.Fatalf("templated send without a field: %v", err)
	}
	if got := st.Capture.CountByRecipient(); got["bob@example.org"] != 1 || st.Capture.Count() != 2 {
		t.Fatalf("captured %v; want one more, for bob", got)
	}
}
