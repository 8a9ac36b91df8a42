package postgres

import (
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/rangecast/rangecast/internal/store"
)

// TestTerminatedBackendIsUnavailable: a backend the server terminated
// (pg_terminate_backend, a shutdown), a server not yet accepting
// connections, one with no connection slot left, or a broken connection
// is unavailable, waited out by callers, not an internal error: a tester's
// pg_terminate_backend failed a pause and status calls with "Internal".
// A refused login or a missing database is not: waiting would not help.
func TestTerminatedBackendIsUnavailable(t *testing.T) {
	t.Parallel()
	for code, want := range map[string]bool{"57P01": true, "57P02": true, "57P03": true, "53300": true, "08006": true,
		"28P01": false, "3D000": false, "23505": false} {
		err := &pgconn.PgError{Severity: "FATAL", Code: code, Message: "terminating connection due to administrator command"}
		if got := errors.Is(mapErr("broadcast X", err), store.ErrUnavailable); got != want {
			t.Errorf("SQLSTATE %s: unavailable %v, want %v", code, got, want)
		}
	}
}
