package bus

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

const (
	// TxStream holds transactional send jobs, one subject per message. It is
	// a stream of its own with its own consumer, so transactional mail never
	// waits behind page jobs. Work-queue retention: a job leaves the stream
	// once its message is finished (sent, failed or unknown); a retry is the
	// same job offered again later (NakWithDelay).
	TxStream   = "RANGECAST_TRANSACTIONAL"
	TxSubjects = "rangecast.tx.>"
	TxConsumer = "transactional"

	// TxEventPrefix is where workers announce, on core NATS (no stream),
	// that a transactional message's attempt has an outcome, so a Send
	// waiting for it answers at once instead of polling. Outside TxSubjects
	// on purpose: the stream must not store these.
	TxEventPrefix = "rangecast.txevents."
)

// TxOptions tunes the transactional stream and consumer.
type TxOptions struct {
	// AckWait is how long a worker may hold a job without a heartbeat
	// before JetStream offers it to another worker: how soon the job of a
	// worker that died mid-send is looked at again. Longer than one SMTP
	// attempt (the transport's timeout) with a margin.
	AckWait  time.Duration
	Replicas int
	Memory   bool
}

// SetupTransactional creates (or updates) the transactional stream and its
// consumer and returns the consumer. MaxDeliver is unlimited on purpose: how
// often a message is tried is decided by its receipt's attempt count, which
// ends it as failed, visibly; a JetStream delivery limit would drop the job
// silently and leave the receipt queued.
func SetupTransactional(ctx context.Context, js jetstream.JetStream, o TxOptions) (jetstream.Consumer, error) {
	if o.AckWait == 0 {
		o.AckWait = 2 * time.Minute
	}
	if o.Replicas == 0 {
		o.Replicas = 1
	}
	storage := jetstream.FileStorage
	if o.Memory {
		storage = jetstream.MemoryStorage
	}
	if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:       TxStream,
		Subjects:   []string{TxSubjects},
		Retention:  jetstream.WorkQueuePolicy,
		Storage:    storage,
		Replicas:   o.Replicas,
		Duplicates: DuplicateWindow,
	}); err != nil {
		return nil, fmt.Errorf("bus: transactional stream: %w", err)
	}
	c, err := js.CreateOrUpdateConsumer(ctx, TxStream, jetstream.ConsumerConfig{
		Durable:       TxConsumer,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       o.AckWait,
		MaxDeliver:    -1,
		MaxAckPending: 10000,
	})
	if err != nil {
		return nil, fmt.Errorf("bus: transactional consumer: %w", err)
	}
	return c, nil
}

// setupTransactional is Setup's part: the options Setup was given.
func setupTransactional(ctx context.Context, js jetstream.JetStream, o Options) error {
	_, err := SetupTransactional(ctx, js, TxOptions{Replicas: o.Replicas, Memory: o.Memory})
	return err
}

// TxSubject is the job subject of one transactional message.
func TxSubject(id string) string { return "rangecast.tx.jobs." + id }

// TxEventSubject is where an attempt's outcome for message id is announced.
func TxEventSubject(id string) string { return TxEventPrefix + id }

// TxJob asks a worker to try one transactional message. It names the
// receipt only; the receipt's state decides what happens, so a duplicate
// job is harmless.
type TxJob struct {
	ID string `json:"id"`
}

// PublishTx queues a job for message id unless one is already waiting in the
// stream. dedupe distinguishes deliberate re-publications (after a lost job)
// from copies of the same publication within DuplicateWindow.
func PublishTx(ctx context.Context, js jetstream.JetStream, id, dedupe string) error {
	subject := TxSubject(id)
	stream, err := js.Stream(ctx, TxStream)
	if err != nil {
		return fmt.Errorf("publish transactional job: %w", err)
	}
	if _, err := stream.GetLastMsgForSubject(ctx, subject); err == nil {
		return nil // a job is still in the stream: queued, delayed or held by a worker
	} else if !errors.Is(err, jetstream.ErrMsgNotFound) {
		return fmt.Errorf("publish transactional job: look up queued job: %w", err)
	}
	msgID := id
	if dedupe = strings.TrimSpace(dedupe); dedupe != "" {
		msgID += ":" + dedupe
	}
	if _, err := js.Publish(ctx, subject, Encode(TxJob{ID: id}), jetstream.WithMsgID(msgID)); err != nil {
		return fmt.Errorf("publish transactional job: %w", err)
	}
	return nil
}
