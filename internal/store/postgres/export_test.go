package postgres

import "github.com/jackc/pgx/v5/pgxpool"

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
