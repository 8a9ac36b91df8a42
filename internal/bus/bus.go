// Package bus names every JetStream stream, consumer, KV bucket and subject
// rangecast uses, defines the messages that travel on them, and creates them
// idempotently at start.
package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

const (
	// PageStream holds page jobs. Work-queue retention: a job is removed once
	// a worker acks it, and one durable consumer is shared by all workers.
	PageStream   = "RANGECAST_PAGES"
	PageSubjects = "rangecast.pages.>"
	PageConsumer = "pageworkers"

	// ReportStream carries page reports from workers to the coordinator.
	ReportStream   = "RANGECAST_REPORTS"
	ReportSubjects = "rangecast.reports.>"
	ReportConsumer = "coordinator"

	// BroadcastBucket holds, per broadcast, the range records (the cursors)
	// and the broadcast state that workers watch. It is a hint: Postgres is
	// the truth.
	BroadcastBucket = "rangecast_broadcasts"

	// LeaseBucket holds the coordinators' leader lease. Entries expire
	// LeaseTTL after their last write, so a dead leader's lease lapses.
	LeaseBucket = "rangecast_leader"
	LeaseTTL    = 6 * time.Second

	// WorkerBucket holds one key per live page worker, rewritten every
	// WorkerBeat; a worker that stops writing (killed, partitioned) lapses
	// after WorkerTTL. The reconciler reads it to tell a dead owner's claims
	// (in doubt) from a live one's (in flight).
	WorkerBucket = "rangecast_workers"
	WorkerTTL    = 15 * time.Second
	WorkerBeat   = 3 * time.Second

	// VerifierBucket holds, per coordinator serving the public HTTP, the ids
	// of the unsubscribe keys it verifies links with (message.KeyID),
	// rewritten every VerifierBeat and lapsing after VerifierTTL. Page
	// workers sign with a key every live coordinator has, so a key put
	// first on the workers before the coordinators have it signs no link
	// nobody can verify.
	VerifierBucket = "rangecast_unsubscribe_keys"
	VerifierTTL    = 30 * time.Second
	VerifierBeat   = 10 * time.Second

	// DuplicateWindow is how long JetStream remembers a Nats-Msg-Id. A page
	// dispatched twice within it is stored once.
	DuplicateWindow = 2 * time.Minute
)

// PageHeartbeat is how often a worker tells JetStream it is still working on
// a page (InProgress), whatever a slow SMTP server does.
const PageHeartbeat = 5 * time.Second

// DefaultPageAckWait is PageAckWait's default: a live worker's heartbeat
// may be lost once (a gap of two intervals) without its page being handed
// on, while a dead worker's ranges sit idle for at most this long. At 20 s
// that idle time was the whole tail of a broadcast whose workers were
// killed near its end (see docs/benchmarks.md, the crash run).
const DefaultPageAckWait = 12 * time.Second

// Options tunes what Setup creates.
type Options struct {
	// PageAckWait is how long a worker may hold a page without a progress
	// heartbeat before JetStream hands it to another worker: how soon the
	// page of a dead worker is run again. Workers heartbeat every
	// PageHeartbeat, well within it.
	PageAckWait time.Duration
	// PageMaxDeliver bounds how often one page job is handed out. A page
	// that crashes or hangs its worker every time ends there, and the
	// coordinator fails the broadcast with the reason (see
	// MaxDeliveriesAdvisory) instead of looping.
	PageMaxDeliver int
	// Replicas for streams and buckets (1 for dev, 3 in a cluster).
	Replicas int
	// Memory keeps streams in memory (tests only).
	Memory bool
}

func (o Options) withDefaults() Options {
	if o.PageAckWait == 0 {
		o.PageAckWait = DefaultPageAckWait
	}
	if o.Replicas == 0 {
		o.Replicas = 1
	}
	if o.PageMaxDeliver == 0 {
		o.PageMaxDeliver = 10
	}
	return o
}

// Bus is the set of JetStream handles the coordinator and workers share.
type Bus struct {
	JS         jetstream.JetStream
	PageStream jetstream.Stream
	Pages      jetstream.Consumer
	Reports    jetstream.Consumer
	Broadcasts jetstream.KeyValue
	Lease      jetstream.KeyValue
	Governors  jetstream.KeyValue
	Workers    jetstream.KeyValue
	Verifiers  jetstream.KeyValue
}

// Setup creates (or updates) every stream, consumer and bucket.
func Setup(ctx context.Context, js jetstream.JetStream, o Options) (*Bus, error) {
	o = o.withDefaults()
	storage := jetstream.FileStorage
	if o.Memory {
		storage = jetstream.MemoryStorage
	}
	pageStream, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:       PageStream,
		Subjects:   []string{PageSubjects},
		Retention:  jetstream.WorkQueuePolicy,
		Storage:    storage,
		Replicas:   o.Replicas,
		Duplicates: DuplicateWindow,
	})
	if err != nil {
		return nil, fmt.Errorf("bus: page stream: %w", err)
	}
	pages, err := js.CreateOrUpdateConsumer(ctx, PageStream, jetstream.ConsumerConfig{
		Durable:       PageConsumer,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       o.PageAckWait,
		MaxDeliver:    o.PageMaxDeliver,
		MaxAckPending: 10000,
	})
	if err != nil {
		return nil, fmt.Errorf("bus: page consumer: %w", err)
	}
	if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:      ReportStream,
		Subjects:  []string{ReportSubjects},
		Retention: jetstream.WorkQueuePolicy,
		Storage:   storage,
		Replicas:  o.Replicas,
		// A report retried after a lost acknowledgement carries its
		// first try's id, and is stored once.
		Duplicates: DuplicateWindow,
	}); err != nil {
		return nil, fmt.Errorf("bus: report stream: %w", err)
	}
	reports, err := js.CreateOrUpdateConsumer(ctx, ReportStream, jetstream.ConsumerConfig{
		Durable:       ReportConsumer,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       30 * time.Second,
		MaxAckPending: 10000,
	})
	if err != nil {
		return nil, fmt.Errorf("bus: report consumer: %w", err)
	}
	if err := setupTransactional(ctx, js, o); err != nil {
		return nil, err
	}
	// Every bucket keeps one value per key; a TTL lets a writer's keys
	// lapse when it stops writing.
	bucket := func(name, what string, ttl time.Duration) (jetstream.KeyValue, error) {
		kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket:   name,
			History:  1,
			TTL:      ttl,
			Storage:  jetstream.StorageType(storage),
			Replicas: o.Replicas,
		})
		if err != nil {
			return nil, fmt.Errorf("bus: %s bucket: %w", what, err)
		}
		return kv, nil
	}
	kv, err := bucket(BroadcastBucket, "broadcast", 0)
	if err != nil {
		return nil, err
	}
	governors, err := bucket(GovernorBucket, "governor", 0)
	if err != nil {
		return nil, err
	}
	lease, err := bucket(LeaseBucket, "lease", LeaseTTL)
	if err != nil {
		return nil, err
	}
	workers, err := bucket(WorkerBucket, "worker", WorkerTTL)
	if err != nil {
		return nil, err
	}
	verifiers, err := bucket(VerifierBucket, "unsubscribe key", VerifierTTL)
	if err != nil {
		return nil, err
	}
	return &Bus{JS: js, PageStream: pageStream, Pages: pages, Reports: reports, Broadcasts: kv, Lease: lease, Governors: governors, Workers: workers,
		Verifiers: verifiers}, nil
}

// MaxDeliveriesAdvisory is where JetStream announces a page job that reached
// PageMaxDeliver.
const MaxDeliveriesAdvisory = "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES." + PageStream + "." + PageConsumer

// MaxDeliveries is the part of that advisory rangecast reads.
type MaxDeliveries struct {
	StreamSeq  uint64 `json:"stream_seq"`
	Deliveries int    `json:"deliveries"`
}

// PageSubject is where jobs for one range of a broadcast are published; one
// subject per range lets the coordinator ask whether that range's job is
// still queued.
func PageSubject(broadcast string, rangeIndex int) string {
	if rangeIndex == SweepRange {
		return "rangecast.pages." + broadcast + ".sweep"
	}
	return "rangecast.pages." + broadcast + "." + strconv.Itoa(rangeIndex)
}

// ReportSubject is where reports for one broadcast are published.
func ReportSubject(broadcast string) string { return "rangecast.reports." + broadcast }

// ReportMsgID is the JetStream dedupe id of the report of a page run (run:
// the worker's unique name for it). Every try to publish the report carries
// it, so a try stored whose acknowledgement was lost is not stored again:
// the governor counted such a report twice.
func ReportMsgID(run string) string { return "report:" + run }

// WorkerKey is the liveness key of one page worker.
func WorkerKey(worker string) string { return "w." + worker }

// OwnerWorker is the worker part of a claim owner ("worker/run").
func OwnerWorker(owner string) string {
	if i := strings.IndexByte(owner, '/'); i >= 0 {
		return owner[:i]
	}
	return owner
}

// StateKey is the KV key of a broadcast's state record.
func StateKey(broadcast string) string { return broadcast + ".state" }

// AlarmKey is the KV key of a broadcast's reputation when an alarm last
// paused it: counts after a resume start from there, on any leader.
func AlarmKey(broadcast string) string { return broadcast + ".alarm" }

// StateKeys matches every broadcast's state record (for workers' watch).
const StateKeys = "*.state"

// RangeKey is the KV key of one range record.
func RangeKey(broadcast string, index int) string {
	return broadcast + ".range." + strconv.Itoa(index)
}

// RangeKeys matches every range record of a broadcast.
func RangeKeys(broadcast string) string { return broadcast + ".range.*" }

// PublishPage queues a page job under its dedupe id. If JetStream reports a
// duplicate but the range has no job queued any more (the earlier copy was
// already run and acked), the job is published again under a fresh id:
// otherwise a re-dispatch within DuplicateWindow would be silently lost.
func (b *Bus) PublishPage(ctx context.Context, job PageJob, now time.Time) error {
	subject := PageSubject(job.Broadcast, job.Range)
	ack, err := b.JS.Publish(ctx, subject, Encode(job), jetstream.WithMsgID(job.MsgID()))
	if err != nil {
		return fmt.Errorf("publish page: %w", err)
	}
	if !ack.Duplicate {
		return nil
	}
	queued, err := b.PageStream.GetLastMsgForSubject(ctx, subject)
	if err == nil {
		var q PageJob
		if Decode(queued.Data, &q) == nil && q.From == job.From && q.Epoch == job.Epoch && q.Issue == job.Issue {
			return nil // the same page is still waiting for a worker
		}
	} else if !errors.Is(err, jetstream.ErrMsgNotFound) {
		return fmt.Errorf("publish page: look up queued job: %w", err)
	}
	_, err = b.JS.Publish(ctx, subject, Encode(job), jetstream.WithMsgID(job.MsgID()+":"+strconv.FormatInt(now.UnixNano(), 36)))
	if err != nil {
		return fmt.Errorf("publish page: %w", err)
	}
	return nil
}

// PageJob asks a worker to walk up to Limit eligible contacts of one range
// with From <= id <= Until. It carries no identity of its own: any worker can
// run it, and running it twice sends nothing twice.
type PageJob struct {
	Broadcast string `json:"broadcast"`
	Range     int    `json:"range"`
	From      string `json:"from"`
	Until     string `json:"until"`
	Limit     int    `json:"limit"`
	// Epoch is the range record's epoch when the job was made; a report
	// from an older epoch (before the reconciler moved the cursor back) is
	// ignored.
	Epoch int `json:"epoch,omitempty"`
	// Issue counts deliberate re-issues of the same page (after a resume):
	// a new issue is a new dedupe id, so it cannot be mistaken for a copy
	// that a worker is dropping at that moment.
	Issue int `json:"issue,omitempty"`
	// Content is the broadcast's content revision when the job was made
	// (store.Broadcast.ContentRevision): a worker holding an older compiled
	// content reads the broadcast again before sending (an edit while
	// paused).
	Content int `json:"content,omitempty"`
	// Issued is when the coordinator made the job (its clock), echoed in
	// the report: a refusal met by a page made before the broadcast's
	// last resume or last accepted message is old news and does not count
	// toward failing the broadcast.
	Issued time.Time `json:"issued,omitzero"`
	// Sweep marks a sweep of the broadcast's due deferred rows instead of a
	// walk of a range: Range is SweepRange, From and Until are unused.
	Sweep bool `json:"sweep,omitempty"`
	// Defer names the receiving providers whose recipients must not be sent
	// now (held after a quota rejection, or breaker open), with when to try
	// again: the worker records them deferred until then and walks on.
	Defer map[string]time.Time `json:"defer,omitempty"`
	// GiveUp names held providers that have accepted nothing for longer
	// than the coordinator waits (coordinator.GovernorConfig's
	// GiveUpAfter), with the reason: their recipients the worker would
	// defer are recorded failed with it instead, not attempted.
	GiveUp map[string]string `json:"give_up,omitempty"`
	// Probe names half-open providers this page carries the ramp's step
	// for: their recipients may be sent, on at most Conns[provider]
	// connections at a time (1 when absent: the breaker's probe), until the
	// step's transient refusals are at least StepFloor and StepShare of its
	// attempts (governor.StepEnds; both 0, from an older coordinator: the
	// first refusal); the rest are deferred until Defer's time for that
	// provider.
	Probe     []string       `json:"probe,omitempty"`
	Conns     map[string]int `json:"conns,omitempty"`
	StepShare float64        `json:"step_share,omitempty"`
	StepFloor int            `json:"step_floor,omitempty"`
}

// SweepRange is the Range of a sweep job, which belongs to no range.
const SweepRange = -1

// MsgID is the JetStream dedupe id: the same page dispatched twice within
// DuplicateWindow is stored once.
func (j PageJob) MsgID() string {
	if j.Sweep {
		return j.Broadcast + ":sweep:" + strconv.Itoa(j.Issue)
	}
	id := j.Broadcast + ":" + strconv.Itoa(j.Range) + ":" + j.From
	if j.Epoch > 0 {
		id += ":e" + strconv.Itoa(j.Epoch)
	}
	if j.Issue > 0 {
		id += ":i" + strconv.Itoa(j.Issue)
	}
	return id
}

// ErrorClass says why a page stopped early.
type ErrorClass string

const (
	ClassNone      ErrorClass = ""
	ClassTransient ErrorClass = "transient"
	ClassQuota     ErrorClass = "quota"
	ClassChannel   ErrorClass = "channel"
	ClassPaused    ErrorClass = "paused"
	ClassCancelled ErrorClass = "cancelled"
)

// Report tells the coordinator how far a page got. Next is the first id not
// yet walked: every id below it has a committed outcome (or belongs to
// another attempt's claim).
type Report struct {
	Broadcast string `json:"broadcast"`
	Range     int    `json:"range"`
	Epoch     int    `json:"epoch,omitempty"`
	From      string `json:"from"`
	Next      string `json:"next"`
	Done      bool   `json:"done"`
	Limit     int    `json:"limit"`
	// Issue is a sweep's PageJob.Issue: which of a broadcast's sweeps out
	// at once this reports.
	Issue   int        `json:"issue,omitempty"`
	Claimed int        `json:"claimed"`
	Sent    int        `json:"sent"`
	Failed  int        `json:"failed"`
	Class   ErrorClass `json:"class,omitempty"`
	Error   string     `json:"error,omitempty"`
	// Deferred counts recipients recorded deferred (their provider held).
	Deferred int `json:"deferred,omitempty"`
	// InDoubt counts messages whose connection was lost after the final
	// dot (or whose reply to it timed out): maybe delivered, recorded
	// unknown, never sent again.
	InDoubt int `json:"in_doubt,omitempty"`
	// Domain is the broadcast's sending domain, whose governor counts
	// what the page sent.
	Domain string `json:"domain,omitempty"`
	// Sweep: the report of a sweep job; it moves no cursor.
	Sweep bool `json:"sweep,omitempty"`
	// Providers is what each receiving provider did in this page, for the
	// governor's breakers and quota holds.
	Providers map[string]ProviderResult `json:"providers,omitempty"`
	// Probed echoes the job's Probe: the half-open providers whose ramp
	// step this page carried, released when it had none of theirs to send.
	Probed []string `json:"probed,omitempty"`
	// Reached counts the sends that got as far as naming their recipient
	// (RCPT TO), whatever the answer; Unreached those that failed before
	// (connect, TLS, AUTH, MAIL FROM). A sweep that reached nobody is the
	// relay refusing everyone, not a tail of recipients refusing. Both
	// are 0 from a worker older than them.
	Reached   int `json:"reached,omitempty"`
	Unreached int `json:"unreached,omitempty"`
	// Issued echoes the job's Issued; zero from a worker older than it.
	Issued time.Time `json:"issued,omitzero"`
}

// ProviderResult is one receiving provider's part of a page.
type ProviderResult struct {
	Sent      int `json:"sent,omitempty"`
	Transient int `json:"transient,omitempty"`
	// Quota: the provider refused for quota (e.g. 452 4.5.3).
	Quota bool `json:"quota,omitempty"`
	// Hold is the pause the provider's own guidance asks for after its
	// reply (Gmail 421 4.7.28: 10 minutes), instead of a quota rejection's
	// lowered ceiling; Linear: come back one connection at a time.
	Hold   time.Duration `json:"hold,omitempty"`
	Linear bool          `json:"linear,omitempty"`
	// Reply is the latest refusal's short form ("451 4.3.0"), for status.
	Reply string `json:"reply,omitempty"`
	// StepEnded: the page carried this provider's ramp step and ended it
	// (its refusals met governor.StepEnds, or a quota, hold or channel
	// error): the coordinator re-opens the breaker whatever sends still in
	// flight then brought. An older worker never sets it.
	StepEnded bool `json:"step_ended,omitempty"`
}

// RangeRecord is the coordinator's cursor for one range, stored in KV.
type RangeRecord struct {
	Index int    `json:"index"`
	Start string `json:"start"`
	End   string `json:"end"`
	// Next is the first id not yet walked; it only moves forward.
	Next       string `json:"next"`
	Done       bool   `json:"done"`
	Dispatched int64  `json:"dispatched"`
	Sent       int64  `json:"sent"`
	Failed     int64  `json:"failed"`
	// Epoch grows each time the reconciler moves the cursor back to re-walk
	// a released in-doubt claim; reports of pages from an older epoch must
	// not move the cursor past it.
	Epoch int `json:"epoch,omitempty"`
	// Fruitless counts consecutive reports that made no progress because of
	// a transient error.
	Fruitless int `json:"fruitless,omitempty"`
}

// StateRecord mirrors a broadcast's state for workers to watch.
type StateRecord struct {
	State  string `json:"state"`
	Reason string `json:"reason,omitempty"`
	// Content is the broadcast's content revision (an edit while paused
	// makes the next): a worker whose page or cached content is older
	// stops the page or reads the content again, whatever its job says.
	Content int `json:"content,omitempty"`
}

// Encode marshals a bus message.
func Encode(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("bus: encode %T: %v", v, err)) // only plain structs travel on the bus
	}
	return b
}

// Decode unmarshals a bus message.
func Decode(data []byte, v any) error {
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("bus: decode %T: %w", v, err)
	}
	return nil
}

// WorkerRecord is a live page worker's liveness record (WorkerKey): the claim
// owners ("worker/run") of the page runs it is making progress on. A run
// missing from it, or a worker whose key lapsed, holds its claims no more:
// the reconciler settles them.
type WorkerRecord struct {
	Runs []string `json:"runs"`
}
