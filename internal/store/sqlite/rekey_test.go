package sqlite

import (
	"context"
	"testing"

	"github.com/oklog/ulid/v2"

	"github.com/rangecast/rangecast/internal/store"
)

// Migration 011's Go step gives rows written with the old key
// (strings.ToLower, no NFC) address.Key, so an old decomposed 'é' and a new
// composed one are one contact; a row whose new key another holds keeps
// its own.
func TestRekeyEmails(t *testing.T) {
	s := open(t, ":memory:")
	ctx := context.Background()
	a, b, c := ulid.Make(), ulid.Make(), ulid.Make()
	for _, r := range []struct {
		id         ulid.ULID
		email, key string
	}{
		{a, "E\u0301mile@x.org", "e\u0301mile@x.org"},
		{b, "zoë@x.org", "zoë@x.org"}, // NFC already: unchanged
		{c, "Zoe\u0308@x.org", "zoe\u0308@x.org"},
	} {
		if _, err := s.w.ExecContext(ctx, `INSERT INTO contacts (id, email, email_key, name, attributes, subscribed, do_not_contact, suppressed, created_at, updated_at)
VALUES (?, ?, ?, '', '{}', 1, 0, 0, 0, 0)`, id(r.id), r.email, r.key); err != nil {
			t.Fatal(err)
		}
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := rekeyEmails(ctx, tx); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	ids, err := s.ImportContacts(ctx, []store.Contact{{ID: ulid.Make(), Email: "\u00e9mile@x.org"}, {ID: ulid.Make(), Email: "ZOË@x.org"}}, t0)
	if err != nil {
		t.Fatal(err)
	}
	if ids[0] != a {
		t.Errorf("composed émile: id %s, want the old decomposed contact %s", ids[0], a)
	}
	if ids[1] != b {
		t.Errorf("ZOË: id %s, want %s (the row that held the key first)", ids[1], b)
	}
}
