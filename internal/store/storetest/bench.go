package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/rangecast/rangecast/internal/store"
)

// BenchClaimAndRecord walks a whole audience of n contacts the way one page
// worker does (pages of 200; per window of 16: Claim, then RecordOutcomes)
// on a fresh store per iteration, and reports rows/s. Only the walk is
// timed. Every store implementation runs it, so their figures compare.
func BenchClaimAndRecord(b *testing.B, open func(b *testing.B) store.Store, contacts int) {
	const pageSize, window = 200, 16
	var walked int64
	var elapsed time.Duration
	b.StopTimer()
	for range b.N {
		s := open(b)
		bc := seedBench(b, s, contacts)
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
		if n != int64(contacts) || c != (store.Counts{Sent: int64(contacts)}) {
			b.Fatalf("walked %d rows, counts %+v; want %d sent", n, c, contacts)
		}
	}
	b.ReportMetric(float64(walked)/elapsed.Seconds(), "rows/s")
}

// seedBench stores n subscribed contacts one second apart and accepts a
// whole-audience broadcast (with no ANALYZE beyond what accepting does).
func seedBench(b *testing.B, s store.Store, contacts int) store.Broadcast {
	ctx := b.Context()
	entropy := ulid.Monotonic(&splitmix{state: 1}, 0)
	batch := make([]store.Contact, 0, 10_000)
	for i := range contacts {
		batch = append(batch, store.Contact{
			ID:         ulid.MustNew(ulid.Timestamp(t0.Add(time.Duration(i)*time.Second)), entropy),
			Email:      fmt.Sprintf("c%06d@example.org", i),
			Subscribed: true,
		})
		if len(batch) == cap(batch) || i == contacts-1 {
			if _, err := s.ImportContacts(ctx, batch, t0); err != nil {
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
	if bc.SnapshotTotal != int64(contacts) {
		b.Fatalf("snapshot total %d, want %d", bc.SnapshotTotal, contacts)
	}
	return bc
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
			claimed, err := s.Claim(ctx, bc.ID, "w1/1", claims, now)
			if err != nil {
				return sent, err
			}
			outcomes := make([]store.Outcome, len(claimed))
			for i, id := range claimed {
				outcomes[i] = store.Outcome{ContactID: id, Status: store.SendSent}
			}
			if err := s.RecordOutcomes(ctx, bc.ID, "w1/1", outcomes, now); err != nil {
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
		from = succ(last)
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
