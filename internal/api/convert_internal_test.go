package api

import (
	"fmt"
	"testing"
	"time"

	"github.com/rangecast/rangecast/internal/coordinator"
	"github.com/rangecast/rangecast/internal/governor"
)

// TestDomainStatusListsWhatHoldsBackMost: a domain that heard from 20,000
// small recipient domains lists 200 providers, held first and the big ones
// before small domains, and counts the rest, so the answer fits a gRPC
// message.
func TestDomainStatusListsWhatHoldsBackMost(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	d := governor.NewDomain("example.com", governor.Limits{}, nil, now)
	for i := range 20_000 {
		d.RecordTransientReply(now, fmt.Sprintf("small-%05d.example", i), "450 4.7.1 greylisted")
	}
	d.RecordTransientReply(now, "outlook.com", "451 4.7.500 busy")
	d.HoldProvider(now, governor.ProviderGoogle, time.Hour, "421 4.7.28", true)
	pb := domainStatusPB(coordinator.DomainStatus{Status: d.Status(now)})
	ps := pb.GetProviders()
	if len(ps) != listedProviders || pb.GetProvidersLeftOut() != 20_002-listedProviders {
		t.Fatalf("listed %d providers, %d left out; want %d and %d", len(ps), pb.GetProvidersLeftOut(), listedProviders, 20_002-listedProviders)
	}
	if ps[0].GetProvider() != governor.ProviderGoogle || ps[1].GetProvider() != governor.ProviderMicrosoft {
		t.Fatalf("listed first %s, %s; want google (held), then microsoft", ps[0].GetProvider(), ps[1].GetProvider())
	}
}
