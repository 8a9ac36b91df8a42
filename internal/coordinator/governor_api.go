package coordinator

import (
	"context"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rangecast/rangecast/internal/bus"
	"github.com/rangecast/rangecast/internal/governor"
	pb "github.com/rangecast/rangecast/proto/rangecast/v1"
)

// GovernorAPI serves rangecast.v1.GovernorService. Any coordinator answers:
// the leader from the governors it runs, a follower from the state last
// written to KV. Changes go through KV, where the leader follows them.
type GovernorAPI struct {
	pb.UnimplementedGovernorServiceServer
	c *Coordinator
}

// NewGovernorAPI returns the gRPC service backed by c.
func NewGovernorAPI(c *Coordinator) *GovernorAPI { return &GovernorAPI{c: c} }

// domainName is what a sending domain may look like: it is also a KV key.
var domainName = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)+$`)

// serverName is what an SMTP server's configured name may look like.
var serverName = regexp.MustCompile(`^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$`)

func (api *GovernorAPI) enabled() error {
	if api.c.cfg.Governor == nil {
		return status.Error(codes.FailedPrecondition, "this coordinator runs without a governor (no per-domain limits are enforced); start it with the governor enabled")
	}
	return nil
}

func checkDomain(raw string) (string, error) {
	d := strings.ToLower(strings.TrimSpace(raw))
	if d == "" {
		return "", invalid("domain is required: the sending domain, the part of the From address after @")
	}
	if !domainName.MatchString(d) {
		return "", invalid("domain %q is not a domain name like example.com", raw)
	}
	return d, nil
}

func (api *GovernorAPI) GetDomain(ctx context.Context, req *pb.GetDomainRequest) (*pb.GetDomainResponse, error) {
	if err := api.enabled(); err != nil {
		return nil, err
	}
	d, err := checkDomain(req.GetDomain())
	if err != nil {
		return nil, err
	}
	s, err := api.status(ctx, d)
	if err != nil {
		return nil, err
	}
	return &pb.GetDomainResponse{Domain: s}, nil
}

func (api *GovernorAPI) ListDomains(ctx context.Context, _ *pb.ListDomainsRequest) (*pb.ListDomainsResponse, error) {
	if err := api.enabled(); err != nil {
		return nil, err
	}
	names, err := api.domains(ctx)
	if err != nil {
		return nil, err
	}
	out := &pb.ListDomainsResponse{}
	for _, d := range names {
		s, err := api.status(ctx, d)
		if status.Code(err) == codes.NotFound {
			continue // deleted meanwhile
		}
		if err != nil {
			return nil, err
		}
		out.Domains = append(out.Domains, s)
	}
	return out, nil
}

func (api *GovernorAPI) SetDomainLimits(ctx context.Context, req *pb.SetDomainLimitsRequest) (*pb.SetDomainLimitsResponse, error) {
	if err := api.enabled(); err != nil {
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
		return nil, invalid("rate_per_second must be above 0, got %v", *r)
	}
	if b := req.Burst; b != nil && *b <= 0 {
		return nil, invalid("burst must be at least 1, got %d", *b)
	}
	if c := req.DailyCeiling; c != nil && (*c < governor.MinCeiling || *c > governor.MaxCeiling) {
		return nil, invalid("daily_ceiling must be between %d and %d, got %d", governor.MinCeiling, governor.MaxCeiling, *c)
	}
	kv := api.c.cfg.Bus.Governors
	key := bus.GovernorLimitsKey(d)
	now := api.c.cfg.Clock.Now().UTC()
	for attempt := 0; ; attempt++ {
		var l bus.GovernorLimits
		rev, _, err := bus.GetJSON(ctx, kv, key, &l)
		if err != nil {
			return nil, status.Errorf(codes.Unavailable, "read limits of %s: %v", d, err)
		}
		if req.RatePerSecond != nil {
			l.RatePerSecond = *req.RatePerSecond
		}
		if req.Burst != nil {
			l.Burst = int(*req.Burst)
		}
		if req.DailyCeiling != nil {
			l.Ceiling, l.CeilingSetAt = int(*req.DailyCeiling), now
		}
		data := bus.Encode(l)
		_, err = bus.PutAt(ctx, kv, key, data, rev)
		if bus.IsConflict(err) && attempt < 3 {
			continue // changed by someone else meanwhile: merge into theirs
		}
		if bus.IsConflict(err) {
			return nil, status.Errorf(codes.Aborted, "limits of %s are being changed by someone else at the same time; try again", d)
		}
		if err != nil {
			return nil, status.Errorf(codes.Unavailable, "write limits of %s: %v", d, err)
		}
		if g := api.c.hostedGovernors(); g != nil {
			// The leader's watch will see it too; applying it now makes
			// the answer below show it.
			if _, err := g.domain(d); err == nil {
				g.follow(key, data)
			}
		}
		break
	}
	s, err := api.status(ctx, d)
	if status.Code(err) == codes.NotFound {
		s, err = api.offline(ctx, d, true)
	}
	if err != nil {
		return nil, err
	}
	return &pb.SetDomainLimitsResponse{Domain: s}, nil
}

func (api *GovernorAPI) ResetRateLimit(ctx context.Context, req *pb.ResetRateLimitRequest) (*pb.ResetRateLimitResponse, error) {
	if err := api.enabled(); err != nil {
		return nil, err
	}
	server := strings.TrimSpace(req.GetServer())
	if server == "" {
		return nil, invalid("server is required: the SMTP server's name in the governor configuration (%q here)", serverOf(api.c.cfg.Governor.Limits))
	}
	if !serverName.MatchString(server) {
		return nil, invalid("server %q is not a server name (letters, digits, - _ and dots)", server)
	}
	if configured := serverOf(api.c.cfg.Governor.Limits); server != configured {
		return nil, status.Errorf(codes.NotFound, "no SMTP server named %q: the sending domains here send through %q", server, configured)
	}
	now := api.c.cfg.Clock.Now().UTC()
	key := bus.GovernorResetKey(server)
	data := bus.Encode(bus.GovernorReset{At: now})
	if _, err := api.c.cfg.Bus.Governors.Put(ctx, key, data); err != nil {
		return nil, status.Errorf(codes.Unavailable, "record the reset: %v", err)
	}
	if g := api.c.hostedGovernors(); g != nil {
		g.follow(key, data)
	}
	names, err := api.domains(ctx)
	if err != nil {
		return nil, err
	}
	return &pb.ResetRateLimitResponse{ResetAt: timestamppb.New(now), Domains: names}, nil
}

// domains lists the sending domains with stored state.
func (api *GovernorAPI) domains(ctx context.Context) ([]string, error) {
	lister, err := api.c.cfg.Bus.Governors.ListKeysFiltered(ctx, bus.GovernorStateKeys)
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "list governor state: %v", err)
	}
	defer lister.Stop() //nolint:errcheck
	var names []string
	for k := range lister.Keys() {
		names = append(names, strings.TrimPrefix(k, "state."))
	}
	slices.Sort(names)
	return names, nil
}

// status reports a domain: live from the leader's governor, else from KV.
func (api *GovernorAPI) status(ctx context.Context, d string) (*pb.DomainStatus, error) {
	now := api.c.cfg.Clock.Now()
	if g := api.c.hostedGovernors(); g != nil {
		if s := g.status(now, d); s != nil {
			return domainStatus(*s, serverOf(g.defaults), true), nil
		}
	}
	return api.offline(ctx, d, false)
}

// offline builds a domain's status from what KV holds. A domain with no
// state is NotFound unless orNew, which shows what it would start with.
func (api *GovernorAPI) offline(ctx context.Context, d string, orNew bool) (*pb.DomainStatus, error) {
	kv := api.c.cfg.Bus.Governors
	st, _, err := readGovernorState(ctx, kv, d)
	if err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	ol, err := readGovernorLimits(ctx, kv, d)
	if err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	if st == nil && ol == nil && !orNew {
		return nil, status.Errorf(codes.NotFound, "no governor state for %s: nothing has been sent from it yet", d)
	}
	now := api.c.cfg.Clock.Now()
	limits := mergeLimits(api.c.cfg.Governor.Limits, ol)
	dom := governor.NewDomain(d, limits, st, now)
	if ol != nil && ol.Ceiling > 0 {
		dom.SetCeiling(now, ol.CeilingSetAt, ol.Ceiling)
	}
	server := serverOf(api.c.cfg.Governor.Limits)
	w, _, err := readHourly(ctx, kv, server)
	if err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	srv := governor.NewServer(server, api.c.cfg.Governor.Limits.EmailsPerHour, w)
	if r, err := readGovernorReset(ctx, kv, server); err == nil && !r.At.IsZero() {
		srv.Reset(r.At)
	}
	dom.ShareServer(srv)
	return domainStatus(dom.Status(now), server, false), nil
}

func domainStatus(s governor.Status, server string, live bool) *pb.DomainStatus {
	out := &pb.DomainStatus{
		Domain:        s.Domain,
		Day:           s.Day,
		DailyCeiling:  int64(s.Ceiling),
		SentToday:     int64(s.SentToday),
		InFlight:      int64(s.InFlight),
		RejectedToday: s.RejectedToday,
		Tokens:        s.Tokens,
		RatePerSecond: s.RatePerSecond,
		Burst:         int32(s.Burst),
		Server:        server,
		EmailsPerHour: int64(s.EmailsPerHour),
		HourlyCount:   int64(s.HourlyCount),
		HourlySent:    int64(s.HourlySent),
		Waiting:       s.Waiting,
		Live:          live,
	}
	if !s.ResetAt.IsZero() {
		out.HourlyResetAt = timestamppb.New(s.ResetAt)
	}
	if !s.ResumesAt.IsZero() {
		out.ResumesAt = timestamppb.New(s.ResumesAt)
	}
	for _, p := range s.Providers {
		ps := &pb.ProviderStatus{Provider: p.Provider, Phase: providerPhase(p.Phase), Failures: int32(p.Failures), ProbeInFlight: p.ProbeInFlight}
		if !p.Until.IsZero() {
			ps.Until = timestamppb.New(p.Until)
		}
		out.Providers = append(out.Providers, ps)
	}
	return out
}

func providerPhase(p string) pb.ProviderPhase {
	switch p {
	case governor.PhaseClosed:
		return pb.ProviderPhase_PROVIDER_PHASE_CLOSED
	case governor.PhaseHalfOpen:
		return pb.ProviderPhase_PROVIDER_PHASE_HALF_OPEN
	case governor.PhaseOpen:
		return pb.ProviderPhase_PROVIDER_PHASE_OPEN
	case governor.PhaseHeld:
		return pb.ProviderPhase_PROVIDER_PHASE_HELD
	}
	panic(fmt.Sprintf("unknown provider phase %q", p))
}
