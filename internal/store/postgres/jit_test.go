package postgres_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/rangecast/rangecast/internal/store/postgres"
	"github.com/rangecast/rangecast/internal/testenv"
)

// TestWindowStatementsNeverJIT: the statements a page runs per window and
// per page are planned once, generically, and a generic plan's cost is an
// estimate without its parameters' values; on a large ledger it passed
// jit_above_cost, and compiling the outcome write on every run was most of
// Postgres' CPU per message at 1M (make bench: 637 µs). With the JIT
// thresholds at 0 (as that estimate crossed them) and JIT on in the
// session (a url may set it), the window statements still plan without
// JIT; the same statements without their settings are JIT compiled, so
// the check can fail.
func TestWindowStatementsNeverJIT(t *testing.T) {
	t.Parallel()
	s := testenv.Postgres(t)
	ctx := t.Context()
	// pg_jit_available() is also false where jit is off, as the store's
	// sessions have it (Open): ask with it on.
	tx, err := s.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var available bool
	if _, err = tx.Exec(ctx, `SET LOCAL jit = on`); err == nil {
		err = tx.QueryRow(ctx, `SELECT pg_jit_available()`).Scan(&available)
	}
	tx.Rollback(ctx) //nolint:errcheck
	if err != nil {
		t.Fatal(err)
	}
	if !available {
		t.Skip("this Postgres has no JIT provider (pg_jit_available() is false): nothing can be compiled")
	}
	var jit string
	if err := s.Pool().QueryRow(ctx, `SHOW jit`).Scan(&jit); err != nil || jit != "off" {
		t.Errorf("a store session has jit = %q (%v), want off by default (Open)", jit, err)
	}
	bid := "0190f1e2a3b4c5d6e7f8091a2b3c4d5e"
	at := time.Date(2031, time.March, 14, 9, 0, 0, 0, time.UTC).Format(time.RFC3339)
	outcomeArgs := fmt.Sprintf(`'w1/1', '%s', ARRAY['%s']::uuid[], ARRAY['%032x']::uuid[], ARRAY['sent'], ARRAY[''], ARRAY[NULL]::timestamptz[], ARRAY[0], ARRAY[false]`, at, bid, 0x2a)
	for _, st := range []struct {
		name, pre, params, sql, args string
	}{
		{"claim", postgres.ForceKeyLookupsSQL, "uuid, uuid[], text[], text[], timestamptz, text", postgres.ClaimSQL,
			fmt.Sprintf(`'%s', ARRAY['%032x']::uuid[], ARRAY['a@example.org'], ARRAY['<a@example.org>'], '%s', 'w1/1'`, bid, 0x2a, at)},
		{"outcomes UPDATE", postgres.ForceKeyLookupsSQL, "text, timestamptz, uuid[], uuid[], text[], text[], timestamptz[], integer[], boolean[]",
			postgres.RecordOutcomesSQL, outcomeArgs},
		{"outcomes UPDATE with reputation", postgres.ForceKeyLookupsSQL, "text, timestamptz, uuid[], uuid[], text[], text[], timestamptz[], integer[], boolean[], uuid",
			postgres.RecordOutcomesAndReputationSQL, outcomeArgs + fmt.Sprintf(`, '%s'`, bid)},
		{"release DELETE", postgres.ForceKeyLookupsSQL, "text, uuid[], uuid[]", postgres.ReleaseSQL,
			fmt.Sprintf(`'w1/1', ARRAY['%s']::uuid[], ARRAY['%032x']::uuid[]`, bid, 0x2a)},
		{"eligible page", postgres.PageInIDOrderSQL, "uuid, uuid, integer", postgres.PageSQL(0),
			fmt.Sprintf(`'%032x', '%032x', 200`, 0, 0xff)},
		{"eligible page of a segment", postgres.PageInIDOrderSQL, "uuid, uuid, integer, bigint", postgres.PageSQL(1),
			fmt.Sprintf(`'%032x', '%032x', 200, 1`, 0, 0xff)},
		{"last eligible contact", postgres.PageInIDOrderSQL, "uuid", postgres.LastSQL(0), fmt.Sprintf(`'%032x'`, 0xff)},
	} {
		if !jitPlanned(t, s, "", st.params, st.sql, st.args) {
			t.Errorf("%s without its settings: planned without JIT at jit_above_cost 0; the check below proves nothing", st.name)
		}
		if jitPlanned(t, s, st.pre, st.params, st.sql, st.args) {
			t.Errorf("%s: its generic plan is JIT compiled when the estimate passes jit_above_cost; the settings run before it must turn JIT off", st.name)
		}
	}
}

// jitPlanned reports whether sql's generic plan, after pre in the same
// transaction, would be JIT compiled, with JIT on and its thresholds at 0.
func jitPlanned(t *testing.T, s *postgres.Store, pre, params, sql, args string) bool {
	t.Helper()
	raw := explainJSON(t, s, []string{`SET LOCAL jit = on`, `SET LOCAL jit_above_cost = 0`, `SET LOCAL plan_cache_mode = force_generic_plan`}, pre, params, sql, args)
	var out []struct {
		JIT *json.RawMessage `json:"JIT"`
	}
	if err := json.Unmarshal([]byte(raw), &out); err != nil || len(out) != 1 {
		t.Fatalf("EXPLAIN output %s: %v", raw, err)
	}
	return out[0].JIT != nil
}
