package sqlite

import (
	"context"
	"fmt"
	"strings"
)

// SearchText is storetest.TextSearcher: every column of every table, read
// from sqlite_schema and pragma_table_info, as text (a BLOB as its bytes),
// searched case-insensitively.
func (s *Store) SearchText(ctx context.Context, needle string) ([]string, error) {
	rows, err := s.r.QueryContext(ctx, `
SELECT m.name, p.name FROM sqlite_schema m, pragma_table_info(m.name) p
WHERE m.type = 'table' AND m.name NOT LIKE 'sqlite_%' ORDER BY m.name, p.cid`)
	if err != nil {
		return nil, err
	}
	type col struct{ table, column string }
	var cols []col
	for rows.Next() {
		var c col
		if err := rows.Scan(&c.table, &c.column); err != nil {
			rows.Close()
			return nil, err
		}
		cols = append(cols, c)
	}
	rows.Close()
	if len(cols) == 0 {
		return nil, fmt.Errorf("no columns in schema")
	}
	quote := func(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }
	var hits []string
	for _, c := range cols {
		var n int64
		q := `SELECT count(*) FROM ` + quote(c.table) + ` WHERE instr(lower(CAST(` + quote(c.column) + ` AS TEXT)), lower(?)) > 0`
		if err := s.r.QueryRowContext(ctx, q, needle).Scan(&n); err != nil {
			return nil, fmt.Errorf("%s.%s: %w", c.table, c.column, err)
		}
		if n > 0 {
			hits = append(hits, c.table+"."+c.column)
		}
	}
	return hits, nil
}
