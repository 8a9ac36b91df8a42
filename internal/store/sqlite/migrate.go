package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"

	"github.com/rangecast/rangecast/internal/address"
	"github.com/rangecast/rangecast/internal/store"
)

//go:embed migrations/*.sql
var migrations embed.FS

// migrate applies every embedded migration not yet applied, in version
// order, each in its own transaction on db (the write pool, whose
// transactions begin IMMEDIATE). The check for an applied version runs inside
// that transaction, under the write lock, so two processes opening the same
// new file at once apply each migration once.
func migrate(ctx context.Context, db *sql.DB) error {
	names, err := fs.Glob(migrations, "migrations/*.sql")
	if err != nil {
		return err
	}
	sort.Strings(names)
	for _, name := range names {
		base := strings.TrimPrefix(name, "migrations/")
		version, err := strconv.Atoi(strings.SplitN(base, "_", 2)[0])
		if err != nil {
			return fmt.Errorf("sqlite: migrate: bad migration name %q", base)
		}
		body, err := migrations.ReadFile(name)
		if err != nil {
			return err
		}
		if err := migrateOne(ctx, db, version, string(body), goSteps[version]); err != nil {
			return fmt.Errorf("sqlite: migrate %s: %w", base, err)
		}
	}
	return nil
}

// goSteps run after a version's SQL, in its transaction, for what SQL
// cannot compute.
var goSteps = map[int]func(context.Context, *sql.Tx) error{
	11: rekeyEmails,
	16: makeErasureKey,
}

// makeErasureKey stores the key of store.ErasureHash, once.
func makeErasureKey(ctx context.Context, tx *sql.Tx) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO erasure_key (id, key) VALUES (1, ?) ON CONFLICT (id) DO NOTHING`, store.NewErasureKey())
	return err
}

// rekeyEmails recomputes the email keys of addresses that are not ASCII
// with address.Key (ASCII ones fold the same either way). A row whose new
// key another row already holds keeps its old key: the two contacts stay
// two, as they were, rather than fail the migration.
func rekeyEmails(ctx context.Context, tx *sql.Tx) error {
	for _, q := range []struct{ sel, upd string }{
		{`SELECT id, email, email_key FROM contacts WHERE email GLOB '*[^ -~]*'`,
			`UPDATE contacts SET email_key = ?2 WHERE id = ?1 AND NOT EXISTS (SELECT 1 FROM contacts WHERE email_key = ?2)`},
		{`SELECT id, email, email_key FROM outbound_receipts WHERE email GLOB '*[^ -~]*'`,
			`UPDATE outbound_receipts AS r SET email_key = ?2 WHERE id = ?1 AND NOT EXISTS
			   (SELECT 1 FROM outbound_receipts o WHERE o.kind = r.kind AND o.key = r.key AND o.email_key = ?2)`},
	} {
		type row struct {
			id         []byte
			email, key string
		}
		rows, err := tx.QueryContext(ctx, q.sel)
		if err != nil {
			return err
		}
		var todo []row
		for rows.Next() {
			var r row
			if err := rows.Scan(&r.id, &r.email, &r.key); err != nil {
				rows.Close()
				return err
			}
			if k := address.Key(r.email); k != r.key {
				r.key = k
				todo = append(todo, r)
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		for _, r := range todo {
			if _, err := tx.ExecContext(ctx, q.upd, r.id, r.key); err != nil {
				return err
			}
		}
	}
	return nil
}

func migrateOne(ctx context.Context, db *sql.DB, version int, body string, step func(context.Context, *sql.Tx) error) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck
	if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY) STRICT`); err != nil {
		return err
	}
	var applied bool
	if err := tx.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM schema_migrations WHERE version = ?)`, version).Scan(&applied); err != nil {
		return err
	}
	if applied {
		return nil
	}
	if _, err := tx.ExecContext(ctx, body); err != nil {
		return err
	}
	if step != nil {
		if err := step(ctx, tx); err != nil {
			return err
		}
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (version) VALUES (?)`, version); err != nil {
		return err
	}
	return tx.Commit()
}
