package ranges

import (
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
)

// benchBounds are the first and last ids of an audience built over a year.
func benchBounds() (ulid.ULID, ulid.ULID) {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	lo := ulid.MustNew(ulid.Timestamp(t0), ulid.Monotonic(zeroReader{}, 0))
	hi := ulid.MustNew(ulid.Timestamp(t0.AddDate(1, 0, 0)), ulid.Monotonic(zeroReader{}, 0))
	return lo, hi
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 0x5a
	}
	return len(p), nil
}

// BenchmarkSplit cuts an audience's id span into the 32 ranges, as
// StartBroadcast does once per broadcast.
//
//	go test -run '^$' -bench Split -benchmem ./internal/ranges/
func BenchmarkSplit(b *testing.B) {
	lo, hi := benchBounds()
	for b.Loop() {
		rs, err := Split(lo, hi)
		if err != nil || len(rs) != Count {
			b.Fatalf("split: %d ranges, %v", len(rs), err)
		}
	}
}

// BenchmarkPosition is one cursor's share of its range, computed for each
// of 32 ranges on every status call.
func BenchmarkPosition(b *testing.B) {
	lo, hi := benchBounds()
	rs, err := Split(lo, hi)
	if err != nil {
		b.Fatal(err)
	}
	r := rs[7]
	mid := ulid.MustNew(r.Start.Time()+(r.End.Time()-r.Start.Time())/3, zeroReader{})
	var sum float64
	for b.Loop() {
		sum += Position(r, mid)
	}
	if sum <= 0 {
		b.Fatal("position never positive")
	}
}
