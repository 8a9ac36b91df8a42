package postgres_test

import (
	"testing"

	"github.com/rangecast/rangecast/internal/store"
	"github.com/rangecast/rangecast/internal/store/postgres"
	"github.com/rangecast/rangecast/internal/store/storetest"
	"github.com/rangecast/rangecast/internal/testenv"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return testenv.Postgres(t) })
}

// TestCustomPlans: every connection plans each statement for its
// arguments; a generic plan cached while the ledger was empty would scan it
// for every message once it is not (see Open).
func TestCustomPlans(t *testing.T) {
	s := testenv.Postgres(t)
	var mode string
	if err := s.Pool().QueryRow(t.Context(), `SHOW plan_cache_mode`).Scan(&mode); err != nil {
		t.Fatal(err)
	}
	if mode != "force_custom_plan" {
		t.Fatalf("plan_cache_mode = %q, want force_custom_plan", mode)
	}
}

// Upgrading to migration 008 mid-broadcast backfills its sums (020 adds a
// column to its tables, so it is applied again too).
func TestReputationBackfill(t *testing.T) {
	s := testenv.Postgres(t)
	storetest.ReputationBackfill(t, s, func(t *testing.T) {
		ctx := t.Context()
		if _, err := s.Pool().Exec(ctx, `
DROP TABLE broadcast_reputation, broadcast_reputation_deltas;
DELETE FROM schema_migrations WHERE version IN (8, 20)`); err != nil {
			t.Fatal(err)
		}
		if err := postgres.Migrate(ctx, s.Pool()); err != nil {
			t.Fatal(err)
		}
	})
}
