// Package govstate keeps the sending domains' governor state in JetStream
// KV (bus.GovernorBucket): the key layout, the records, and every read and
// write of them. The leading coordinator writes what its governors learned
// (State, Hourly); whichever coordinator takes an operator's call writes
// Limits and Reset, which the leader follows (Watch); workers and
// transactional senders read through a View.
package govstate

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/rangecast/rangecast/internal/bus"
	"github.com/rangecast/rangecast/internal/governor"
)

// The keys, per sending domain or SMTP server.
func stateKey(domain string) string   { return "state." + domain }
func limitsKey(domain string) string  { return "limits." + domain }
func resetKey(server string) string   { return "reset." + server }
func hourlyKey(server string) string  { return "hourly." + server }
func releaseKey(domain string) string { return "release." + domain }

// Key patterns for the leader's watch and for listing.
const (
	stateKeys   = "state.>"
	limitsKeys  = "limits.>"
	resetKeys   = "reset.>"
	releaseKeys = "release.>"
)

// Limits is what an operator set for a sending domain. A zero field keeps
// the configured default.
type Limits struct {
	RatePerSecond float64 `json:"rate_per_second,omitempty"`
	Burst         int     `json:"burst,omitempty"`
	// Ceiling sets the daily ceiling by hand once; CeilingSetAt tells the
	// leader whether it has applied this one.
	Ceiling      int       `json:"ceiling,omitempty"`
	CeilingSetAt time.Time `json:"ceiling_set_at,omitzero"`
}

// Over lays l over the configured defaults d; a nil l leaves d as it is.
func (l *Limits) Over(d governor.Limits) governor.Limits {
	if l == nil {
		return d
	}
	if l.RatePerSecond > 0 {
		d.RatePerSecond = l.RatePerSecond
	}
	if l.Burst > 0 {
		d.Burst = l.Burst
	}
	return d
}

// Reset records a manual reset of an SMTP server's hourly limit.
type Reset struct {
	At time.Time `json:"at"`
}

// Release records an operator lifting a receiving provider's hold for a
// sending domain (governor.Domain.ReleaseProvider).
type Release struct {
	Provider string    `json:"provider"`
	At       time.Time `json:"at"`
}

// ErrContended: a compare-and-set lost to someone else's write every time
// it was tried.
var ErrContended = errors.New("changed by someone else at the same time")

// KV reads and writes the governor bucket.
type KV struct {
	kv jetstream.KeyValue
}

// New returns the governor state kept in kv (bus.Bus.Governors).
func New(kv jetstream.KeyValue) *KV { return &KV{kv: kv} }

// State returns a sending domain's learned state and its revision; nil and
// 0 when it has none.
func (s *KV) State(ctx context.Context, domain string) (*governor.DomainState, uint64, error) {
	var st governor.DomainState
	rev, found, err := bus.GetJSON(ctx, s.kv, stateKey(domain), &st)
	if err != nil || !found {
		return nil, 0, wrapRead(err, "governor state", domain)
	}
	return &st, rev, nil
}

// Limits returns what an operator set for a sending domain, nil for nothing.
func (s *KV) Limits(ctx context.Context, domain string) (*Limits, error) {
	var l Limits
	_, found, err := bus.GetJSON(ctx, s.kv, limitsKey(domain), &l)
	if err != nil || !found {
		return nil, wrapRead(err, "governor limits", domain)
	}
	return &l, nil
}

// Hourly returns an SMTP server's hourly window and its revision.
func (s *KV) Hourly(ctx context.Context, server string) (governor.HourlyWindow, uint64, error) {
	var w governor.HourlyWindow
	rev, _, err := bus.GetJSON(ctx, s.kv, hourlyKey(server), &w)
	if err != nil {
		return w, 0, fmt.Errorf("read hourly window of %s: %w", server, err)
	}
	return w, rev, nil
}

// Reset returns an SMTP server's last manual reset, zero for none.
func (s *KV) Reset(ctx context.Context, server string) (Reset, error) {
	var r Reset
	_, _, err := bus.GetJSON(ctx, s.kv, resetKey(server), &r)
	return r, wrapRead(err, "rate-limit reset", server)
}

// Domains lists the sending domains with learned state, sorted.
func (s *KV) Domains(ctx context.Context) ([]string, error) {
	lister, err := s.kv.ListKeysFiltered(ctx, stateKeys)
	if err != nil {
		return nil, fmt.Errorf("list governor state: %w", err)
	}
	defer lister.Stop() //nolint:errcheck
	var names []string
	for k := range lister.Keys() {
		names = append(names, strings.TrimPrefix(k, "state."))
	}
	slices.Sort(names)
	return names, nil
}

// StateBudget bounds a stored state record's size. NATS refuses a message
// over its max payload (1 MB by default), and every page worker reads the
// record about once a second per sending domain; a list with many small
// recipient domains can hold tens of thousands of breakers (see
// governor.Ranked), megabytes of them.
const StateBudget = 256 << 10

// minProviderBytes is about the fewest bytes a provider takes in a stored
// state (one remembering only a run of refusals: its name and a time); a
// state with more providers than fit at that size is bounded without being
// encoded whole first.
const minProviderBytes = 48

// WriteState writes d's state over revision rev (0: create it). On a
// conflict it merges in what is stored (governor.Merge keeps the more
// cautious of each), adopts the merge and tries again. A state over
// StateBudget is stored with the providers that matter most only (ranked
// at now); leftOut says how many were left out: the leader keeps them, and
// loses them at a handover.
func (s *KV) WriteState(ctx context.Context, d *governor.Domain, rev uint64, now time.Time) (next uint64, leftOut int, err error) {
	next, err = s.casMerge(ctx, stateKey(d.State().Domain), rev,
		func() []byte {
			var b []byte
			b, leftOut = encodeBounded(d.State(), now, StateBudget)
			return b
		},
		func(stored []byte) error {
			var st governor.DomainState
			if err := bus.Decode(stored, &st); err != nil {
				return err
			}
			d.Adopt(governor.Merge(d.State(), st))
			return nil
		})
	return next, leftOut, err
}

// encodeBounded encodes st within budget bytes, keeping as many of its
// providers as fit, most important first, and says how many it left out.
func encodeBounded(st governor.DomainState, now time.Time, budget int) ([]byte, int) {
	providers := len(st.Holds) + len(st.Breakers)
	n := budget / minProviderBytes // no more than this many can fit
	if providers <= n {
		b := bus.Encode(st)
		if len(b) <= budget {
			return b, 0
		}
		// Start from the share of providers the budget would hold were
		// they all of a size.
		n = providers * budget / len(b)
	}
	// Shrink from there: the first ranked (open breakers with their
	// reasons) are the larger. Written about once a second, a state of
	// tens of thousands of providers is not encoded whole each time.
	ranked := st.Ranked(now)
	for {
		kept, left := st.Keeping(ranked, n)
		b := bus.Encode(kept)
		if len(b) <= budget || n == 0 {
			return b, left
		}
		n = min(n-1, n*9/10)
	}
}

// WriteHourly writes a server's hourly window the same way.
func (s *KV) WriteHourly(ctx context.Context, srv *governor.Server, rev uint64) (uint64, error) {
	return s.casMerge(ctx, hourlyKey(srv.Name()), rev,
		func() []byte { return bus.Encode(srv.Window()) },
		func(stored []byte) error {
			var w governor.HourlyWindow
			if err := bus.Decode(stored, &w); err != nil {
				return err
			}
			srv.Adopt(governor.MergeHourly(srv.Window(), w))
			return nil
		})
}

// casMerge writes encode() at key by compare-and-set over rev (0: create
// it). When someone else wrote first, adopt merges what they stored into
// what encode will write next, and it tries again, a few times at most.
func (s *KV) casMerge(ctx context.Context, key string, rev uint64, encode func() []byte, adopt func(stored []byte) error) (uint64, error) {
	for attempt := 0; ; attempt++ {
		next, err := bus.PutAt(ctx, s.kv, key, encode(), rev)
		if !bus.IsConflict(err) || attempt >= 3 {
			return next, err
		}
		e, err := s.kv.Get(ctx, key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			rev = 0 // deleted meanwhile: create it again
		case err != nil:
			return 0, err
		default:
			if err := adopt(e.Value()); err != nil {
				return 0, err
			}
			rev = e.Revision()
		}
	}
}

// ChangeLimits applies change to the limits stored for domain by
// compare-and-set, merging into a concurrent change (ErrContended after a
// few lost races), and returns the change as the leader will see it.
func (s *KV) ChangeLimits(ctx context.Context, domain string, change func(*Limits)) (Change, error) {
	key := limitsKey(domain)
	for attempt := 0; ; attempt++ {
		var l Limits
		rev, _, err := bus.GetJSON(ctx, s.kv, key, &l)
		if err != nil {
			return Change{}, fmt.Errorf("read limits of %s: %w", domain, err)
		}
		change(&l)
		_, err = bus.PutAt(ctx, s.kv, key, bus.Encode(l), rev)
		if bus.IsConflict(err) && attempt < 3 {
			continue // changed by someone else meanwhile: merge into theirs
		}
		if bus.IsConflict(err) {
			return Change{}, fmt.Errorf("limits of %s: %w", domain, ErrContended)
		}
		if err != nil {
			return Change{}, fmt.Errorf("write limits of %s: %w", domain, err)
		}
		return Change{Domain: domain, Limits: &l}, nil
	}
}

// PutReset records a manual reset of server's hourly limit at at.
func (s *KV) PutReset(ctx context.Context, server string, at time.Time) (Change, error) {
	r := Reset{At: at}
	if _, err := s.kv.Put(ctx, resetKey(server), bus.Encode(r)); err != nil {
		return Change{}, fmt.Errorf("record the reset: %w", err)
	}
	return Change{Server: server, Reset: &r}, nil
}

// PutRelease records that an operator lifted provider's hold for domain at
// at, for the leader to apply (a record per domain: the leader follows
// each write as it comes).
func (s *KV) PutRelease(ctx context.Context, domain, provider string, at time.Time) (Change, error) {
	r := Release{Provider: provider, At: at}
	if _, err := s.kv.Put(ctx, releaseKey(domain), bus.Encode(r)); err != nil {
		return Change{}, fmt.Errorf("record the release: %w", err)
	}
	return Change{Domain: domain, Release: &r}, nil
}

// Change is an operator's change, as the leader follows it: a domain's
// Limits or a provider's Release, or an SMTP server's Reset.
type Change struct {
	Domain  string
	Limits  *Limits
	Release *Release
	Server  string
	Reset   *Reset
}

// Watch follows operators' changes (limits, releases and resets) written from now on,
// until ctx ends. A malformed record is passed to bad and skipped.
func (s *KV) Watch(ctx context.Context, bad func(key string, err error)) (<-chan Change, error) {
	w, err := s.kv.WatchFiltered(ctx, []string{limitsKeys, resetKeys, releaseKeys}, jetstream.UpdatesOnly())
	if err != nil {
		return nil, err
	}
	out := make(chan Change)
	go func() {
		defer close(out)
		defer w.Stop() //nolint:errcheck
		for {
			var e jetstream.KeyValueEntry
			var ok bool
			select {
			case <-ctx.Done():
				return
			case e, ok = <-w.Updates():
				if !ok {
					return
				}
			}
			if e == nil || e.Operation() != jetstream.KeyValuePut {
				continue
			}
			ch, err := decodeChange(e.Key(), e.Value())
			if err != nil {
				bad(e.Key(), err)
				continue
			}
			select {
			case out <- ch:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, nil
}

func decodeChange(key string, value []byte) (Change, error) {
	switch {
	case strings.HasPrefix(key, "limits."):
		var l Limits
		if err := bus.Decode(value, &l); err != nil {
			return Change{}, err
		}
		return Change{Domain: strings.TrimPrefix(key, "limits."), Limits: &l}, nil
	case strings.HasPrefix(key, "reset."):
		var r Reset
		if err := bus.Decode(value, &r); err != nil {
			return Change{}, err
		}
		return Change{Server: strings.TrimPrefix(key, "reset."), Reset: &r}, nil
	case strings.HasPrefix(key, "release."):
		var r Release
		if err := bus.Decode(value, &r); err != nil {
			return Change{}, err
		}
		return Change{Domain: strings.TrimPrefix(key, "release."), Release: &r}, nil
	}
	return Change{}, fmt.Errorf("key %s is no operator's change", key)
}

// wrapRead names what could not be read; nil stays nil.
func wrapRead(err error, what, of string) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("read %s of %s: %w", what, of, err)
}
