package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Test-only access for package postgres_test: the tests there need testenv,
// which imports this package, so they cannot live in package postgres.

// RecordOutcomesSQL is the statement that writes a window's outcomes, and
// ForceKeyLookupsSQL the one run before it in its transaction.
const (
	RecordOutcomesSQL  = recordOutcomes
	ForceKeyLookupsSQL = forceKeyLookups
)

// ReleaseSQL is the statement Release sends.
const ReleaseSQL = releaseClaims

// Pool returns the store's connection pool.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// RekeyEmails is migration 011's Go step.
var RekeyEmails = rekeyEmails

// SearchText is storetest.TextSearcher: every column of every table of the
// store's schema, read from the catalog, cast to text (bytea as its
// bytes), searched case-insensitively.
func (s *Store) SearchText(ctx context.Context, needle string) ([]string, error) {
	rows, err := s.pool.Query(ctx, `
SELECT c.table_name, c.column_name, c.data_type
FROM information_schema.columns c JOIN information_schema.tables t USING (table_schema, table_name)
WHERE c.table_schema = current_schema() AND t.table_type = 'BASE TABLE'
ORDER BY c.table_name, c.ordinal_position`)
	if err != nil {
		return nil, err
	}
	type col struct{ table, column, typ string }
	var cols []col
	var c col
	if _, err := pgx.ForEachRow(rows, []any{&c.table, &c.column, &c.typ}, func() error {
		cols = append(cols, c)
		return nil
	}); err != nil {
		return nil, err
	}
	if len(cols) == 0 {
		return nil, fmt.Errorf("no columns in schema")
	}
	var hits []string
	for _, c := range cols {
		expr := pgx.Identifier{c.column}.Sanitize() + "::text"
		if c.typ == "bytea" {
			expr = "encode(" + pgx.Identifier{c.column}.Sanitize() + ", 'escape')"
		}
		var n int64
		q := `SELECT count(*) FROM ` + pgx.Identifier{c.table}.Sanitize() + ` WHERE strpos(lower(` + expr + `), lower($1)) > 0`
		if err := s.pool.QueryRow(ctx, q, needle).Scan(&n); err != nil {
			return nil, fmt.Errorf("%s.%s: %w", c.table, c.column, err)
		}
		if n > 0 {
			hits = append(hits, c.table+"."+c.column)
		}
	}
	return hits, nil
}

// SnapshotSQL is the accept-time audience query.
var SnapshotSQL = snapshotQuery

// ExactSQL is the query that reads every k-th eligible id, and IndexOnlySQL
// the setting the accept transaction runs it under.
var (
	ExactSQL     = exactQuery
	IndexOnlySQL = indexOnly
)

// PageSQL is EligiblePage's query, and PageInIDOrderSQL the settings it
// runs under.
var (
	PageSQL          = pageQuery
	PageInIDOrderSQL = pageInIDOrder
)
