package ranges

import (
	"bytes"
	"io"
	"math"
	"math/big"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
)

// The tests check the uint128 code against math/big, so that a bug in the
// package's arithmetic cannot hide behind the same bug in the oracle.

var (
	zero   ulid.ULID
	top    = fromBig(new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 128), big.NewInt(1)))
	two128 = new(big.Int).Lsh(big.NewInt(1), 128)
)

func toBig(id ulid.ULID) *big.Int { return new(big.Int).SetBytes(id[:]) }

func fromBig(b *big.Int) ulid.ULID {
	var id ulid.ULID
	b.FillBytes(id[:])
	return id
}

// plus returns id+d; it panics if the result leaves id space, which is a
// bug in the test itself.
func plus(id ulid.ULID, d int64) ulid.ULID {
	b := new(big.Int).Add(toBig(id), big.NewInt(d))
	if b.Sign() < 0 || b.Cmp(two128) >= 0 {
		panic("plus: out of id space")
	}
	return fromBig(b)
}

// inSpace reports whether id+d stays within id space.
func inSpace(id ulid.ULID, d int64) bool {
	b := new(big.Int).Add(toBig(id), big.NewInt(d))
	return b.Sign() >= 0 && b.Cmp(two128) < 0
}

func size(r Range) *big.Int {
	s := new(big.Int).Sub(toBig(r.End), toBig(r.Start))
	return s.Add(s, big.NewInt(1))
}

// checkTiling verifies that rs is exactly what Split(min, max) promises.
func checkTiling(t testing.TB, min, max ulid.ULID, rs []Range) {
	t.Helper()

	span := new(big.Int).Sub(toBig(max), toBig(min))
	span.Add(span, big.NewInt(1))
	want := int64(Count)
	if span.Cmp(big.NewInt(Count)) < 0 {
		want = span.Int64()
	}
	if int64(len(rs)) != want {
		t.Fatalf("Split(%s, %s): got %d ranges, want %d", min, max, len(rs), want)
	}
	if rs[0].Start != min {
		t.Fatalf("Split(%s, %s): first Start %s, want min", min, max, rs[0].Start)
	}
	if rs[len(rs)-1].End != max {
		t.Fatalf("Split(%s, %s): last End %s, want max", min, max, rs[len(rs)-1].End)
	}

	var lo, hi *big.Int
	sum := new(big.Int)
	for i, r := range rs {
		if r.Index != i {
			t.Fatalf("Split(%s, %s): range %d has Index %d", min, max, i, r.Index)
		}
		if r.Start.Compare(r.End) > 0 {
			t.Fatalf("Split(%s, %s): range %d is inverted: %+v", min, max, i, r)
		}
		if i > 0 {
			// No gap, no overlap: each range starts right after the last.
			want := new(big.Int).Add(toBig(rs[i-1].End), big.NewInt(1))
			if toBig(r.Start).Cmp(want) != 0 {
				t.Fatalf("Split(%s, %s): range %d starts at %s, previous ends at %s", min, max, i, r.Start, rs[i-1].End)
			}
		}
		s := size(r)
		sum.Add(sum, s)
		if lo == nil || s.Cmp(lo) < 0 {
			lo = s
		}
		if hi == nil || s.Cmp(hi) > 0 {
			hi = s
		}
	}
	if d := new(big.Int).Sub(hi, lo); d.Cmp(big.NewInt(1)) > 0 {
		t.Fatalf("Split(%s, %s): sizes range from %s to %s", min, max, lo, hi)
	}
	if sum.Cmp(span) != 0 {
		t.Fatalf("Split(%s, %s): sizes sum to %s, want %s", min, max, sum, span)
	}
}

// checkFind verifies that id lies in exactly one range when it is within
// [rs[0].Start, rs[last].End] and in none otherwise, by scanning with
// bytes.Compare (the definition of id order), and that Find and Contains
// agree with the scan.
func checkFind(t testing.TB, rs []Range, id ulid.ULID) {
	t.Helper()

	in := func(lo, hi ulid.ULID) bool {
		return bytes.Compare(lo[:], id[:]) <= 0 && bytes.Compare(id[:], hi[:]) <= 0
	}
	inside := in(rs[0].Start, rs[len(rs)-1].End)
	hit, n := -1, 0
	for i, r := range rs {
		want := in(r.Start, r.End)
		if r.Contains(id) != want {
			t.Fatalf("range %d %+v: Contains(%s) = %v, want %v", i, r, id, !want, want)
		}
		if want {
			hit = i
			n++
		}
	}
	switch {
	case inside && n != 1:
		t.Fatalf("id %s in [%s, %s] lands in %d ranges, want 1", id, rs[0].Start, rs[len(rs)-1].End, n)
	case !inside && n != 0:
		t.Fatalf("id %s outside [%s, %s] lands in %d ranges, want 0", id, rs[0].Start, rs[len(rs)-1].End, n)
	}
	if got := Find(rs, id); got != hit {
		t.Fatalf("Find(%s) = %d, want %d", id, got, hit)
	}
}

// probes returns ids worth checking against rs: every boundary and its
// neighbours, just outside both ends, and random ids inside.
func probes(rng *rand.Rand, rs []Range, random int) []ulid.ULID {
	var ids []ulid.ULID
	add := func(id ulid.ULID, d int64) {
		if inSpace(id, d) {
			ids = append(ids, plus(id, d))
		}
	}
	for _, r := range rs {
		for _, d := range []int64{-1, 0, 1} {
			add(r.Start, d)
			add(r.End, d)
		}
	}
	min, max := toBig(rs[0].Start), toBig(rs[len(rs)-1].End)
	span := new(big.Int).Sub(max, min)
	span.Add(span, big.NewInt(1))
	for range random {
		off := new(big.Int).Mod(toBig(randID(rng)), span)
		ids = append(ids, fromBig(off.Add(off, min)))
	}
	return ids
}

func randID(rng *rand.Rand) ulid.ULID {
	return u128{rng.Uint64(), rng.Uint64()}.ulid()
}

// randPair returns min <= max with spans spread over every order of
// magnitude, since uniform pairs would almost all span ~2^127.
func randPair(rng *rand.Rand) (ulid.ULID, ulid.ULID) {
	a := randID(rng)
	var b ulid.ULID
	switch rng.IntN(3) {
	case 0:
		b = randID(rng)
	case 1:
		// A small span, around Count.
		d := big.NewInt(rng.Int64N(3 * Count))
		b = fromBig(new(big.Int).Mod(d.Add(d, toBig(a)), two128))
	default:
		// A span of random bit length.
		d := new(big.Int).Rsh(toBig(randID(rng)), uint(rng.IntN(129)))
		b = fromBig(new(big.Int).Mod(d.Add(d, toBig(a)), two128))
	}
	if a.Compare(b) > 0 {
		a, b = b, a
	}
	return a, b
}

func TestSplit(t *testing.T) {
	t.Parallel()

	var (
		dayOne  = ulid.MustParse("01KJMAT3Y0YFZMTH8Y8AF1G8GN") // 2026-03-01 09:14 UTC
		dayFour = ulid.MustParse("01KJWWS6T0NBQ0D8PP9DPHNBE9") // 2026-03-04 17:02 UTC
		msA     = ulid.MustParse("01KJNXGE00WM1HWJWSQW8TW2KS") // 2026-03-02 00:00:00.000
		msB     = ulid.MustParse("01KJNXGE01DTY49J2ZT5TBZK7M") // one millisecond later
		mid     = fromBig(new(big.Int).Lsh(big.NewInt(1), 127))
	)

	tests := []struct {
		name     string
		min, max ulid.ULID
		n        int
	}{
		{"one contact", dayOne, dayOne, 1},
		{"zero only", zero, zero, 1},
		{"top only", top, top, 1},
		{"adjacent", dayOne, plus(dayOne, 1), 2},
		{"31 ids", dayOne, plus(dayOne, 30), 31},
		{"32 ids", dayOne, plus(dayOne, 31), 32},
		{"33 ids", dayOne, plus(dayOne, 32), 32},
		{"64 ids", zero, plus(zero, 63), 32},
		{"65 ids", zero, plus(zero, 64), 32},
		{"full space", zero, top, 32},
		{"lower half", zero, plus(mid, -1), 32},
		{"upper half", mid, top, 32},
		{"near top 5", plus(top, -4), top, 5},
		{"near top 33", plus(top, -32), top, 32},
		{"near top 1000", plus(top, -999), top, 32},
		{"near top wide", mid, plus(top, -1), 32},
		{"zero to one", zero, plus(zero, 1), 2},
		{"across hi/lo word", fromBig(new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 64), big.NewInt(3))), fromBig(new(big.Int).Add(new(big.Int).Lsh(big.NewInt(1), 64), big.NewInt(40))), 32},
		{"few days", dayOne, dayFour, 32},
		{"one millisecond", msA, msB, 32},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			rs, err := Split(tt.min, tt.max)
			if err != nil {
				t.Fatalf("Split: %v", err)
			}
			if len(rs) != tt.n {
				t.Fatalf("got %d ranges, want %d", len(rs), tt.n)
			}
			checkTiling(t, tt.min, tt.max, rs)

			rng := rand.New(rand.NewPCG(1, uint64(len(tt.name))))
			for _, id := range probes(rng, rs, 200) {
				checkFind(t, rs, id)
			}
		})
	}
}

func TestSplitFullSpaceEven(t *testing.T) {
	t.Parallel()

	// 2^128 splits evenly: every range holds exactly 2^123 ids.
	rs, err := Split(zero, top)
	if err != nil {
		t.Fatal(err)
	}
	want := new(big.Int).Lsh(big.NewInt(1), 123)
	for _, r := range rs {
		if size(r).Cmp(want) != 0 {
			t.Fatalf("range %d holds %s ids, want 2^123", r.Index, size(r))
		}
	}
}

func TestSplitRandom(t *testing.T) {
	t.Parallel()

	rng := rand.New(rand.NewPCG(7, 11))
	for range 2000 {
		min, max := randPair(rng)
		rs, err := Split(min, max)
		if err != nil {
			t.Fatalf("Split(%s, %s): %v", min, max, err)
		}
		checkTiling(t, min, max, rs)
		for _, id := range probes(rng, rs, 20) {
			checkFind(t, rs, id)
		}
	}
}

func TestSplitInverted(t *testing.T) {
	t.Parallel()

	a := ulid.MustParse("01KJMAT3Y0YFZMTH8Y8AF1G8GN")
	tests := []struct {
		name     string
		min, max ulid.ULID
	}{
		{"off by one", plus(a, 1), a},
		{"full space", top, zero},
		{"low word only", plus(zero, 5), plus(zero, 4)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			rs, err := Split(tt.min, tt.max)
			if err == nil {
				t.Fatalf("Split(%s, %s) = %v, want error", tt.min, tt.max, rs)
			}
		})
	}
}

func TestFindOutside(t *testing.T) {
	t.Parallel()

	a := ulid.MustParse("01KJMAT3Y0YFZMTH8Y8AF1G8GN")
	rs, err := Split(a, plus(a, 1000))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		rs   []Range
		id   ulid.ULID
		want int
	}{
		{"below", rs, plus(a, -1), -1},
		{"above", rs, plus(a, 1001), -1},
		{"zero", rs, zero, -1},
		{"top", rs, top, -1},
		{"first", rs, a, 0},
		{"last", rs, plus(a, 1000), Count - 1},
		{"nil", nil, a, -1},
		{"subset", rs[5:7], rs[6].Start, 1},
		{"gap in subset", []Range{rs[1], rs[3]}, rs[2].Start, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			if got := Find(tt.rs, tt.id); got != tt.want {
				t.Fatalf("Find(%s) = %d, want %d", tt.id, got, tt.want)
			}
		})
	}
}

func TestNext(t *testing.T) {
	t.Parallel()

	a := ulid.MustParse("01KJMAT3Y0YFZMTH8Y8AF1G8GN")
	lowWordTop := fromBig(new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 64), big.NewInt(1)))
	tests := []struct {
		name string
		id   ulid.ULID
		want ulid.ULID
		ok   bool
	}{
		{"zero", zero, plus(zero, 1), true},
		{"real", a, plus(a, 1), true},
		{"carry into high word", lowWordTop, plus(lowWordTop, 1), true},
		{"below top", plus(top, -1), top, true},
		{"top overflows", top, top, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			got, ok := Next(tt.id)
			if ok != tt.ok {
				t.Fatalf("Next(%s) ok = %v, want %v", tt.id, ok, tt.ok)
			}
			if ok && got != tt.want {
				t.Fatalf("Next(%s) = %s, want %s", tt.id, got, tt.want)
			}
		})
	}
}

func TestPosition(t *testing.T) {
	t.Parallel()

	a := ulid.MustParse("01KJMAT3Y0YFZMTH8Y8AF1G8GN")
	r := Range{Start: a, End: plus(a, 99)} // 100 ids
	full := Range{Start: zero, End: top}
	mid := fromBig(new(big.Int).Lsh(big.NewInt(1), 127))
	one := Range{Start: a, End: a}

	tests := []struct {
		name string
		r    Range
		next ulid.ULID
		want float64
	}{
		{"before start", r, plus(a, -1), 0},
		{"zero cursor", r, zero, 0},
		{"at start", r, a, 0},
		{"one in", r, plus(a, 1), 0.01},
		{"middle", r, plus(a, 50), 0.5},
		{"at end", r, plus(a, 99), 0.99},
		{"just past end", r, plus(a, 100), 1},
		{"far past end", r, top, 1},
		{"full space start", full, zero, 0},
		{"full space middle", full, mid, 0.5},
		{"full space end", full, top, math.Nextafter(1, 0)},
		{"single id pending", one, a, 0},
		{"single id done", one, plus(a, 1), 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			got := Position(tt.r, tt.next)
			if math.Abs(got-tt.want) > 1e-12 {
				t.Fatalf("Position(%+v, %s) = %v, want %v", tt.r, tt.next, got, tt.want)
			}
		})
	}
}

func TestPositionDoneOnlyPastEnd(t *testing.T) {
	t.Parallel()

	// A wide range whose last id is pending must not look finished, even
	// though (End-Start)/(End-Start+1) rounds to 1 in float64.
	rs, err := Split(zero, top)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if p := Position(r, r.End); p >= 1 {
			t.Fatalf("range %d: Position at End = %v, want < 1", r.Index, p)
		}
		next, ok := Next(r.End)
		if !ok {
			continue // past the top of id space; nothing can be past End
		}
		if p := Position(r, next); p != 1 {
			t.Fatalf("range %d: Position past End = %v, want 1", r.Index, p)
		}
	}
}

func TestPositionMonotonic(t *testing.T) {
	t.Parallel()

	rng := rand.New(rand.NewPCG(3, 5))
	for range 500 {
		min, max := randPair(rng)
		rs, err := Split(min, max)
		if err != nil {
			t.Fatal(err)
		}
		r := rs[rng.IntN(len(rs))]
		ids := probes(rng, []Range{r}, 30)
		for _, x := range ids {
			for _, y := range ids {
				if x.Compare(y) <= 0 && Position(r, x) > Position(r, y) {
					t.Fatalf("Position(%+v): %s -> %v but later %s -> %v", r, x, Position(r, x), y, Position(r, y))
				}
			}
			if p := Position(r, x); p < 0 || p > 1 {
				t.Fatalf("Position(%+v, %s) = %v, outside [0, 1]", r, x, p)
			}
		}
	}
}

func TestAdvance(t *testing.T) {
	t.Parallel()

	a := ulid.MustParse("01KJMAT3Y0YFZMTH8Y8AF1G8GN")
	tests := []struct {
		name          string
		cur, proposed ulid.ULID
		want          ulid.ULID
		moved         bool
	}{
		{"forward", a, plus(a, 10), plus(a, 10), true},
		{"by one", a, plus(a, 1), plus(a, 1), true},
		{"same", a, a, a, false},
		{"backward", plus(a, 10), a, plus(a, 10), false},
		{"backward to zero", a, zero, a, false},
		{"from zero", zero, a, a, true},
		{"to top", a, top, top, true},
		{"high word decides", fromBig(new(big.Int).Lsh(big.NewInt(1), 64)), plus(zero, 1<<62), fromBig(new(big.Int).Lsh(big.NewInt(1), 64)), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			got, moved := Advance(tt.cur, tt.proposed)
			if got != tt.want || moved != tt.moved {
				t.Fatalf("Advance(%s, %s) = %s, %v; want %s, %v", tt.cur, tt.proposed, got, moved, tt.want, tt.moved)
			}
		})
	}
}

func TestAdvanceMonotonic(t *testing.T) {
	t.Parallel()

	// Replay proposals in random order, as redelivered progress reports
	// would arrive: the cursor never goes back and ends at the maximum.
	rng := rand.New(rand.NewPCG(9, 9))
	for range 100 {
		props := make([]ulid.ULID, 50)
		for i := range props {
			props[i] = randID(rng)
		}
		var cur, best ulid.ULID
		for _, p := range props {
			next, moved := Advance(cur, p)
			if next.Compare(cur) < 0 {
				t.Fatalf("Advance(%s, %s) moved back to %s", cur, p, next)
			}
			if moved != (next != cur) {
				t.Fatalf("Advance(%s, %s) = %s, moved %v", cur, p, next, moved)
			}
			if p.Compare(best) > 0 {
				best = p
			}
			cur = next
		}
		if cur != best {
			t.Fatalf("cursor ended at %s, want max proposal %s", cur, best)
		}
	}
}

func TestU128(t *testing.T) {
	t.Parallel()

	rng := rand.New(rand.NewPCG(2, 4))
	for range 2000 {
		a, b := randID(rng), randID(rng)
		n := rng.Uint64N(64) + 1
		ua, ub := load(a), load(b)
		ba, bb := toBig(a), toBig(b)

		if got := ua.ulid(); got != a {
			t.Fatalf("round trip %s -> %s", a, got)
		}
		if got, want := ua.cmp(ub), ba.Cmp(bb); got != want {
			t.Fatalf("cmp(%s, %s) = %d, want %d", a, b, got, want)
		}
		sum := new(big.Int).Add(ba, bb)
		if got, want := ua.add(ub).ulid(), fromBig(sum.Mod(sum, two128)); got != want {
			t.Fatalf("%s + %s = %s, want %s", a, b, got, want)
		}
		diff := new(big.Int).Sub(ba, bb)
		if got, want := ua.sub(ub).ulid(), fromBig(diff.Mod(diff, two128)); got != want {
			t.Fatalf("%s - %s = %s, want %s", a, b, got, want)
		}
		q, r := ua.divmod(n)
		bq, br := new(big.Int).DivMod(ba, new(big.Int).SetUint64(n), new(big.Int))
		if q.ulid() != fromBig(bq) || r != br.Uint64() {
			t.Fatalf("%s divmod %d = %s, %d; want %s, %s", a, n, q.ulid(), r, fromBig(bq), br)
		}
	}
}

func FuzzSplit(f *testing.F) {
	a := ulid.MustParse("01KJMAT3Y0YFZMTH8Y8AF1G8GN")
	b := ulid.MustParse("01KJWWS6T0NBQ0D8PP9DPHNBE9")
	for _, s := range [][2]ulid.ULID{
		{a, a}, {a, b}, {zero, top}, {top, top}, {zero, zero},
		{a, plus(a, 30)}, {a, plus(a, 31)}, {a, plus(a, 32)},
		{plus(top, -40), top},
	} {
		f.Add(s[0][:], s[1][:])
	}
	f.Fuzz(func(t *testing.T, x, y []byte) {
		min, max := fuzzID(x), fuzzID(y)
		if min.Compare(max) > 0 {
			if _, err := Split(min, max); err == nil {
				t.Fatalf("Split(%s, %s): no error for min > max", min, max)
			}
			min, max = max, min
		}
		rs, err := Split(min, max)
		if err != nil {
			t.Fatalf("Split(%s, %s): %v", min, max, err)
		}
		checkTiling(t, min, max, rs)
	})
}

func FuzzFind(f *testing.F) {
	a := ulid.MustParse("01KJMAT3Y0YFZMTH8Y8AF1G8GN")
	b := ulid.MustParse("01KJWWS6T0NBQ0D8PP9DPHNBE9")
	for _, s := range [][3]ulid.ULID{
		{a, b, a}, {a, b, b}, {a, b, plus(a, -1)}, {a, b, plus(b, 1)},
		{zero, top, zero}, {zero, top, top}, {a, plus(a, 40), plus(a, 2)},
	} {
		f.Add(s[0][:], s[1][:], s[2][:])
	}
	f.Fuzz(func(t *testing.T, x, y, z []byte) {
		min, max, id := fuzzID(x), fuzzID(y), fuzzID(z)
		if min.Compare(max) > 0 {
			min, max = max, min
		}
		rs, err := Split(min, max)
		if err != nil {
			t.Fatalf("Split(%s, %s): %v", min, max, err)
		}
		checkFind(t, rs, id)
		if i := Find(rs, id); i >= 0 {
			// Within its own range the cursor sits somewhere before the end.
			if p := Position(rs[i], id); p < 0 || p >= 1 {
				t.Fatalf("Position(%+v, %s) = %v, want [0, 1)", rs[i], id, p)
			}
		}
	})
}

// fuzzID turns arbitrary fuzz bytes into an id. Short inputs are
// right-aligned so that small byte strings become small ids, which keeps
// the fuzzer exploring narrow spans instead of only ~2^127-wide ones.
func fuzzID(b []byte) ulid.ULID {
	var id ulid.ULID
	if len(b) > len(id) {
		b = b[:len(id)]
	}
	copy(id[len(id)-len(b):], b)
	return id
}

// TestCutsEven: a sample clustered like a bulk import (most ids within one
// millisecond, a few spread over a year) cuts into ranges that each hold
// about 1/Count of it, where Split by id space puts the import in one range.
func TestCutsEven(t *testing.T) {
	t.Parallel()
	rnd := rand.New(rand.NewPCG(1, 2))
	entropy := func() io.Reader { return &randReader{rnd} }
	var ids []ulid.ULID
	year := uint64(365 * 24 * time.Hour / time.Millisecond)
	for range 1_000 {
		ids = append(ids, ulid.MustNew(1_700_000_000_000+rnd.Uint64N(year), entropy()))
	}
	for range 20_000 {
		ids = append(ids, ulid.MustNew(1_700_000_000_000+year/2+rnd.Uint64N(3), entropy()))
	}
	sorted := slices.SortedFunc(slices.Values(ids), ulid.ULID.Compare)
	lo, hi := sorted[0], sorted[len(sorted)-1]
	count := func(rs []Range) (largest int) {
		for _, r := range rs {
			n := 0
			for _, id := range sorted {
				if r.Contains(id) {
					n++
				}
			}
			largest = max(largest, n)
		}
		return largest
	}
	mean := len(ids) / Count
	byspace, err := Split(lo, hi)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Split by id space: largest range %d, mean %d", count(byspace), mean)

	// Cut from every 10th id, as a sample would give.
	var sample []ulid.ULID
	for i := 0; i < len(ids); i += 10 {
		sample = append(sample, ids[i])
	}
	cuts := Cuts(sample)
	if len(cuts) != Count-1 {
		t.Fatalf("Cuts gave %d starts, want %d", len(cuts), Count-1)
	}
	rs, err := SplitAt(lo, hi, cuts)
	if err != nil {
		t.Fatal(err)
	}
	checkTiles(t, rs, lo, hi)
	if got := count(rs); got > 2*mean {
		t.Errorf("SplitAt: largest range %d contacts, want ≤ 2 × mean %d", got, mean)
	} else {
		t.Logf("SplitAt: largest range %d, mean %d", got, mean)
	}
}

func TestSplitAt(t *testing.T) {
	t.Parallel()
	lo, hi := ulid.ULID{0: 1}, ulid.ULID{0: 9}
	for _, tc := range []struct {
		name   string
		starts []ulid.ULID
		want   int
	}{
		{"none is Split", nil, Count},
		{"one inside", []ulid.ULID{{0: 5}}, 2},
		{"outside and at min dropped", []ulid.ULID{{0: 1}, {0: 5}, {0: 10}}, 2},
		{"at max", []ulid.ULID{{0: 9}}, 2},
		{"not ascending dropped", []ulid.ULID{{0: 6}, {0: 4}, {0: 8}}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs, err := SplitAt(lo, hi, tc.starts)
			if err != nil {
				t.Fatal(err)
			}
			if len(rs) != tc.want {
				t.Fatalf("%d ranges, want %d: %v", len(rs), tc.want, rs)
			}
			checkTiles(t, rs, lo, hi)
		})
	}
	if _, err := SplitAt(hi, lo, []ulid.ULID{{0: 5}}); err == nil {
		t.Error("SplitAt(max, min) succeeded")
	}
}

// checkTiles fails unless rs tile [lo, hi] in order, each Index its place.
func checkTiles(t *testing.T, rs []Range, lo, hi ulid.ULID) {
	t.Helper()
	next := lo
	for i, r := range rs {
		if r.Index != i || r.Start != next || r.Start.Compare(r.End) > 0 {
			t.Fatalf("range %d = %+v does not follow %s", i, r, next)
		}
		next, _ = Next(r.End)
	}
	if rs[len(rs)-1].End != hi {
		t.Fatalf("last range ends at %s, want %s", rs[len(rs)-1].End, hi)
	}
}

type randReader struct{ r *rand.Rand }

func (r *randReader) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(r.r.Uint32())
	}
	return len(p), nil
}

// TestAudienceRanks: ranges cut from a whole audience take no more pages
// (of PageSize) than the audience itself, once there are Count pages of
// it, so a 10,000-contact broadcast writes as many page records per
// message as a 1,000,000-contact one. A smaller audience keeps Count
// ranges of one page each.
func TestAudienceRanks(t *testing.T) {
	t.Parallel()
	for _, n := range []int{0, 1, Count, Count + 1, 100, 6_399, Count * PageSize, Count*PageSize + 1, 9_500, 10_000, 12_801, 99_999, 1_000_000} {
		ranks := AudienceRanks(n)
		if n <= Count {
			if ranks != nil {
				t.Errorf("n=%d: ranks %v, want none", n, ranks)
			}
			continue
		}
		if len(ranks) != Count-1 {
			t.Fatalf("n=%d: %d ranks, want %d", n, len(ranks), Count-1)
		}
		bounds := append(append([]int{0}, ranks...), n)
		pages, largest := 0, 0
		for i := 1; i < len(bounds); i++ {
			size := bounds[i] - bounds[i-1]
			if size <= 0 {
				t.Fatalf("n=%d: range %d is empty or reversed (ranks %v)", n, i-1, ranks)
			}
			if i < len(bounds)-1 && n >= Count*PageSize && size%PageSize != 0 {
				t.Errorf("n=%d: range %d holds %d, not whole pages of %d", n, i-1, size, PageSize)
			}
			pages += (size + PageSize - 1) / PageSize
			largest = max(largest, size)
		}
		if want := max(Count, (n+PageSize-1)/PageSize); pages != want {
			t.Errorf("n=%d: ranges take %d pages, want %d", n, pages, want)
		}
		if mean := n / Count; largest > 2*mean {
			t.Errorf("n=%d: largest range %d, want ≤ 2 × the mean %d", n, largest, mean)
		}
	}
}

// TestAudienceCuts: the starts cut from a whole audience split it at
// AudienceRanks, each start just after the contact before it.
func TestAudienceCuts(t *testing.T) {
	t.Parallel()
	rnd := rand.New(rand.NewPCG(3, 4))
	ids := make([]ulid.ULID, 9_500)
	for i := range ids {
		ids[i] = ulid.MustNew(1_700_000_000_000+rnd.Uint64N(3), &randReader{rnd})
	}
	slices.SortFunc(ids, ulid.ULID.Compare)
	ids = slices.Compact(ids)
	rs, err := SplitAt(ids[0], ids[len(ids)-1], AudienceCuts(ids))
	if err != nil {
		t.Fatal(err)
	}
	checkTiles(t, rs, ids[0], ids[len(ids)-1])
	bounds := append(append([]int{0}, AudienceRanks(len(ids))...), len(ids))
	if len(rs) != len(bounds)-1 {
		t.Fatalf("%d ranges, want %d", len(rs), len(bounds)-1)
	}
	for i, r := range rs {
		if next, _ := Next(ids[max(0, bounds[i]-1)]); i > 0 && r.Start != next {
			t.Errorf("range %d starts at %s, want just after the contact before it, %s", i, r.Start, next)
		}
		if n := bounds[i+1] - bounds[i]; !r.Contains(ids[bounds[i]]) || !r.Contains(ids[bounds[i+1]-1]) ||
			(i > 0 && r.Contains(ids[bounds[i]-1])) {
			t.Errorf("range %d does not hold exactly ranks [%d, %d) (%d contacts)", i, bounds[i], bounds[i+1], n)
		}
	}
}
