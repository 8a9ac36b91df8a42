package cli

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/rangecast/rangecast/internal/store"
)

// TestUnsuppressCommand lifts a suppression through a real coordinator:
// a hard bounce recorded against a contact (as a relay that answers "User
// unknown" to everyone leaves it) is lifted with a reason, the contact is
// eligible again, and what cannot be lifted says why: no reason, not
// suppressed, an erased address, an unknown contact.
func TestUnsuppressCommand(t *testing.T) {
	t.Parallel()
	addr, st := testServer(t)
	run := func(args ...string) (string, error) {
		t.Helper()
		return rangecast(t, "", append([]string{"--addr", addr}, args...)...)
	}
	mustRun := func(args ...string) string {
		t.Helper()
		out, err := run(args...)
		if err != nil {
			t.Fatalf("rangecast %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
	mustRun("contacts", "import", writeFile(t, "c.csv", "email\nann@example.org\nbob@example.org\n"))
	ctx := context.Background()
	ann, err := st.ContactByEmail(ctx, "ann@example.org")
	if err != nil {
		t.Fatal(err)
	}
	bounce := store.HardBouncePrefix + "smtp rcpt: 550 5.1.1 <ann@example.org>: User unknown in local recipient table"
	if _, err := st.Suppress(ctx, ann.ID, bounce, time.Now()); err != nil {
		t.Fatal(err)
	}

	if _, err := run("contacts", "unsuppress", "ann@example.org"); err == nil || !strings.Contains(err.Error(), "reason") {
		t.Errorf("unsuppress without --reason: %v", err)
	}
	out := mustRun("contacts", "unsuppress", "ANN@example.org", "--reason", "the relay took example.org for its own on Dec 6")
	if !strings.HasPrefix(out, "lifted the suppression of ann@example.org ("+ann.ID.String()+"), which was: "+bounce) || strings.Contains(out, "still receives no") {
		t.Errorf("contacts unsuppress printed %q", out)
	}
	if d, err := st.GetContact(ctx, ann.ID); err != nil || d.Suppressed || !d.Eligible {
		t.Errorf("after unsuppress: %+v, %v; want eligible again", d, err)
	}
	if _, err := run("contacts", "unsuppress", "ann@example.org", "--reason", "again"); err == nil || !strings.Contains(describe(err), "is not suppressed") {
		t.Errorf("unsuppress of a contact not suppressed: %v", err)
	}
	if _, err := run("contacts", "unsuppress", "nobody@example.org", "--reason", "x"); err == nil || !strings.Contains(describe(err), "not found") {
		t.Errorf("unsuppress of an unknown contact: %v", err)
	}
	if _, err := run("contacts", "unsuppress", "not-a-ulid", "--reason", "x"); err == nil || !strings.Contains(describe(err), "neither an email address") {
		t.Errorf("unsuppress of something neither an address nor an id: %v", err)
	}

	// An erased address imported again stays suppressed for good, also
	// once an operator's suppress has replaced its reason.
	mustRun("contacts", "delete", "bob@example.org")
	mustRun("contacts", "import", writeFile(t, "again.csv", "email\nbob@example.org\n"))
	mustRun("contacts", "suppress", "bob@example.org", "--reason", "op")
	_, err = run("contacts", "unsuppress", "bob@example.org", "--reason", "they asked to be back")
	if err == nil || !strings.Contains(describe(err), "erased before") || !strings.Contains(describe(err), "not possible now") {
		t.Errorf("unsuppress of an erased address: %v", err)
	}
	if bob, err := st.ContactByEmail(ctx, "bob@example.org"); err != nil || !bob.Suppressed {
		t.Errorf("an erased address after unsuppress: %+v, %v; want suppressed still", bob, err)
	}
}
