package postgres_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/rangecast/rangecast/internal/store"
	"github.com/rangecast/rangecast/internal/testenv"
)

// BenchmarkClaimAndRecord walks a whole 120k audience the way one page
// worker does (pages of 200; per window of 16: Claim, then RecordOutcomes),
// on a freshly created broadcast_sends table with no ANALYZE beyond the one
// AcceptBroadcast does while it is still empty. Each iteration gets its own
// schema, so every walk starts on a fresh table; only the walk is timed.
//
//	go test -run '^$' -bench ClaimAndRecord -benchtime 1x ./internal/store/postgres/
func BenchmarkClaimAndRecord(b *testing.B) {
	const contacts, pageSize, window = 120_000, 200, 16
	var walked int64
	var elapsed time.Duration
	b.StopTimer()
	for range b.N {
		s := testenv.Postgres(b)
		ctx := b.Context()
		entropy := ulid.Monotonic(zeroReader{}, 0)
		batch := make([]store.Contact, 0, 10_000)
		for i := range contacts {
			batch = append(batch, store.Contact{
				ID:         ulid.MustNew(ulid.Timestamp(t0.Add(time.Duration(i)*time.Second)), entropy),
				Email:      fmt.Sprintf("c%06d@example.org", i),
				Subscribed: true,
			})
			if len(batch) == cap(batch) || i == contacts-1 {
				if _, err := s.UpsertContacts(ctx, batch, t0); err != nil {
					b.Fatal(err)
				}
				batch = batch[:0]
			}
		}
		bc, _, err := s.CreateBroadcast(ctx, store.Broadcast{
			ID: ulid.MustNew(ulid.Timestamp(t0), entropy), Name: "bench", CreatedAt: t0,
			Content: store.Content{FromAddress: "news@example.org", Subject: "s", HTML: "h"},
		})
		if err != nil {
			b.Fatal(err)
		}
		if bc, err = s.AcceptBroadcast(ctx, bc.ID, t0); err != nil {
			b.Fatal(err)
		}
		if bc.SnapshotTotal != contacts {
			b.Fatalf("snapshot total %d, want %d", bc.SnapshotTotal, contacts)
		}

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

		c, err := s.Counts(ctx, bc.ID)
		if err != nil {
			b.Fatal(err)
		}
		if n != contacts || c != (store.Counts{Sent: contacts}) {
			b.Fatalf("walked %d rows, counts %+v; want %d sent", n, c, contacts)
		}
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

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}
