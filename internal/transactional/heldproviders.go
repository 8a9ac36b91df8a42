package transactional

import (
	"context"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/rangecast/rangecast/internal/bus"
	"github.com/rangecast/rangecast/internal/governor"
	"github.com/rangecast/rangecast/internal/govstate"
	"github.com/rangecast/rangecast/internal/transport"
)

// HeldProviders is the Admission of workers: it shares the sending domains'
// governors, which the leading coordinator runs, through JetStream. Admit
// reads the state the leader writes to KV and holds back a message to a
// receiving provider that is held after a quota rejection or has its breaker
// open. Observe reports each outcome to the leader (bus.UsageSubject), which
// counts it toward the day and feeds the breakers, so broadcasts get less.
// It never refuses for the daily ceiling, the rate or the hourly limit:
// a password reset must not wait for midnight behind a newsletter.
type HeldProviders struct {
	view *govstate.View
	js   jetstream.JetStream
	log  *slog.Logger
}

// NewHeldProviders returns an Admission reading b's governor bucket.
func NewHeldProviders(b *bus.Bus, log *slog.Logger) *HeldProviders {
	return &HeldProviders{view: govstate.NewView(b.Governors), js: b.JS, log: log}
}

// Admit implements Admission.
func (g *HeldProviders) Admit(ctx context.Context, sendingDomain, recipient string, now time.Time) (governor.Refusal, error) {
	domain := strings.ToLower(sendingDomain)
	// A half-open provider admits transactional mail, which is little and
	// urgent; Refusals leaves it out.
	held, err := g.view.Refusals(ctx, domain, now)
	if err != nil {
		return governor.Refusal{}, err
	}
	return held[governor.Provider(domainOf(recipient))], nil
}

// Observe implements Admission.
func (g *HeldProviders) Observe(sendingDomain, recipient string, sendErr error, _ time.Time) {
	u := bus.Usage{Domain: strings.ToLower(sendingDomain)}
	p := governor.Provider(domainOf(recipient))
	r := bus.ProviderResult{Reply: transport.Reply(sendErr)}
	guide, guided := transport.Guide(sendErr)
	switch c := transport.Classify(sendErr); {
	case sendErr == nil:
		u.Sent, r.Sent = 1, 1
	case guided && guide.Hold > 0:
		// The provider's own pause (Gmail's 421 4.7.28), as for pages.
		r.Hold, r.Linear = guide.Hold, guide.Linear
	case c == transport.Transient:
		if transport.AtTheServer(sendErr) {
			return // the relay's (connect, AUTH), as for pages: nothing about the provider
		}
		r.Transient = 1
	case c == transport.Quota:
		r.Quota = true
	default:
		return // the recipient's or the channel's fault: nothing about the provider's limits
	}
	u.Providers = map[string]bus.ProviderResult{p: r}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := g.js.Publish(ctx, bus.UsageSubject, bus.Encode(u)); err != nil {
		g.log.Warn("transactional send not reported to the governor", "domain", u.Domain, "err", err)
	}
}

func domainOf(address string) string { return address[strings.LastIndexByte(address, '@')+1:] }
