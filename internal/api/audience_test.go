package api_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/emersion/go-smtp"
	"github.com/oklog/ulid/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/rangecast/rangecast/internal/api"
	"github.com/rangecast/rangecast/internal/capture"
	"github.com/rangecast/rangecast/internal/store"
	pb "github.com/rangecast/rangecast/proto/rangecast/v1"
)

// stores runs f as a parallel subtest on Postgres (when reachable) and on
// SQLite.
func stores(t *testing.T, f func(t *testing.T, sqlite bool)) {
	for _, sqlite := range []bool{false, true} {
		name := "postgres"
		if sqlite {
			name = "sqlite"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f(t, sqlite)
		})
	}
}

func (s *stack) audience() pb.AudienceServiceClient { return pb.NewAudienceServiceClient(s.conn) }

func (s *stack) getContact(req *pb.GetContactRequest) *pb.GetContactResponse {
	s.t.Helper()
	resp, err := s.audience().GetContact(context.Background(), req)
	if err != nil {
		s.t.Fatalf("GetContact(%v): %v", req, err)
	}
	return resp
}

func (s *stack) preview(segment string) *pb.PreviewAudienceResponse {
	s.t.Helper()
	resp, err := s.audience().PreviewAudience(context.Background(), &pb.PreviewAudienceRequest{Segment: segment})
	if err != nil {
		s.t.Fatalf("PreviewAudience(%q): %v", segment, err)
	}
	return resp
}

// TestImportReportsEveryBadRow: rejections carry the row number counted
// across stream messages and store batches, duplicates are found across
// them, every kind of over-long field is reported, and every other row is
// committed.
func TestImportReportsEveryBadRow(t *testing.T) {
	t.Parallel()
	s, ac := newAPIStack(t)
	var rows []*pb.ContactRow
	add := func(r *pb.ContactRow) int64 {
		rows = append(rows, r)
		return int64(len(rows))
	}
	first := add(&pb.ContactRow{Email: "first@example.org", Name: "First"})
	for i := range 6000 {
		add(&pb.ContactRow{Email: fmt.Sprintf("u%05d@example.org", i), Name: "U", Attributes: map[string]string{"i": strconv.Itoa(i)}})
	}
	manyAttrs := map[string]string{}
	for i := range 65 {
		manyAttrs[fmt.Sprintf("a%d", i)] = "x"
	}
	longEmail := strings.Repeat("l", 290) + "@example.org"
	want := map[int64][]string{
		// Beyond the first store batch (5,000 rows) and many messages later.
		add(&pb.ContactRow{Email: "FIRST@Example.org", Name: "Again"}):                                                  {"duplicate of row 1"},
		add(&pb.ContactRow{Email: longEmail}):                                                                           {"email is 302 characters", "254"},
		add(&pb.ContactRow{Email: "attr@example.org", Attributes: map[string]string{"bio": strings.Repeat("b", 3000)}}): {`attribute "bio" is 3000 characters`, "2048"},
		add(&pb.ContactRow{Email: "many@example.org", Attributes: manyAttrs}):                                           {"65 attributes", "64"},
		add(&pb.ContactRow{Email: "key@example.org", Attributes: map[string]string{strings.Repeat("k", 129): "v"}}):     {"is 129 characters", "128"},
		add(&pb.ContactRow{Email: "nokey@example.org", Attributes: map[string]string{"": "v"}}):                         {"attribute name is empty"},
		add(&pb.ContactRow{Email: "seg@example.org", Segments: []string{"bad\nname"}}):                                  {"segment name", "line break"},
		add(&pb.ContactRow{Email: "seg2@example.org", Segments: []string{strings.Repeat("s", 129)}}):                    {"segment name is 129 characters"},
		add(&pb.ContactRow{Email: "U04999@EXAMPLE.ORG"}):                                                                {"duplicate of row 5001"},
		add(&pb.ContactRow{Email: "segs@example.org", Segments: make65("s")}):                                           {"65 segments", "64"},
		add(&pb.ContactRow{Email: "bad address@example.org"}):                                                           {"not a valid email address"},
	}
	late := add(&pb.ContactRow{Email: "late@example.org", Segments: []string{"late"}})

	resp := importRows(t, ac, rows, 700, 700, 700, 700, 700, 700, 700, 700)
	if wantImported := int64(len(rows) - len(want)); resp.GetImported() != wantImported || resp.GetRejected() != int64(len(want)) {
		t.Errorf("imported %d, rejected %d; want %d and %d", resp.GetImported(), resp.GetRejected(), wantImported, len(want))
	}
	got := map[int64]*pb.RowError{}
	for i, e := range resp.GetErrors() {
		if i > 0 && resp.GetErrors()[i-1].GetRow() >= e.GetRow() {
			t.Errorf("errors not in row order: row %d after %d", e.GetRow(), resp.GetErrors()[i-1].GetRow())
		}
		got[e.GetRow()] = e
	}
	for row, parts := range want {
		e, ok := got[row]
		if !ok {
			t.Errorf("row %d (%.40s) not reported; errors: %v", row, rows[row-1].GetEmail(), resp.GetErrors())
			continue
		}
		for _, p := range parts {
			if !strings.Contains(e.GetError(), p) {
				t.Errorf("row %d: error %q does not mention %q", row, e.GetError(), p)
			}
		}
	}
	if e := got[first+6002]; e != nil && e.GetEmail() != longEmail[:254]+"…" {
		t.Errorf("over-long email echoed as %q, want its first 254 characters and an ellipsis", e.GetEmail())
	}
	if len(got) != len(want) {
		t.Errorf("%d rows rejected, want %d: %v", len(got), len(want), resp.GetErrors())
	}

	p := s.preview("")
	if p.GetMatched() != resp.GetImported() || p.GetEligible() != resp.GetImported() {
		t.Errorf("after the import: %d contacts, %d eligible; want %d (every imported row)", p.GetMatched(), p.GetEligible(), resp.GetImported())
	}
	if c := s.getContact(&pb.GetContactRequest{Email: "first@example.org"}).GetContact(); c.GetName() != "First" {
		t.Errorf("the rejected duplicate changed the first row's contact: name %q", c.GetName())
	}
	if c := s.getContact(&pb.GetContactRequest{Email: "u04321@example.org"}).GetContact(); c.GetAttributes()["i"] != "4321" {
		t.Errorf("row of contact u04321: attributes %v", c.GetAttributes())
	}
	if p := s.preview("late"); p.GetMatched() != 1 {
		t.Errorf("segment of row %d: %d members, want 1", late, p.GetMatched())
	}
}

// TestImportCountsErrorsBeyondTheList: the response lists the first 1,000
// rejected rows, each reason cut short, but counts them all: 10,000 long
// rejected rows made an answer over gRPC's 4 MiB, which the client
// refused although the good rows were committed.
func TestImportCountsErrorsBeyondTheList(t *testing.T) {
	t.Parallel()
	_, ac := newAPIStack(t)
	rows := make([]*pb.ContactRow, 0, 10_005)
	long := strings.Repeat("x", 240)
	for i := range 10_003 {
		rows = append(rows, &pb.ContactRow{Email: fmt.Sprintf("bad%d%s", i, long)})
	}
	rows = append(rows, &pb.ContactRow{Email: "a@example.org"}, &pb.ContactRow{Email: "b@example.org"})
	resp := importRows(t, ac, rows, 3000, 3000, 3000)
	if resp.GetImported() != 2 || resp.GetRejected() != 10_003 || len(resp.GetErrors()) != 1_000 {
		t.Fatalf("imported %d, rejected %d, %d errors listed; want 2, 10003, 1000", resp.GetImported(), resp.GetRejected(), len(resp.GetErrors()))
	}
	if e := resp.GetErrors(); e[0].GetRow() != 1 || e[999].GetRow() != 1_000 {
		t.Errorf("listed rows %d..%d, want the first 1,000", e[0].GetRow(), e[999].GetRow())
	}
	if n := proto.Size(resp); n > 2<<20 {
		t.Errorf("answer is %d bytes; want it far below gRPC's 4 MiB", n)
	}
}

// TestImportMergesCaseInsensitively on the bulk path: a re-import in
// another case, in a batch large enough for COPY, keeps the id, replaces
// the name, merges attributes, and never re-subscribes.
func TestImportMergesCaseInsensitively(t *testing.T) {
	stores(t, func(t *testing.T, sqlite bool) {
		s := newStack(t, stackOptions{sqlite: sqlite})
		ac := s.audience()
		importRows(t, ac, []*pb.ContactRow{
			{Email: "Ann@Example.org", Name: "Ann", Attributes: map[string]string{"plan": "pro", "city": "Lyon"}},
			{Email: "gone@example.org", Name: "Gone", Unsubscribed: true},
		})
		before := s.getContact(&pb.GetContactRequest{Email: "ann@example.org"}).GetContact()
		rows := []*pb.ContactRow{
			{Email: "ANN@EXAMPLE.ORG", Name: "Ann B", Attributes: map[string]string{"plan": "team", "lang": "fr"}},
			{Email: "GONE@example.org", Name: "Gone again"},
		}
		for i := range 1000 {
			rows = append(rows, &pb.ContactRow{Email: fmt.Sprintf("bulk%04d@example.org", i)})
		}
		if resp := importRows(t, ac, rows); resp.GetImported() != int64(len(rows)) || resp.GetRejected() != 0 {
			t.Fatalf("re-import: %v", resp)
		}
		after := s.getContact(&pb.GetContactRequest{Email: "ANN@example.ORG"}).GetContact()
		wantAttrs := map[string]string{"plan": "team", "city": "Lyon", "lang": "fr"}
		if after.GetId() != before.GetId() || after.GetName() != "Ann B" || !equalMaps(after.GetAttributes(), wantAttrs) {
			t.Errorf("after the re-import: id %s name %q attributes %v; want id %s, name Ann B, attributes %v",
				after.GetId(), after.GetName(), after.GetAttributes(), before.GetId(), wantAttrs)
		}
		if g := s.getContact(&pb.GetContactRequest{Email: "gone@example.org"}).GetContact(); g.GetSubscribed() || g.GetEligible() || g.GetName() != "Gone again" {
			t.Errorf("re-imported unsubscribed contact: %v; want still unsubscribed, name updated", g)
		}
		if p := s.preview(""); p.GetMatched() != 1002 || p.GetEligible() != 1001 {
			t.Errorf("preview: %v, want 1002 contacts, 1001 eligible", p)
		}
	})
}

// make65 returns 65 distinct names.
func make65(prefix string) []string {
	out := make([]string, 65)
	for i := range out {
		out[i] = fmt.Sprint(prefix, i)
	}
	return out
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// TestGetContactHistory: after two real broadcasts, a contact's history
// shows each with its status and the SMTP server's reply, latest first.
func TestGetContactHistory(t *testing.T) {
	stores(t, func(t *testing.T, sqlite bool) {
		s := newStack(t, stackOptions{sqlite: sqlite, workers: 1, concurrency: 4, sinkOpts: []capture.Option{
			capture.WithRcptHook(func(to string) *smtp.SMTPError {
				if strings.HasPrefix(to, "bad@") {
					return &smtp.SMTPError{Code: 550, EnhancedCode: smtp.EnhancedCode{5, 1, 1}, Message: "No such user here"}
				}
				return nil
			}),
		}})
		ctx := context.Background()
		ac := s.audience()
		importRows(t, ac, []*pb.ContactRow{
			{Email: "ok@example.org", Name: "Ok"},
			{Email: "bad@example.org", Name: "Bad"},
			{Email: "quiet@example.org", Name: "Quiet", Unsubscribed: true},
		})
		var ids []string
		for _, name := range []string{"March news", "April news"} {
			req := validRequest()
			req.Name = name
			created, err := s.client.CreateBroadcast(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			id := created.GetBroadcast().GetId()
			s.start(id)
			s.waitState(id, pb.BroadcastState_BROADCAST_STATE_COMPLETED, 30*time.Second)
			ids = append(ids, id)
		}

		ok := s.getContact(&pb.GetContactRequest{Email: "OK@example.org"})
		if c := ok.GetContact(); c.GetEmail() != "ok@example.org" || !c.GetEligible() || !c.GetSubscribed() {
			t.Errorf("contact: %v", c)
		}
		h := ok.GetHistory()
		if len(h) != 2 || ok.GetHistoryTruncated() {
			t.Fatalf("history of ok@: %v (truncated %v), want 2 entries", h, ok.GetHistoryTruncated())
		}
		for i, want := range []struct{ id, name string }{{ids[1], "April news"}, {ids[0], "March news"}} {
			e := h[i]
			if e.GetBroadcastId() != want.id || e.GetBroadcastName() != want.name || e.GetStatus() != pb.SendStatus_SEND_STATUS_SENT ||
				e.GetBroadcastState() != pb.BroadcastState_BROADCAST_STATE_COMPLETED || e.GetReply() != "" ||
				!strings.Contains(e.GetMessageId(), want.id) || e.GetEmail() != "ok@example.org" {
				t.Errorf("history[%d] = %v, want %s (%s) sent", i, e, want.name, want.id)
			}
		}

		// By id, limited to one entry: the latest, and the history says
		// there is more.
		one := s.getContact(&pb.GetContactRequest{Id: ok.GetContact().GetId(), HistoryLimit: 1})
		if len(one.GetHistory()) != 1 || !one.GetHistoryTruncated() || one.GetHistory()[0].GetBroadcastId() != ids[1] {
			t.Errorf("history limited to 1: %v truncated %v", one.GetHistory(), one.GetHistoryTruncated())
		}

		// The 550 5.1.1 of the first broadcast suppressed bad@ (a hard
		// bounce at send): the second did not mail it again.
		badContact := s.getContact(&pb.GetContactRequest{Email: "bad@example.org"})
		bad := badContact.GetHistory()
		if len(bad) != 1 || bad[0].GetBroadcastName() != "March news" {
			t.Fatalf("history of bad@: %v; want only the first broadcast's refusal", bad)
		}
		if c := badContact.GetContact(); !c.GetSuppressed() || !strings.Contains(c.GetSuppressedReason(), "hard bounce at send") || c.GetEligible() {
			t.Errorf("bad@ after a 550 5.1.1: %v; want it suppressed for the hard bounce", c)
		}
		for _, e := range bad {
			if e.GetStatus() != pb.SendStatus_SEND_STATUS_FAILED || !strings.Contains(e.GetReply(), "550") || !strings.Contains(e.GetReply(), "No such user here") {
				t.Errorf("bad@ in %s: status %s reply %q; want failed with the server's 550 reply", e.GetBroadcastName(), e.GetStatus(), e.GetReply())
			}
		}
		quiet := s.getContact(&pb.GetContactRequest{Email: "quiet@example.org"})
		if len(quiet.GetHistory()) != 0 || quiet.GetContact().GetEligible() || quiet.GetContact().GetSubscribed() {
			t.Errorf("unsubscribed contact: %v with history %v; want ineligible, no history", quiet.GetContact(), quiet.GetHistory())
		}

		_, err := ac.GetContact(ctx, &pb.GetContactRequest{Email: "nobody@example.org"})
		wantStatus(t, "unknown email", err, codes.NotFound, "nobody@example.org")
		unknown := ulid.Make().String()
		_, err = ac.GetContact(ctx, &pb.GetContactRequest{Id: unknown})
		wantStatus(t, "unknown id", err, codes.NotFound, unknown)
		_, err = ac.GetContact(ctx, &pb.GetContactRequest{Id: "42"})
		wantStatus(t, "malformed id", err, codes.InvalidArgument, `"42"`, "ULID")
		_, err = ac.GetContact(ctx, &pb.GetContactRequest{Id: unknown, Email: "ok@example.org"})
		wantStatus(t, "id and email", err, codes.InvalidArgument, "not both")
		_, err = ac.GetContact(ctx, &pb.GetContactRequest{})
		wantStatus(t, "neither", err, codes.InvalidArgument, "id or by email")
		_, err = ac.GetContact(ctx, &pb.GetContactRequest{Email: "ok@example.org", HistoryLimit: -1})
		wantStatus(t, "negative limit", err, codes.InvalidArgument, "history_limit")
	})
}

// TestSegmentPreviewAgreesWithSend: segment membership is kept by add and
// remove; PreviewAudience's two numbers count the members and, through the
// suppression gate, the ones that may receive mail; and a broadcast to the
// segment then sends exactly to those.
func TestSegmentPreviewAgreesWithSend(t *testing.T) {
	stores(t, func(t *testing.T, sqlite bool) {
		s := newStack(t, stackOptions{sqlite: sqlite, workers: 1, concurrency: 4})
		ctx := context.Background()
		ac := s.audience()
		var rows []*pb.ContactRow
		for _, e := range []string{"m1", "m2", "m3", "m4", "m5", "m6", "o1", "o2"} {
			rows = append(rows, &pb.ContactRow{Email: e + "@example.org", Name: e})
		}
		rows = append(rows, &pb.ContactRow{Email: "dnc@example.org", DoNotContact: true})
		importRows(t, ac, rows)
		m6 := s.getContact(&pb.GetContactRequest{Email: "m6@example.org"}).GetContact().GetId()
		dnc := s.getContact(&pb.GetContactRequest{Email: "dnc@example.org"}).GetContact().GetId()

		created, err := ac.CreateSegment(ctx, &pb.CreateSegmentRequest{Name: "club"})
		if err != nil || created.GetSegment().GetName() != "club" || created.GetSegment().GetId() == 0 {
			t.Fatalf("CreateSegment(club) = %v, %v", created, err)
		}
		_, err = ac.CreateSegment(ctx, &pb.CreateSegmentRequest{Name: "club"})
		wantStatus(t, "segment twice", err, codes.AlreadyExists, `"club"`)
		for _, name := range []string{"", "  ", "a\nb", strings.Repeat("n", 129), " club"} {
			_, err = ac.CreateSegment(ctx, &pb.CreateSegmentRequest{Name: name})
			wantStatus(t, fmt.Sprintf("segment name %q", name), err, codes.InvalidArgument)
		}

		// Named twice (another spelling, an id and its email, a repeated
		// id): one contact, counted once.
		ghost := ulid.Make().String()
		add, err := ac.AddSegmentMembers(ctx, &pb.AddSegmentMembersRequest{
			Segment: "club",
			Emails: []string{"M1@example.org", "m2@example.org", "m3@example.org", "m4@example.org", "m5@example.org", "ghost@example.org",
				"M2@EXAMPLE.ORG", "m6@example.org", "Ghost@example.org"},
			ContactIds: []string{m6, ghost, dnc, ghost},
		})
		if err != nil {
			t.Fatal(err)
		}
		if add.GetChanged() != 7 || add.GetUnchanged() != 0 || !slices.Equal(add.GetNotFound(), []string{"ghost@example.org", ghost}) {
			t.Errorf("add: %v; want 7 added, not found [ghost@example.org %s]", add, ghost)
		}
		again, err := ac.AddSegmentMembers(ctx, &pb.AddSegmentMembersRequest{Segment: "club", Emails: []string{"m1@example.org"}, ContactIds: []string{m6}})
		if err != nil || again.GetChanged() != 0 || again.GetUnchanged() != 2 {
			t.Errorf("adding members again: %v, %v; want 2 unchanged", again, err)
		}
		rm, err := ac.RemoveSegmentMembers(ctx, &pb.RemoveSegmentMembersRequest{Segment: "club", Emails: []string{"m5@example.org", "o1@example.org"}})
		if err != nil || rm.GetChanged() != 1 || rm.GetUnchanged() != 1 || len(rm.GetNotFound()) != 0 {
			t.Errorf("remove m5 (member) and o1 (not): %v, %v; want 1 removed, 1 unchanged", rm, err)
		}
		if _, err := ac.UnsubscribeContact(ctx, &pb.UnsubscribeContactRequest{Email: "M2@example.org"}); err != nil {
			t.Fatal(err)
		}
		m3 := s.getContact(&pb.GetContactRequest{Email: "m3@example.org"}).GetContact().GetId()
		sup, err := ac.SuppressContact(ctx, &pb.SuppressContactRequest{Id: m3, Reason: "asked by phone"})
		if err != nil {
			t.Fatal(err)
		}
		if c := sup.GetContact(); !c.GetSuppressed() || c.GetSuppressedReason() != "asked by phone" || c.GetEligible() || c.GetSuppressedAt() == nil {
			t.Errorf("suppressed contact: %v", c)
		}

		// club: m1 m2(unsubscribed) m3(suppressed) m4 m6 dnc(do-not-contact).
		if p := s.preview("club"); p.GetMatched() != 6 || p.GetEligible() != 3 {
			t.Errorf("preview club: %v, want 6 matched, 3 eligible", p)
		}
		if p := s.preview(""); p.GetMatched() != 9 || p.GetEligible() != 6 {
			t.Errorf("preview everyone: %v, want 9 matched, 6 eligible", p)
		}
		if c := s.getContact(&pb.GetContactRequest{Email: "m1@example.org"}).GetContact(); !slices.Equal(c.GetSegments(), []string{"club"}) {
			t.Errorf("m1's segments: %v", c.GetSegments())
		}

		req := validRequest()
		req.Segment = "club"
		b, err := s.client.CreateBroadcast(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		id := b.GetBroadcast().GetId()
		started, err := s.client.StartBroadcast(ctx, &pb.StartBroadcastRequest{Id: id})
		if err != nil {
			t.Fatal(err)
		}
		if started.GetBroadcast().GetSnapshotTotal() != 3 {
			t.Errorf("broadcast to club: snapshot %d, preview said 3", started.GetBroadcast().GetSnapshotTotal())
		}
		s.waitState(id, pb.BroadcastState_BROADCAST_STATE_COMPLETED, 30*time.Second)
		var got []string
		for rcpt := range s.sink.CountByRecipient() {
			got = append(got, rcpt)
		}
		slices.Sort(got)
		if want := []string{"m1@example.org", "m4@example.org", "m6@example.org"}; !slices.Equal(got, want) {
			t.Errorf("broadcast to club reached %v, want %v (what the preview counted)", got, want)
		}

		// Errors a person can act on.
		_, err = ac.AddSegmentMembers(ctx, &pb.AddSegmentMembersRequest{Segment: "nope", Emails: []string{"m1@example.org"}})
		wantStatus(t, "unknown segment", err, codes.NotFound, `"nope"`, "segments create")
		_, err = ac.AddSegmentMembers(ctx, &pb.AddSegmentMembersRequest{Emails: []string{"m1@example.org"}})
		wantStatus(t, "no segment", err, codes.InvalidArgument, "segment is required")
		_, err = ac.RemoveSegmentMembers(ctx, &pb.RemoveSegmentMembersRequest{Segment: "club"})
		wantStatus(t, "no contacts", err, codes.InvalidArgument, "at least one contact")
		_, err = ac.AddSegmentMembers(ctx, &pb.AddSegmentMembersRequest{Segment: "club", ContactIds: []string{"m1@example.org"}})
		wantStatus(t, "email as id", err, codes.InvalidArgument, "not a ULID")
		_, err = ac.AddSegmentMembers(ctx, &pb.AddSegmentMembersRequest{Segment: "club", Emails: make([]string, 10_001)})
		wantStatus(t, "too many", err, codes.InvalidArgument, "10001", "10000")
		_, err = ac.PreviewAudience(ctx, &pb.PreviewAudienceRequest{Segment: "nope"})
		wantStatus(t, "preview unknown segment", err, codes.NotFound, `"nope"`)
		_, err = ac.SuppressContact(ctx, &pb.SuppressContactRequest{Email: "m1@example.org"})
		wantStatus(t, "suppress without reason", err, codes.InvalidArgument, "reason is required")
		// Printed by contacts show: a line break or an escape in it
		// rewrote the terminal (a fake "segments" line).
		_, err = ac.SuppressContact(ctx, &pb.SuppressContactRequest{Email: "m1@example.org", Reason: "ok\nsegments    FAKE"})
		wantStatus(t, "suppress reason with a line break", err, codes.InvalidArgument, "reason", "U+000A")
		_, err = ac.CreateSegment(ctx, &pb.CreateSegmentRequest{Name: "club\x1b[2J"})
		wantStatus(t, "segment name with an escape", err, codes.InvalidArgument, "U+001B")
		_, err = ac.SuppressContact(ctx, &pb.SuppressContactRequest{Email: "nobody@example.org", Reason: "x"})
		wantStatus(t, "suppress unknown", err, codes.NotFound, "nobody@example.org")
		_, err = ac.UnsubscribeContact(ctx, &pb.UnsubscribeContactRequest{Email: "nobody@example.org"})
		wantStatus(t, "unsubscribe unknown", err, codes.NotFound, "nobody@example.org")
	})
}

// TestAudienceNeedsToken: the bearer-token interceptor covers every
// AudienceService method, the ones added since it was written included.
func TestAudienceNeedsToken(t *testing.T) {
	t.Parallel()
	const token = "audience-token-9c1e"
	conn := authServer(t, api.AuthConfig{Tokens: []string{token}, Log: slog.New(slog.DiscardHandler)})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	desc := pb.AudienceService_ServiceDesc
	if len(desc.Methods) < 7 {
		t.Fatalf("AudienceService has %d unary methods; the test expects the 7 it knows", len(desc.Methods))
	}
	for _, m := range desc.Methods {
		method := "/" + desc.ServiceName + "/" + m.MethodName
		err := conn.Invoke(ctx, method, &emptypb.Empty{}, &emptypb.Empty{})
		wantCode(t, method+" without token", err, codes.Unauthenticated, "")
		err = conn.Invoke(withToken(ctx, token), method, &emptypb.Empty{}, &emptypb.Empty{})
		if code := status.Code(err); code == codes.Unauthenticated || code == codes.Unimplemented {
			t.Errorf("%s with the token: %v", method, err)
		}
	}
	for _, sd := range desc.Streams {
		stream, err := pb.NewAudienceServiceClient(conn).ImportContacts(ctx)
		if err == nil {
			_, err = stream.CloseAndRecv()
		}
		wantCode(t, sd.StreamName+" without token", err, codes.Unauthenticated, "")
	}
}

// TestImportThroughput imports contacts through the real gRPC stream, in
// the CLI's 500-row messages, and logs rows per second, on Postgres (when
// reachable) and SQLite. 20,000 rows by default; RANGECAST_IMPORT_ROWS=1000000
// measures a million, and RANGECAST_IMPORT_STORE=postgres (or sqlite) runs
// one store only, so the two do not share the CPU.
func TestImportThroughput(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	n := 20_000
	if v := os.Getenv("RANGECAST_IMPORT_ROWS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			t.Fatalf("RANGECAST_IMPORT_ROWS=%q: want a positive number", v)
		}
	}
	only := os.Getenv("RANGECAST_IMPORT_STORE")
	stores(t, func(t *testing.T, sqlite bool) {
		if only != "" && (only == "sqlite") != sqlite {
			t.Skipf("RANGECAST_IMPORT_STORE=%s", only)
		}
		s := newStack(t, stackOptions{sqlite: sqlite})
		importThroughput(t, s, n)
	})
}

func importThroughput(t *testing.T, s *stack, n int) {
	kind := fmt.Sprintf("%T", s.store)
	// The second pass finds every address: all updates, no new contact.
	for _, pass := range []string{"new contacts", "re-import (all updates)"} {
		imported, bad, elapsed := importGenerated(t, s, n)
		t.Logf("%s: %d rows (%d rejected) through gRPC into %s in %v: %.0f rows/s",
			pass, imported, bad, kind, elapsed.Round(time.Millisecond), float64(n)/elapsed.Seconds())
		if p := s.preview(""); p.GetMatched() != imported {
			t.Fatalf("after the import the store holds %d contacts, want %d", p.GetMatched(), imported)
		}
	}
}

// importGenerated streams n generated rows as the CLI would, in 500-row
// messages; every 100,000th row is invalid, so the errors path is part of
// the run.
func importGenerated(t *testing.T, s *stack, n int) (imported, bad int64, elapsed time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	start := time.Now()
	stream, err := s.audience().ImportContacts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const chunk = 500
	plans := []string{"free", "pro", "team"}
	for i := 0; i < n; i += chunk {
		rows := make([]*pb.ContactRow, 0, chunk)
		for j := i; j < min(i+chunk, n); j++ {
			email := fmt.Sprintf("user%07d@example.org", j)
			if j%100_000 == 99_999 {
				email, bad = fmt.Sprintf("user%07d", j), bad+1
			}
			rows = append(rows, &pb.ContactRow{
				Email: email, Name: fmt.Sprintf("User %d", j),
				Attributes: map[string]string{"plan": plans[j%3], "signup": "2026-11-30"},
			})
		}
		if err := stream.Send(&pb.ImportContactsRequest{Rows: rows}); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := stream.CloseAndRecv()
	if err != nil {
		t.Fatal(err)
	}
	elapsed = time.Since(start)
	if resp.GetImported() != int64(n)-bad || resp.GetRejected() != bad {
		t.Fatalf("imported %d, rejected %d; want %d and %d", resp.GetImported(), resp.GetRejected(), int64(n)-bad, bad)
	}
	return resp.GetImported(), bad, elapsed
}

// TestImportStopsWhenTheStoreFails: a store failure mid-stream ends the
// call (no hang between the reader and the writer) with an error that says
// how far the import got.
func TestImportStopsWhenTheStoreFails(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{sqlite: true})
	ac := s.audience()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream, err := ac.ImportContacts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	next := 0
	send := func(n int) error {
		rows := make([]*pb.ContactRow, n)
		for i := range rows {
			rows[i] = &pb.ContactRow{Email: fmt.Sprintf("s%06d@example.org", next)}
			next++
		}
		return stream.Send(&pb.ImportContactsRequest{Rows: rows})
	}
	// One full store batch (5,000 rows) is written while the stream is open.
	if err := send(6000); err != nil {
		t.Fatal(err)
	}
	for s.preview("").GetMatched() < 5000 {
		if ctx.Err() != nil {
			t.Fatal("the first batch was never written")
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.store.Close()
	for range 20 {
		if send(1000) != nil {
			break // the server ended the stream
		}
	}
	_, err = stream.CloseAndRecv()
	t.Logf("the client sees: %v", err)
	wantStatus(t, "import after the store closed", err, codes.Internal, "import stopped after row", "at least 5000 rows committed")
}

// TestSendStatusPB: every ledger status the store writes has its own value
// in the proto enum, so history never shows "Unknown status" for a status
// the server knows.
func TestSendStatusPB(t *testing.T) {
	seen := map[pb.SendStatus]store.SendStatus{}
	for _, s := range []store.SendStatus{
		store.SendClaimed, store.SendSent, store.SendFailed, store.SendDeferred, store.SendUnknown,
		store.SendDelivered, store.SendOpened, store.SendClicked, store.SendBounced, store.SendComplained, store.SendUnsubscribed,
	} {
		v := api.SendStatusPB(s)
		if v == pb.SendStatus_SEND_STATUS_UNSPECIFIED {
			t.Errorf("ledger status %q has no SendStatus value", s)
		}
		if other, dup := seen[v]; dup {
			t.Errorf("ledger statuses %q and %q both map to %s", other, s, v)
		}
		seen[v] = s
	}
	if v := api.SendStatusPB("something-new"); v != pb.SendStatus_SEND_STATUS_UNSPECIFIED {
		t.Errorf("an unknown status maps to %s, want UNSPECIFIED", v)
	}
}
