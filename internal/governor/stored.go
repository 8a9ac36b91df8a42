package governor

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"
)

// A list with many small recipient domains gives a sending domain a breaker
// per domain that deferred it (a greylisting server's first answer, a dead
// MX's timeouts remembered for RefusalMemory): tens of thousands of
// providers, which no one record, status line or set of metric labels can
// carry. What is stored or shown keeps the providers whose loss would cost
// most, in the order Ranked gives, and says how many it left out.

// Ranked returns the providers with a hold or a breaker, those that matter
// most first:
//
//  1. held or open: their recipients must not be sent to, and a page worker
//     learns that from the stored state;
//  2. ramping back up (half-open): forgotten, a provider gets every
//     connection again at once;
//  3. closed, with failures in the window: forgotten, the count towards a
//     trip starts again;
//  4. closed, remembering only a run of refusals: forgotten, giving its
//     recipients up starts again.
//
// Within a rank the big providers (Google, Microsoft, Yahoo, Apple) come
// first, then more failures, then the name, so the order is stable.
func (s DomainState) Ranked(now time.Time) []string {
	type ranked struct {
		p        string
		rank     int
		big      bool
		failures int
	}
	rs := make([]ranked, 0, len(s.Holds)+len(s.Breakers))
	for p := range union(s.Holds, s.Breakers) {
		r := ranked{p: p, rank: 3, big: bigProvider(p)}
		b, ok := s.Breakers[p]
		if ok {
			r.failures = len(b.Failures)
			switch {
			case b.phase(now) == PhaseOpen:
				r.rank = 0
			case b.phase(now) == PhaseHalfOpen:
				r.rank = 1
			case !b.onlyRefusing():
				r.rank = 2
			}
		}
		if until, held := s.Holds[p]; held && now.Before(until) {
			r.rank = 0
		}
		rs = append(rs, r)
	}
	slices.SortFunc(rs, func(a, b ranked) int {
		if c := cmp.Compare(a.rank, b.rank); c != 0 {
			return c
		}
		if a.big != b.big {
			if a.big {
				return -1
			}
			return 1
		}
		if c := cmp.Compare(b.failures, a.failures); c != 0 {
			return c
		}
		return cmp.Compare(a.p, b.p)
	})
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.p
	}
	return out
}

// Keeping returns s with the holds and breakers of the first n providers of
// ranked only (ranked as Ranked gives them), and how many providers it left
// out.
func (s DomainState) Keeping(ranked []string, n int) (DomainState, int) {
	if n >= len(ranked) {
		return s, 0
	}
	out := s
	out.Holds, out.Breakers = nil, nil
	for _, p := range ranked[:max(n, 0)] {
		if until, ok := s.Holds[p]; ok {
			if out.Holds == nil {
				out.Holds = map[string]time.Time{}
			}
			out.Holds[p] = until
		}
		if b, ok := s.Breakers[p]; ok {
			if out.Breakers == nil {
				out.Breakers = map[string]BreakerState{}
			}
			out.Breakers[p] = b
		}
	}
	out.LeftOut = len(ranked) - max(n, 0)
	return out, out.LeftOut
}

// bigProvider reports whether p is one of the big receiving providers.
func bigProvider(p string) bool {
	switch p {
	case ProviderGoogle, ProviderMicrosoft, ProviderYahoo, ProviderApple:
		return true
	}
	return false
}

// summarizedProviders is how many slowing providers a one-line summary
// names; the rest are counted.
const summarizedProviders = 5

// RankProviders orders providers by how much they hold back, most first:
// held and open, then ramping, then refusing some attempts, then the rest
// (ProviderStatus.Slowing is false); within each the big providers first,
// then more failures, then the name. It sorts a copy.
func RankProviders(providers []ProviderStatus) []ProviderStatus {
	ranked := slices.Clone(providers)
	slices.SortFunc(ranked, compareRank)
	return ranked
}

// compareRank orders two providers as RankProviders does.
func compareRank(a, b ProviderStatus) int {
	if c := cmp.Compare(phaseRank(a), phaseRank(b)); c != 0 {
		return c
	}
	if ab, bb := bigProvider(a.Provider), bigProvider(b.Provider); ab != bb {
		if ab {
			return -1
		}
		return 1
	}
	if c := cmp.Compare(b.Failures, a.Failures); c != 0 {
		return c
	}
	return cmp.Compare(a.Provider, b.Provider)
}

// firstRanked keeps the first k of the providers it is offered, in
// RankProviders' order, and counts them all: a partial sort, since a
// sending domain may hear from tens of thousands.
type firstRanked struct {
	k     int
	first []ProviderStatus
	n     int
}

func (f *firstRanked) offer(p ProviderStatus) {
	f.n++
	if len(f.first) == f.k && (f.k == 0 || compareRank(p, f.first[f.k-1]) >= 0) {
		return
	}
	i, _ := slices.BinarySearchFunc(f.first, p, compareRank)
	f.first = slices.Insert(f.first, i, p)
	if len(f.first) > f.k {
		f.first = f.first[:f.k]
	}
}

// RankSlowing is RankProviders of the providers that slow sending
// (ProviderStatus.Slowing) only.
func RankSlowing(providers []ProviderStatus) []ProviderStatus {
	ranked := RankProviders(providers)
	if i := slices.IndexFunc(ranked, func(p ProviderStatus) bool { return !p.Slowing() }); i >= 0 {
		return ranked[:i] // they sort last
	}
	return ranked
}

// summarizeSlowing joins the summaries of the first summarizedProviders of
// the providers that slow sending, ranked already (RankSlowing), and counts
// the rest of all of them: a list of many small domains that each deferred
// once reads as one line, not thousands.
func summarizeSlowing(first []ProviderStatus, all int) string {
	words := make([]string, 0, summarizedProviders+1)
	for _, p := range first[:min(len(first), summarizedProviders)] {
		words = append(words, p.Summary)
	}
	if rest := all - len(words); rest > 0 {
		words = append(words, fmt.Sprintf("%s more providers deferring or held (see governor status)", Thousands(rest)))
	}
	return strings.Join(words, "; ")
}

// phaseRank orders providers by how much they hold back, as Ranked does.
func phaseRank(p ProviderStatus) int {
	switch {
	case p.Phase == PhaseHeld || p.Phase == PhaseOpen:
		return 0
	case p.Phase == PhaseHalfOpen:
		return 1
	case p.Slowing():
		return 2
	}
	return 3
}
