package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/oklog/ulid/v2"

	"github.com/rangecast/rangecast/internal/store"
	"github.com/rangecast/rangecast/internal/store/postgres"
)

// TestImportRacingAnErasureIsErasedOrSuppressed: an erasure has recorded an
// address's hash and looked for its contact (none yet), and has not
// committed, when an import of that address runs. The import must wait for
// the erasure and then see the hash: its contact is suppressed as erased,
// never left in clear text and mailable. Before, the import's statement read
// the erased addresses without the uncommitted hash, and its contact,
// committed after the erasure's delete had looked, stayed unsuppressed
// (tester: erase and import of one address at once).
func TestImportRacingAnErasureIsErasedOrSuppressed(t *testing.T) {
	t.Parallel()
	s, _, _ := windowSetup(t, 0)
	ctx := t.Context()
	const email = "racing@example.org"

	// The erasure's transaction, held open after its delete found nothing.
	erase, pid := heldTransaction(t, s)
	if _, err := erase.Exec(ctx, `INSERT INTO erased_addresses (hash, erased_at) VALUES ($1, $2)`, s.ErasureHash(email), t0); err != nil {
		t.Fatal(err)
	}
	if _, err := erase.Exec(ctx, `DELETE FROM contacts WHERE email_key = $1`, email); err != nil {
		t.Fatal(err)
	}

	type result struct {
		ids []ulid.ULID
		err error
	}
	done := make(chan result, 1)
	go func() {
		ids, err := s.ImportContacts(ctx, []store.Contact{{ID: ulid.MustNew(ulid.Timestamp(t0), nil), Email: email, Subscribed: true}}, t0)
		done <- result{ids, err}
	}()
	// The import either waits for the erasure (as it must) or, without the
	// lock, commits at once.
	var early *result
	for deadline := time.Now().Add(10 * time.Second); early == nil; {
		if blocking(t, s, pid) {
			break
		}
		select {
		case r := <-done:
			early = &r
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("the import neither waited for the erasure nor returned in 10 s")
		}
	}
	if early != nil {
		t.Errorf("the import committed while the erasure was open (%v); want it to wait for the erasure", early.err)
	}
	if err := erase.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	r := early
	if r == nil {
		got := <-done
		r = &got
	}
	if r.err != nil {
		t.Fatalf("ImportContacts = %v", r.err)
	}
	if len(r.ids) != 1 || r.ids[0] == (ulid.ULID{}) {
		t.Fatalf("ImportContacts ids = %v; want the contact written", r.ids)
	}
	d, err := s.GetContact(ctx, r.ids[0])
	if err != nil {
		t.Fatal(err)
	}
	if !d.Suppressed || d.SuppressedReason != store.ErasedReason {
		t.Errorf("contact imported during the erasure: suppressed %v (%q); want suppressed as erased (%q)", d.Suppressed, d.SuppressedReason, store.ErasedReason)
	}
}

// TestReceiptRepeatedDuringAnErasureIsAReplay: a transactional request
// repeated under its key while the erasure of its recipient is rewriting
// the receipt must wait for the erasure and then find the erased receipt:
// a replay, not a new message. Before, the repeat's insert waited on the
// unique index, found the key free once the erasure committed, and the
// message was sent a second time (review); the next erasure of the address
// then failed for good on the twin's hashed keys.
func TestReceiptRepeatedDuringAnErasureIsAReplay(t *testing.T) {
	t.Parallel()
	s, _, _ := windowSetup(t, 0)
	ctx := t.Context()
	const email = "reset@example.org"
	request := func() store.Receipt {
		return store.Receipt{ID: ulid.Make(), Kind: "transactional", Key: "reset:1", Email: email, PayloadHash: "h", Payload: []byte(`{}`),
			MessageID: "m@example.org", NextAttemptAt: t0, CreatedAt: t0}
	}
	first, created, err := s.CreateReceipt(ctx, request())
	if err != nil || !created {
		t.Fatalf("CreateReceipt = %v, created %v", err, created)
	}

	// The erasure's transaction, held open after it rewrote the receipt.
	erase, pid := heldTransaction(t, s)
	if _, err := erase.Exec(ctx, `LOCK TABLE erased_addresses IN ROW EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	key := s.ErasureKey()
	if _, err := erase.Exec(ctx, `UPDATE outbound_receipts SET email = $2, email_key = $3, key = $4, payload = ''::bytea, payload_hash = $5 WHERE id = $1`,
		first.ID[:], store.NewErasedToken(), store.ErasedReceiptKey(key, email), store.ErasedIdempotencyKey(key, "reset:1"), store.ErasedPayloadHash(key, "h")); err != nil {
		t.Fatal(err)
	}

	type result struct {
		r       store.Receipt
		created bool
		err     error
	}
	done := make(chan result, 1)
	go func() {
		r, created, err := s.CreateReceipt(ctx, request())
		done <- result{r, created, err}
	}()
	for deadline := time.Now().Add(10 * time.Second); !blocking(t, s, pid); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the repeat did not wait for the erasure in 10 s")
		}
	}
	if err := erase.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	got := <-done
	if got.err != nil || got.created || got.r.ID != first.ID || got.r.PayloadHash != "h" {
		t.Fatalf("repeat during the erasure: created %v, id %s (first %s), payload hash %q, err %v; want a replay of the first", got.created, got.r.ID, first.ID, got.r.PayloadHash, got.err)
	}
	if _, err := s.Erase(ctx, []string{email}, t0.Add(time.Minute)); err != nil {
		t.Fatalf("erasing the address again: %v", err)
	}
}

// heldTransaction begins a transaction a test holds open (rolled back at
// its end) and returns it with its backend's pid, for blocking.
func heldTransaction(t *testing.T, s *postgres.Store) (pgx.Tx, int32) {
	t.Helper()
	ctx := t.Context()
	tx, err := s.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tx.Rollback(context.Background()) }) //nolint:errcheck
	var pid int32
	if err := tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	return tx, pid
}
