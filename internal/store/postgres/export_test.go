package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/oklog/ulid/v2"

	"github.com/rangecast/rangecast/internal/store"
)

// Test-only access for package postgres_test: the tests there need testenv,
// which imports this package, so they cannot live in package postgres.

// RecordOutcomesSQL is the statement that writes a window's outcomes, and
// ForceKeyLookupsSQL the one run before it in its transaction.
const (
	RecordOutcomesSQL  = recordOutcomes
	ForceKeyLookupsSQL = forceKeyLookups
)

// ClaimSQL is the statement a window write claims with.
const ClaimSQL = claimQuery

// ReleaseSQL is the statement Release sends.
const ReleaseSQL = releaseClaims

// RecordOutcomesAndReputationSQL is the statement RecordAndClaim sends for
// the outcomes: recordOutcomes with the reputation delta; its arguments are
// OutcomeWriteArgs.
const RecordOutcomesAndReputationSQL = recordOutcomesAndReputation

// OutcomeWriteArgs are RecordOutcomesAndReputationSQL's arguments.
func OutcomeWriteArgs(broadcast ulid.ULID, owner string, outcomes []store.Outcome, now time.Time) []any {
	return append(outcomeArgs(broadcast, owner, outcomes, now), uid(broadcast))
}

// Probe is a statement queued after the batch RecordAndClaim sends, in the
// same round trip and so in its implicit transaction; its one row is scanned
// into a string.
type Probe struct {
	SQL  string
	Args []any
}

// RecordAndClaimProbed is RecordAndClaim's batch, built and read by the
// same code, sent on conn with probes queued after it. It returns the
// claimed contacts and the probes' results.
func RecordAndClaimProbed(ctx context.Context, conn *pgxpool.Conn, broadcast ulid.ULID, owner string, outcomes []store.Outcome, next []store.Claim, now time.Time, probes ...Probe) ([]ulid.ULID, []string, error) {
	w := newWindowWrite(broadcast, owner, outcomes, next, now)
	for _, p := range probes {
		w.batch.Queue(p.SQL, p.Args...)
	}
	results := conn.SendBatch(ctx, w.batch)
	claimed, err := w.read(results)
	var got []string
	for i := 0; err == nil && i < len(probes); i++ {
		var v string
		err = results.QueryRow().Scan(&v)
		got = append(got, v)
	}
	if cerr := results.Close(); err == nil {
		err = cerr
	}
	return claimed, got, mapErr("record outcomes and claim (probed)", err)
}

// ErasureHash is store.ErasureHash under the store's own key.
func (s *Store) ErasureHash(email string) string { return store.ErasureHash(s.erasureKey, email) }

// ErasureKey is the store's key for the erased hashes.
func (s *Store) ErasureKey() []byte { return s.erasureKey }

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
	ExactSQL       = exactQuery
	IndexOnlySQL   = indexOnly
	PlanDefaultSQL = planDefault
	// SamplePages is the table size (in pages) above which the audience is
	// counted and sampled rather than read whole.
	SamplePages int64 = samplePages
)

// PageSQL is EligiblePage's query, and PageInIDOrderSQL the settings it
// runs under.
var (
	PageSQL          = pageQuery
	LastSQL          = lastQuery
	PageInIDOrderSQL = pageInIDOrder
)

// CutsWithin is the accept-time cut of a sample to the audience's bounds.
var CutsWithin = cutsWithin

// OpenRowScansSQL is run before ClaimOwnersSQL and PendingSQL in their
// transactions.
const (
	OpenRowScansSQL = openRowScans
	ClaimOwnersSQL  = claimOwners
	PendingSQL      = pendingQuery
	DoubtsSQL       = doubtsQuery
)

// MarkRunning moves a draft straight to running, as AcceptBroadcast would
// without taking its audience: tests that write the ledger directly need a
// running broadcast (only one takes claims).
func (s *Store) MarkRunning(ctx context.Context, id ulid.ULID) error {
	_, err := s.pool.Exec(ctx, `UPDATE broadcasts SET state = 'running' WHERE id = $1`, uid(id))
	return err
}

// StateLockSQL takes the lock SetState holds while it moves a broadcast,
// with StateLockKeys' arguments.
const StateLockSQL = stateLock

// ClaimGateSQL takes the lock a claim holds (shared) while it reads the
// broadcast's state and inserts, with StateLockKeys' arguments.
const ClaimGateSQL = claimGate

func StateLockKeys(broadcast ulid.ULID) []any { return stateLockKeys(broadcast) }
