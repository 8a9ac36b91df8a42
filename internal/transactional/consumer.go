package transactional

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/oklog/ulid/v2"

	"github.com/rangecast/rangecast/internal/bus"
	"github.com/rangecast/rangecast/internal/clock"
	"github.com/rangecast/rangecast/internal/message"
	"github.com/rangecast/rangecast/internal/store"
	"github.com/rangecast/rangecast/internal/transport"
)

// Lookup answers "was the message with this Message-ID accepted?" for a
// transport that can tell; it settles a send whose worker died mid-send.
type Lookup func(ctx context.Context, messageID string) (accepted bool, err error)

// ConsumerConfig wires the sender that runs inside the page worker process.
type ConsumerConfig struct {
	Store     store.Store
	JS        jetstream.JetStream
	Transport transport.Transport
	Clock     clock.Clock
	Log       *slog.Logger
	// DKIM signs each message with its From domain's keys; nil signs
	// nothing.
	DKIM *message.DKIM
	// Slots is how many messages are sent at once. They are the consumer's
	// own, apart from the page worker's window, so a running broadcast
	// never makes transactional mail wait for a slot.
	Slots int
	// Schedule decides retries (default DefaultSchedule).
	Schedule Schedule
	// InDoubtAfter is the claim lease: a message claimed this long ago with
	// no outcome was being sent by a worker that died. Longer than one SMTP
	// attempt can take (default 5 minutes).
	InDoubtAfter time.Duration
	// Lookup settles in-doubt sends; without it they are marked unknown
	// and never sent again.
	Lookup Lookup
	// Admission, when set, is asked before every attempt; nil sends freely.
	Admission Admission
	// FetchWait bounds one pull, so a stop is noticed promptly.
	FetchWait time.Duration
	// SweepEvery is how often receipts that lost their job (a Send that
	// stored the message but could not queue it) are queued again; the
	// grace before one counts as lost is the same. Default 1 minute.
	SweepEvery time.Duration
	// Rand returns a number in [0, 1) for the retry jitter.
	Rand func() float64
}

func (c ConsumerConfig) withDefaults() ConsumerConfig {
	if c.Clock == nil {
		c.Clock = clock.Real{}
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
	if c.Slots <= 0 {
		c.Slots = 4
	}
	if len(c.Schedule.Backoff) == 0 {
		c.Schedule = DefaultSchedule
	}
	if c.InDoubtAfter == 0 {
		c.InDoubtAfter = 5 * time.Minute
	}
	if c.FetchWait == 0 {
		c.FetchWait = 2 * time.Second
	}
	if c.SweepEvery == 0 {
		c.SweepEvery = time.Minute
	}
	if c.Rand == nil {
		c.Rand = rand.Float64
	}
	return c
}

// Consumer pulls transactional jobs and sends them.
type Consumer struct {
	cfg ConsumerConfig
	// started numbers this consumer's sends as they start; accepted is the
	// highest number of a send its relay accepted. A refusal that may be
	// one mailbox's is that mailbox's only if the relay accepted, since
	// the same message's refusal before, a send started after it (lone):
	// an order the relay's answers give, not two machines' clocks.
	started, accepted atomic.Int64
	// lones holds, by message, the attempt this consumer last saw refused
	// so and the send number then (the page's own memory: a retry on
	// another worker, or after a restart, counts as a first refusal).
	lonesMu sync.Mutex
	lones   map[ulid.ULID]loneMark
}

// loneMark is a message's latest lone refusal seen here: its attempt and
// Consumer.started then.
type loneMark struct {
	n       int
	started int64
}

// NewConsumer returns a consumer; Run starts it.
func NewConsumer(cfg ConsumerConfig) *Consumer { return &Consumer{cfg: cfg.withDefaults()} }

// retryStoreAfter is how soon a job is offered again after the store or bus
// failed to answer.
const retryStoreAfter = 5 * time.Second

// Run pulls and sends until ctx ends. Sends in flight then finish and
// record their outcome before Run returns.
func (c *Consumer) Run(ctx context.Context) error {
	cons, err := c.cfg.JS.Consumer(ctx, bus.TxStream, bus.TxConsumer)
	if err != nil {
		if ctx.Err() != nil {
			return nil // stopped before it started
		}
		return fmt.Errorf("transactional consumer: %w", err)
	}
	var wg sync.WaitGroup
	for range c.cfg.Slots {
		wg.Go(func() { c.slot(ctx, cons) })
	}
	wg.Go(func() { c.sweep(ctx) })
	wg.Wait()
	return nil
}

func (c *Consumer) slot(ctx context.Context, cons jetstream.Consumer) {
	for ctx.Err() == nil {
		msg, err := cons.Next(jetstream.FetchMaxWait(c.cfg.FetchWait))
		if err != nil {
			if errors.Is(err, jetstream.ErrNoMessages) || errors.Is(err, nats.ErrTimeout) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				continue
			}
			c.cfg.Log.Warn("fetch transactional job failed", "err", err)
			select {
			case <-ctx.Done():
			case <-c.cfg.Clock.After(time.Second):
			}
			continue
		}
		// The attempt runs to its outcome even when the worker is asked to
		// stop: a message must not be left claimed by a clean shutdown.
		c.handle(context.WithoutCancel(ctx), msg)
	}
}

// handle settles one job with JetStream: Ack when the message is finished
// (or the job is a stale copy), NakWithDelay to try it again later.
func (c *Consumer) handle(ctx context.Context, msg jetstream.Msg) {
	var job bus.TxJob
	if err := bus.Decode(msg.Data(), &job); err != nil {
		c.cfg.Log.Error("malformed transactional job dropped", "err", err)
		msg.Term() //nolint:errcheck
		return
	}
	id, err := ulid.ParseStrict(job.ID)
	if err != nil {
		c.cfg.Log.Error("transactional job with a malformed id dropped", "id", job.ID)
		msg.Term() //nolint:errcheck
		return
	}
	log := c.cfg.Log.With("message", job.ID)
	r, err := c.cfg.Store.GetReceipt(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		log.Error("transactional job for an unknown message dropped")
		msg.Term() //nolint:errcheck
		return
	}
	if err != nil {
		log.Warn("cannot read transactional message; retried later", "err", err)
		msg.NakWithDelay(retryStoreAfter) //nolint:errcheck
		return
	}
	now := c.cfg.Clock.Now()
	switch {
	case r.Status.Finished():
		msg.Ack() //nolint:errcheck
		return
	case r.Status == store.ReceiptSending:
		if held := r.ClaimedAt.Add(c.cfg.InDoubtAfter).Sub(now); held > 0 {
			// Someone holds the claim (or held it and died): wait out its
			// lease before judging it.
			msg.NakWithDelay(held) //nolint:errcheck
			return
		}
		var again bool
		if r, again = c.settleInDoubt(ctx, log, r); !again {
			c.settle(msg, r, now)
			return
		}
	case r.NextAttemptAt.After(now):
		msg.NakWithDelay(r.NextAttemptAt.Sub(now)) //nolint:errcheck
		return
	}
	c.attempt(ctx, log, msg, r)
}

// settle acks a finished message's job or offers a queued one again when
// it is due; a receipt that could not be read or written is retried soon.
func (c *Consumer) settle(msg jetstream.Msg, r store.Receipt, now time.Time) {
	switch {
	case r.Status.Finished():
		msg.Ack() //nolint:errcheck
	case r.Status == store.ReceiptQueued:
		msg.NakWithDelay(max(r.NextAttemptAt.Sub(now), 0)) //nolint:errcheck
	default:
		msg.NakWithDelay(retryStoreAfter) //nolint:errcheck
	}
}

// attempt claims a queued, due message, sends it and records the outcome.
func (c *Consumer) attempt(ctx context.Context, log *slog.Logger, msg jetstream.Msg, r store.Receipt) {
	p, err := decodePayload(r.Payload)
	if err != nil {
		log.Error("transactional message cannot be decoded", "err", err)
		msg.NakWithDelay(retryStoreAfter) //nolint:errcheck
		return
	}
	m := p.message()
	now := c.cfg.Clock.Now()
	if g := c.cfg.Admission; g != nil {
		held, err := g.Admit(ctx, m.SendingDomain(), m.To, now)
		switch {
		case err != nil:
			log.Warn("governor did not answer; retried later", "err", err)
			msg.NakWithDelay(retryStoreAfter) //nolint:errcheck
			return
		case held.Until.After(now):
			log.Debug("transactional message held by the governor", "until", held.Until, "limit", held.Limit, "reason", held.Text)
			msg.NakWithDelay(held.Until.Sub(now)) //nolint:errcheck
			return
		}
	}
	// The claim is committed before the message can reach the server: a
	// second job, worker or replay finds it sending and sends nothing.
	r, err = c.cfg.Store.ClaimReceipt(ctx, r.ID, now)
	if errors.Is(err, store.ErrConflict) {
		msg.Ack() //nolint:errcheck // another copy of the job holds it
		return
	}
	if err != nil {
		log.Warn("cannot claim transactional message; retried later", "err", err)
		msg.NakWithDelay(retryStoreAfter) //nolint:errcheck
		return
	}
	n := r.Attempts
	rendered, err := message.RenderTransactional(m, r.MessageID, now)
	if err == nil {
		rendered, _, err = c.cfg.DKIM.Sign(rendered)
	}
	if err != nil {
		// Validated when it was accepted, so this is a bug or a changed
		// rule; retrying cannot help.
		c.finish(ctx, log, msg, r, n, store.AttemptOutcome{Status: store.ReceiptFailed, Result: "invalid", Reply: err.Error()})
		return
	}
	msg.InProgress() //nolint:errcheck // the ack wait starts again for the send
	seq := c.started.Add(1)
	reply, sendErr := c.cfg.Transport.Send(ctx, rendered)
	done := c.cfg.Clock.Now()
	class := transport.Classify(sendErr)
	if g := c.cfg.Admission; g != nil {
		g.Observe(m.SendingDomain(), m.To, sendErr, done)
	}
	var se *transport.SendError
	if sendErr == nil {
		for a := c.accepted.Load(); a < seq && !c.accepted.CompareAndSwap(a, seq); a = c.accepted.Load() {
		}
	}
	if !transport.MaybeOneRecipient(sendErr) {
		c.forgetLone(r.ID)
	}
	switch {
	case sendErr == nil:
		sendSeconds.Observe(done.Sub(r.CreatedAt).Seconds())
		c.finish(ctx, log, msg, r, n, store.AttemptOutcome{Status: store.ReceiptSent, Result: "sent", Reply: reply})
	case errors.As(sendErr, &se) && se.MaybeDelivered && c.cfg.Lookup == nil:
		// The server may have the message and nothing can ask it: sending
		// again could deliver a second copy, so it is never resent.
		c.finish(ctx, log, msg, r, n, store.AttemptOutcome{Status: store.ReceiptUnknown, Result: "in_doubt", Reply: sendErr.Error(),
			Reason: "in doubt: the connection was lost after the message was handed over, and the transport cannot say whether it was accepted; not sent again"})
	case errors.As(sendErr, &se) && se.MaybeDelivered:
		// The claim stays until its lease ends; then the lookup settles it
		// (a server may take a moment to show a message it accepted).
		attempts.WithLabelValues("in_doubt").Inc()
		log.Warn("transactional send in doubt; looked up after the lease", "err", sendErr)
		msg.NakWithDelay(c.cfg.InDoubtAfter) //nolint:errcheck
	case class == transport.Recipient:
		c.finish(ctx, log, msg, r, n, store.AttemptOutcome{Status: store.ReceiptFailed, Result: "recipient", Reply: sendErr.Error()})
	case transport.MaybeOneRecipient(sendErr):
		c.finish(ctx, log, msg, r, n, c.lone(ctx, log, r, n, sendErr, done))
	case transport.BeforeRecipient(sendErr):
		// The relay took nothing (down, TLS or AUTH failing, the sender
		// refused): retried for Schedule.Unreached, not charged as one of
		// the message's attempts (named).
		if class == transport.Channel {
			channelErrors.Inc()
			log.Error("transactional send hit a channel-wide error", "attempt", n, "err", sendErr)
		}
		o := store.AttemptOutcome{Result: resultUnreached, Reply: sendErr.Error()}
		if wait, ok := c.cfg.Schedule.RetryUnreached(n, class, done.Sub(r.CreatedAt), c.cfg.Rand()); ok {
			o.Status, o.NextAttemptAt = store.ReceiptQueued, done.Add(wait)
		} else {
			o.Status = store.ReceiptFailed
			o.Reason = fmt.Sprintf("gave up after %s with the relay taking nothing (%d attempts); last reply: %s",
				cmp.Or(c.cfg.Schedule.Unreached, DefaultUnreached), n, sendErr.Error())
		}
		c.finish(ctx, log, msg, r, n, o)
	default:
		if class == transport.Channel {
			channelErrors.Inc()
			log.Error("transactional send hit a channel-wide error", "attempt", n, "err", sendErr)
		}
		o := store.AttemptOutcome{Result: class.String(), Reply: sendErr.Error()}
		c.retryOrGiveUp(ctx, log, r.ID, n, class, sendErr, done, &o)
		c.finish(ctx, log, msg, r, n, o)
	}
}

// resultUnreached is the result of an attempt that failed before the
// recipient was named (transport.BeforeRecipient).
const resultUnreached = "unreached"

// resultLone is the result of an attempt refused by a reply a server may
// give of one mailbox alone (transport.MaybeOneRecipient: a mailbox's
// policy filter, "550 5.7.1 … for <x>"), or of the whole relay.
const resultLone = "lone"

// lone decides attempt n refused by err, a reply that may be the
// recipient's alone or the relay's for everyone. Refused so twice in a row
// here, the relay accepting a send started in between, it is the
// recipient's: failed, with the reply. The first time it is retried at the schedule's
// step, without the channel alert; refused so again with nothing accepted
// in between, it may be the relay's: the longest step and the alert, as a
// channel error. Every one was the channel's: one filtered mailbox was
// retried for hours and raised the alert (tester). Failing one at once
// when such refusals were rare (reverted) would have failed, for good,
// the first messages of a relay that starts refusing everyone (reviewer).
func (c *Consumer) lone(ctx context.Context, log *slog.Logger, r store.Receipt, n int, err error, done time.Time) store.AttemptOutcome {
	o := store.AttemptOutcome{Result: resultLone, Reply: err.Error()}
	class := transport.Transient
	c.lonesMu.Lock()
	prev, again := c.lones[r.ID]
	again = again && prev.n == n-1
	if again && c.accepted.Load() > prev.started {
		delete(c.lones, r.ID)
		c.lonesMu.Unlock()
		o.Status, o.Result = store.ReceiptFailed, "recipient"
		o.Reason = "refused twice by a reply about this mailbox, while the relay took other mail in between: " + err.Error()
		return o
	}
	if c.lones == nil {
		c.lones = map[ulid.ULID]loneMark{}
	}
	c.lones[r.ID] = loneMark{n: n, started: c.started.Load()}
	c.lonesMu.Unlock()
	if again {
		class = transport.Channel
		channelErrors.Inc()
		log.Error("transactional send refused again with nothing accepted since: the relay may be refusing everyone", "attempt", n, "err", err)
	}
	if c.retryOrGiveUp(ctx, log, r.ID, n, class, err, done, &o) {
		c.forgetLone(r.ID)
	}
	return o
}

// retryOrGiveUp queues o for the schedule's retry of a failure of class
// after attempt n, by the attempts that named the recipient, or fails it
// once they are spent, with the last reply, and says whether it did.
func (c *Consumer) retryOrGiveUp(ctx context.Context, log *slog.Logger, id ulid.ULID, n int, class transport.Class, err error, done time.Time, o *store.AttemptOutcome) (gaveUp bool) {
	named := c.named(ctx, log, id, n)
	if wait, ok := c.cfg.Schedule.Retry(named, class, c.cfg.Rand()); ok {
		o.Status, o.NextAttemptAt = store.ReceiptQueued, done.Add(wait)
		return false
	}
	o.Status = store.ReceiptFailed
	o.Reason = fmt.Sprintf("gave up after %d attempts; last reply: %s", named, err.Error())
	return true
}

// forgetLone drops a message's lone mark: its attempt had another end.
func (c *Consumer) forgetLone(id ulid.ULID) {
	c.lonesMu.Lock()
	defer c.lonesMu.Unlock()
	delete(c.lones, id)
}

// named is how many of a message's n attempts named its recipient: the
// others (resultUnreached) are not charged to it. n when the history
// cannot be read: the message is then retried as if each counted, which
// gives up sooner, never later.
func (c *Consumer) named(ctx context.Context, log *slog.Logger, id ulid.ULID, n int) int {
	if n <= 1 {
		return n
	}
	as, err := c.cfg.Store.ReceiptAttempts(ctx, id)
	if err != nil {
		log.Warn("cannot read the message's attempts; each counts", "err", err)
		return n
	}
	named := n
	for _, a := range as {
		if a.Result == resultUnreached {
			named--
		}
	}
	return max(named, 1)
}

// finish records attempt n's outcome, announces it and settles the job.
func (c *Consumer) finish(ctx context.Context, log *slog.Logger, msg jetstream.Msg, r store.Receipt, n int, o store.AttemptOutcome) {
	now := c.cfg.Clock.Now()
	got, err := c.cfg.Store.FinishAttempt(ctx, r.ID, n, o, now)
	// This worker knows the outcome; once it gives up, only the in-doubt
	// rules can decide, and without a transport lookup they must call it
	// unknown. So a store blip is retried here for a while first.
	for wait := time.Second; err != nil && !errors.Is(err, store.ErrConflict) && wait <= 16*time.Second; wait *= 2 {
		log.Warn("transactional outcome not recorded yet; retrying", "attempt", n, "err", err, "in", wait)
		msg.InProgress() //nolint:errcheck // the job stays this worker's meanwhile
		select {
		case <-ctx.Done():
		case <-c.cfg.Clock.After(wait):
		}
		if ctx.Err() != nil {
			break
		}
		now = c.cfg.Clock.Now()
		got, err = c.cfg.Store.FinishAttempt(ctx, r.ID, n, o, now)
	}
	switch {
	case errors.Is(err, store.ErrConflict):
		// Settled by someone else (the in-doubt rules, after this send
		// outlived its lease); the stored outcome stands.
		log.Warn("transactional outcome already settled elsewhere", "attempt", n, "result", o.Result)
		msg.Ack() //nolint:errcheck
		return
	case err != nil:
		// The claim stays; after its lease the in-doubt rules settle it
		// (the message may have gone), never a blind resend.
		log.Error("cannot record transactional outcome", "attempt", n, "result", o.Result, "err", err)
		msg.NakWithDelay(c.cfg.InDoubtAfter) //nolint:errcheck
		return
	}
	attempts.WithLabelValues(o.Result).Inc()
	if got.Status == store.ReceiptQueued {
		retriesScheduled.Inc()
	}
	log.Info("transactional attempt", "attempt", n, "result", o.Result, "status", got.Status, "reply", o.Reply)
	c.announce(got.ID)
	c.settle(msg, got, now)
}

// settleInDoubt decides a claim whose lease ended without an outcome: the
// worker died between claim and outcome. Confirmed accepted → sent;
// confirmed not accepted → attempt recorded lost, and again = true (send
// now); no way to tell → unknown, never resent.
func (c *Consumer) settleInDoubt(ctx context.Context, log *slog.Logger, r store.Receipt) (_ store.Receipt, again bool) {
	n := r.Attempts
	var o store.AttemptOutcome
	if c.cfg.Lookup == nil {
		o = store.AttemptOutcome{Status: store.ReceiptUnknown, Result: "unknown",
			Reply: "in doubt: the worker stopped between claim and outcome, and the transport cannot say whether the message was accepted; not sent again"}
	} else {
		accepted, err := c.cfg.Lookup(ctx, r.MessageID)
		switch {
		case err != nil:
			log.Warn("in-doubt lookup failed; retried later", "err", err)
			return r, false
		case accepted:
			o = store.AttemptOutcome{Status: store.ReceiptSent, Result: "sent", Reply: "accepted (confirmed by the transport after the worker stopped)"}
		default:
			o = store.AttemptOutcome{Status: store.ReceiptQueued, Result: "lost", NextAttemptAt: c.cfg.Clock.Now(),
				Reply: "the worker stopped before the server accepted the message (confirmed by the transport)"}
			if named := c.named(ctx, log, r.ID, n); named >= c.cfg.Schedule.MaxAttempts() {
				o.Status, o.NextAttemptAt = store.ReceiptFailed, time.Time{}
				o.Reason = "gave up after " + strconv.Itoa(named) + " attempts; the last worker stopped before the server accepted the message"
			}
		}
	}
	got, err := c.cfg.Store.FinishAttempt(ctx, r.ID, n, o, c.cfg.Clock.Now())
	if err != nil {
		if !errors.Is(err, store.ErrConflict) {
			log.Warn("cannot settle in-doubt transactional message", "err", err)
		}
		return r, false
	}
	attempts.WithLabelValues(o.Result).Inc()
	log.Warn("in-doubt transactional message settled", "attempt", n, "result", o.Result, "status", got.Status)
	c.announce(got.ID)
	return got, got.Status == store.ReceiptQueued
}

func (c *Consumer) announce(id ulid.ULID) {
	if nc := c.cfg.JS.Conn(); nc != nil {
		nc.Publish(bus.TxEventSubject(id.String()), nil) //nolint:errcheck // a waiter also polls
	}
}

// sweepBatch bounds the receipts re-queued in one round.
const sweepBatch = 200

// sweep re-queues messages whose job is gone: stored by Send but never
// queued (the publish failed), or queued and overdue with nothing in the
// stream. PublishTx skips any message whose job is still there.
func (c *Consumer) sweep(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.cfg.Clock.After(c.cfg.SweepEvery):
		}
		now := c.cfg.Clock.Now()
		grace := c.cfg.SweepEvery
		rs, err := c.cfg.Store.StaleReceipts(ctx, now.Add(-grace), now.Add(-c.cfg.InDoubtAfter-grace), sweepBatch)
		if err != nil {
			c.cfg.Log.Warn("cannot look for lost transactional jobs", "err", err)
			continue
		}
		for _, r := range rs {
			dedupe := fmt.Sprintf("sweep:%s:%d:%d", r.Status, r.Attempts, now.Unix()/int64(max(grace/time.Second, 1)))
			if err := bus.PublishTx(ctx, c.cfg.JS, r.ID.String(), dedupe); err != nil {
				c.cfg.Log.Warn("cannot re-queue transactional message", "message", r.ID, "err", err)
			}
		}
	}
}
