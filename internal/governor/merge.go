package governor

import "time"

// Merge combines two versions of a domain's state that were changed apart —
// a leader's and its predecessor's, written around a handover — so that
// nothing either learned is lost. Where they disagree it takes the more
// cautious: the lower ceiling, the higher count, any rejection, the longer
// hold, the breaker open longer. Caution errs toward sending less, which
// costs an hour; the other way costs weeks of reputation. One exception: a
// run of refusals one version remembers past its ramp and the other does
// not is dropped, since failing recipients is the costlier mistake there.
func Merge(a, b DomainState) DomainState {
	out := a.clone()
	b = b.clone()
	switch {
	case b.Day > a.Day: // DateOnly strings order like the dates
		out.Day, out.SentToday, out.RejectedToday = b.Day, b.SentToday, b.RejectedToday
	case b.Day == a.Day:
		out.SentToday = max(a.SentToday, b.SentToday)
		out.RejectedToday = a.RejectedToday || b.RejectedToday
	}
	switch {
	case a.Ceiling <= 0:
		out.Ceiling = b.Ceiling
	case b.Ceiling > 0:
		out.Ceiling = min(a.Ceiling, b.Ceiling)
	}
	if b.CeilingSetAt.After(out.CeilingSetAt) {
		out.CeilingSetAt = b.CeilingSetAt
	}
	for p, until := range b.Holds {
		if out.Holds == nil {
			out.Holds = map[string]time.Time{}
		}
		out.Holds[p] = maxTime(out.Holds[p], until)
	}
	for p, bb := range b.Breakers {
		ab, ok := out.Breakers[p]
		if out.Breakers == nil {
			out.Breakers = map[string]BreakerState{}
		}
		switch {
		case !ok, bb.OpenUntil.After(ab.OpenUntil):
			out.Breakers[p] = bb
		case bb.OpenUntil.Equal(ab.OpenUntil) && len(bb.Failures) > len(ab.Failures):
			out.Breakers[p] = bb
		case bb.OpenUntil.Equal(ab.OpenUntil) && !bb.OpenUntil.IsZero() && bb.conns() < ab.conns():
			// Both ramping back from the same trip: the fewer connections.
			out.Breakers[p] = bb
		}
	}
	for p, kept := range out.Breakers {
		_, inA := a.Breakers[p]
		_, inB := b.Breakers[p]
		// A side that is a stored record with providers left out
		// (LeftOut) may lack p for want of room, not having dropped it.
		missing := (inA && !inB && b.LeftOut == 0) || (inB && !inA && a.LeftOut == 0)
		if kept.onlyRefusing() && missing {
			// Remembered by one side only: the other may have dropped it
			// on an accepted send. Kept, it could give recipients up at
			// once on the next trip; dropped, the count starts again.
			delete(out.Breakers, p)
		}
	}
	out.LeftOut = 0
	if len(out.Breakers) == 0 {
		out.Breakers = nil
	}
	out.Hourly = MergeHourly(a.Hourly, b.Hourly)
	return out
}

// MergeHourly combines two versions of an hourly window: the one that
// counted more, and the later reset.
func MergeHourly(a, b HourlyWindow) HourlyWindow {
	out := a.clone()
	if total(b) > total(a) {
		out = b.clone()
	}
	out.ResetAt = maxTime(a.ResetAt, b.ResetAt)
	return out
}

func total(w HourlyWindow) int {
	n := 0
	for _, s := range w.Slots {
		n += s.Count
	}
	return n
}

// Adopt replaces the learned state with st (the result of a Merge), keeping
// the grants in flight and the token bucket.
func (d *Domain) Adopt(st DomainState) {
	d.mu.Lock()
	defer d.mu.Unlock()
	name := d.st.Domain
	d.st = st.clone()
	d.st.Domain, d.st.LeftOut = name, 0
	if !d.shared {
		d.server.Adopt(st.Hourly)
	}
	d.st.Hourly = HourlyWindow{}
}
