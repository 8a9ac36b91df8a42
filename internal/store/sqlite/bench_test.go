package sqlite

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/rangecast/rangecast/internal/store"
)

// BenchmarkClaimAndRecord walks a whole 20k audience the way one page worker
// does (pages of 200; per window of 16: Claim, then RecordOutcomes), on a
// new database file each iteration; only the walk is timed. Compare
// internal/store/postgres's benchmark of the same name (120k contacts).
//
//	go test -run '^$' -bench ClaimAndRecord -benchtime 3x ./internal/store/sqlite/
func BenchmarkClaimAndRecord(b *testing.B) {
	const contacts, pageSize, window = 20_000, 200, 16
	var walked int64
	var elapsed time.Duration
	b.StopTimer()
	for range b.N {
		s, err := Open(b.Context(), filepath.Join(b.TempDir(), "rangecast.db"))
		if err != nil {
			b.Fatal(err)
		}
		bc := seed(b, s, contacts)
		now := t0.Add(time.Hour)

		b.StartTimer()
		start := time.Now()
		n, err := walk(b, s, bc, pageSize, window, now)
		elapsed += time.Since(start)
		b.StopTimer()
		if err != nil {
			b.Fatal(err)
		}
		walked += n
		c, err := s.Counts(b.Context(), bc.ID)
		if err != nil {
			b.Fatal(err)
		}
		if n != contacts || c != (store.Counts{Sent: contacts}) {
			b.Fatalf("walked %d rows, counts %+v; want %d sent", n, c, contacts)
		}
		s.Close()
	}
	b.ReportMetric(float64(walked)/elapsed.Seconds(), "rows/s")
}

// walk runs the page loop over [MinID, MaxID] and returns the rows sent.
func walk(b *testing.B, s store.Store, bc store.Broadcast, pageSize, window int, now time.Time) (int64, error) {
	ctx := b.Context()
	var sent int64
	from := bc.MinID
	for {
		page, err := s.EligiblePage(ctx, bc, from, bc.MaxID, pageSize)
		if err != nil {
			return sent, err
		}
		for lo := 0; lo < len(page); lo += window {
			win := page[lo:min(lo+window, len(page))]
			claims := make([]store.Claim, len(win))
			for i, c := range win {
				claims[i] = store.Claim{ContactID: c.ID, Email: c.Email, MessageID: "<" + c.ID.String() + "@example.org>"}
			}
			claimed, err := s.Claim(ctx, bc.ID, claims, now)
			if err != nil {
				return sent, err
			}
			outcomes := make([]store.Outcome, len(claimed))
			for i, id := range claimed {
				outcomes[i] = store.Outcome{ContactID: id, Status: store.SendSent}
			}
			if err := s.RecordOutcomes(ctx, bc.ID, outcomes, now); err != nil {
				return sent, err
			}
			sent += int64(len(outcomes))
		}
		if len(page) < pageSize {
			return sent, nil
		}
		last := page[len(page)-1].ID
		if last == bc.MaxID {
			return sent, nil
		}
		from = next(last)
	}
}

// next returns the id right after id.
func next(id ulid.ULID) ulid.ULID {
	for i := len(id) - 1; i >= 0; i-- {
		id[i]++
		if id[i] != 0 {
			break
		}
	}
	return id
}
