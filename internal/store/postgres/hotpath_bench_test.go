package postgres_test

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/oklog/ulid/v2"

	"github.com/rangecast/rangecast/internal/procstat"
	"github.com/rangecast/rangecast/internal/ranges"
	"github.com/rangecast/rangecast/internal/store"
	"github.com/rangecast/rangecast/internal/store/postgres"
	"github.com/rangecast/rangecast/internal/testenv"
)

// The hot path of a page, one statement kind per benchmark, on a store that
// looks like one mid-way through a large broadcast: 100k contacts and a
// ledger already holding 100k sent rows of the running broadcast (the
// DESIGN's warning: plans that are fine on a small table are not at 100k+).
// Each reports rows/s besides ns/op, so a window of 16 and a page of 200
// compare.
//
//	go test -run '^$' -bench 'EligiblePage|ClaimBatch|RecordOutcomes' -benchmem ./internal/store/postgres/
//
// (RecordOutcomes matches BenchmarkRecordOutcomesAndClaim too: the page
// worker's call per window.)

const (
	hotContacts = 100_000
	hotLedger   = 100_000
	hotPage     = 200 // coordinator.Config.PageLimit
	hotWindow   = 16  // the pageworker's default in-flight window
)

var hotT0 = time.Date(2031, time.March, 14, 9, 0, 0, 0, time.UTC)

// hotSetup loads contacts and the ledger by SQL (the store's bulk path is
// not what is measured here) and accepts a whole-audience broadcast.
func hotSetup(b *testing.B) (*postgres.Store, store.Broadcast) {
	b.Helper()
	s := testenv.Postgres(b)
	ctx := context.Background()
	pool := s.Pool()
	// Ids are ULIDs as uuid: one millisecond per contact, so id order is
	// row order; md5 of the row number stands in for the entropy.
	if _, err := pool.Exec(ctx, `
INSERT INTO contacts (id, email, email_key, name, attributes, subscribed, created_at, updated_at)
SELECT (lpad(to_hex($1::bigint + i), 12, '0') || substr(md5(i::text), 1, 20))::uuid,
       'c' || i || '@bench.example', 'c' || i || '@bench.example', 'Contact ' || i, '{"city":"Oslo"}', i % 20 <> 0, $2, $2
FROM generate_series(1, $3::bigint) AS i`, hotT0.UnixMilli(), hotT0, hotContacts); err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `ANALYZE contacts`); err != nil {
		b.Fatal(err)
	}
	bc, _, err := s.CreateBroadcast(ctx, store.Broadcast{
		ID: ulid.MustNew(ulid.Timestamp(hotT0), ulid.DefaultEntropy()), Name: "hot path", CreatedAt: hotT0,
		Content: store.Content{FromAddress: "news@bench.example", Subject: "s", HTML: "h"},
	})
	if err != nil {
		b.Fatal(err)
	}
	if bc, err = s.AcceptBroadcast(ctx, bc.ID, hotT0); err != nil {
		b.Fatal(err)
	}
	// The ledger after a first stretch of the broadcast: rows of other
	// contact ids (timestamps before the audience's), all sent.
	if _, err := pool.Exec(ctx, `
INSERT INTO broadcast_sends (broadcast_id, contact_id, email, status, message_id, claimed_at, updated_at, accepted)
SELECT $1, (lpad(to_hex($2::bigint - i), 12, '0') || substr(md5(i::text), 1, 20))::uuid,
       'l' || i || '@bench.example', 'sent', 'l' || i, $3, $3, true
FROM generate_series(1, $4::bigint) AS i`, [16]byte(bc.ID), hotT0.UnixMilli()-1, hotT0, hotLedger); err != nil {
		b.Fatal(err)
	}
	return s, bc
}

// freshClaims returns a window of claims for new contacts, which it
// inserts (a claim needs its contact: one erased meanwhile is not claimed);
// the caller stops the timer around it.
func freshClaims(b *testing.B, s *postgres.Store, entropy *ulid.MonotonicEntropy, at time.Time) []store.Claim {
	b.Helper()
	claims := make([]store.Claim, hotWindow)
	ids := make([][16]byte, hotWindow)
	emails := make([]string, hotWindow)
	for i := range claims {
		id := ulid.MustNew(ulid.Timestamp(at), entropy)
		claims[i] = store.Claim{ContactID: id, Email: id.String() + "@bench.example", MessageID: id.String() + "@bench.example"}
		ids[i], emails[i] = [16]byte(id), claims[i].Email
	}
	if _, err := s.Pool().Exec(context.Background(), `
INSERT INTO contacts (id, email, email_key, created_at, updated_at)
SELECT u.id, u.email, u.email, $3, $3 FROM unnest($1::uuid[], $2::text[]) AS u(id, email)`, ids, emails, at); err != nil {
		b.Fatal(err)
	}
	return claims
}

// BenchmarkEligiblePage reads one page of 200 eligible contacts, at a new
// position of the audience each time.
func BenchmarkEligiblePage(b *testing.B) {
	s, bc := hotSetup(b)
	ctx := context.Background()
	// Page starts spread over the whole audience.
	var starts []ulid.ULID
	from := bc.MinID
	for {
		page, err := s.EligiblePage(ctx, bc, from, bc.MaxID, hotPage)
		if err != nil {
			b.Fatal(err)
		}
		if len(page) < hotPage {
			break
		}
		starts = append(starts, from)
		next, ok := ranges.Next(page[len(page)-1].ID)
		if !ok {
			break
		}
		from = next
	}
	i := 0
	for b.Loop() {
		page, err := s.EligiblePage(ctx, bc, starts[i%len(starts)], bc.MaxID, hotPage)
		if err != nil || len(page) != hotPage {
			b.Fatalf("page of %d, %v", len(page), err)
		}
		i++
	}
	b.ReportMetric(float64(b.N*hotPage)/b.Elapsed().Seconds(), "rows/s")
}

// BenchmarkClaimBatch claims one in-flight window (16 rows) by INSERT …
// ON CONFLICT DO NOTHING RETURNING.
func BenchmarkClaimBatch(b *testing.B) {
	s, bc := hotSetup(b)
	ctx := context.Background()
	entropy := ulid.Monotonic(ulid.DefaultEntropy(), 0)
	at := hotT0.Add(time.Hour)
	for b.Loop() {
		b.StopTimer()
		claims := freshClaims(b, s, entropy, at)
		b.StartTimer()
		got, err := s.Claim(ctx, bc.ID, "w1/1", claims, at)
		if err != nil || len(got) != hotWindow {
			b.Fatalf("claimed %d, %v", len(got), err)
		}
	}
	b.ReportMetric(float64(b.N*hotWindow)/b.Elapsed().Seconds(), "rows/s")
}

// claimSent claims a window (the timer stopped) and fills outcomes with
// its rows, every one sent.
func claimSent(b *testing.B, s *postgres.Store, bc store.Broadcast, claims []store.Claim, at time.Time, outcomes []store.Outcome) {
	b.Helper()
	got, err := s.Claim(context.Background(), bc.ID, "w1/1", claims, at)
	if err != nil || len(got) != len(outcomes) {
		b.Fatalf("claimed %d, %v", len(got), err)
	}
	for i, id := range got {
		outcomes[i] = store.Outcome{ContactID: id, Status: store.SendSent}
	}
}

// BenchmarkRecordOutcomes writes one window's outcomes (16 sent) in one
// batch; the claims are made with the timer stopped.
func BenchmarkRecordOutcomes(b *testing.B) {
	s, bc := hotSetup(b)
	ctx := context.Background()
	entropy := ulid.Monotonic(ulid.DefaultEntropy(), 0)
	at := hotT0.Add(time.Hour)
	outcomes := make([]store.Outcome, hotWindow)
	for b.Loop() {
		b.StopTimer()
		claimSent(b, s, bc, freshClaims(b, s, entropy, at), at, outcomes)
		b.StartTimer()
		if err := s.RecordOutcomes(ctx, bc.ID, "w1/1", outcomes, at); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	c, err := s.Counts(ctx, bc.ID)
	if err != nil {
		b.Fatal(err)
	}
	if c.Claimed != 0 || c.Sent != int64(hotLedger+b.N*hotWindow) {
		b.Fatalf("counts %+v after %d windows", c, b.N)
	}
	b.ReportMetric(float64(b.N*hotWindow)/b.Elapsed().Seconds(), "rows/s")
}

// BenchmarkRecordOutcomesAndClaim is the page worker's write per window:
// the outcomes of one window (16 sent) and the claims of the window two
// ahead (16 new rows), in one call; the rows whose outcomes are written are
// claimed with the timer stopped.
func BenchmarkRecordOutcomesAndClaim(b *testing.B) {
	s, bc := hotSetup(b)
	ctx := context.Background()
	entropy := ulid.Monotonic(ulid.DefaultEntropy(), 0)
	at := hotT0.Add(time.Hour)
	outcomes := make([]store.Outcome, hotWindow)
	for b.Loop() {
		b.StopTimer()
		claimSent(b, s, bc, freshClaims(b, s, entropy, at), at, outcomes)
		next := freshClaims(b, s, entropy, at)
		b.StartTimer()
		claimed, err := s.RecordAndClaim(ctx, bc.ID, "w1/1", outcomes, next, at)
		if err != nil || len(claimed) != hotWindow {
			b.Fatalf("claimed %d, %v", len(claimed), err)
		}
	}
	b.StopTimer()
	c, err := s.Counts(ctx, bc.ID)
	if err != nil {
		b.Fatal(err)
	}
	if c.Claimed != int64(b.N*hotWindow) || c.Sent != int64(hotLedger+b.N*hotWindow) {
		b.Fatalf("counts %+v after %d windows", c, b.N)
	}
	b.ReportMetric(float64(b.N*hotWindow)/b.Elapsed().Seconds(), "rows/s")
}

// BenchmarkWindowWrite is the page worker's steady state against the
// ledger of hotSetup: window after window, one RecordAndClaim that records
// the outcomes of the window sent (all sent) and claims the next, as
// runPage does. Besides time it reports the Postgres CPU a message costs
// (pg-µs/msg: utime+stime of the pool's backends, from /proc, when the
// server runs on this machine), which is what make bench's Postgres CPU
// target counts, by window size. DESIGN bounds a claim batch by the
// in-flight window (small claim batches), so a window's commit and
// statements are shared by that many messages and no more.
//
//	go test -run '^$' -bench WindowWrite ./internal/store/postgres/
func BenchmarkWindowWrite(b *testing.B) {
	for _, window := range []int{4, hotWindow, 64} {
		b.Run(strconv.Itoa(window), func(b *testing.B) { benchWindowWrite(b, window) })
	}
}

func benchWindowWrite(b *testing.B, window int) {
	s, bc := hotSetup(b)
	ctx := context.Background()
	entropy := ulid.Monotonic(ulid.DefaultEntropy(), 0)
	at := hotT0.Add(time.Hour)
	backends := poolBackends(b, s)
	claimed, err := s.Claim(ctx, bc.ID, "w1/1", freshWindow(b, s, entropy, at, window), at)
	if err != nil || len(claimed) != window {
		b.Fatalf("claimed %d, %v", len(claimed), err)
	}
	outcomes := make([]store.Outcome, window)
	var cpu time.Duration
	dialed := s.Pool().Stat().NewConnsCount()
	for b.Loop() {
		b.StopTimer()
		next := freshWindow(b, s, entropy, at, window)
		for i, id := range claimed {
			outcomes[i] = store.Outcome{ContactID: id, Status: store.SendSent}
		}
		before := backends.cpu()
		b.StartTimer()
		claimed, err = s.RecordAndClaim(ctx, bc.ID, "w1/1", outcomes, next, at)
		b.StopTimer()
		cpu += backends.cpu() - before
		b.StartTimer()
		if err != nil || len(claimed) != window {
			b.Fatalf("claimed %d, %v", len(claimed), err)
		}
	}
	msgs := float64(b.N * window)
	b.ReportMetric(float64(b.Elapsed().Microseconds())/msgs, "µs/msg")
	// A connection dialed during the loop ran on a backend not counted.
	if backends.readable && s.Pool().Stat().NewConnsCount() == dialed {
		b.ReportMetric(float64(cpu.Microseconds())/msgs, "pg-µs/msg")
	}
}

// freshWindow is freshClaims for a window of n.
func freshWindow(b *testing.B, s *postgres.Store, entropy *ulid.MonotonicEntropy, at time.Time, n int) []store.Claim {
	b.Helper()
	var out []store.Claim
	for len(out) < n {
		out = append(out, freshClaims(b, s, entropy, at)...)
	}
	return out[:n:n]
}

// backendSet is the server processes behind a pool's connections.
type backendSet struct {
	pids []uint32
	// readable: /proc shows them as postgres processes, so the server
	// runs on this machine (a remote server's pids name other processes,
	// or none).
	readable bool
}

// poolBackends opens the pool's connections (a few, as the page worker's
// sequential writes use) and names their server processes.
func poolBackends(b *testing.B, s *postgres.Store) backendSet {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var conns []*pgxpool.Conn
	for range min(4, s.Pool().Config().MaxConns) {
		c, err := s.Pool().Acquire(ctx)
		if err != nil {
			b.Fatal(err)
		}
		conns = append(conns, c)
	}
	var set backendSet
	for _, c := range s.Pool().AcquireAllIdle(ctx) {
		conns = append(conns, c)
	}
	for _, c := range conns {
		set.pids = append(set.pids, c.Conn().PgConn().PID())
		c.Release()
	}
	set.readable = true
	for _, pid := range set.pids {
		comm, err := os.ReadFile("/proc/" + strconv.FormatUint(uint64(pid), 10) + "/comm")
		if _, cerr := procstat.CPU(int(pid)); err != nil || cerr != nil || strings.TrimSpace(string(comm)) != "postgres" {
			set.readable = false
		}
	}
	return set
}

// cpu is the backends' utime+stime so far.
func (set backendSet) cpu() time.Duration {
	var total time.Duration
	for _, pid := range set.pids {
		t, _ := procstat.CPU(int(pid))
		total += t
	}
	return total
}
