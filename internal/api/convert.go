package api

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rangecast/rangecast/internal/coordinator"
	"github.com/rangecast/rangecast/internal/governor"
	"github.com/rangecast/rangecast/internal/store"
	pb "github.com/rangecast/rangecast/proto/rangecast/v1"
)

// The conversions between domain types and the wire, all in one place.

var stateValues = map[store.State]pb.BroadcastState{
	store.StateDraft:     pb.BroadcastState_BROADCAST_STATE_DRAFT,
	store.StateRunning:   pb.BroadcastState_BROADCAST_STATE_RUNNING,
	store.StatePaused:    pb.BroadcastState_BROADCAST_STATE_PAUSED,
	store.StateCompleted: pb.BroadcastState_BROADCAST_STATE_COMPLETED,
	store.StateCancelled: pb.BroadcastState_BROADCAST_STATE_CANCELLED,
	store.StateFailed:    pb.BroadcastState_BROADCAST_STATE_FAILED,
}

var policyNames = map[pb.InDoubtPolicy]string{
	pb.InDoubtPolicy_IN_DOUBT_POLICY_UNSPECIFIED: "",
	pb.InDoubtPolicy_IN_DOUBT_POLICY_SKIP:        string(coordinator.InDoubtSkip),
	pb.InDoubtPolicy_IN_DOUBT_POLICY_RESEND:      string(coordinator.InDoubtResend),
}

func policyValue(name string) pb.InDoubtPolicy {
	for v, n := range policyNames {
		if n == name {
			return v
		}
	}
	return pb.InDoubtPolicy_IN_DOUBT_POLICY_UNSPECIFIED
}

func timestamp(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

func broadcastPB(b store.Broadcast, p *pb.Progress) *pb.Broadcast {
	c := b.Content
	return &pb.Broadcast{
		Id: b.ID.String(), Name: b.Name, State: stateValues[b.State], Reason: b.Reason, Segment: b.Segment,
		ThrottlePerHour: b.ThrottlePerHour,
		Content:         &pb.BroadcastContent{FromName: c.FromName, FromAddress: c.FromAddress, Subject: c.Subject, Html: c.HTML, Text: c.Text},
		SnapshotTotal:   b.SnapshotTotal,
		CreatedAt:       timestamp(b.CreatedAt), StartedAt: timestamp(b.StartedAt), FinishedAt: timestamp(b.FinishedAt),
		Progress: p, InDoubtPolicy: policyValue(b.InDoubtPolicy), NoUnsubscribeLink: b.NoUnsubscribeLink,
		ScheduledAt: timestamp(b.ScheduledAt), ContentRevision: int32(b.ContentRevision),
	}
}

// statusPB is a broadcast with its progress.
func statusPB(s coordinator.BroadcastStatus) *pb.Broadcast {
	p := s.Progress
	out := &pb.Progress{
		RangesTotal: int32(p.RangesTotal), RangesDone: int32(p.RangesDone), PagesDispatched: p.PagesDispatched,
		Sent: p.Sent, Failed: p.Failed, Deferred: p.Deferred, InDoubt: p.InDoubt, Unknown: p.Unknown, SentAgainInDoubt: p.SentAgainInDoubt, LeftOut: p.LeftOut,
		WaitingFor: p.WaitingFor,
	}
	for _, r := range p.Ranges {
		out.Ranges = append(out.Ranges, &pb.RangeProgress{Index: int32(r.Index), Start: r.Start, End: r.End, Next: r.Next,
			Done: r.Done, Position: r.Position, Sent: r.Sent, Failed: r.Failed})
	}
	b := broadcastPB(s.Broadcast, out)
	if s.Policy != "" {
		b.InDoubtPolicy = policyValue(string(s.Policy)) // in force, the default included
	}
	return b
}

// SendStatusPB maps a ledger status to the proto enum by name
// ("delivered" → SEND_STATUS_DELIVERED), so a status added to both needs
// no change here; one the enum lacks is UNSPECIFIED, which clients show as
// "Unknown status".
func SendStatusPB(s store.SendStatus) pb.SendStatus {
	if v, ok := pb.SendStatus_value["SEND_STATUS_"+strings.ToUpper(string(s))]; ok {
		return pb.SendStatus(v)
	}
	return pb.SendStatus_SEND_STATUS_UNSPECIFIED
}

func contactPB(d store.ContactDetail) *pb.Contact {
	c := &pb.Contact{
		Id: d.ID.String(), Email: d.Email, Name: d.Name, Subscribed: d.Subscribed, DoNotContact: d.DoNotContact,
		Suppressed: d.Suppressed, SuppressedReason: d.SuppressedReason, Eligible: d.Eligible, Segments: d.Segments,
		CreatedAt: timestamp(d.CreatedAt), UpdatedAt: timestamp(d.UpdatedAt),
	}
	if !d.SuppressedAt.IsZero() {
		c.SuppressedAt = timestamp(d.SuppressedAt)
	}
	if len(d.Attributes) > 0 {
		c.Attributes = make(map[string]string, len(d.Attributes))
		for k, v := range d.Attributes {
			if s, ok := v.(string); ok {
				c.Attributes[k] = s
				continue
			}
			// Imports store strings; anything else (written by other
			// means) is shown as its JSON.
			b, err := json.Marshal(v)
			if err != nil {
				b = []byte(fmt.Sprint(v))
			}
			c.Attributes[k] = string(b)
		}
	}
	return c
}

// listedProviders bounds the providers a domain's status lists: a list of
// many small recipient domains gives one per domain that deferred once,
// tens of thousands, past what a gRPC answer carries (4 MB by default).
const listedProviders = 200

func domainStatusPB(d coordinator.DomainStatus) *pb.DomainStatus {
	s := d.Status
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
		Server:        d.Server,
		EmailsPerHour: int64(s.EmailsPerHour),
		HourlyCount:   int64(s.HourlyCount),
		HourlySent:    int64(s.HourlySent),
		Waiting:       s.Waiting,
		Live:          d.Live,
	}
	if !s.ResetAt.IsZero() {
		out.HourlyResetAt = timestamppb.New(s.ResetAt)
	}
	if !s.ResumesAt.IsZero() {
		out.ResumesAt = timestamppb.New(s.ResumesAt)
	}
	ranked := governor.RankProviders(s.Providers)
	if len(ranked) > listedProviders {
		out.ProvidersLeftOut = int64(len(ranked) - listedProviders)
		ranked = ranked[:listedProviders]
	}
	for _, p := range ranked {
		ps := &pb.ProviderStatus{Provider: p.Provider, Phase: providerPhase(p.Phase), Failures: int32(p.Failures), ProbeInFlight: p.ProbeInFlight,
			Connections: int32(p.Connections), RampTo: int32(p.RampTo), DeferredShare: p.Deferred, Reason: p.Reason, Summary: p.Summary}
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
