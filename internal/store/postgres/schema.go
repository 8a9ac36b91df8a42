package postgres

import (
	"context"
	"fmt"
	"net/url"
	"regexp"

	"github.com/jackc/pgx/v5"
)

var schemaName = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// SchemaName reports whether s is a schema name WithSchema takes.
func SchemaName(s string) bool { return schemaName.MatchString(s) }

// WithSchema creates schema (if missing) on the server at dbURL and returns a
// URL whose connections use it, so a dev or demo install keeps to itself.
func WithSchema(ctx context.Context, dbURL, schema string) (string, error) {
	if !schemaName.MatchString(schema) {
		return "", fmt.Errorf("schema name %q: use lowercase letters, digits and _", schema)
	}
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return "", fmt.Errorf("postgres: connect: %w", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+schema); err != nil {
		return "", fmt.Errorf("postgres: create schema %s: %w", schema, err)
	}
	u, err := url.Parse(dbURL)
	if err != nil {
		return "", fmt.Errorf("postgres: database url: %w", err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// DropSchema removes schema and everything in it.
func DropSchema(ctx context.Context, dbURL, schema string) error {
	if !schemaName.MatchString(schema) {
		return fmt.Errorf("schema name %q: use lowercase letters, digits and _", schema)
	}
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return fmt.Errorf("postgres: connect: %w", err)
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
	return err
}
