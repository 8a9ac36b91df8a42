package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/oklog/ulid/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rangecast/rangecast/internal/bus"
	"github.com/rangecast/rangecast/internal/ranges"
	"github.com/rangecast/rangecast/internal/store"
	pb "github.com/rangecast/rangecast/proto/rangecast/v1"
)

type runKind int

const (
	kindE2E runKind = iota
	kindLatency
	kindInFlight // the in-flight run (plan.inFlight): latency-bound, judged on its peak
	kindSize
	kindCrash
	kindFresh
	kindTarpit
)

// runOptions adds measurements to a broadcast run.
type runOptions struct {
	profile bool    // CPU profiles of the coordinator and one worker
	crashAt float64 // kill -9 every worker at this fraction (0: never)
}

// runResult is one broadcast through one stack.
type runResult struct {
	kind      runKind
	spec      stackSpec
	contacts  int
	eligible  int64
	delivered int64 // recipients the sink accepted
	// peakInFlight is the most messages the sink answered DATA for at once.
	peakInFlight int64
	// startLatency is the StartBroadcast call; bareSnapshot the audience
	// query alone on the same schema.
	startLatency, bareSnapshot time.Duration
	// analyze is ANALYZE broadcast_sends on the run's ledger, for
	// comparison (accepting a broadcast ran it once; no longer).
	analyze time.Duration
	// elapsed runs from just before StartBroadcast to the sink's last
	// acceptance.
	elapsed time.Duration
	// phases splits elapsed: where a run short of its ideal lost the time.
	phases phases
	// CPU during elapsed, by process group.
	cpuCoordinator, cpuWorkers, cpuPostgres, cpuSink time.Duration
	kvWrites, pagesDispatched                        float64
	coordHWMKB                                       int64
	xacts, rowsWritten                               int64
	// reads are the run's table read counters (pg_stat_user_tables).
	reads map[string]tableReads
	// activity counts samples of rangecast's Postgres sessions by
	// application, state, wait event and statement (profiled runs only).
	activity map[activityKey]int
	final    *pb.Progress
	state    string
	profiles map[string]string
	crash    *crashResult
	// bare is the bare client measured beside this run (the targets'
	// end-to-end runs); nil elsewhere.
	bare *adjacentBare
}

func (r *runResult) rate() float64 { return float64(r.delivered) / r.elapsed.Seconds() }

// bareRate and bareCPUPerMsg are the bare client's rate and CPU per
// message to compare this run with: measured beside it where it was, else
// the run's first ceiling.
func (r *runResult) bareRate(first ceilingResult) float64 {
	if r.bare != nil {
		return r.bare.rate()
	}
	return first.rate()
}

func (r *runResult) bareCPUPerMsg(first ceilingResult) float64 {
	if r.bare != nil {
		return r.bare.cpuPerMsg()
	}
	return first.cpuPerMsg()
}

// phases is a run's time in three parts: until the sink's first message,
// the body (from then until 90 % of the eligible were delivered) and the
// tail (the last 10 %). Against a steady pace, the start is time lost
// outright and a tail slower than the body is the ranges running out
// unevenly.
type phases struct {
	start, body, tail time.Duration
	// bodyRate is the rate between 10 % and 90 % of the eligible, and
	// tailAtPace how long the last 10 % would have taken at it.
	bodyRate   float64
	tailAtPace time.Duration
}

// phasesOf splits a run's timeline (sink counts sampled from t0 on), first
// and last being the sink's first and last acceptances.
func phasesOf(tl []sample, t0, first, last time.Time, eligible int64) phases {
	crossed := func(frac float64) time.Time {
		goal := int64(frac * float64(eligible))
		for i, s := range tl {
			if s.n < goal {
				continue
			}
			if i == 0 || s.n == tl[i-1].n {
				return s.at
			}
			// Linear between the two samples around the crossing.
			prev := tl[i-1]
			f := float64(goal-prev.n) / float64(s.n-prev.n)
			return prev.at.Add(time.Duration(f * float64(s.at.Sub(prev.at))))
		}
		return last
	}
	t10, t90 := crossed(0.10), crossed(0.90)
	p := phases{start: first.Sub(t0), body: t90.Sub(first), tail: last.Sub(t90)}
	if d := t90.Sub(t10).Seconds(); d > 0 {
		p.bodyRate = 0.8 * float64(eligible) / d
		p.tailAtPace = time.Duration(0.1 * float64(eligible) / p.bodyRate * float64(time.Second))
	}
	return p
}

// cpuPerMsg is rangecast's own CPU (coordinator + workers) per message.
func (r *runResult) cpuPerMsg() time.Duration {
	if r.delivered == 0 {
		return 0
	}
	return (r.cpuCoordinator + r.cpuWorkers) / time.Duration(r.delivered)
}

func (r *runResult) kvPer1000() float64 {
	if r.delivered == 0 {
		return 0
	}
	return r.kvWrites * 1000 / float64(r.delivered)
}

func (r *runResult) xactsPerMsg() float64 {
	if r.delivered == 0 {
		return 0
	}
	return float64(r.xacts) / float64(r.delivered)
}

// rowsReadPerMsg is rows read by sequential and index scans per message.
func (r *runResult) rowsReadPerMsg() float64 {
	if r.delivered == 0 {
		return 0
	}
	var n int64
	for _, t := range r.reads {
		n += t.seqRows + t.idxRows
	}
	return float64(n) / float64(r.delivered)
}

func (r *runResult) rowsPerMsg() float64 {
	if r.delivered == 0 {
		return 0
	}
	return float64(r.rowsWritten) / float64(r.delivered)
}

// activityKey is one kind of pg_stat_activity sample.
type activityKey struct {
	app, what string
}

// asSize is the same run listed under audience size.
func (r *runResult) asSize() *runResult {
	c := *r
	c.kind = kindSize
	c.profiles, c.activity = nil, nil
	return &c
}

// crashResult is what killing every worker cost.
type crashResult struct {
	atDelivered int64
	preRate     float64 // msg/s over the 3 s before the kill
	// reread are ledger rows beyond their range's cursor at the kill:
	// claimed or sent by the dead workers' pages but not yet reported, so
	// walked again by the re-run pages. rangesHit is how many ranges had
	// any; maxPerRange the most in one range.
	reread, maxPerRange, rangesHit int64
	inDoubt                        int64 // of those, claims with no outcome
	restartAfter                   time.Duration
	firstAfter                     time.Duration // kill → first message after the restart
	fullSpeedAfter                 time.Duration // kill → 1 s window at ≥ 90 % of preRate; 0 if never
	pageLimit                      int
	killedAt                       time.Time
	// stalled are the ranges whose page died with the workers, with their
	// cursor at the kill; resumedAfter is when the last of them moved on
	// (its page run again by a new worker).
	stalled      map[int]string
	resumedAfter time.Duration
}

// sample is the sink's count at a moment.
type sample struct {
	at       time.Time
	n        int64
	inFlight int64 // messages in DATA at the sink
}

func (h *harness) runBroadcast(ctx context.Context, spec stackSpec, contacts int, opt runOptions) (r *runResult, err error) {
	schema, eligible, err := h.audience(ctx, contacts)
	if err != nil {
		return nil, err
	}
	spec.schema = schema
	analyze, err := h.resetLedger(ctx, schema, !spec.freshLedger)
	if err != nil {
		return nil, err
	}
	r = &runResult{spec: spec, contacts: contacts, eligible: eligible, analyze: analyze}
	if r.bareSnapshot, err = h.bareSnapshot(ctx, schema); err != nil {
		return nil, err
	}
	h.waitBackendsGone(ctx)
	x0, err := h.dbStats(ctx)
	if err != nil {
		return nil, err
	}
	reads0, err := h.readCounters(ctx, schema)
	if err != nil {
		return nil, err
	}
	h.logf("%s: %d contacts (%d eligible), %s in flight, sink latency %s, nats sync %s",
		spec.name, contacts, eligible, spec.shape(), spec.sinkLatency, syncName(spec.syncAlways))
	s, err := h.startStack(ctx, spec)
	if err != nil {
		return nil, err
	}
	stopped := false
	defer func() {
		if !stopped {
			s.stop()
		}
	}()
	api := pb.NewBroadcastServiceClient(s.grpc)
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	created, err := api.CreateBroadcast(cctx, &pb.CreateBroadcastRequest{
		Name: "bench " + spec.name, RequestId: "bench-" + h.runID + "-" + spec.name,
		Content: &pb.BroadcastContent{FromName: content.FromName, FromAddress: content.FromAddress, Subject: content.Subject, Html: content.HTML},
	})
	cancel()
	if err != nil {
		return nil, fmt.Errorf("%s: create broadcast: %w", spec.name, err)
	}
	id := created.GetBroadcast().GetId()
	m0, err := scrape(ctx, s.coordMet)
	if err != nil {
		return nil, err
	}
	sampler := startCPUSampler(500*time.Millisecond, map[string]func() []int{
		"coordinator": func() []int { return []int{s.coord.Pid()} },
		"workers":     func() []int { return s.rangecastPIDs()[1:] },
		"sink":        func() []int { return []int{s.sink.Pid()} },
		"postgres": func() []int {
			pids, _ := h.backendPIDs(ctx)
			return pids
		},
	})
	samplerStopped := false
	defer func() {
		if !samplerStopped {
			sampler.stop()
		}
	}()

	t0 := time.Now()
	cctx, cancel = context.WithTimeout(ctx, 5*time.Minute)
	_, err = api.StartBroadcast(cctx, &pb.StartBroadcastRequest{Id: id})
	cancel()
	if err != nil {
		return nil, fmt.Errorf("%s: start broadcast: %w", spec.name, err)
	}
	r.startLatency = time.Since(t0)

	var wg sync.WaitGroup
	followCtx, stopFollow := context.WithCancel(ctx)
	defer stopFollow()
	if opt.profile {
		r.activity = map[activityKey]int{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			h.sampleActivity(followCtx, r.activity)
		}()
		r.profiles = map[string]string{}
		var mu sync.Mutex
		for name, target := range map[string][2]string{
			"coordinator": {s.coordMet, filepath.Join(h.bin, "coordinator")},
			"pageworker":  {s.workMet[0], filepath.Join(h.bin, "pageworker")},
		} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				// Let the run reach its pace first.
				select {
				case <-ctx.Done():
					return
				case <-time.After(time.Second):
				}
				top, err := profile(ctx, target[0], target[1], filepath.Join(s.dir, name+".pprof"), h.plan.profileSeconds)
				if err != nil {
					top = "profile failed: " + err.Error()
				}
				mu.Lock()
				r.profiles[name] = top
				mu.Unlock()
			}()
		}
	}

	// Follow the sink until every eligible contact has a message, or the
	// broadcast ends without (a crash run's in-doubt claims are not resent).
	deadline := time.Now().Add(time.Duration(eligible)*time.Second/100 + 3*time.Minute)
	var timeline []sample
	// Kept however the run ends: a stalled or failed run is where it tells
	// the most.
	defer func() { writeTimeline(filepath.Join(s.dir, "timeline.csv"), t0, timeline) }()
	kv, err := s.js.KeyValue(ctx, bus.BroadcastBucket)
	if err != nil {
		return nil, err
	}
	nextState := time.Now().Add(time.Second)
	for {
		st, err := sinkStats(ctx, s.sinkStat)
		if err != nil {
			return nil, err
		}
		now := time.Now()
		timeline = append(timeline, sample{at: now, n: st.Recipients, inFlight: st.InFlight})
		r.delivered, r.peakInFlight = st.Recipients, st.PeakInFlight
		if st.LastUnixNano > 0 {
			r.elapsed = time.Unix(0, st.LastUnixNano).Sub(t0)
		}
		if st.Recipients >= eligible {
			break
		}
		if opt.crashAt > 0 && r.crash == nil && float64(st.Recipients) >= opt.crashAt*float64(eligible) {
			if r.crash, err = h.crashWorkers(ctx, s, id, timeline); err != nil {
				return nil, err
			}
		}
		if c := r.crash; c != nil && c.resumedAfter == 0 && stalledResumed(ctx, kv, id, c.stalled) {
			c.resumedAfter = time.Since(c.killedAt)
		}
		// The state is read from KV, as workers do: a status call would
		// add ledger counts to the Postgres load being measured.
		if now.After(nextState) && kvState(ctx, kv, id) != string(store.StateRunning) {
			b, err := getBroadcast(ctx, api, id)
			if err == nil && b.GetState() != pb.BroadcastState_BROADCAST_STATE_RUNNING {
				if b.GetState() == pb.BroadcastState_BROADCAST_STATE_COMPLETED && r.crash != nil {
					// Settle: the sink may still be counting the last replies.
					time.Sleep(200 * time.Millisecond)
					if st, err := sinkStats(ctx, s.sinkStat); err == nil {
						r.delivered = st.Recipients
						r.elapsed = time.Unix(0, st.LastUnixNano).Sub(t0)
					}
					break
				}
				return nil, fmt.Errorf("%s: broadcast is %s (%s) with %d of %d delivered\ncoordinator log:\n%s",
					spec.name, stateName(b.GetState()), b.GetReason(), st.Recipients, eligible, s.coord.LogTail(20))
			}
		}
		if now.After(nextState) {
			nextState = now.Add(time.Second)
		}
		if now.After(deadline) {
			return nil, fmt.Errorf("%s: %d of %d delivered after %s; coordinator log:\n%s", spec.name, st.Recipients, eligible, time.Since(t0).Round(time.Second), s.coord.LogTail(20))
		}
		if err := sleepCtx(ctx, 100*time.Millisecond); err != nil {
			return nil, err
		}
	}
	if st, err := sinkStats(ctx, s.sinkStat); err == nil && st.FirstUnixNano > 0 && st.LastUnixNano > 0 {
		r.phases = phasesOf(timeline, t0, time.Unix(0, st.FirstUnixNano), time.Unix(0, st.LastUnixNano), eligible)
	}
	cpu := sampler.stop()
	samplerStopped = true
	r.cpuCoordinator, r.cpuWorkers, r.cpuPostgres, r.cpuSink = cpu["coordinator"], cpu["workers"], cpu["postgres"], cpu["sink"]
	if r.coordHWMKB, err = statusKB(s.coord.Pid(), "VmHWM"); err != nil {
		return nil, err
	}
	if r.crash != nil {
		r.crash.fullSpeedAfter = fullSpeed(timeline, r.crash)
	}
	stopFollow()
	wg.Wait()

	// The broadcast completes once the coordinator has applied the last
	// reports: its KV writes are counted up to then. The state is read
	// from KV; a status call would count the whole ledger in Postgres.
	for end := time.Now().Add(2 * time.Minute); ; {
		r.state = kvState(ctx, kv, id)
		if r.state != "" && r.state != string(store.StateRunning) {
			break
		}
		if time.Now().After(end) {
			return nil, fmt.Errorf("%s: every message delivered but the broadcast is still %q after 2 min", spec.name, r.state)
		}
		if err := sleepCtx(ctx, 100*time.Millisecond); err != nil {
			return nil, err
		}
	}
	if r.crash != nil {
		// What became of the dead workers' claims (one status call).
		b, err := getBroadcast(ctx, api, id)
		if err != nil {
			return nil, err
		}
		r.final = b.GetProgress()
	}
	m1, err := scrape(ctx, s.coordMet)
	if err != nil {
		return nil, err
	}
	r.kvWrites = sum(m1, "rangecast_coordinator_kv_writes_total") - sum(m0, "rangecast_coordinator_kv_writes_total")
	r.pagesDispatched = sum(m1, "rangecast_coordinator_pages_dispatched_total") - sum(m0, "rangecast_coordinator_pages_dispatched_total")
	s.stop()
	stopped = true
	h.waitBackendsGone(ctx)
	x1, err := h.dbStats(ctx)
	if err != nil {
		return nil, err
	}
	r.xacts, r.rowsWritten = x1.xacts-x0.xacts, x1.rows-x0.rows
	reads1, err := h.readCounters(ctx, schema)
	if err != nil {
		return nil, err
	}
	r.reads = map[string]tableReads{}
	for t, v := range reads1 {
		o := reads0[t]
		r.reads[t] = tableReads{seqScans: v.seqScans - o.seqScans, seqRows: v.seqRows - o.seqRows, idxScans: v.idxScans - o.idxScans, idxRows: v.idxRows - o.idxRows}
	}
	h.logf("%s: %s, %d delivered in %s: %.0f msg/s; start %s (bare query %s); rangecast CPU %s/msg (coordinator %s, workers %s per message); KV writes %.1f per 1,000; %.3f Postgres xacts/msg; %.1f rows read/msg %s; coordinator peak RSS %d MiB",
		spec.name, r.state, r.delivered, r.elapsed.Round(time.Millisecond), r.rate(), r.startLatency.Round(time.Millisecond), r.bareSnapshot.Round(100*time.Microsecond),
		r.cpuPerMsg().Round(100*time.Nanosecond), perMsg(r.cpuCoordinator, r.delivered), perMsg(r.cpuWorkers, r.delivered), r.kvPer1000(), r.xactsPerMsg(), r.rowsReadPerMsg(), readsText(r.reads), r.coordHWMKB/1024)
	return r, nil
}

// crashWorkers kills -9 every worker, reads where the cursors stand and
// what lies beyond them in the ledger, and starts as many workers again.
func (h *harness) crashWorkers(ctx context.Context, s *stack, id string, timeline []sample) (*crashResult, error) {
	killed := time.Now()
	c := &crashResult{atDelivered: timeline[len(timeline)-1].n, preRate: rateOver(timeline, 3*time.Second), pageLimit: ranges.PageSize, stalled: map[int]string{}}
	n := len(s.workers)
	for _, w := range s.workers {
		w.Signal(syscall.SIGKILL, 10*time.Second)
	}
	// Reports the workers published before dying are applied within
	// moments; after that the cursors stand still until pages re-run.
	if err := sleepCtx(ctx, 500*time.Millisecond); err != nil {
		return nil, err
	}
	if err := h.beyondCursors(ctx, s, id, c); err != nil {
		return nil, err
	}
	for range n {
		if err := s.addWorker(); err != nil {
			return nil, err
		}
	}
	c.restartAfter = time.Since(killed)
	h.logf("crash: killed %d workers at %d delivered (%.0f msg/s before); %d ledger rows beyond the cursors in %d ranges (at most %d in one; %d in doubt); restarted after %s",
		n, c.atDelivered, c.preRate, c.reread, c.rangesHit, c.maxPerRange, c.inDoubt, c.restartAfter.Round(time.Millisecond))
	// fullSpeedAfter is computed from the timeline once the run is over;
	// remember when the kill happened.
	c.killedAt = killed
	return c, nil
}

// beyondCursors counts, per unfinished range, ledger rows at or past the
// range's cursor (Next): rows a re-run page reads again.
func (h *harness) beyondCursors(ctx context.Context, s *stack, id string, c *crashResult) error {
	kv, err := s.js.KeyValue(ctx, bus.BroadcastBucket)
	if err != nil {
		return err
	}
	conn, err := h.connectSchema(ctx, s.spec.schema)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	bid, err := ulid.ParseStrict(id)
	if err != nil {
		return err
	}
	for i := range ranges.Count {
		e, err := kv.Get(ctx, bus.RangeKey(id, i))
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			// No report yet: the range is at its start. At half the
			// audience every range has reported; not counted.
			continue
		}
		if err != nil {
			return err
		}
		var rec bus.RangeRecord
		if err := bus.Decode(e.Value(), &rec); err != nil {
			return err
		}
		if rec.Done {
			continue
		}
		next, err1 := ulid.ParseStrict(rec.Next)
		end, err2 := ulid.ParseStrict(rec.End)
		if err := errors.Join(err1, err2); err != nil {
			return err
		}
		var rows, claimed int64
		err = conn.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE status = 'claimed') FROM broadcast_sends
WHERE broadcast_id = $1 AND contact_id >= $2 AND contact_id <= $3`, [16]byte(bid), [16]byte(next), [16]byte(end)).Scan(&rows, &claimed)
		if err != nil {
			return err
		}
		c.reread += rows
		c.inDoubt += claimed
		c.maxPerRange = max(c.maxPerRange, rows)
		if rows > 0 {
			c.rangesHit++
			c.stalled[i] = rec.Next
		}
	}
	return nil
}

// writeTimeline keeps the sink's counts as sampled, in the run's folder
// (-dir), for a look at where a run lost its time: seconds since
// StartBroadcast, messages accepted, messages in DATA.
func writeTimeline(path string, t0 time.Time, tl []sample) {
	var b strings.Builder
	b.WriteString("seconds,accepted,in_flight\n")
	for _, s := range tl {
		fmt.Fprintf(&b, "%.3f,%d,%d\n", s.at.Sub(t0).Seconds(), s.n, s.inFlight)
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
	}
}

// rateOver is the sink's rate over the last d of the timeline.
func rateOver(tl []sample, d time.Duration) float64 {
	if len(tl) < 2 {
		return 0
	}
	last := tl[len(tl)-1]
	first := tl[0]
	for _, s := range tl {
		if last.at.Sub(s.at) <= d {
			first = s
			break
		}
	}
	dt := last.at.Sub(first.at).Seconds()
	if dt <= 0 {
		return 0
	}
	return float64(last.n-first.n) / dt
}

// fullSpeed finds, after the kill, the first message after the restart and
// the end of the first 1 s window at 90 % of the rate before the kill.
func fullSpeed(tl []sample, c *crashResult) time.Duration {
	var atKill int64 = -1
	for i, s := range tl {
		if s.at.Before(c.killedAt) {
			continue
		}
		if atKill < 0 {
			atKill = tl[max(0, i-1)].n
		}
		if c.firstAfter == 0 && s.n > atKill && s.at.Sub(c.killedAt) > c.restartAfter {
			c.firstAfter = s.at.Sub(c.killedAt)
		}
		if s.at.Sub(c.killedAt) < c.restartAfter+time.Second {
			continue
		}
		if rateOver(tl[:i+1], time.Second) >= 0.9*c.preRate {
			return s.at.Sub(c.killedAt)
		}
	}
	return 0
}

func getBroadcast(ctx context.Context, api pb.BroadcastServiceClient, id string) (*pb.Broadcast, error) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := api.GetBroadcast(cctx, &pb.GetBroadcastRequest{Id: id})
	if err != nil {
		if status.Code(err) == codes.NotFound {
			return nil, fmt.Errorf("broadcast %s vanished: %w", id, err)
		}
		return nil, err
	}
	return resp.GetBroadcast(), nil
}

func stateName(s pb.BroadcastState) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "BROADCAST_STATE_"))
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// kvState is the broadcast's state as the coordinator mirrors it in KV
// (lowercase, as in store.State), or "" when it cannot be read.
func kvState(ctx context.Context, kv jetstream.KeyValue, id string) string {
	e, err := kv.Get(ctx, bus.StateKey(id))
	if err != nil {
		return ""
	}
	var rec bus.StateRecord
	if bus.Decode(e.Value(), &rec) != nil {
		return ""
	}
	return rec.State
}

// sampleActivity counts what rangecast's Postgres sessions are doing, every
// 50 ms until ctx ends: idle (waiting for the process), or active in which
// statement and wait event.
func (h *harness) sampleActivity(ctx context.Context, into map[activityKey]int) {
	for ctx.Err() == nil {
		acts, err := h.sessionActivity(ctx)
		if err == nil {
			for _, a := range acts {
				what := a.state
				if a.state == "active" {
					what = "active: " + statementKind(a.query)
					if a.wait != "" {
						what += " [" + a.wait + "]"
					}
				}
				into[activityKey{app: a.app, what: what}]++
			}
		}
		if sleepCtx(ctx, 50*time.Millisecond) != nil {
			return
		}
	}
}

// readsText lists tables' reads, the largest first.
func readsText(reads map[string]tableReads) string {
	type row struct {
		name string
		t    tableReads
	}
	var rows []row
	for n, t := range reads {
		if t.seqRows+t.idxRows > 0 {
			rows = append(rows, row{n, t})
		}
	}
	sort.Slice(rows, func(i, j int) bool {
		return rows[i].t.seqRows+rows[i].t.idxRows > rows[j].t.seqRows+rows[j].t.idxRows
	})
	var parts []string
	for _, r := range rows {
		parts = append(parts, fmt.Sprintf("%s: %d seq scans reading %d rows, %d index scans fetching %d", r.name, r.t.seqScans, r.t.seqRows, r.t.idxScans, r.t.idxRows))
	}
	return "(" + strings.Join(parts, "; ") + ")"
}

// stalledResumed reports whether every stalled range's cursor has moved
// past where it stood at the kill (or the range is done).
func stalledResumed(ctx context.Context, kv jetstream.KeyValue, id string, stalled map[int]string) bool {
	for i, next := range stalled {
		e, err := kv.Get(ctx, bus.RangeKey(id, i))
		if err != nil {
			return false
		}
		var rec bus.RangeRecord
		if bus.Decode(e.Value(), &rec) != nil {
			return false
		}
		if !rec.Done && rec.Next == next {
			return false
		}
	}
	return true
}
