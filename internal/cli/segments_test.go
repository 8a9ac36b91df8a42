package cli

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/rangecast/rangecast/internal/store"
)

// TestContactsAndSegmentsCommands drives the contact and segment commands
// against a real coordinator: what they print, and that a partial success
// (unknown contacts) exits non-zero.
func TestContactsAndSegmentsCommands(t *testing.T) {
	t.Parallel()
	addr, st := testServer(t)
	run := func(stdin string, args ...string) (string, error) {
		t.Helper()
		return rangecast(t, stdin, append([]string{"--addr", addr}, args...)...)
	}
	mustRun := func(stdin string, args ...string) string {
		t.Helper()
		out, err := run(stdin, args...)
		if err != nil {
			t.Fatalf("rangecast %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
	csv := writeFile(t, "c.csv", "email,name,plan\nann@example.org,Ann,pro\nbob@example.org,Bob,free\ncat@example.org,Cat,free\ndan@example.org,Dan,pro\n")
	mustRun("", "contacts", "import", csv)

	if out := mustRun("", "segments", "create", "club"); out != "created segment club\n" {
		t.Errorf("segments create: %q", out)
	}
	if _, err := run("", "segments", "create", "club"); err == nil || !strings.Contains(describe(err), "already exists") {
		t.Errorf("segments create twice: %v", err)
	}

	// Add from arguments and from a file (a CSV with a header; a comment,
	// a blank line, an unknown address).
	ann, err := st.ContactByEmail(context.Background(), "ann@example.org")
	if err != nil {
		t.Fatal(err)
	}
	if out := mustRun("", "segments", "add", "club", ann.ID.String()); out != "added 1 contact to club (0 already members)\n" {
		t.Errorf("segments add by id: %q", out)
	}
	// Repeated lines (bob in two spellings, ghost twice) are one contact
	// each, not counted again as already members or not found.
	file := writeFile(t, "members.csv", "email,name\n# the pro plan\nANN@example.org,Ann\n\nbob@example.org,Bob\nghost@example.org,Nobody\ncat@example.org\nBob@Example.org\nghost@example.org\n")
	out, err := run("", "segments", "add", "club", "--file", file)
	var nf errNotFound
	if !errors.As(err, &nf) || nf != 1 {
		t.Errorf("segments add with an unknown address: error %v, want 1 not found", err)
	}
	if want := "added 2 contacts to club (1 already members)\n  no such contact: ghost@example.org\n"; out != want {
		t.Errorf("segments add --file printed %q, want %q", out, want)
	}
	if out := mustRun("cat@example.org\n", "segments", "remove", "club", "--file", "-"); out != "removed 1 contact from club (0 not members)\n" {
		t.Errorf("segments remove from stdin: %q", out)
	}
	if _, err := run("", "segments", "add", "nope", "ann@example.org"); err == nil || !strings.Contains(describe(err), "not found") || !strings.Contains(describe(err), `"nope"`) {
		t.Errorf("add to an unknown segment: %v", err)
	}
	if _, err := run("", "segments", "add", "club"); err == nil || !strings.Contains(err.Error(), "name the contacts") {
		t.Errorf("add with no contacts: %v", err)
	}

	// club is ann and bob; suppress bob, unsubscribe dan (not a member).
	if out := mustRun("", "contacts", "suppress", "BOB@example.org", "--reason", "legal hold"); !strings.HasPrefix(out, "suppressed bob@example.org (") || !strings.HasSuffix(out, "): legal hold\n") {
		t.Errorf("contacts suppress: %q", out)
	}
	if _, err := run("", "contacts", "suppress", "bob@example.org"); err == nil || !strings.Contains(err.Error(), "reason") {
		t.Errorf("suppress without --reason: %v", err)
	}
	if out := mustRun("", "contacts", "unsubscribe", "dan@example.org"); out != "unsubscribed dan@example.org\n" {
		t.Errorf("contacts unsubscribe: %q", out)
	}
	if _, err := run("", "contacts", "unsubscribe", "nobody@example.org"); err == nil || !strings.Contains(describe(err), "not found") {
		t.Errorf("unsubscribe unknown: %v", err)
	}
	if out := mustRun("", "segments", "preview", "club"); out != "segment club: 2 contacts, 1 eligible to receive (1 unsubscribed, do-not-contact, suppressed or without an address)\n" {
		t.Errorf("segments preview club: %q", out)
	}
	var p struct{ Matched, Eligible string }
	if err := json.Unmarshal([]byte(mustRun("", "segments", "preview", "--json")), &p); err != nil || p.Matched != "4" || p.Eligible != "2" {
		t.Errorf("segments preview --json (everyone): %+v, %v; want 4 matched, 2 eligible", p, err)
	}

	// A ledger row, so that show has history: one claimed and failed.
	b, _, err := st.CreateBroadcast(context.Background(), store.Broadcast{
		ID: ulid.Make(), Name: "Spring", CreatedAt: time.Now(),
		Content: store.Content{FromAddress: "news@example.org", Subject: "Hi", HTML: "<p>Hi</p>"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.AcceptBroadcast(context.Background(), b.ID, time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Claim(context.Background(), b.ID, "w1/1", []store.Claim{{ContactID: ann.ID, Email: ann.Email, MessageID: "<m@example.org>"}}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := st.RecordOutcomes(context.Background(), b.ID, "w1/1", []store.Outcome{{ContactID: ann.ID, Status: store.SendFailed, Error: "550 5.1.1 no such user"}}, time.Now()); err != nil {
		t.Fatal(err)
	}
	out = mustRun("", "contacts", "show", "Ann@Example.org")
	for _, want := range []string{
		"id          " + ann.ID.String() + "\n",
		"status      receives broadcasts\n",
		"segments    club\n",
		`attributes  plan="pro"` + "\n",
		"BROADCAST", "REPLY",
		b.ID.String(), "Spring", "Failed", "550 5.1.1 no such user",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("contacts show does not print %q:\n%s", want, out)
		}
	}
	out = mustRun("", "contacts", "show", "bob@example.org")
	if !strings.Contains(out, "receives no broadcasts: suppressed (legal hold, ") || !strings.Contains(out, "no broadcast has sent to this contact") {
		t.Errorf("contacts show of a suppressed contact:\n%s", out)
	}
	var shown struct {
		Contact struct{ Email string }
		History []struct{ Status, Reply string }
	}
	if err := json.Unmarshal([]byte(mustRun("", "contacts", "show", ann.ID.String(), "--json")), &shown); err != nil {
		t.Fatal(err)
	}
	if shown.Contact.Email != "ann@example.org" || len(shown.History) != 1 || shown.History[0].Status != "SEND_STATUS_FAILED" {
		t.Errorf("contacts show --json: %+v", shown)
	}
	if _, err := run("", "contacts", "show", "nobody@example.org"); err == nil || !strings.Contains(describe(err), "not found") {
		t.Errorf("show unknown: %v", err)
	}
}

func TestReadRefs(t *testing.T) {
	got, err := readRefs(strings.NewReader("\ufeffEmail,name\n a@example.org , A\n# comment\n\n\"b@example.org\"\n01J9Z3K8M2T4V6X8Y0A2B4C6D8\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"a@example.org", "b@example.org", "01J9Z3K8M2T4V6X8Y0A2B4C6D8"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("readRefs = %q, want %q", got, want)
	}
	// Without a header the first line is a contact.
	got, _ = readRefs(strings.NewReader("a@example.org\n"))
	if len(got) != 1 {
		t.Errorf("first line without a header: %q", got)
	}
}
