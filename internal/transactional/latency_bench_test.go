package transactional_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/rangecast/rangecast/internal/capture"
	"github.com/rangecast/rangecast/internal/coordinator"
	"github.com/rangecast/rangecast/internal/governor"
	"github.com/rangecast/rangecast/internal/server"
	"github.com/rangecast/rangecast/internal/store"
	"github.com/rangecast/rangecast/internal/testenv"
	pb "github.com/rangecast/rangecast/proto/rangecast/v1"
)

const (
	benchAudience = 50_000
	// benchSamples transactional messages are timed per run, one at a
	// time, a few milliseconds apart.
	benchSamples = 200
	benchGap     = 10 * time.Millisecond
)

// BenchmarkTransactionalLatency measures transactional latency from the
// Send call to the SMTP server's 250, p50 and p99, on the shipped wiring
// (server.StartStack: coordinator with the gRPC API, two page workers with
// their transactional consumers, capture SMTP server) over Postgres, with
// the system idle and while a 50,000-recipient broadcast runs unthrottled.
//
//	go test ./internal/transactional/ -run '^$' -bench TransactionalLatency -benchtime 1x
func BenchmarkTransactionalLatency(b *testing.B) {
	b.Run("idle", func(b *testing.B) { benchLatency(b, false) })
	b.Run("broadcast_50k", func(b *testing.B) { benchLatency(b, true) })
}

func benchLatency(b *testing.B, withBroadcast bool) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := server.StartStack(ctx, server.StackOptions{
		Dir: b.TempDir(), DatabaseURL: testenv.DatabaseURL(b), GRPCAddr: "127.0.0.1:0", Workers: 2, Log: testLogger(),
		// A new sending domain's daily ceiling (5,000) would stop the
		// broadcast a tenth of the way in; the benchmark wants it running
		// at full speed throughout.
		Governor: &coordinator.GovernorConfig{Limits: governor.Limits{InitialCeiling: governor.MaxCeiling, RatePerSecond: 1e6, Burst: 1e6}},
	})
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		if err := st.Stop(); err != nil {
			b.Errorf("stack stop: %v", err)
		}
	}()
	var mu sync.Mutex
	arrived := map[string]time.Time{}
	broadcastMsgs := 0
	got := make(chan struct{}, 1)
	st.Capture.OnMessage(func(m capture.Message) {
		now := time.Now() // the hook runs just before the 250 is written
		mu.Lock()
		defer mu.Unlock()
		if !strings.HasPrefix(m.MessageID, "tx.") {
			broadcastMsgs++
			return
		}
		arrived[m.MessageID] = now
		select {
		case got <- struct{}{}:
		default:
		}
	})
	conn, err := grpc.NewClient(st.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	tx := pb.NewTransactionalServiceClient(conn)
	bc := pb.NewBroadcastServiceClient(conn)

	var broadcastID string
	if withBroadcast {
		broadcastID = startBroadcast(b, ctx, st.Store, bc)
		// Measure at full speed, not during the ramp-up.
		deadline := time.Now().Add(2 * time.Minute)
		for {
			mu.Lock()
			n := broadcastMsgs
			mu.Unlock()
			if n >= 2_000 {
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("the broadcast sent only %d messages in 2 minutes", n)
			}
			<-time.After(20 * time.Millisecond)
		}
	}

	var lat []time.Duration
	var bcastBefore, bcastAfter int
	var window time.Duration
	b.ResetTimer()
	for range b.N {
		mu.Lock()
		bcastBefore = broadcastMsgs
		mu.Unlock()
		began := time.Now()
		for i := range benchSamples {
			key := fmt.Sprintf("bench:%s:%d", ulid.Make(), i)
			start := time.Now()
			resp, err := tx.Send(ctx, &pb.SendRequest{
				IdempotencyKey: key, To: fmt.Sprintf("user%d@bench.rangecast.test", i),
				FromAddress: "no-reply@rangecast.test", Subject: "Your sign-in code", Text: "Your code is 123456.\n",
			})
			if err != nil {
				b.Fatal(err)
			}
			id := resp.GetMessage().GetMessageId()
			deadline := time.After(time.Minute)
			for {
				mu.Lock()
				at, ok := arrived[id]
				mu.Unlock()
				if ok {
					lat = append(lat, at.Sub(start))
					break
				}
				select {
				case <-got:
				case <-deadline:
					b.Fatalf("transactional message %s not received within a minute", id)
				}
			}
			<-time.After(benchGap)
		}
		window = time.Since(began)
		mu.Lock()
		bcastAfter = broadcastMsgs
		mu.Unlock()
	}
	b.StopTimer()

	slices.Sort(lat)
	pct := func(p float64) time.Duration { return lat[min(len(lat)-1, int(float64(len(lat))*p))] }
	b.ReportMetric(float64(pct(0.50).Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(pct(0.99).Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(lat[len(lat)-1].Microseconds())/1000, "max-ms")
	if withBroadcast {
		// The samples only count if the broadcast was sending throughout.
		rate := float64(bcastAfter-bcastBefore) / window.Seconds()
		b.ReportMetric(rate, "broadcast-msg/s")
		if bcastAfter-bcastBefore == 0 {
			b.Fatal("the broadcast sent nothing while transactional latency was measured")
		}
		g, err := bc.GetBroadcast(ctx, &pb.GetBroadcastRequest{Id: broadcastID})
		if err != nil {
			b.Fatal(err)
		}
		b.Logf("broadcast %s: %s, %d of %d sent when sampling ended; %d transactional samples over %s",
			broadcastID, g.GetBroadcast().GetState(), bcastAfter, benchAudience, len(lat), window.Round(time.Millisecond))
	}
}

// startBroadcast imports benchAudience contacts and starts an unthrottled
// broadcast to them.
func startBroadcast(b *testing.B, ctx context.Context, st store.Store, bc pb.BroadcastServiceClient) string {
	b.Helper()
	now := time.Now()
	for from := 0; from < benchAudience; from += 5_000 {
		cs := make([]store.Contact, 0, 5_000)
		for i := from; i < min(from+5_000, benchAudience); i++ {
			cs = append(cs, store.Contact{ID: ulid.Make(), Email: fmt.Sprintf("c%06d@bench.rangecast.test", i), Name: fmt.Sprintf("C %d", i), Subscribed: true})
		}
		if _, err := st.ImportContacts(ctx, cs, now); err != nil {
			b.Fatal(err)
		}
	}
	created, err := bc.CreateBroadcast(ctx, &pb.CreateBroadcastRequest{
		Name: "bench", Content: &pb.BroadcastContent{FromAddress: "news@rangecast.test", Subject: "News for {{.Name}}", Html: "<p>Hello {{.Name}}</p><a href=\"{{.UnsubscribeURL}}\">Unsubscribe</a>"},
	})
	if err != nil {
		b.Fatal(err)
	}
	id := created.GetBroadcast().GetId()
	if _, err := bc.StartBroadcast(ctx, &pb.StartBroadcastRequest{Id: id}); err != nil {
		b.Fatal(err)
	}
	return id
}
