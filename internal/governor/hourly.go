package governor

import "time"

// HourSlot counts the sends recorded from Start until the next slot begins or
// Start's minute ends, whichever is first. A slot starts on a minute boundary
// unless a reset fell inside that minute, in which case it starts at the
// reset, so sends before and after a reset never share a slot.
type HourSlot struct {
	Start time.Time `json:"start"`
	Count int       `json:"count"`
}

// end is when the slot's minute ends: from end+1h on it no longer counts.
func (s HourSlot) end() time.Time { return s.Start.Truncate(time.Minute).Add(time.Minute) }

// HourlyWindow is the hourly limit of an SMTP server: sends are counted over
// [max(now−1h, ResetAt), now]. It keeps per-minute counts rather than one
// timestamp per message, so its size stays bounded (at most two slots per
// minute of the last hour) whatever the volume. A slot counts while any part
// of its minute is inside the hour, so a send may count up to a minute longer
// than an hour: erring on the side of not exceeding the server's limit.
//
// Domain embeds one for the server its domain sends through; a coordinator
// whose servers are shared between domains can keep one per server.
type HourlyWindow struct {
	Slots []HourSlot `json:"slots,omitempty"`
	// ResetAt is when an operator last reset the limit. Sends before it stay
	// recorded (they show as sent in the last hour) but no longer count.
	ResetAt time.Time `json:"reset_at,omitzero"`
}

// Record counts n sends at now and forgets slots that left the hour. A
// record older than the newest slot (a late report) goes into the newest
// slot, and one older than ResetAt counts from ResetAt: it may count a little
// long, never not at all.
func (w *HourlyWindow) Record(now time.Time, n int) {
	if n <= 0 {
		return
	}
	now = now.UTC()
	key := now.Truncate(time.Minute)
	if w.ResetAt.After(key) {
		key = w.ResetAt
	}
	if k := len(w.Slots); k > 0 {
		last := &w.Slots[k-1]
		if !key.After(last.Start) {
			// Same slot, or a late record: count it in the newest slot,
			// which keeps it in the window longest.
			last.Count += n
			return
		}
		// A slot that starts inside its minute is born of a reset, so the
		// slots before it in that minute are all before the reset and will
		// never count again: fold them into one to keep two per minute.
		if k >= 2 && sameMinute(w.Slots[k-2].Start, key) && sameMinute(last.Start, key) {
			w.Slots[k-2].Count += last.Count
			w.Slots = w.Slots[:k-1]
		}
	}
	w.Slots = append(w.Slots, HourSlot{Start: key, Count: n})
	w.prune(now)
}

// Reset moves ResetAt to now (never backwards) and deletes nothing: the
// operator says the server's own counter was reset, not that the mail was
// not sent.
func (w *HourlyWindow) Reset(now time.Time) {
	if now = now.UTC(); now.After(w.ResetAt) {
		w.ResetAt = now
	}
}

// Count is the sends that count against the limit at now: those in the last
// hour and not before ResetAt.
func (w *HourlyWindow) Count(now time.Time) int {
	n := 0
	for _, s := range w.Slots {
		if counts(s, now, w.ResetAt) {
			n += s.Count
		}
	}
	return n
}

// Sent is the sends in the last hour, reset or not (for display).
func (w *HourlyWindow) Sent(now time.Time) int {
	n := 0
	for _, s := range w.Slots {
		if inHour(s, now) {
			n += s.Count
		}
	}
	return n
}

// freeAt is the first time at or after now when Count+reserved is below limit
// without anything else happening. When only reserved grants fill the limit,
// they will be recorded about now and count for an hour.
func (w *HourlyWindow) freeAt(now time.Time, limit, reserved int) time.Time {
	left := w.Count(now) + reserved
	if left < limit {
		return now
	}
	for _, s := range w.Slots { // oldest first
		if !counts(s, now, w.ResetAt) {
			continue
		}
		if left -= s.Count; left < limit {
			return s.end().Add(time.Hour)
		}
	}
	return now.Add(time.Hour)
}

func (w *HourlyWindow) prune(now time.Time) {
	i := 0
	for i < len(w.Slots) && !inHour(w.Slots[i], now) {
		i++
	}
	if i > 0 {
		w.Slots = append(w.Slots[:0], w.Slots[i:]...)
	}
}

func (w HourlyWindow) clone() HourlyWindow {
	w.Slots = append([]HourSlot(nil), w.Slots...)
	return w
}

func inHour(s HourSlot, now time.Time) bool { return s.end().After(now.Add(-time.Hour)) }

func counts(s HourSlot, now, resetAt time.Time) bool {
	return inHour(s, now) && !s.Start.Before(resetAt)
}

func sameMinute(a, b time.Time) bool { return a.Truncate(time.Minute).Equal(b.Truncate(time.Minute)) }
