package api_test

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rangecast/rangecast/internal/coordinator"
	pb "github.com/rangecast/rangecast/proto/rangecast/v1"
)

func (s *stack) governorClient() pb.GovernorServiceClient { return pb.NewGovernorServiceClient(s.conn) }

// TestGovernorAPIErrors: bad input gets InvalidArgument with a message a
// person can act on, unknown names NotFound, and a coordinator without a
// governor says so.
func TestGovernorAPIErrors(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{governor: &coordinator.GovernorConfig{}})
	g, ctx := s.governorClient(), context.Background()
	ceiling := func(n int64) *int64 { return &n }
	cases := []struct {
		name string
		call func() error
		code codes.Code
		msg  string
	}{
		{"no domain", func() error { _, err := g.GetDomain(ctx, &pb.GetDomainRequest{}); return err }, codes.InvalidArgument, "domain is required"},
		{"not a domain", func() error { _, err := g.GetDomain(ctx, &pb.GetDomainRequest{Domain: "news@example.com"}); return err }, codes.InvalidArgument, "not a domain name"},
		// A name that long would be a NATS subject past the server's
		// control line, which closed the coordinator's connection.
		{"a domain too long", func() error {
			_, err := g.GetDomain(ctx, &pb.GetDomainRequest{Domain: strings.Repeat("a", 5000) + ".com"})
			return err
		}, codes.InvalidArgument, "is 5004 characters; a domain name has at most 253"},
		{"a label too long", func() error {
			_, err := g.SetDomainLimits(ctx, &pb.SetDomainLimitsRequest{Domain: strings.Repeat("b", 64) + ".com", DailyCeiling: ceiling(200)})
			return err
		}, codes.InvalidArgument, "a label has at most 63"},
		{"never sent", func() error { _, err := g.GetDomain(ctx, &pb.GetDomainRequest{Domain: "quiet.example"}); return err }, codes.NotFound, "nothing has been sent"},
		{"nothing to set", func() error {
			_, err := g.SetDomainLimits(ctx, &pb.SetDomainLimitsRequest{Domain: "example.com"})
			return err
		}, codes.InvalidArgument, "nothing to set"},
		{"ceiling below the floor", func() error {
			_, err := g.SetDomainLimits(ctx, &pb.SetDomainLimitsRequest{Domain: "example.com", DailyCeiling: ceiling(5)})
			return err
		}, codes.InvalidArgument, "between 100 and 5000000"},
		{"unknown server", func() error { _, err := g.ResetRateLimit(ctx, &pb.ResetRateLimitRequest{Server: "mx9"}); return err }, codes.NotFound, `send through "default"`},
	}
	for _, c := range cases {
		err := c.call()
		if status.Code(err) != c.code || !strings.Contains(status.Convert(err).Message(), c.msg) {
			t.Errorf("%s: got %v; want %s mentioning %q", c.name, err, c.code, c.msg)
		}
	}
	// The coordinator still answers: its NATS connection is whole.
	if _, err := g.ListDomains(ctx, &pb.ListDomainsRequest{}); err != nil {
		t.Fatalf("after the refusals: %v", err)
	}
	// A ceiling set by hand shows at once, on a domain that never sent.
	r, err := g.SetDomainLimits(ctx, &pb.SetDomainLimitsRequest{Domain: "Example.COM", DailyCeiling: ceiling(200_000)})
	if err != nil {
		t.Fatal(err)
	}
	if r.GetDomain().GetDomain() != "example.com" || r.GetDomain().GetDailyCeiling() != 200_000 {
		t.Fatalf("after SetDomainLimits: %v", r.GetDomain())
	}

	plain := newStack(t, stackOptions{})
	_, err = plain.governorClient().ListDomains(ctx, &pb.ListDomainsRequest{})
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("ListDomains without a governor: %v; want FailedPrecondition", err)
	}
}
