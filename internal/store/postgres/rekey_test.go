package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/rangecast/rangecast/internal/store"
	"github.com/rangecast/rangecast/internal/store/postgres"
	"github.com/rangecast/rangecast/internal/testenv"
)

// Migration 011 keys existing rows by lower(email) and its Go step gives
// non-ASCII ones address.Key: 'Ü' as lower() leaves it under the C locale
// and a decomposed 'é' become the keys a new import computes.
func TestRekeyEmails(t *testing.T) {
	t.Parallel()
	s := testenv.Postgres(t)
	ctx := context.Background()
	a, b := ulid.Make(), ulid.Make()
	for _, r := range []struct {
		id         ulid.ULID
		email, key string
	}{
		{a, "Ü@x.org", "Ü@x.org"}, // lower() under the C locale
		{b, "E\u0301mile@x.org", "e\u0301mile@x.org"},
	} {
		if _, err := s.Pool().Exec(ctx, `INSERT INTO contacts (id, email, email_key, name, attributes, subscribed, do_not_contact, suppressed, created_at, updated_at)
VALUES ($1, $2, $3, '', '{}', true, false, false, now(), now())`, [16]byte(r.id), r.email, r.key); err != nil {
			t.Fatal(err)
		}
	}
	tx, err := s.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := postgres.RekeyEmails(ctx, tx); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	ids, err := s.ImportContacts(ctx, []store.Contact{{ID: ulid.Make(), Email: "ü@x.org"}, {ID: ulid.Make(), Email: "\u00e9mile@x.org"}}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if ids[0] != a || ids[1] != b {
		t.Errorf("ids %v, want the old contacts %s and %s", ids, a, b)
	}
}
