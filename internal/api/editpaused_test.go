package api_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/rangecast/rangecast/internal/api"
	"github.com/rangecast/rangecast/internal/store"
	pb "github.com/rangecast/rangecast/proto/rangecast/v1"
)

// TestTemplateMistakeFixedWhilePaused: a template that fails for most of
// the list pauses the broadcast (TestTemplateMistakesRefusedOrPause); the
// operator edits the paused broadcast's content and resumes, and the rest
// of the list is sent the new content, nobody twice. Before, a started
// broadcast's content could not change: the only ways out were fixing
// every contact's data or cancelling, and a new broadcast would have sent
// a second copy to those already sent.
func TestTemplateMistakeFixedWhilePaused(t *testing.T) {
	t.Parallel()
	onBothStores(t, func(t *testing.T, sqlite bool) {
		s := newStack(t, stackOptions{sqlite: sqlite, workers: 2})
		ctx := context.Background()
		contacts := make([]store.Contact, 60)
		want := map[string]bool{}
		for i := range contacts {
			contacts[i] = store.Contact{ID: ulid.Make(), Email: fmt.Sprintf("c%02d@example.org", i), Name: "C", Subscribed: true}
			if i < 4 || i == len(contacts)-1 { // the create-time sample
				contacts[i].Attributes = map[string]any{"city": "Lyon"}
			}
			want[contacts[i].Email] = true
		}
		if _, err := s.store.ImportContacts(ctx, contacts, time.Now()); err != nil {
			t.Fatal(err)
		}
		resp, err := s.client.CreateBroadcast(ctx, &pb.CreateBroadcastRequest{Name: "b", Content: &pb.BroadcastContent{
			FromAddress: "news@rangecast.test", Subject: "Hi", Html: `<p>{{.Attributes.city}}</p>` + unsubscribeLink}})
		if err != nil {
			t.Fatal(err)
		}
		id := resp.GetBroadcast().GetId()
		s.start(id)
		b := s.waitState(id, pb.BroadcastState_BROADCAST_STATE_PAUSED, 30*time.Second)
		if !strings.Contains(b.GetReason(), "city") || !strings.Contains(b.GetReason(), "broadcasts update") {
			t.Errorf("paused with reason %q; want the template error and the way out", b.GetReason())
		}
		s.waitQuiet(300 * time.Millisecond)
		before := s.sink.Count()

		ops := pb.NewBroadcastOpsServiceClient(s.conn)
		update := func(req *pb.UpdateBroadcastRequest) (*pb.Broadcast, error) {
			req.Id = id
			resp, err := ops.UpdateBroadcast(ctx, req)
			return resp.GetBroadcast(), err
		}
		// Only the content changes, and the sending domain stays.
		_, err = update(&pb.UpdateBroadcastRequest{Name: proto.String("renamed"), Subject: proto.String("x")})
		wantStatus(t, "name", err, codes.FailedPrecondition, "paused", "only its content", "name", "nothing was changed")
		// The throttle changes in a call of its own, not with the content.
		_, err = update(&pb.UpdateBroadcastRequest{ThrottlePerHour: proto.Int64(10), Subject: proto.String("x")})
		wantStatus(t, "throttle with content", err, codes.FailedPrecondition, "throttle_per_hour in a call of its own", "nothing was changed")
		if b, err := update(&pb.UpdateBroadcastRequest{ThrottlePerHour: proto.Int64(10)}); err != nil || b.GetThrottlePerHour() != 10 || b.GetState() != pb.BroadcastState_BROADCAST_STATE_PAUSED {
			t.Fatalf("throttle alone: %v, %v; want throttle 10, still paused", b, err)
		}
		if b, err := update(&pb.UpdateBroadcastRequest{ThrottlePerHour: proto.Int64(0)}); err != nil || b.GetThrottlePerHour() != 0 {
			t.Fatalf("throttle lifted: %v, %v", b, err)
		}
		_, err = update(&pb.UpdateBroadcastRequest{ThrottlePerHour: proto.Int64(-1)})
		wantStatus(t, "negative throttle", err, codes.InvalidArgument, "throttle_per_hour")
		_, err = update(&pb.UpdateBroadcastRequest{FromAddress: proto.String("news@elsewhere.test")})
		wantStatus(t, "domain", err, codes.FailedPrecondition, "rangecast.test", "elsewhere.test")
		// New content is checked as at create: still failing for the list.
		_, err = update(&pb.UpdateBroadcastRequest{Html: proto.String(`<p>{{.Attributes.cty}}</p>` + unsubscribeLink)})
		wantStatus(t, "still broken", err, codes.InvalidArgument, "cty")
		_, err = update(&pb.UpdateBroadcastRequest{Html: proto.String(`<p>no link</p>`)})
		wantStatus(t, "no unsubscribe link", err, codes.InvalidArgument, "unsubscribe", "nothing was changed")
		if err != nil && strings.Contains(err.Error(), "--no-unsubscribe-link") {
			t.Errorf("an edit without the link is told to create the broadcast with --no-unsubscribe-link: %v", err)
		}
		// Still broken for the contacts that paused it, though fine for
		// the create-time sample (a tester's edit was accepted, and the
		// resume paused again at once).
		_, err = update(&pb.UpdateBroadcastRequest{Subject: proto.String("Hi {{.Attributes.city}}"),
			Html: proto.String(`<p>Hello</p>` + unsubscribeLink)})
		wantStatus(t, "still broken for those held", err, codes.InvalidArgument, "city", "held back", "nothing was changed")
		_, err = update(&pb.UpdateBroadcastRequest{})
		wantStatus(t, "nothing to change", err, codes.InvalidArgument, "nothing to change")
		if got := s.status(id); got.GetContentRevision() != 0 || !strings.Contains(got.GetContent().GetHtml(), "city") {
			t.Fatalf("refused edits changed the broadcast: revision %d, html %q", got.GetContentRevision(), got.GetContent().GetHtml())
		}

		// The contact or two per worker that failed alone with the old
		// template's error before the mistake was recognised go again.
		unrendered := s.status(id).GetProgress().GetFailed()
		t.Logf("%d failed to render before the halt", unrendered)
		// Unavailable while a window claimed before the pause has no
		// outcome yet (slow under load): an operator tries again.
		var edit *pb.UpdateBroadcastResponse
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			edit, err = ops.UpdateBroadcast(ctx, &pb.UpdateBroadcastRequest{Id: id, Subject: proto.String("Hi again"), FromAddress: proto.String("hello@rangecast.test"),
				Html: proto.String(`<p>Hello from the fixed template</p>` + unsubscribeLink)})
			if status.Code(err) != codes.Unavailable || time.Now().After(deadline) {
				break
			}
		}
		if err != nil {
			t.Fatal(err)
		}
		edited := edit.GetBroadcast()
		if edit.GetRerendered() != unrendered {
			t.Errorf("the edit rerendered %d; want the %d that failed to render", edit.GetRerendered(), unrendered)
		}
		if edited.GetState() != pb.BroadcastState_BROADCAST_STATE_PAUSED || edited.GetContentRevision() != 1 || edited.GetContent().GetSubject() != "Hi again" {
			t.Fatalf("after the edit: %v, revision %d, subject %q; want paused, revision 1, the new subject",
				edited.GetState(), edited.GetContentRevision(), edited.GetContent().GetSubject())
		}
		if _, err := s.client.ResumeBroadcast(ctx, &pb.ResumeBroadcastRequest{Id: id}); err != nil {
			t.Fatal(err)
		}
		done := s.waitState(id, pb.BroadcastState_BROADCAST_STATE_COMPLETED, time.Minute)
		s.exactlyOnce(want)
		if p := done.GetProgress(); p.GetSent() != int64(len(contacts)) || p.GetFailed() != 0 {
			t.Errorf("completed with %d sent, %d failed; want all %d sent", p.GetSent(), p.GetFailed(), len(contacts))
		}
		for _, m := range s.sink.Messages() {
			fixed := m.Subject == "Hi again" && strings.Contains(string(m.Raw), "Hello from the fixed template") && m.From == "hello@rangecast.test"
			switch {
			case m.Seq <= before && fixed:
				t.Errorf("message %d to %v, sent before the edit, has the new content", m.Seq, m.To)
			case m.Seq > before && !fixed:
				t.Errorf("message %d to %v, sent after the edit, has subject %q from %s; want the new content", m.Seq, m.To, m.Subject, m.From)
			}
		}
		if n := s.sink.Count() - before; n < len(contacts)-5 {
			t.Errorf("%d sent after the edit; want the rest of the list", n)
		}
	})
}

// TestEditWaitsForClaimsOut: an edit of a paused broadcast with a message
// claimed and no outcome recorded (a window finishing after the pause) is
// Unavailable, saying to try again, and changes nothing; once the outcome
// is in, the same edit goes through.
func TestEditWaitsForClaimsOut(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{sqlite: true})
	ctx := context.Background()
	a := s.seed(3)
	id := ulid.MustParse(s.create("", 0))
	if _, err := s.store.AcceptBroadcast(ctx, id, time.Now()); err != nil {
		t.Fatal(err)
	}
	c := a.contacts[0]
	if _, err := s.store.Claim(ctx, id, "w/1", []store.Claim{{ContactID: c.ID, Email: c.Email, MessageID: "<m@rangecast.test>"}}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := s.store.SetState(ctx, id, []store.State{store.StateRunning}, store.StatePaused, "", time.Now()); err != nil {
		t.Fatal(err)
	}
	ops := pb.NewBroadcastOpsServiceClient(s.conn)
	edit := &pb.UpdateBroadcastRequest{Id: id.String(), Subject: proto.String("Fixed")}
	_, err := ops.UpdateBroadcast(ctx, edit)
	wantStatus(t, "claim out", err, codes.Unavailable, "claimed without an outcome", "try again", "nothing was changed")
	if st, _ := status.FromError(err); !api.AnsweredByCoordinator(st) {
		t.Errorf("the claims-out refusal is not marked as the coordinator's answer: the CLI would say it cannot reach it")
	}
	if b, err := s.store.GetBroadcast(ctx, id); err != nil || b.ContentRevision != 0 || b.Content.Subject == "Fixed" {
		t.Fatalf("after the refused edit: revision %d, subject %q, %v; want unchanged", b.ContentRevision, b.Content.Subject, err)
	}
	if err := s.store.RecordOutcomes(ctx, id, "w/1", []store.Outcome{{ContactID: c.ID, Status: store.SendSent}}, time.Now()); err != nil {
		t.Fatal(err)
	}
	resp, err := ops.UpdateBroadcast(ctx, edit)
	if err != nil || resp.GetBroadcast().GetContentRevision() != 1 || resp.GetBroadcast().GetContent().GetSubject() != "Fixed" {
		t.Fatalf("edit once the outcome is in: %v, %v; want revision 1 and the new subject", resp.GetBroadcast(), err)
	}
}
