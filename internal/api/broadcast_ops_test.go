package api_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rangecast/rangecast/internal/clock"
	"github.com/rangecast/rangecast/internal/store"
	"github.com/rangecast/rangecast/internal/testenv"
	pb "github.com/rangecast/rangecast/proto/rangecast/v1"
)

// TestScheduledStartSurvivesFailover: a scheduled draft starts by itself on
// the leader at its time, not before, after the leader that accepted the
// schedule stepped down; it then sends to everyone once. The coordinators
// run on a fake clock (the workers on the wall clock), so "its time" is an
// hour away and the test takes seconds. On both stores.
func TestScheduledStartSurvivesFailover(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"postgres", "sqlite"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fake := clock.NewFake(time.Now())
			s := newStack(t, stackOptions{sqlite: name == "sqlite", pageLimit: 50, clock: fake})
			s.clock = clock.Real{} // workers keep the wall clock: their fetches and heartbeats must run
			s.startWorker()
			testenv.Eventually(t, "the first coordinator leads", 10*time.Second, s.coord.Leading)
			a := s.seed(300)
			id := s.create("", 0)
			ops := pb.NewBroadcastOpsServiceClient(s.conn)
			ctx := context.Background()
			at := fake.Now().Add(time.Hour).Truncate(time.Second) // stores keep microseconds
			resp, err := ops.ScheduleBroadcast(ctx, &pb.ScheduleBroadcastRequest{Id: id, At: timestamppb.New(at)})
			if err != nil {
				t.Fatal(err)
			}
			if !resp.GetBroadcast().GetScheduledAt().AsTime().Equal(at) {
				t.Fatalf("scheduled_at = %v; want %v", resp.GetBroadcast().GetScheduledAt().AsTime(), at)
			}

			// Half-way: nothing starts early.
			fake.Advance(30 * time.Minute)
			cfg := s.coordCfg
			cfg.Name = "second"
			follower := s.runReplica(cfg)
			s.stopCoord() // the leader that took the schedule steps down
			// A follower tries the lease once per leaseRenew of its clock.
			if !testenv.Poll(20*time.Second, func() bool { fake.Advance(2 * time.Second); return follower.coord.Leading() }) {
				t.Fatal("the second coordinator did not take over")
			}
			status := func() *pb.Broadcast {
				r, err := follower.client.GetBroadcast(ctx, &pb.GetBroadcastRequest{Id: id})
				if err != nil {
					t.Fatal(err)
				}
				return r.GetBroadcast()
			}
			b := status()
			if b.GetState() != pb.BroadcastState_BROADCAST_STATE_DRAFT || !b.GetScheduledAt().AsTime().Equal(at) {
				t.Fatalf("before its time: %s, scheduled %v; want a draft still scheduled at %v", b.GetState(), b.GetScheduledAt().AsTime(), at)
			}

			// Its time comes on the new leader.
			fake.Advance(30 * time.Minute)
			if !testenv.Poll(time.Minute, func() bool {
				fake.Advance(100 * time.Millisecond) // the new leader's ticks
				return status().GetState() == pb.BroadcastState_BROADCAST_STATE_COMPLETED
			}) {
				b := status()
				t.Fatalf("not completed: %s (%s), sent %d", b.GetState(), b.GetReason(), b.GetProgress().GetSent())
			}
			b = status()
			if b.GetStartedAt().AsTime().Before(at) {
				t.Errorf("started at %v, before its time %v", b.GetStartedAt().AsTime(), at)
			}
			s.exactlyOnce(a.eligible(false))
		})
	}
}

// TestBroadcastOpsRefusals: bad input is InvalidArgument, a state that does
// not allow the change FailedPrecondition, an unknown broadcast NotFound,
// each with a message that says what to do.
func TestBroadcastOpsRefusals(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{workers: 1})
	s.seed(20)
	draft := s.create("", 0)
	running := s.create("", 0)
	ops := pb.NewBroadcastOpsServiceClient(s.conn)
	ctx := context.Background()
	scheduled := s.create("", 0)
	if _, err := ops.ScheduleBroadcast(ctx, &pb.ScheduleBroadcastRequest{Id: scheduled, At: timestamppb.New(time.Now().Add(time.Hour))}); err != nil {
		t.Fatal(err)
	}
	s.start(running)
	missing := "01J9Z3K8M2T4V6X8Y0A2B4C6D8"
	past := timestamppb.New(time.Now().Add(-time.Minute))
	future := timestamppb.New(time.Now().Add(time.Hour))
	many := make([]string, 21)
	for i := range many {
		many[i] = "qa@example.net"
	}
	for _, c := range []struct {
		name string
		call func() error
		code codes.Code
		says string
	}{
		{"malformed id", func() error {
			_, err := ops.ReportBroadcast(ctx, &pb.ReportBroadcastRequest{Id: "nope"})
			return err
		}, codes.InvalidArgument, "ULID"},
		{"unknown broadcast", func() error {
			_, err := ops.ReportBroadcast(ctx, &pb.ReportBroadcastRequest{Id: missing})
			return err
		}, codes.NotFound, "broadcasts list"},
		{"preview without a contact", func() error {
			_, err := ops.PreviewBroadcast(ctx, &pb.PreviewBroadcastRequest{Id: draft})
			return err
		}, codes.InvalidArgument, "exactly one of contact_email and contact_id"},
		{"preview without the workers' settings", func() error {
			_, err := ops.PreviewBroadcast(ctx, &pb.PreviewBroadcastRequest{Id: draft, ContactEmail: "user000001@example.org"})
			return err
		}, codes.FailedPrecondition, "--public-url"},
		{"test to nobody", func() error {
			_, err := ops.TestBroadcast(ctx, &pb.TestBroadcastRequest{Id: draft})
			return err
		}, codes.InvalidArgument, "give 1 to 20"},
		{"test to too many", func() error {
			_, err := ops.TestBroadcast(ctx, &pb.TestBroadcastRequest{Id: draft, To: many})
			return err
		}, codes.InvalidArgument, "give 1 to 20"},
		{"test without a relay", func() error {
			_, err := ops.TestBroadcast(ctx, &pb.TestBroadcastRequest{Id: draft, To: []string{"qa@example.net"}})
			return err
		}, codes.FailedPrecondition, "--smtp-url"},
		{"schedule without a time", func() error {
			_, err := ops.ScheduleBroadcast(ctx, &pb.ScheduleBroadcastRequest{Id: draft})
			return err
		}, codes.InvalidArgument, "at is required"},
		{"schedule in the past", func() error {
			_, err := ops.ScheduleBroadcast(ctx, &pb.ScheduleBroadcastRequest{Id: draft, At: past})
			return err
		}, codes.InvalidArgument, "broadcasts start"},
		{"schedule years ahead", func() error {
			_, err := ops.ScheduleBroadcast(ctx, &pb.ScheduleBroadcastRequest{Id: draft, At: timestamppb.New(time.Date(9999, 3, 14, 9, 0, 0, 0, time.UTC))})
			return err
		}, codes.InvalidArgument, "more than five years away"},
		{"schedule a started broadcast", func() error {
			_, err := ops.ScheduleBroadcast(ctx, &pb.ScheduleBroadcastRequest{Id: running, At: future})
			return err
		}, codes.FailedPrecondition, "only a draft can be scheduled"},
		{"pause a scheduled draft", func() error {
			_, err := s.client.PauseBroadcast(ctx, &pb.PauseBroadcastRequest{Id: scheduled})
			return err
		}, codes.FailedPrecondition, "is scheduled to start: 'rangecast broadcasts unschedule " + scheduled + "' keeps it a draft"},
		{"unschedule a started broadcast", func() error {
			_, err := ops.UnscheduleBroadcast(ctx, &pb.UnscheduleBroadcastRequest{Id: running})
			return err
		}, codes.FailedPrecondition, "only a draft can be unscheduled"},
		{"update a started broadcast", func() error {
			_, err := ops.UpdateBroadcast(ctx, &pb.UpdateBroadcastRequest{Id: running, Name: proto.String("x")})
			return err
		}, codes.FailedPrecondition, "only a draft can be edited or a paused one (its content only); pause it first"},
		{"update to an empty name", func() error {
			_, err := ops.UpdateBroadcast(ctx, &pb.UpdateBroadcastRequest{Id: draft, Name: proto.String("")})
			return err
		}, codes.InvalidArgument, "name cannot be empty"},
		{"update to a negative throttle", func() error {
			_, err := ops.UpdateBroadcast(ctx, &pb.UpdateBroadcastRequest{Id: draft, ThrottlePerHour: proto.Int64(-1)})
			return err
		}, codes.InvalidArgument, "throttle_per_hour"},
		{"update to a body without an unsubscribe link", func() error {
			_, err := ops.UpdateBroadcast(ctx, &pb.UpdateBroadcastRequest{Id: draft, Html: proto.String("<p>Hi</p>")})
			return err
		}, codes.InvalidArgument, "unsubscribe"},
		{"delete a started broadcast", func() error {
			_, err := ops.DeleteBroadcast(ctx, &pb.DeleteBroadcastRequest{Id: running})
			return err
		}, codes.FailedPrecondition, "only a draft can be deleted"},
		{"report with too many groups", func() error {
			_, err := ops.ReportBroadcast(ctx, &pb.ReportBroadcastRequest{Id: draft, FailureGroups: 5000})
			return err
		}, codes.InvalidArgument, "failure_groups"},
		{"retry a draft", func() error {
			_, err := ops.RetryBroadcast(ctx, &pb.RetryBroadcastRequest{Id: draft})
			return err
		}, codes.FailedPrecondition, "nothing has been sent"},
		{"export an unknown broadcast", func() error {
			stream, err := ops.ExportBroadcast(ctx, &pb.ExportBroadcastRequest{Id: missing})
			if err != nil {
				return err
			}
			_, err = stream.Recv()
			return err
		}, codes.NotFound, missing},
		{"export rows of no status", func() error {
			stream, err := ops.ExportBroadcast(ctx, &pb.ExportBroadcastRequest{Id: running, Statuses: []pb.SendStatus{pb.SendStatus(99)}})
			if err != nil {
				return err
			}
			_, err = stream.Recv()
			return err
		}, codes.InvalidArgument, "not a ledger status"},
	} {
		err := c.call()
		if st, _ := status.FromError(err); status.Code(err) != c.code || !strings.Contains(st.Message(), c.says) {
			t.Errorf("%s: %v; want %s saying %q", c.name, err, c.code, c.says)
		}
	}
	// A running broadcast is not retried: its sweeps still run.
	if _, err := ops.RetryBroadcast(ctx, &pb.RetryBroadcastRequest{Id: running}); status.Code(err) != codes.FailedPrecondition {
		if b := s.status(running); b.GetState() == pb.BroadcastState_BROADCAST_STATE_RUNNING {
			t.Errorf("retry of a running broadcast: %v; want FailedPrecondition", err)
		}
	}
}

// TestScheduledStartThatCannotStart: a scheduled draft whose content no
// longer renders for its audience when its time comes stays a draft, is
// taken off the schedule (not retried every tick), and says why.
func TestScheduledStartThatCannotStart(t *testing.T) {
	t.Parallel()
	fake := clock.NewFake(time.Now())
	s := newStack(t, stackOptions{sqlite: true, clock: fake})
	testenv.Eventually(t, "the coordinator leads", 10*time.Second, s.coord.Leading)
	s.seed(20)
	id := s.create("", 0)
	ops := pb.NewBroadcastOpsServiceClient(s.conn)
	ctx := context.Background()
	at := fake.Now().Add(time.Hour).Truncate(time.Second)
	if _, err := ops.ScheduleBroadcast(ctx, &pb.ScheduleBroadcastRequest{Id: id, At: timestamppb.New(at)}); err != nil {
		t.Fatal(err)
	}
	// The draft changes behind the API's back (an older client, a direct
	// edit): it now needs an attribute no contact has.
	b, err := s.store.GetBroadcast(ctx, ulid.MustParse(id))
	if err != nil {
		t.Fatal(err)
	}
	b.Content.HTML = `<p>{{.Attributes.coupon}}</p><a href="{{.UnsubscribeURL}}">Unsubscribe</a>`
	if _, err := s.store.UpdateDraft(ctx, b.ID, store.Draft{Name: b.Name, Content: b.Content}, fake.Now()); err != nil {
		t.Fatal(err)
	}
	fake.Advance(time.Hour)
	var got *pb.Broadcast
	if !testenv.Poll(20*time.Second, func() bool {
		fake.Advance(500 * time.Millisecond)
		got = s.status(id)
		return got.GetScheduledAt() == nil
	}) {
		t.Fatalf("still scheduled after its time: %s (%s)", got.GetState(), got.GetReason())
	}
	if got.GetState() != pb.BroadcastState_BROADCAST_STATE_DRAFT || !strings.Contains(got.GetReason(), "scheduled start at") || !strings.Contains(got.GetReason(), "coupon") {
		t.Fatalf("after a failed scheduled start: %s, reason %q; want a draft saying why", got.GetState(), got.GetReason())
	}
}

// TestExportStreamsKeysetPages: an export of more rows than a page arrives
// as several stream messages of at most one page each, every row once, in
// contact id order. On both stores.
func TestExportStreamsKeysetPages(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"postgres", "sqlite"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := newStack(t, stackOptions{sqlite: name == "sqlite"})
			ctx := context.Background()
			a := s.seed(2600)
			id := ulid.MustParse(s.create("", 0))
			if _, err := s.store.AcceptBroadcast(ctx, id, time.Now()); err != nil {
				t.Fatal(err)
			}
			var claims []store.Claim
			var outcomes []store.Outcome
			for _, c := range a.contacts {
				claims = append(claims, store.Claim{ContactID: c.ID, Email: c.Email, MessageID: "<" + id.String() + "." + c.ID.String() + "@rangecast.test>"})
				outcomes = append(outcomes, store.Outcome{ContactID: c.ID, Status: store.SendSent})
			}
			for i := 0; i < len(claims); i += 500 {
				j := min(i+500, len(claims))
				if _, err := s.store.Claim(ctx, id, "w/1", claims[i:j], time.Now()); err != nil {
					t.Fatal(err)
				}
				if err := s.store.RecordOutcomes(ctx, id, "w/1", outcomes[i:j], time.Now()); err != nil {
					t.Fatal(err)
				}
			}
			stream, err := pb.NewBroadcastOpsServiceClient(s.conn).ExportBroadcast(ctx, &pb.ExportBroadcastRequest{Id: id.String()})
			if err != nil {
				t.Fatal(err)
			}
			var msgs, rows int
			last := ""
			for {
				m, err := stream.Recv()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				msgs++
				if len(m.GetRows()) > 1000 {
					t.Fatalf("a stream message carries %d rows; want at most a page (1000)", len(m.GetRows()))
				}
				for _, r := range m.GetRows() {
					if r.GetContactId() <= last {
						t.Fatalf("row %s after %s: not in contact id order, or twice", r.GetContactId(), last)
					}
					last = r.GetContactId()
					rows++
				}
			}
			if rows != 2600 || msgs != 3 {
				t.Fatalf("export: %d rows in %d messages; want 2600 in 3", rows, msgs)
			}
		})
	}
}
