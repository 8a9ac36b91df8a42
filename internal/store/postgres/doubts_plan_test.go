package postgres_test

import (
	"strings"
	"testing"

	"github.com/rangecast/rangecast/internal/store/postgres"
)

// TestDoubtsReadOnlyDoubtfulRows: a completed broadcast's reason counts its
// unknown and sent-again-in-doubt messages (Store.Doubts) through the
// partial indexes of migration 019, on a ledger never analyzed and on an
// analyzed one, so the read costs the few such rows, not the broadcast's
// size (Counts at completion was a third of make bench's rows read per
// message).
func TestDoubtsReadOnlyDoubtfulRows(t *testing.T) {
	t.Parallel()
	s, b, _ := windowSetup(t, 0)
	ctx := t.Context()
	pool := s.Pool()
	// 60,000 rows of the broadcast: 5 unknown, 7 sent again in doubt.
	if _, err := pool.Exec(ctx, `
INSERT INTO broadcast_sends (broadcast_id, contact_id, email, status, message_id, claimed_at, updated_at, accepted, in_doubt)
SELECT $1, gen_random_uuid(), 'd' || i || '@example.org', CASE WHEN i <= 5 THEN 'unknown' ELSE 'sent' END,
       '<d' || i || '@example.org>', $2, $2, i > 5, i > 5 AND i <= 12
FROM generate_series(1, 60000) AS i`, [16]byte(b.ID), t0); err != nil {
		t.Fatal(err)
	}
	for _, analyzed := range []bool{false, true} {
		if analyzed {
			if _, err := pool.Exec(ctx, `ANALYZE broadcast_sends`); err != nil {
				t.Fatal(err)
			}
		}
		var plan string
		if err := pool.QueryRow(ctx, "EXPLAIN (FORMAT JSON) "+postgres.DoubtsSQL, [16]byte(b.ID)).Scan(&plan); err != nil {
			t.Fatal(err)
		}
		for _, index := range []string{"broadcast_sends_unknown", "broadcast_sends_in_doubt"} {
			if !strings.Contains(plan, `"Index Name": "`+index+`"`) {
				t.Errorf("Doubts (analyzed %t) does not read %s:\n%s", analyzed, index, plan)
			}
		}
		if strings.Contains(plan, "Seq Scan") {
			t.Errorf("Doubts (analyzed %t) scans the ledger:\n%s", analyzed, plan)
		}
		unknown, again, err := s.Doubts(ctx, b.ID)
		if err != nil || unknown != 5 || again != 7 {
			t.Errorf("Doubts = %d unknown, %d sent again in doubt, %v; want 5 and 7", unknown, again, err)
		}
	}
}
