package api

import (
	"context"
	"math"
	"regexp"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rangecast/rangecast/internal/address"
	"github.com/rangecast/rangecast/internal/coordinator"
	"github.com/rangecast/rangecast/internal/governor"
	pb "github.com/rangecast/rangecast/proto/rangecast/v1"
)

// GovernorAPI serves rangecast.v1.GovernorService. Any coordinator answers:
// the leader from the governors it runs, a follower from the state last
// written to KV (coordinator/domains.go).
type GovernorAPI struct {
	pb.UnimplementedGovernorServiceServer
	cfg Config
}

// NewGovernorAPI returns the gRPC service backed by cfg's engine.
func NewGovernorAPI(cfg Config) *GovernorAPI { return &GovernorAPI{cfg: cfg.withDefaults()} }

// maxDomainLen and maxLabelLen are RFC 1035's limits on a name (in its
// text form) and on each of its labels.
const (
	maxDomainLen = 253
	maxLabelLen  = 63
)

// domainName is what a sending domain may look like: it is also a KV key.
var domainName = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)+$`)

// serverName is what an SMTP server's configured name may look like.
var serverName = regexp.MustCompile(`^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$`)

// server is the configured SMTP server's name; FailedPrecondition without
// a governor.
func (api *GovernorAPI) server() (string, error) {
	s, err := api.cfg.Engine.GovernorServer()
	return s, errorOrNil(err)
}

func checkDomain(raw string) (string, error) {
	d := strings.ToLower(strings.TrimSpace(raw))
	if d == "" {
		return "", invalid("domain is required: the sending domain, the part of the From address after @")
	}
	// Length first: the name becomes a KV key, a NATS subject, and a
	// subject past the server's control line closes the coordinator's
	// connection (a 5,000-character domain in 'governor status' stopped
	// all sending until a restart).
	if len(d) > maxDomainLen {
		return "", invalid("domain %q… is %d characters; a domain name has at most %d", d[:40], len(d), maxDomainLen)
	}
	for label := range strings.SplitSeq(d, ".") {
		if len(label) > maxLabelLen {
			return "", invalid("domain %q has a label of %d characters; a label has at most %d", d, len(label), maxLabelLen)
		}
	}
	if !domainName.MatchString(d) {
		return "", invalid("domain %q is not a domain name like example.com", raw)
	}
	return d, nil
}

func (api *GovernorAPI) GetDomain(ctx context.Context, req *pb.GetDomainRequest) (*pb.GetDomainResponse, error) {
	if _, err := api.server(); err != nil {
		return nil, err
	}
	d, err := checkDomain(req.GetDomain())
	if err != nil {
		return nil, err
	}
	s, err := api.cfg.Engine.DomainStatus(ctx, d)
	if err != nil {
		return nil, Error(err)
	}
	return &pb.GetDomainResponse{Domain: domainStatusPB(s)}, nil
}

func (api *GovernorAPI) ListDomains(ctx context.Context, _ *pb.ListDomainsRequest) (*pb.ListDomainsResponse, error) {
	names, err := api.cfg.Engine.SendingDomains(ctx)
	if err != nil {
		return nil, Error(err)
	}
	out := &pb.ListDomainsResponse{}
	for _, d := range names {
		s, err := api.cfg.Engine.DomainStatus(ctx, d)
		if coordinator.KindOf(err) == coordinator.NotFound {
			continue // deleted meanwhile
		}
		if err != nil {
			return nil, Error(err)
		}
		out.Domains = append(out.Domains, domainStatusPB(s))
	}
	return out, nil
}

func (api *GovernorAPI) SetDomainLimits(ctx context.Context, req *pb.SetDomainLimitsRequest) (*pb.SetDomainLimitsResponse, error) {
	if _, err := api.server(); err != nil {
		return nil, err
	}
	d, err := checkDomain(req.GetDomain())
	if err != nil {
		return nil, err
	}
	if req.RatePerSecond == nil && req.Burst == nil && req.DailyCeiling == nil {
		return nil, invalid("nothing to set: give rate_per_second, burst or daily_ceiling")
	}
	if r := req.RatePerSecond; r != nil && (*r <= 0 || math.IsNaN(*r) || math.IsInf(*r, 0)) {
		return nil, invalid("rate_per_second must be a finite number above 0, got %v", *r)
	}
	if b := req.Burst; b != nil && *b <= 0 {
		return nil, invalid("burst must be at least 1, got %d", *b)
	}
	if c := req.DailyCeiling; c != nil && (*c < governor.MinCeiling || *c > governor.MaxCeiling) {
		return nil, invalid("daily_ceiling must be between %d and %d, got %d", governor.MinCeiling, governor.MaxCeiling, *c)
	}
	ch := coordinator.LimitChange{RatePerSecond: req.RatePerSecond}
	if req.Burst != nil {
		b := int(*req.Burst)
		ch.Burst = &b
	}
	if req.DailyCeiling != nil {
		c := int(*req.DailyCeiling)
		ch.DailyCeiling = &c
	}
	s, err := api.cfg.Engine.SetDomainLimits(ctx, d, ch)
	if err != nil {
		return nil, Error(err)
	}
	return &pb.SetDomainLimitsResponse{Domain: domainStatusPB(s)}, nil
}

func (api *GovernorAPI) ResetRateLimit(ctx context.Context, req *pb.ResetRateLimitRequest) (*pb.ResetRateLimitResponse, error) {
	configured, err := api.server()
	if err != nil {
		return nil, err
	}
	server := strings.TrimSpace(req.GetServer())
	if server == "" {
		return nil, invalid("server is required: the SMTP server's name in the governor configuration (%q here)", configured)
	}
	if !serverName.MatchString(server) {
		return nil, invalid("server %q is not a server name (letters, digits, - _ and dots)", server)
	}
	if server != configured {
		return nil, status.Errorf(codes.NotFound, "no SMTP server named %q: the sending domains here send through %q", server, configured)
	}
	at, names, err := api.cfg.Engine.ResetHourly(ctx, server)
	if err != nil {
		return nil, Error(err)
	}
	return &pb.ResetRateLimitResponse{ResetAt: timestamppb.New(at), Domains: names}, nil
}

// providerName is a receiving provider as governor status names it
// ("google", "microsoft") or a recipient domain ("gmail.com").
var providerName = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*$`)

func (api *GovernorAPI) ReleaseProvider(ctx context.Context, req *pb.ReleaseProviderRequest) (*pb.ReleaseProviderResponse, error) {
	if _, err := api.server(); err != nil {
		return nil, err
	}
	d, err := checkDomain(req.GetDomain())
	if err != nil {
		return nil, err
	}
	p := strings.TrimSuffix(strings.ToLower(strings.TrimSpace(req.GetProvider())), ".")
	if p == "" {
		return nil, invalid("provider is required: the receiving provider as 'rangecast governor status' names it (google, microsoft, example.org)")
	}
	if len(p) > maxDomainLen {
		return nil, invalid("provider %q… is %d characters; a domain name has at most %d", p[:40], len(p), maxDomainLen)
	}
	notProvider := invalid("provider %q is not a provider name nor a domain (governor status names them: google, microsoft, example.org)", p)
	if strings.Contains(p, ".") {
		// A recipient domain, as addresses keep it: Unicode, so an
		// internationalised one given as xn--… names the same provider.
		c, err := address.Canonical("postmaster@" + p)
		if err != nil {
			return nil, notProvider
		}
		p = c[strings.LastIndexByte(c, '@')+1:]
	} else if !providerName.MatchString(p) {
		return nil, notProvider
	}
	r, err := api.cfg.Engine.ReleaseProvider(ctx, d, p)
	if err != nil {
		return nil, Error(err)
	}
	return &pb.ReleaseProviderResponse{Domain: domainStatusPB(r.Status), Provider: r.Provider, Was: providerPhase(r.Was), Due: r.Due}, nil
}
