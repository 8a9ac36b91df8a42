package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/rangecast/rangecast/internal/server"
	"github.com/rangecast/rangecast/internal/store"
	"github.com/rangecast/rangecast/internal/testenv"
)

// catalogStack is the dev stack (capture SMTP, one worker) on SQLite or on
// a fresh Postgres schema.
func catalogStack(t *testing.T, onPostgres bool) *server.Stack {
	t.Helper()
	o := server.StackOptions{Dir: t.TempDir(), GRPCAddr: "127.0.0.1:0", Workers: 1, Log: slog.New(slog.DiscardHandler)}
	if onPostgres {
		o.DatabaseURL = testenv.DatabaseURL(t)
	}
	st, err := server.StartStack(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := st.Stop(); err != nil {
			t.Errorf("stack stop: %v", err)
		}
	})
	return st
}

// jsonLines decodes one JSON object per line.
func jsonLines(t *testing.T, out string) []map[string]any {
	t.Helper()
	var objs []map[string]any
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("not a JSON line: %q: %v", sc.Text(), err)
		}
		objs = append(objs, m)
	}
	return objs
}

// TestCatalogCommands drives every listing and deleting command, erasure
// included, through the real CLI against the whole system on both stores:
// lists across several pages, --json, the refusals and their codes, and an
// erased address imported again that a real broadcast does not mail.
func TestCatalogCommands(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		pg   bool
	}{{"SQLite", false}, {"Postgres", true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			st := catalogStack(t, tc.pg)
			run := func(stdin string, args ...string) (string, error) {
				t.Helper()
				return rangecast(t, stdin, append([]string{"--addr", st.GRPCAddr}, args...)...)
			}
			mustRun := func(stdin string, args ...string) string {
				t.Helper()
				out, err := run(stdin, args...)
				if err != nil {
					t.Fatalf("rangecast %s: %v\n%s", strings.Join(args, " "), err, out)
				}
				return out
			}
			wantErr := func(want string, args ...string) {
				t.Helper()
				out, err := run("", args...)
				if err == nil || !strings.Contains(describe(err), want) {
					t.Errorf("rangecast %s: %v (printed %q); want an error with %q", strings.Join(args, " "), err, out, want)
				}
			}
			catalogScenario(t, st, run, mustRun, wantErr)
		})
	}
}

func catalogScenario(t *testing.T, st *server.Stack, run func(string, ...string) (string, error), mustRun func(string, ...string) string, wantErr func(string, ...string)) {
	csv := writeFile(t, "c.csv", "email,name\nann@example.org,Ann\nbob@example.org,Bob\ncat@example.org,Cat\nZed.Erase@Example.org,Zed\n")
	mustRun("", "contacts", "import", csv, "--segment", "club")

	// contacts list: everyone, in import order, across pages of one.
	out := mustRun("", "contacts", "list", "--page-size", "1")
	for _, e := range []string{"ann@example.org", "bob@example.org", "cat@example.org", "Zed.Erase@example.org"} {
		if !strings.Contains(out, e) {
			t.Errorf("contacts list lacks %s:\n%s", e, out)
		}
	}
	if strings.Index(out, "ann@") > strings.Index(out, "bob@") {
		t.Errorf("contacts list is not in import order:\n%s", out)
	}
	if objs := jsonLines(t, mustRun("", "contacts", "list", "--json", "--page-size", "2", "--limit", "3")); len(objs) != 3 || objs[0]["email"] != "ann@example.org" {
		t.Errorf("contacts list --json --limit 3: %v", objs)
	}
	mustRun("", "segments", "create", "pros")
	mustRun("", "segments", "add", "pros", "cat@example.org")
	if objs := jsonLines(t, mustRun("", "contacts", "list", "--segment", "pros", "--json")); len(objs) != 1 || objs[0]["email"] != "cat@example.org" {
		t.Errorf("contacts list --segment pros: %v", objs)
	}
	wantErr("no segment named", "contacts", "list", "--segment", "nope")
	wantErr("page_size", "contacts", "list", "--page-size", "9999")

	// segments list and delete.
	out = mustRun("", "segments", "list", "--page-size", "1")
	if !strings.Contains(out, "club") || !strings.Contains(out, "pros") || !strings.Contains(out, "4") {
		t.Errorf("segments list:\n%s", out)
	}
	if objs := jsonLines(t, mustRun("", "segments", "list", "--json")); len(objs) != 2 || objs[0]["members"] != "4" {
		t.Errorf("segments list --json: %v", objs)
	}
	html := writeFile(t, "b.html", `<p>Hi {{.Name}}</p><a href="{{.UnsubscribeURL}}">Unsubscribe</a>`)
	mustRun("", "broadcasts", "create", "--name", "to pros", "--from", "news@rangecast.test", "--subject", "Hi", "--html", html, "--segment", "pros")
	wantErr("audience of 1 broadcast", "segments", "delete", "pros")
	if out := mustRun("", "segments", "delete", "club"); out != "deleted segment club (4 members; the contacts stay)\n" {
		t.Errorf("segments delete: %q", out)
	}
	wantErr("no segment named \"club\"", "segments", "delete", "club")
	mustRun("", "segments", "create", "tmp")
	if objs := jsonLines(t, mustRun("", "segments", "delete", "tmp", "--json")); len(objs) != 1 {
		t.Errorf("segments delete --json: %v", objs)
	}

	// send template list and delete.
	body := writeFile(t, "t.txt", "Hello {{.name}}\n")
	for _, name := range []string{"welcome", "reset", "invoice"} {
		mustRun("", "send", "template", "put", name, "--from", "no-reply@rangecast.test", "--subject", "S "+name, "--text", body)
	}
	out = mustRun("", "send", "template", "list", "--page-size", "2")
	if strings.Index(out, "invoice") < 0 || strings.Index(out, "invoice") > strings.Index(out, "reset") || strings.Index(out, "reset") > strings.Index(out, "welcome") {
		t.Errorf("send template list (by name, over two pages):\n%s", out)
	}
	if out := mustRun("", "send", "template", "delete", "reset"); out != "deleted template reset (version 1)\n" {
		t.Errorf("send template delete: %q", out)
	}
	wantErr("no template named \"reset\"", "send", "template", "delete", "reset")
	if objs := jsonLines(t, mustRun("", "send", "template", "list", "--json")); len(objs) != 2 {
		t.Errorf("send template list --json after delete: %v", objs)
	}
	if objs := jsonLines(t, mustRun("", "send", "template", "delete", "invoice", "--json")); len(objs) != 1 {
		t.Errorf("send template delete --json: %v", objs)
	}

	// contacts delete: erasure, by argument (any case) and by file.
	out = mustRun("", "contacts", "delete", "ZED.ERASE@example.ORG")
	if !strings.HasPrefix(out, "erased ZED.ERASE@example.ORG (contact ") || !strings.Contains(out, "stays suppressed") {
		t.Errorf("contacts delete: %q", out)
	}
	wantErr("no contact has the email", "contacts", "show", "zed.erase@example.org")
	wantErr("not an email address", "contacts", "delete", "zed")
	wantErr("U+200B", "contacts", "delete", "\u200bzed@example.org")
	// A BOM a spreadsheet wrote at the file's start is not part of an address.
	file := writeFile(t, "erase.csv", "\ufeffemail\n# requests of the week\nbob@example.org\n\nnever@example.org\n")
	objs := jsonLines(t, mustRun("", "contacts", "delete", "--file", file, "--json"))
	if len(objs) != 2 || objs[0]["email"] != "bob@example.org" || objs[0]["contactId"] == "" || objs[1]["contactId"] != "" {
		t.Errorf("contacts delete --file --json: %v", objs)
	}

	// Imported again, the erased addresses are suppressed and a broadcast
	// to everyone does not mail them.
	again := writeFile(t, "again.csv", "email,name\nzed.erase@example.org,Zed again\nBOB@example.org,Bob again\nnever@example.org,N\n")
	mustRun("", "contacts", "import", again)
	out = mustRun("", "contacts", "show", "zed.erase@example.org")
	if !strings.Contains(out, "receives no broadcasts: suppressed ("+store.ErasedReason) {
		t.Errorf("contacts show of an erased address imported again:\n%s", out)
	}
	id := strings.TrimSpace(mustRun("", "broadcasts", "create", "--name", "everyone", "--from", "news@rangecast.test", "--subject", "Hi", "--html", html))
	// Watching a draft nobody started would wait for ever: it says so.
	if out, err := run("", "broadcasts", "watch", id); err == nil || !strings.Contains(out+err.Error(), "draft and not scheduled") {
		t.Errorf("watch of a draft: %v\n%s", err, out)
	}
	if out := mustRun("", "broadcasts", "start", id); strings.Contains(out, "warning") {
		t.Errorf("start of a broadcast with an audience warned:\n%s", out)
	}
	testenv.Eventually(t, "the broadcast completes", time.Minute, func() bool {
		out, err := run("", "broadcasts", "status", id, "--json")
		return err == nil && strings.Contains(out, "BROADCAST_STATE_COMPLETED")
	})
	got := st.Capture.CountByRecipient()
	if got["ann@example.org"] != 1 || got["cat@example.org"] != 1 || len(got) != 2 {
		t.Errorf("the broadcast mailed %v; want ann and cat only (zed, bob and never were erased)", got)
	}

	// A broadcast to a segment nobody eligible is in says so at start.
	mustRun("", "segments", "create", "nobody")
	empty := strings.TrimSpace(mustRun("", "broadcasts", "create", "--name", "empty", "--from", "news@rangecast.test", "--subject", "Hi", "--html", html, "--segment", "nobody"))
	if out := mustRun("", "broadcasts", "start", empty); !strings.Contains(out, "warning: no member of segment nobody is eligible") ||
		!strings.Contains(out, "rangecast segments preview nobody") || !strings.Contains(out, empty) {
		t.Errorf("start of a broadcast with nobody eligible:\n%s", out)
	}
}

// TestWriteCommandsJSON: every write command takes --json and prints one
// JSON object saying what it did, on both stores.
func TestWriteCommandsJSON(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		pg   bool
	}{{"SQLite", false}, {"Postgres", true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			st := catalogStack(t, tc.pg)
			one := func(want string, args ...string) map[string]any {
				t.Helper()
				out, err := rangecast(t, "", append([]string{"--addr", st.GRPCAddr}, args...)...)
				if err != nil {
					t.Fatalf("rangecast %s: %v\n%s", strings.Join(args, " "), err, out)
				}
				objs := jsonLines(t, out)
				if len(objs) != 1 {
					t.Fatalf("rangecast %s printed %d JSON objects:\n%s", strings.Join(args, " "), len(objs), out)
				}
				if _, ok := objs[0][want]; !ok {
					t.Errorf("rangecast %s: no %q in %v", strings.Join(args, " "), want, objs[0])
				}
				return objs[0]
			}
			csv := writeFile(t, "c.csv", "email,name\nann@example.org,Ann\nbob@example.org,Bob\n")
			if m := one("imported", "contacts", "import", csv, "--json"); m["imported"] != float64(2) {
				t.Errorf("import --json: %v", m)
			}
			bad := writeFile(t, "bad.csv", "email,name\ncat@example.org,Cat\nnot-an-address,X\n")
			out, err := rangecast(t, "", "--addr", st.GRPCAddr, "contacts", "import", bad, "--json")
			var rej errRejected
			if objs := jsonLines(t, out); !errors.As(err, &rej) || len(objs) != 1 || objs[0]["imported"] != float64(1) || objs[0]["rejected"] != float64(1) ||
				!strings.Contains(fmt.Sprint(objs[0]["rejectedRows"]), "line 3") {
				t.Errorf("import --json with a bad row: %v, %v; want the counts, the row by line, and a non-zero exit", objs, err)
			}
			one("name", "segments", "create", "club", "--json")
			if m := one("changed", "segments", "add", "club", "ann@example.org", "--json"); m["changed"] != float64(1) {
				t.Errorf("segments add --json: %v", m)
			}
			one("changed", "segments", "remove", "club", "ann@example.org", "--json")
			if m := one("contact", "contacts", "suppress", "bob@example.org", "--reason", "asked", "--json"); m["contact"].(map[string]any)["suppressed"] != true {
				t.Errorf("suppress --json: %v", m)
			}
			if m := one("subscribed", "contacts", "unsubscribe", "ann@example.org", "--json"); m["subscribed"] != false {
				t.Errorf("unsubscribe --json: %v", m)
			}
			body := writeFile(t, "t.txt", "Hello\n")
			one("version", "send", "template", "put", "welcome", "--subject", "Hi", "--text", body, "--json")
			html := writeFile(t, "b.html", `<p>Hi</p><a href="{{.UnsubscribeURL}}">Unsubscribe</a>`)
			b := one("id", "broadcasts", "create", "--name", "n", "--from", "news@rangecast.test", "--subject", "Hi", "--html", html, "--json")
			id, _ := b["id"].(string)
			one("state", "broadcasts", "start", id, "--json")
			testenv.Eventually(t, "the broadcast's domain has a governor state", time.Minute, func() bool {
				out, err := rangecast(t, "", "--addr", st.GRPCAddr, "governor", "status")
				return err == nil && strings.Contains(out, "rangecast.test")
			})
			one("domain", "governor", "set-limits", "rangecast.test", "--rate", "50", "--burst", "100", "--json")
			// A rate lowered under a burst of minutes still lets the burst
			// go at once, and a domain nothing sends from is likely a typo:
			// both are said (testers).
			if out, err := rangecast(t, "", "--addr", st.GRPCAddr, "governor", "set-limits", "rangecast.test", "--burst", "5000"); err != nil || strings.Contains(out, "note:") {
				t.Errorf("set-limits --burst: %v\n%s", err, out)
			}
			if out, err := rangecast(t, "", "--addr", st.GRPCAddr, "governor", "set-limits", "rangecast.test", "--rate", "5"); err != nil ||
				!strings.Contains(out, "note: the burst is still 5,000, over a minute at 5 a second") || strings.Contains(out, "no broadcast sends") {
				t.Errorf("set-limits --rate under a large burst: %v\n%s", err, out)
			}
			if out, err := rangecast(t, "", "--addr", st.GRPCAddr, "governor", "set-limits", "rangecast.tset", "--rate", "5", "--burst", "10"); err != nil ||
				!strings.Contains(out, "note: no broadcast sends from rangecast.tset yet (sending domains: rangecast.test)") {
				t.Errorf("set-limits of a domain nothing sends from: %v\n%s", err, out)
			}
			one("resetAt", "governor", "reset-rate-limit", "default", "--json")
			// Nothing is held here: release says so, and fails.
			if out, err := rangecast(t, "", "--addr", st.GRPCAddr, "governor", "release", "rangecast.test", "gmail.com"); err == nil ||
				!strings.Contains(err.Error(), "google is not held for rangecast.test: nothing to lift") {
				t.Errorf("governor release of a provider not held: %v\n%s", err, out)
			}
		})
	}
}
