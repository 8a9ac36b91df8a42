package postgres

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/rangecast/rangecast/internal/address"
	"github.com/rangecast/rangecast/internal/store"
)

//go:embed migrations/*.sql
var migrations embed.FS

// migrationLock is a fixed advisory lock key so that replicas starting at the
// same time migrate one after another.
const migrationLock = 0x72616e6765 // "range"

// Migrate applies every embedded migration not yet applied, each in its own
// transaction, in version order.
func Migrate(ctx context.Context, pool *pgxpool.Pool) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, migrationLock); err != nil {
		return fmt.Errorf("migrate: lock: %w", err)
	}
	defer conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, migrationLock) //nolint:errcheck

	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (version integer PRIMARY KEY)`); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	names, err := fs.Glob(migrations, "migrations/*.sql")
	if err != nil {
		return err
	}
	sort.Strings(names)
	for _, name := range names {
		base := strings.TrimPrefix(name, "migrations/")
		version, err := strconv.Atoi(strings.SplitN(base, "_", 2)[0])
		if err != nil {
			return fmt.Errorf("migrate: bad migration name %q", base)
		}
		var applied bool
		if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM schema_migrations WHERE version = $1)`, version).Scan(&applied); err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
		if applied {
			continue
		}
		sql, err := migrations.ReadFile(name)
		if err != nil {
			return err
		}
		tx, err := conn.Begin(ctx)
		if err != nil {
			return fmt.Errorf("migrate %s: %w", base, err)
		}
		if _, err := tx.Exec(ctx, string(sql)); err != nil {
			tx.Rollback(ctx) //nolint:errcheck
			return fmt.Errorf("migrate %s: %w", base, err)
		}
		if step := goSteps[version]; step != nil {
			if err := step(ctx, tx); err != nil {
				tx.Rollback(ctx) //nolint:errcheck
				return fmt.Errorf("migrate %s: %w", base, err)
			}
		}
		if _, err := tx.Exec(ctx, `INSERT INTO schema_migrations (version) VALUES ($1)`, version); err != nil {
			tx.Rollback(ctx) //nolint:errcheck
			return fmt.Errorf("migrate %s: %w", base, err)
		}
		if err := tx.Commit(ctx); err != nil {
			return fmt.Errorf("migrate %s: %w", base, err)
		}
	}
	return nil
}

// goSteps run after a version's SQL, in its transaction, for what SQL
// cannot compute.
var goSteps = map[int]func(context.Context, pgx.Tx) error{
	11: rekeyEmails,
	16: makeErasureKey,
}

// makeErasureKey stores the key of store.ErasureHash, once.
func makeErasureKey(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, `INSERT INTO erasure_key (id, key) VALUES (1, $1) ON CONFLICT (id) DO NOTHING`, store.NewErasureKey())
	return err
}

// rekeyEmails recomputes the email keys of addresses that are not ASCII
// with address.Key: for them lower() under the C locale is not the key
// (ASCII ones fold the same either way). A row whose new key another row
// already holds keeps its old key: the two contacts stay two, as they
// were, rather than fail the migration.
func rekeyEmails(ctx context.Context, tx pgx.Tx) error {
	for _, q := range []struct{ sel, upd string }{
		{`SELECT id, email, email_key FROM contacts WHERE email ~ '[^\x01-\x7e]'`,
			`UPDATE contacts SET email_key = $2 WHERE id = $1 AND NOT EXISTS (SELECT 1 FROM contacts WHERE email_key = $2)`},
		{`SELECT id, email, email_key FROM outbound_receipts WHERE email ~ '[^\x01-\x7e]'`,
			`UPDATE outbound_receipts r SET email_key = $2 WHERE id = $1 AND NOT EXISTS
			   (SELECT 1 FROM outbound_receipts o WHERE o.kind = r.kind AND o.key = r.key AND o.email_key = $2)`},
	} {
		rows, err := tx.Query(ctx, q.sel)
		if err != nil {
			return err
		}
		type row struct {
			id  [16]byte
			key string
		}
		var todo []row
		var r row
		var email string
		if _, err := pgx.ForEachRow(rows, []any{&r.id, &email, &r.key}, func() error {
			if k := address.Key(email); k != r.key {
				todo = append(todo, row{r.id, k})
			}
			return nil
		}); err != nil {
			return err
		}
		for _, r := range todo {
			if _, err := tx.Exec(ctx, q.upd, r.id, r.key); err != nil {
				return err
			}
		}
	}
	return nil
}
