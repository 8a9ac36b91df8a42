package cli

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/rangecast/rangecast/internal/store"
)

// TestResumeFailRefused drives "broadcasts resume --fail-refused" against a
// real coordinator: refused on a running broadcast (nothing changed), and
// on a paused one it fails the recipient whose refusal halted it, leaves a
// row deferred for a passing reason, and resumes.
func TestResumeFailRefused(t *testing.T) {
	t.Parallel()
	addr, st := testServer(t)
	run := func(args ...string) (string, error) {
		t.Helper()
		return rangecast(t, "", append([]string{"--addr", addr}, args...)...)
	}
	if out, err := run("contacts", "import", writeFile(t, "c.csv", "email\nann@example.org\nbob@example.org\n")); err != nil {
		t.Fatalf("import: %v\n%s", err, out)
	}
	ctx := context.Background()
	ann, err := st.ContactByEmail(ctx, "ann@example.org")
	if err != nil {
		t.Fatal(err)
	}
	bob, err := st.ContactByEmail(ctx, "bob@example.org")
	if err != nil {
		t.Fatal(err)
	}
	b, _, err := st.CreateBroadcast(ctx, store.Broadcast{ID: ulid.Make(), Name: "Halted", CreatedAt: time.Now(),
		Content: store.Content{FromAddress: "news@example.org", Subject: "Hi", HTML: "<p>Hi</p>"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.AcceptBroadcast(ctx, b.ID, time.Now()); err != nil {
		t.Fatal(err)
	}
	claims := []store.Claim{{ContactID: ann.ID, Email: ann.Email, MessageID: "<a@example.org>"}, {ContactID: bob.ID, Email: bob.Email, MessageID: "<b@example.org>"}}
	if _, err := st.Claim(ctx, b.ID, "w1/1", claims, time.Now()); err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(time.Hour)
	if err := st.RecordOutcomes(ctx, b.ID, "w1/1", []store.Outcome{
		{ContactID: ann.ID, Status: store.SendDeferred, RetryAt: later, Error: store.HaltedPrefix + "smtp data: 550 5.7.1 message rejected by the recipient's filter"},
		{ContactID: bob.ID, Status: store.SendDeferred, RetryAt: later, Error: "smtp rcpt: 451 4.3.0 try again later"},
	}, time.Now()); err != nil {
		t.Fatal(err)
	}

	id := b.ID.String()
	if _, err := run("broadcasts", "resume", id, "--fail-refused"); err == nil || !strings.Contains(describe(err), "is running: --fail-refused applies to a paused broadcast only") {
		t.Errorf("resume --fail-refused of a running broadcast: %v", err)
	}
	if row, err := st.GetSend(ctx, b.ID, ann.ID); err != nil || row.Status != store.SendDeferred {
		t.Errorf("after a refused resume --fail-refused: %+v, %v; want deferred still", row, err)
	}
	if out, err := run("broadcasts", "pause", id); err != nil {
		t.Fatalf("pause: %v\n%s", err, out)
	}
	out, err := run("broadcasts", "resume", id, "--fail-refused")
	if err != nil || out != "failed 1 recipient whose refusal halted it\n"+id+" running\n" {
		t.Fatalf("resume --fail-refused printed %q, %v", out, err)
	}
	if row, err := st.GetSend(ctx, b.ID, ann.ID); err != nil || row.Status != store.SendFailed || !strings.Contains(row.Error, "550 5.7.1") {
		t.Errorf("the recipient whose refusal halted it: %+v, %v; want failed with its reply", row, err)
	}
	if row, err := st.GetSend(ctx, b.ID, bob.ID); err != nil || row.Status != store.SendDeferred {
		t.Errorf("the recipient deferred for a passing reason: %+v, %v; want deferred still", row, err)
	}
	// Paused with nothing of the kind: says so, and resumes.
	if out, err := run("broadcasts", "pause", id); err != nil {
		t.Fatalf("pause: %v\n%s", err, out)
	}
	if out, err := run("broadcasts", "resume", id, "--fail-refused"); err != nil || out != "no recipient's refusal had halted it: nothing failed\n"+id+" running\n" {
		t.Errorf("resume --fail-refused with nothing to fail printed %q, %v", out, err)
	}
	if _, err := run("broadcasts", "resume", "01J9Z3K8M2T4V6X8Y0A2B4C6D8", "--fail-refused"); err == nil || !strings.Contains(describe(err), "not found") {
		t.Errorf("resume --fail-refused of an unknown broadcast: %v", err)
	}
}

// TestUpdatePausedContent drives "broadcasts update" on a paused broadcast:
// its content changes (and the output says to resume), its name does not.
func TestUpdatePausedContent(t *testing.T) {
	t.Parallel()
	addr, st := testServer(t)
	run := func(args ...string) (string, error) {
		t.Helper()
		return rangecast(t, "", append([]string{"--addr", addr}, args...)...)
	}
	if out, err := run("contacts", "import", writeFile(t, "c.csv", "email\nann@example.org\n")); err != nil {
		t.Fatalf("import: %v\n%s", err, out)
	}
	ctx := context.Background()
	b, _, err := st.CreateBroadcast(ctx, store.Broadcast{ID: ulid.Make(), Name: "Typo", CreatedAt: time.Now(), NoUnsubscribeLink: true,
		Content: store.Content{FromAddress: "news@example.org", Subject: "Helo", HTML: "<p>Hi</p>"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.AcceptBroadcast(ctx, b.ID, time.Now()); err != nil {
		t.Fatal(err)
	}
	id := b.ID.String()
	if _, err := run("broadcasts", "update", id, "--subject", "Hello"); err == nil || !strings.Contains(describe(err), "pause it first") {
		t.Errorf("update of a running broadcast: %v; want refused, saying to pause it", err)
	}
	if out, err := run("broadcasts", "pause", id); err != nil {
		t.Fatalf("pause: %v\n%s", err, out)
	}
	out, err := run("broadcasts", "update", id, "--subject", "Hello")
	if want := "updated paused broadcast " + id + " (--subject); resume it to send the new content\n"; err != nil || out != want {
		t.Errorf("update of a paused broadcast printed %q, %v; want %q", out, err, want)
	}
	if _, err := run("broadcasts", "update", id, "--name", "Renamed"); err == nil || !strings.Contains(describe(err), "only its content") {
		t.Errorf("update --name of a paused broadcast: %v; want refused, naming what can change", err)
	}
	got, err := st.GetBroadcast(ctx, b.ID)
	if err != nil || got.Content.Subject != "Hello" || got.Name != "Typo" || got.ContentRevision != 1 || got.State != store.StatePaused {
		t.Errorf("after the updates: %q %q revision %d %s, %v; want the new subject, the old name, revision 1, paused",
			got.Content.Subject, got.Name, got.ContentRevision, got.State, err)
	}
}
