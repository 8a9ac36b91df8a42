package api_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rangecast/rangecast/internal/capture"
	"github.com/rangecast/rangecast/internal/store"
	"github.com/rangecast/rangecast/internal/testenv"
	pb "github.com/rangecast/rangecast/proto/rangecast/v1"
)

func (s *stack) catalog() pb.CatalogServiceClient { return pb.NewCatalogServiceClient(s.conn) }

// Bad input to CatalogService is INVALID_ARGUMENT, a missing name
// NOT_FOUND, a segment still in use FAILED_PRECONDITION, each with words a
// person can act on.
func TestCatalogCodes(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, sqlite bool) {
		s := newStack(t, stackOptions{sqlite: sqlite})
		ctx := context.Background()
		c := s.catalog()
		s.seed(3)
		s.create("newsletter", 0)
		many := make([]string, 10_001)
		for i := range many {
			many[i] = "a@example.org"
		}
		for _, tc := range []struct {
			name string
			call func() error
			code codes.Code
			says string
		}{
			{"page size", func() error {
				_, err := c.ListContacts(ctx, &pb.ListContactsRequest{PageSize: 501})
				return err
			}, codes.InvalidArgument, "page_size 501"},
			{"contact token", func() error {
				_, err := c.ListContacts(ctx, &pb.ListContactsRequest{PageToken: "seg.4"})
				return err
			}, codes.InvalidArgument, "page_token"},
			{"broadcast token", func() error {
				_, err := c.ListContacts(ctx, &pb.ListContactsRequest{PageToken: "bc.01J9Z3K8M2T4V6X8Y0A2B4C6D8"})
				return err
			}, codes.InvalidArgument, "start again without it"},
			{"segment token", func() error {
				_, err := c.ListSegments(ctx, &pb.ListSegmentsRequest{PageToken: "01J9Z3K8M2T4V6X8Y0A2B4C6D8"})
				return err
			}, codes.InvalidArgument, "start again without it"},
			{"template token", func() error {
				_, err := c.ListTemplates(ctx, &pb.ListTemplatesRequest{PageToken: "tpl.!!"})
				return err
			}, codes.InvalidArgument, "page_token"},
			{"unknown segment", func() error {
				_, err := c.ListContacts(ctx, &pb.ListContactsRequest{Segment: "nope"})
				return err
			}, codes.NotFound, `no segment named "nope"`},
			{"erase nothing", func() error {
				_, err := c.EraseContacts(ctx, &pb.EraseContactsRequest{})
				return err
			}, codes.InvalidArgument, "at least one"},
			{"erase too many", func() error {
				_, err := c.EraseContacts(ctx, &pb.EraseContactsRequest{Emails: many})
				return err
			}, codes.InvalidArgument, "at most 10000"},
			{"erase not an address", func() error {
				_, err := c.EraseContacts(ctx, &pb.EraseContactsRequest{Emails: []string{"ann@example.org", "ann"}})
				return err
			}, codes.InvalidArgument, "email 2 of 2"},
			{"erase an address with an invisible character", func() error {
				// It could match no contact: "erased, no such contact"
				// would leave the person in place (tester).
				_, err := c.EraseContacts(ctx, &pb.EraseContactsRequest{Emails: []string{"ann@example.org", "\ufeffbob@example.org"}})
				return err
			}, codes.InvalidArgument, "email 2 of 2 (\"\\ufeffbob@example.org\"): email contains U+FEFF"},
			{"delete segment in use", func() error {
				_, err := c.DeleteSegment(ctx, &pb.DeleteSegmentRequest{Name: "newsletter"})
				return err
			}, codes.FailedPrecondition, "audience of 1 broadcast"},
			{"delete unknown segment", func() error {
				_, err := c.DeleteSegment(ctx, &pb.DeleteSegmentRequest{Name: "nope"})
				return err
			}, codes.NotFound, "segments list"},
			{"delete unknown template", func() error {
				_, err := c.DeleteTemplate(ctx, &pb.DeleteTemplateRequest{Name: "nope"})
				return err
			}, codes.NotFound, "send template list"},
			{"delete no template", func() error {
				_, err := c.DeleteTemplate(ctx, &pb.DeleteTemplateRequest{})
				return err
			}, codes.InvalidArgument, "name the template"},
		} {
			err := tc.call()
			if status.Code(err) != tc.code || !strings.Contains(status.Convert(err).Message(), tc.says) {
				t.Errorf("%s: %v; want %s saying %q", tc.name, err, tc.code, tc.says)
			}
		}
		// Pages join up: every contact once, across pages of one.
		seen := map[string]bool{}
		token := ""
		for {
			resp, err := c.ListContacts(ctx, &pb.ListContactsRequest{PageSize: 1, PageToken: token})
			if err != nil {
				t.Fatal(err)
			}
			for _, ct := range resp.GetContacts() {
				if seen[ct.GetEmail()] {
					t.Fatalf("%s listed twice", ct.GetEmail())
				}
				seen[ct.GetEmail()] = true
			}
			if token = resp.GetNextPageToken(); token == "" {
				break
			}
		}
		if len(seen) != 3 {
			t.Errorf("listed %d contacts, want 3", len(seen))
		}
	})
}

// Contacts erased while a broadcast sends to them: no message goes to a
// token, nobody gets two copies, every message that went out is counted,
// the broadcast completes, and those erased before their page are not
// mailed at all; everyone else gets exactly one copy.
func TestEraseDuringBroadcast(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, sqlite bool) {
		s := newStack(t, stackOptions{sqlite: sqlite, workers: 2, concurrency: 4,
			sinkOpts: []capture.Option{capture.WithLatency(3 * time.Millisecond)}})
		ctx := context.Background()
		a := s.seed(400)
		want := a.eligible(false)
		id := s.create("", 0)
		if _, err := s.client.StartBroadcast(ctx, &pb.StartBroadcastRequest{Id: id}); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, "some messages are sent", time.Minute, func() bool { return s.sink.Count() >= 40 })
		// Every fifth eligible contact, across the whole id space: some sent
		// already, some in flight, most not yet reached.
		var erase []string
		n := 0
		for _, c := range a.contacts {
			if want[c.Email] {
				if n%5 == 0 {
					erase = append(erase, c.Email)
				}
				n++
			}
		}
		before := s.sink.CountByRecipient()
		if _, err := s.catalog().EraseContacts(ctx, &pb.EraseContactsRequest{Emails: erase}); err != nil {
			t.Fatal(err)
		}
		b := s.waitState(id, pb.BroadcastState_BROADCAST_STATE_COMPLETED, 2*time.Minute)
		got := s.sink.CountByRecipient()
		for to, n := range got {
			if n != 1 || strings.HasPrefix(to, store.ErasedToken) || !want[to] {
				t.Errorf("%s received %d messages", to, n)
			}
		}
		erased := map[string]bool{}
		for _, e := range erase {
			erased[e] = true
		}
		late, spared := 0, 0
		for e := range want {
			switch {
			case !erased[e] && got[e] != 1:
				t.Errorf("%s (not erased) received %d messages", e, got[e])
			case erased[e] && got[e] == 1 && before[e] == 0:
				late++ // in flight when the erasure committed
			case erased[e] && got[e] == 0:
				spared++
			}
		}
		// What went out is counted, erased or not.
		if int(b.GetProgress().GetSent()) != s.sink.Count() {
			t.Errorf("broadcast counts %d sent; the server received %d", b.GetProgress().GetSent(), s.sink.Count())
		}
		// In flight at the erasure: the windows (2 workers × 4) claimed
		// before it, and those claimed between the count above and its
		// commit; two windows' worth is a generous bound on this machine.
		if late > 2*2*4 {
			t.Errorf("%d erased contacts were mailed after the erasure; want no more than were in flight", late)
		}
		if spared == 0 {
			t.Errorf("no erased contact was spared: the erasure came too late to test anything")
		}
		t.Logf("erased %d: %d mailed before, %d in flight, %d spared", len(erase), len(erase)-late-spared, late, spared)
	})
}
