// Package ranges cuts contact-id space into contiguous ranges.
//
// Contact ids are ULIDs, which order as 128-bit big-endian unsigned
// integers. A broadcast is split into at most Count ranges by id
// boundaries, not by row counts, so the split can be computed from the
// smallest and largest id alone, with no scan of the contact table, and
// every worker that computes it from the same pair gets the same ranges.
//
// Each range is then tracked by a cursor: the next id still to be
// considered. Everything below the cursor is done. Cursors only move
// forward (see Advance), which makes progress reports idempotent and
// safe to deliver out of order or more than once.
//
// The package is pure logic: no I/O, no clocks.
package ranges

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"slices"

	"github.com/oklog/ulid/v2"
)

// Count is the fixed number of ranges a broadcast is cut into. Fewer
// ranges are produced only when the id span holds fewer than Count ids.
const Count = 32

// Range is a contiguous, inclusive slice [Start, End] of id space.
type Range struct {
	Index int
	Start ulid.ULID
	End   ulid.ULID
}

// Contains reports Start <= id <= End.
func (r Range) Contains(id ulid.ULID) bool {
	return r.Start.Compare(id) <= 0 && id.Compare(r.End) <= 0
}

// Split cuts [min, max] (inclusive, min <= max) into min(Count, max-min+1)
// contiguous ranges by 128-bit boundaries in id space (not by row counts):
// ranges tile [min, max] exactly, ascending, with no gap and no overlap, and
// their sizes differ by at most one. Range i has Index i. Split returns an
// error if min > max.
func Split(min, max ulid.ULID) ([]Range, error) {
	lo, hi := load(min), load(max)
	if lo.cmp(hi) > 0 {
		return nil, fmt.Errorf("ranges: min %s is after max %s", min, max)
	}

	// Work with the span minus one. max-min always fits in 128 bits; the
	// span itself is 2^128 for the full id space and does not.
	d := hi.sub(lo)
	n := uint64(Count)
	if d.hi == 0 && d.lo < Count-1 {
		n = d.lo + 1
	}

	// d = q*n + r, so span = q*n + r+1: the first r+1 ranges hold q+1 ids
	// and the rest hold q, which keeps sizes within one of each other
	// without ever forming the span. Widths are size-1 for the same reason.
	// A short range exists only if r+1 < n, and then span >= n forces
	// q >= 1, so q-1 never wraps where it is used.
	q, r := d.divmod(n)
	rs := make([]Range, n)
	start := lo
	for i := range rs {
		width := q
		if uint64(i) > r {
			width = q.sub(u128{lo: 1})
		}
		end := start.add(width)
		rs[i] = Range{Index: i, Start: start.ulid(), End: end.ulid()}
		// Wraps to zero only past the last range of the full space, where
		// it is never used.
		start = end.add(u128{lo: 1})
	}
	return rs, nil
}

// Cuts returns the starts of ranges 1 … Count-1 that divide a sample of
// ids into Count parts of equal size: just after the ids at ranks
// i·len/Count of the sorted sample, strictly ascending (a duplicate is
// dropped). Just after, so a start is no contact's id, as with Split: a
// page that stops at its range's first contact then still moves the
// cursor, which is how the coordinator tells a refused page from no page. Cut from a
// sample of rows instead of id space, ranges hold about the same number of
// contacts however the ids cluster (a bulk import gives ids of one
// millisecond). Fewer than Count distinct ids give no cuts. sample is sorted
// in place.
func Cuts(sample []ulid.ULID) []ulid.ULID {
	slices.SortFunc(sample, ulid.ULID.Compare)
	sample = slices.Compact(sample)
	if len(sample) < Count {
		return nil
	}
	out := make([]ulid.ULID, 0, Count-1)
	for i := 1; i < Count; i++ {
		if next, ok := Next(sample[i*len(sample)/Count]); ok {
			out = append(out, next)
		}
	}
	return out
}

// PageSize is the most contacts one page walks unless the coordinator is
// configured otherwise (the default of coordinator.Config.PageLimit).
// Ranges cut from a whole audience hold whole pages of it (AudienceRanks).
// A worker trims a page to whole windows of its concurrency; 192 is whole
// windows of 8, 16 (the default), 24, 32, 48, 64 and 96, which then walk a
// page whole, so a range of whole pages ends on one. (256 made the pages
// of a 64-window four round trips long instead of three, and the last
// range of a latency-bound broadcast finished that much later.)
const PageSize = 192

// AudienceRanks are the 0-based ranks, in an audience of n contacts in id
// order, of the first contact of ranges 1 … Count-1 when they are cut from
// the whole audience (every id read, not a sample). With at least Count
// pages of PageSize, every range but the last holds whole pages: a range
// that ended a few contacts past a page would cost one more page, and its
// KV write, for those few, which at 10,000 contacts is a third more writes
// per message than at 1,000,000. A smaller audience is cut into Count
// equal parts, each under a page. n ≤ Count gives none (ranges by id
// space, as Split).
func AudienceRanks(n int) []int {
	if n <= Count {
		return nil
	}
	pages := (n + PageSize - 1) / PageSize
	out := make([]int, 0, Count-1)
	for i := 1; i < Count; i++ {
		// Both ascend strictly: pages ≥ Count moves i·pages/Count by at
		// least one per i, as n > Count moves i·n/Count; and
		// i·pages/Count ≤ pages-1 for i < Count, so every rank is < n.
		if pages >= Count {
			out = append(out, PageSize*(i*pages/Count))
		} else {
			out = append(out, i*n/Count)
		}
	}
	return out
}

// AudienceCuts are the range starts for a whole audience (ids sorted and
// distinct): just after the id before each of AudienceRanks, so a start is
// no contact's id, as with Cuts.
func AudienceCuts(ids []ulid.ULID) []ulid.ULID {
	var out []ulid.ULID
	for _, k := range AudienceRanks(len(ids)) {
		if next, ok := Next(ids[k-1]); ok {
			out = append(out, next)
		}
	}
	return out
}

// SplitAt cuts [min, max] (inclusive) into contiguous ranges that start at
// min and at each of starts, which must ascend strictly; starts outside
// (min, max] are dropped. Ranges tile [min, max] exactly, as Split's do.
// With no starts (a broadcast accepted before ranges were cut from a
// sample, or an audience too small to sample), SplitAt is Split.
func SplitAt(min, max ulid.ULID, starts []ulid.ULID) ([]Range, error) {
	if len(starts) == 0 {
		return Split(min, max)
	}
	if min.Compare(max) > 0 {
		return nil, fmt.Errorf("ranges: min %s is after max %s", min, max)
	}
	rs := make([]Range, 0, len(starts)+1)
	start := min
	for _, s := range starts {
		if s.Compare(start) <= 0 || s.Compare(max) > 0 {
			continue
		}
		rs = append(rs, Range{Index: len(rs), Start: start, End: load(s).sub(u128{lo: 1}).ulid()})
		start = s
	}
	return append(rs, Range{Index: len(rs), Start: start, End: max}), nil
}

// Next returns id+1 and true, or false if id is the largest possible ULID
// (all 0xff). It turns an inclusive End into the exclusive cursor that
// follows it.
func Next(id ulid.ULID) (ulid.ULID, bool) {
	u := load(id)
	if u.hi == math.MaxUint64 && u.lo == math.MaxUint64 {
		return id, false
	}
	return u.add(u128{lo: 1}).ulid(), true
}

// Position reports how far next (the next id still to be considered, so
// everything < next is done) has moved through r, as a fraction in [0, 1]:
// (next-Start)/(End-Start+1), clamped so that next <= Start gives 0 and
// next > End gives 1.
func Position(r Range, next ulid.ULID) float64 {
	s, e, x := load(r.Start), load(r.End), load(next)
	if x.cmp(s) <= 0 {
		return 0
	}
	if x.cmp(e) > 0 {
		return 1
	}
	// The +1 is done in float64 so that a span of 2^128 needs no 129th bit.
	p := x.sub(s).float() / (e.sub(s).float() + 1)
	// Rounding can make the last ids of a wide range look finished. Only a
	// range whose cursor is past End may report 1, so callers can treat 1
	// as "done".
	return min(p, math.Nextafter(1, 0))
}

// Advance returns the later of cur and proposed: cursors only move
// forward, so a stale or duplicated lower proposal is ignored rather than
// rewinding work that is already done. The bool reports whether proposed
// moved the cursor.
func Advance(cur, proposed ulid.ULID) (ulid.ULID, bool) {
	if proposed.Compare(cur) > 0 {
		return proposed, true
	}
	return cur, false
}

// Find returns the position in rs of the range containing id, or -1 if
// none does. For the output of Split that position equals Range.Index.
//
// There are at most Count ranges, so a scan is cheap and, unlike a binary
// search, does not require rs to be sorted or complete.
func Find(rs []Range, id ulid.ULID) int {
	for i, r := range rs {
		if r.Contains(id) {
			return i
		}
	}
	return -1
}

// u128 is an unsigned 128-bit integer. It keeps the arithmetic
// allocation-free, which math/big would not.
type u128 struct{ hi, lo uint64 }

func load(id ulid.ULID) u128 {
	return u128{binary.BigEndian.Uint64(id[:8]), binary.BigEndian.Uint64(id[8:])}
}

func (u u128) ulid() ulid.ULID {
	var id ulid.ULID
	binary.BigEndian.PutUint64(id[:8], u.hi)
	binary.BigEndian.PutUint64(id[8:], u.lo)
	return id
}

func (u u128) cmp(v u128) int {
	switch {
	case u.hi < v.hi:
		return -1
	case u.hi > v.hi:
		return 1
	case u.lo < v.lo:
		return -1
	case u.lo > v.lo:
		return 1
	}
	return 0
}

// add returns u+v modulo 2^128.
func (u u128) add(v u128) u128 {
	lo, c := bits.Add64(u.lo, v.lo, 0)
	hi, _ := bits.Add64(u.hi, v.hi, c)
	return u128{hi, lo}
}

// sub returns u-v modulo 2^128.
func (u u128) sub(v u128) u128 {
	lo, b := bits.Sub64(u.lo, v.lo, 0)
	hi, _ := bits.Sub64(u.hi, v.hi, b)
	return u128{hi, lo}
}

// divmod returns u/n and u%n for n > 0.
func (u u128) divmod(n uint64) (u128, uint64) {
	// Long division in two 64-bit digits; bits.Div64 needs the high
	// dividend word below n, which hi%n is.
	qhi, r := u.hi/n, u.hi%n
	qlo, r := bits.Div64(r, u.lo, n)
	return u128{qhi, qlo}, r
}

func (u u128) float() float64 {
	return float64(u.hi)*0x1p64 + float64(u.lo)
}
