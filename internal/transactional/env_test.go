package transactional_test

import (
	"context"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/emersion/go-smtp"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/rangecast/rangecast/internal/bus"
	"github.com/rangecast/rangecast/internal/capture"
	"github.com/rangecast/rangecast/internal/message"
	"github.com/rangecast/rangecast/internal/store"
	"github.com/rangecast/rangecast/internal/testenv"
	"github.com/rangecast/rangecast/internal/transactional"
	"github.com/rangecast/rangecast/internal/transport"
	pb "github.com/rangecast/rangecast/proto/rangecast/v1"
)

// fastSchedule: four attempts, milliseconds apart, no jitter, so retry tests
// run in well under a second and their timings are exact.
var fastSchedule = transactional.Schedule{Backoff: []time.Duration{20 * time.Millisecond, 20 * time.Millisecond, 20 * time.Millisecond}}

// env is transactional mail on real parts: a store (Postgres when
// reachable), embedded JetStream, a scripted SMTP server (internal/capture
// on go-smtp), the service behind real gRPC, and consumers started on demand.
type env struct {
	t      *testing.T
	store  store.Store
	js     jetstream.JetStream
	sink   *capture.Server
	client pb.TransactionalServiceClient
}

type envOptions struct {
	sqlite   bool
	sinkOpts []capture.Option
}

func testLogger() *slog.Logger {
	if os.Getenv("RANGECAST_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

func setup(t *testing.T, o envOptions) *env {
	t.Helper()
	ctx := context.Background()
	var st store.Store
	if o.sqlite {
		st = testenv.SQLite(t)
	} else {
		st = testenv.Store(t)
	}
	_, js := testenv.NATS(t)
	if _, err := bus.Setup(ctx, js, bus.Options{Memory: true}); err != nil {
		t.Fatal(err)
	}
	// A short ack wait: a job held by a worker that froze is offered to
	// another one within a second.
	if _, err := bus.SetupTransactional(ctx, js, bus.TxOptions{Memory: true, AckWait: time.Second}); err != nil {
		t.Fatal(err)
	}
	sink, err := capture.Start("127.0.0.1:0", o.sinkOpts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sink.Close() })

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	pb.RegisterTransactionalServiceServer(srv, transactional.NewService(transactional.ServiceConfig{
		Store: st, JS: js, Log: testLogger(), PollEvery: 50 * time.Millisecond,
	}))
	go srv.Serve(lis) //nolint:errcheck
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &env{t: t, store: st, js: js, sink: sink, client: pb.NewTransactionalServiceClient(conn)}
}

// smtp returns a transport to the scripted server, closed with the test.
func (e *env) smtp() transport.Transport {
	e.t.Helper()
	tr, err := transport.NewSMTP(e.sink.URL())
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { tr.Close() })
	return tr
}

// consumer starts a consumer on the scripted server with the fast schedule
// (tune adjusts it) and stops it, waiting for its sends, when the test ends.
func (e *env) consumer(tune func(*transactional.ConsumerConfig)) (stop func()) {
	e.t.Helper()
	cfg := transactional.ConsumerConfig{
		Store: e.store, JS: e.js, Transport: e.smtp(), Log: testLogger(),
		Slots: 2, Schedule: fastSchedule, InDoubtAfter: time.Second,
		FetchWait: 200 * time.Millisecond, SweepEvery: time.Hour,
	}
	if tune != nil {
		tune(&cfg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := transactional.NewConsumer(cfg).Run(ctx); err != nil {
			e.t.Errorf("consumer: %v", err)
		}
	})
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); wg.Wait() }) }
	e.t.Cleanup(stop)
	return stop
}

func request(key, to string) *pb.SendRequest {
	return &pb.SendRequest{
		IdempotencyKey: key, To: to, ToName: "Ann Example",
		FromAddress: "no-reply@rangecast.test", FromName: "Rangecast",
		Subject: "Your password reset", Text: "Follow this link to reset your password: https://rangecast.test/r/42\n",
	}
}

func (e *env) send(req *pb.SendRequest) *pb.SendResponse {
	e.t.Helper()
	resp, err := e.client.Send(context.Background(), req)
	if err != nil {
		e.t.Fatalf("Send: %v", err)
	}
	return resp
}

func (e *env) get(id string) *pb.TransactionalMessage {
	e.t.Helper()
	resp, err := e.client.Get(context.Background(), &pb.GetRequest{Id: id})
	if err != nil {
		e.t.Fatalf("Get: %v", err)
	}
	return resp.GetMessage()
}

// waitStatus polls Get until the message reaches want.
func (e *env) waitStatus(id string, want pb.TransactionalStatus, within time.Duration) *pb.TransactionalMessage {
	e.t.Helper()
	deadline := time.After(within)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		m := e.get(id)
		if m.GetStatus() == want {
			return m
		}
		select {
		case <-deadline:
			e.t.Fatalf("message %s is %s after %s (reason %q, %d attempts); want %s", id, m.GetStatus(), within, m.GetReason(), m.GetAttemptCount(), want)
		case <-tick.C:
		}
	}
}

// settle waits a little for anything still moving (a second copy on its way)
// before counting what the server received.
func settle(d time.Duration) { <-time.After(d) }

func reply(code int, enhanced smtp.EnhancedCode, text string) *smtp.SMTPError {
	return &smtp.SMTPError{Code: code, EnhancedCode: enhanced, Message: text}
}

// wait returns a SendRequest.wait of d.
func wait(d time.Duration) *durationpb.Duration { return durationpb.New(d) }

// freezingTransport is a worker that dies mid-send: with deliver, after the
// server has accepted the message; without, before it reaches the server.
// It never returns until the test ends (a dead worker records nothing).
type freezingTransport struct {
	transport.Transport
	deliver bool
	entered chan struct{}
	frozen  chan struct{}
	once    sync.Once
}

func (f *freezingTransport) Send(ctx context.Context, m message.Rendered) (string, error) {
	if f.deliver {
		if _, err := f.Transport.Send(ctx, m); err != nil {
			return "", err
		}
	}
	f.once.Do(func() { close(f.entered) })
	<-f.frozen
	return "", context.Canceled
}

func attemptsSummary(m *pb.TransactionalMessage) string {
	var b strings.Builder
	for _, a := range m.GetAttempts() {
		b.WriteString(a.GetResult() + ":" + a.GetReply() + "; ")
	}
	return b.String()
}
