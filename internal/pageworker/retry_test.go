package pageworker

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/rangecast/rangecast/internal/bus"
	"github.com/rangecast/rangecast/internal/store"
	"github.com/rangecast/rangecast/internal/testenv"
	"github.com/rangecast/rangecast/internal/transport"
)

// TestRefusedRecipientsAreTriedForAnHour drives one page and then every
// sweep as it comes due, on the fake clock, with the default retry
// schedule, for three recipients:
//   - one greylisted for 40 minutes from its first attempt is sent (ten
//     attempts spanned under five minutes, and a tester's 8-minute
//     greylist failed recipients who were never refused);
//   - one refused with a 451 every time fails, given up, only after at
//     least RetryFor (1 h) and MaxAttempts (10);
//   - one whose every MAIL FROM is refused (452 4.3.1: its size) is
//     charged an attempt for each refusal in a window whose other sends
//     got through (the relay works; the refusal is about this message),
//     so it cannot wait uncharged for ever beside them;
//   - one whose connection is refused at the greeting for 50 minutes
//     (421: the relay's connection limit) while the others' get through
//     is never charged for it, and is sent once it gets a connection (a
//     tester's relay at its limit charged such recipients up to 9
//     attempts, none of them ever refused).
func TestRefusedRecipientsAreTriedForAnHour(t *testing.T) {
	t.Parallel()
	for name, open := range bothStores {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			st := open(t)
			tr := &scripted{accepted: map[string]int{}}
			f := newCopiesFixture(t, st, 4, tr)
			grey, refusing, tls, crowded := f.contacts[0], f.contacts[1], f.contacts[2], f.contacts[3]
			start := f.clk.Now()
			tr.answer = func(to string) error {
				switch {
				case to == grey.Email && f.clk.Now().Before(start.Add(40*time.Minute)):
					return &transport.SendError{Code: 450, Enhanced: "4.7.1", Text: "greylisted, try again later", Stage: transport.StageRcpt}
				case to == refusing.Email:
					return &transport.SendError{Code: 451, Enhanced: "4.3.0", Text: "try again later", Stage: transport.StageRcpt}
				case to == tls.Email:
					return &transport.SendError{Code: 452, Enhanced: "4.3.1", Text: "message size exceeds what can be stored now", Stage: transport.StageMail}
				case to == crowded.Email && f.clk.Now().Before(start.Add(50*time.Minute)):
					return &transport.SendError{Code: 421, Enhanced: "4.7.0", Text: "Too many concurrent SMTP connections; try again later", Stage: transport.StageConnect}
				}
				return nil
			}
			ctx := t.Context()
			if _, err := f.w.RunPage(ctx, f.job(), "w/1"); err != nil {
				t.Fatal(err)
			}
			var failedAt time.Time
			reached, unreached := f.sweepUntil(t, start.Add(3*time.Hour), func() {
				if row, err := st.GetSend(ctx, f.b.ID, refusing.ID); err != nil {
					t.Fatal(err)
				} else if row.Status == store.SendFailed && failedAt.IsZero() {
					failedAt = f.clk.Now()
				}
			})
			row := func(id store.Contact) store.Send {
				s, err := st.GetSend(ctx, f.b.ID, id.ID)
				if err != nil {
					t.Fatal(err)
				}
				return s
			}
			if r := row(grey); r.Status != store.SendSent || tr.accepted[grey.Email] != 1 {
				t.Errorf("greylisted recipient: %s (%q), accepted %d times; want sent once", r.Status, r.Error, tr.accepted[grey.Email])
			}
			r := row(refusing)
			if r.Status != store.SendFailed || !strings.Contains(r.Error, store.GaveUpPrefix) {
				t.Fatalf("recipient refused every time: %s (%q); want failed, given up", r.Status, r.Error)
			}
			if took := failedAt.Sub(start); took < time.Hour || r.Attempt < 10 {
				t.Errorf("recipient refused every time failed after %s and %d attempts; want at least 1h and 10", took, r.Attempt)
			} else if took > 3*time.Hour {
				t.Errorf("recipient refused every time failed after %s; the schedule should end within about twice RetryFor", took)
			}
			if r := row(tls); r.Attempt < 10 {
				t.Errorf("recipient whose MAIL FROM alone was refused: %s, attempt %d (%q); want charged its attempts while the others got through", r.Status, r.Attempt, r.Error)
			}
			if r := row(crowded); r.Status != store.SendSent || r.Attempt != 1 || tr.accepted[crowded.Email] != 1 {
				t.Errorf("recipient whose connections were refused at the greeting: %s, attempt %d (%q), accepted %d times; want sent once, at its first charged attempt",
					r.Status, r.Attempt, r.Error, tr.accepted[crowded.Email])
			}
			if unreached == 0 || reached == 0 {
				t.Errorf("sweeps reported %d sends that reached their recipient and %d that did not; want both counted", reached, unreached)
			}
		})
	}
}

// TestRelayOutageChargesNobody: a relay whose STARTTLS fails for every
// connection for two hours (a relay-wide outage: no send of a window
// reaches its recipient) charges no recipient an attempt, so nobody fails
// for it however long it lasts (a relay's TLS outage failed 47 recipients
// by their attempts, found by a tester); once it works again each is sent
// once, at its first real attempt, and the sweeps said they reached nobody.
func TestRelayOutageChargesNobody(t *testing.T) {
	t.Parallel()
	for name, open := range bothStores {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			st := open(t)
			tr := &scripted{accepted: map[string]int{}}
			f := newCopiesFixture(t, st, 3, tr)
			start := f.clk.Now()
			tr.answer = func(string) error {
				if f.clk.Now().Before(start.Add(2 * time.Hour)) {
					return &transport.SendError{Code: 454, Enhanced: "4.7.0", Text: "TLS not available due to local problem", Stage: transport.StageConnect}
				}
				return nil
			}
			ctx := t.Context()
			if _, err := f.w.RunPage(ctx, f.job(), "w/1"); err != nil {
				t.Fatal(err)
			}
			reached, unreached := f.sweepUntil(t, start.Add(3*time.Hour), func() {})
			for _, c := range f.contacts {
				row, err := st.GetSend(ctx, f.b.ID, c.ID)
				if err != nil || row.Status != store.SendSent || row.Attempt != 1 || tr.accepted[c.Email] != 1 {
					t.Errorf("%s: %+v (%v), accepted %d times; want sent once, at its first charged attempt", c.Email, row, err, tr.accepted[c.Email])
				}
			}
			if unreached == 0 || reached != len(f.contacts) {
				t.Errorf("sweeps reported %d sends that reached nobody and %d that did; want the outage's and then %d", unreached, reached, len(f.contacts))
			}
		})
	}
}

// TestGiveUpAttempts: the attempt at which a recipient is given up makes
// the delays before it (at their jittered least) span RetryFor, and is
// never below MaxAttempts; a schedule with no delay at all, or one of
// enormous steps, still gives an answer.
func TestGiveUpAttempts(t *testing.T) {
	for _, c := range []Config{
		{RetryAfter: time.Nanosecond, SweepRetry: time.Nanosecond, MaxAttempts: 10, RetryFor: 168 * time.Hour},
		{RetryAfter: math.MaxInt64, SweepRetry: math.MaxInt64, MaxAttempts: 10, RetryFor: time.Hour},
	} {
		if n := c.giveUpAttempts(); n < c.MaxAttempts {
			t.Errorf("%v/%v: gives up at attempt %d; want at least %d", c.RetryAfter, c.SweepRetry, n, c.MaxAttempts)
		}
	}
	for _, c := range []Config{
		{},
		{RetryAfter: 10 * time.Second, SweepRetry: time.Minute, MaxAttempts: 10, RetryFor: 3 * time.Minute},
		{RetryAfter: time.Second, SweepRetry: 2 * time.Minute, MaxAttempts: 10, RetryFor: time.Nanosecond},
		{RetryFor: 24 * time.Hour},
		{RetryAfter: time.Second, SweepRetry: 3 * time.Second, MaxAttempts: 10, RetryFor: 168 * time.Hour},
		{RetryAfter: time.Hour, SweepRetry: time.Minute, MaxAttempts: 3, RetryFor: 2 * time.Hour},
	} {
		c = c.withDefaults()
		n := c.giveUpAttempts()
		// least is the span of the delays before attempt n at their
		// least, last the least of the delay before it.
		var least, last time.Duration
		for attempt := 1; attempt < n; attempt++ {
			d := c.RetryAfter
			for i := 1; i < attempt && d < c.SweepRetry; i++ {
				d *= 2
			}
			last = min(d, c.SweepRetry) / 2
			least += last
		}
		if n < c.MaxAttempts || least < c.RetryFor {
			t.Errorf("%v/%v/%d/%v: gives up at attempt %d, after at least %s; want at least %d attempts and %s",
				c.RetryAfter, c.SweepRetry, c.MaxAttempts, c.RetryFor, n, least, c.MaxAttempts, c.RetryFor)
		}
		if n > c.MaxAttempts && least-last >= c.RetryFor {
			t.Errorf("%v/%v/%d/%v: gives up at attempt %d, one later than needed", c.RetryAfter, c.SweepRetry, c.MaxAttempts, c.RetryFor, n)
		}
	}
}

// sweepUntil runs every sweep as it comes due, on the fake clock, until
// end, calling after after each, and sums what the sweeps reached. At
// least a minute passes between sweeps, about the coordinator's pace for
// sweeps that reach nobody: a row refused before its recipient was named
// is due again a second after each try.
func (f *copiesFixture) sweepUntil(t *testing.T, end time.Time, after func()) (reached, unreached int) {
	t.Helper()
	return f.sweepEvery(t, end, time.Minute, after)
}

// sweepEvery is sweepUntil with the clock moved on by at least step
// between sweeps.
func (f *copiesFixture) sweepEvery(t *testing.T, end time.Time, step time.Duration, after func()) (reached, unreached int) {
	t.Helper()
	ctx := t.Context()
	sweep := bus.PageJob{Broadcast: f.b.ID.String(), Range: bus.SweepRange, Limit: 100, Sweep: true}
	for f.clk.Now().Before(end) {
		_, due, err := f.st.NextDue(ctx, f.b.ID, f.clk.Now())
		if err != nil {
			t.Fatal(err)
		}
		f.clk.Advance(max(due.Sub(f.clk.Now()), step))
		rep, err := f.w.RunPage(ctx, sweep, "w/S")
		if err != nil {
			t.Fatal(err)
		}
		reached, unreached = reached+rep.Reached, unreached+rep.Unreached
		after()
	}
	return reached, unreached
}

// TestGreylistedRecipientWaitsForTheServer: a recipient a server
// greylists (it refuses every attempt until its delay, counted from the
// first, has passed) is tried again only once that delay can have
// passed: the server's own when its reply names one, 5 minutes when not.
// The doubling from 1 s tried such a recipient 8 times in its first 150 s
// (found by a tester), each refused, and some servers count that against
// the sender.
func TestGreylistedRecipientWaitsForTheServer(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		text  string
		delay time.Duration // the server's
	}{
		{"postgrey", "<a@example.org>: Recipient address rejected: Greylisted, see http://postgrey.schweikert.ch/help/example.org.html", 5 * time.Minute},
		{"names its wait", "Greylisted for 90 seconds, please try again later", 90 * time.Second},
		{"names minutes", "Greylisting in action, please come back in 2 minutes", 2 * time.Minute},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			st := testenv.SQLite(t)
			tr := &scripted{accepted: map[string]int{}}
			f := newCopiesFixture(t, st, 1, tr)
			var tries []time.Time
			tr.answer = func(string) error {
				tries = append(tries, f.clk.Now())
				if f.clk.Now().Sub(tries[0]) < c.delay {
					return &transport.SendError{Code: 450, Enhanced: "4.7.1", Text: c.text, Stage: transport.StageRcpt}
				}
				return nil
			}
			ctx := t.Context()
			if _, err := f.w.RunPage(ctx, f.job(), "w/1"); err != nil {
				t.Fatal(err)
			}
			f.sweepEvery(t, tries[0].Add(time.Hour), time.Second, func() {})
			if len(tries) != 2 || tr.accepted[f.contacts[0].Email] != 1 {
				t.Fatalf("tried at %v after the first attempt, accepted %d times; want tried once more, after the server's %s, and sent",
					offsets(tries), tr.accepted[f.contacts[0].Email], c.delay)
			}
			if waited := tries[1].Sub(tries[0]); waited > c.delay*3/2 {
				t.Errorf("tried again %s after the first attempt; want soon after the server's %s", waited, c.delay)
			}
		})
	}
}

// TestGreylistWaitCountsFromTheRefusal: the wait before a greylisted
// recipient is tried again counts from when the window's replies came
// back, not from when the window began: here its send waits for a slot
// behind four sends of two minutes each, and a wait counted from the
// window's start had passed before the refusal came (the simulation found
// the retry 43 s after the refusal, inside the server's 60 s).
func TestGreylistWaitCountsFromTheRefusal(t *testing.T) {
	t.Parallel()
	st := testenv.SQLite(t)
	tr := &scripted{accepted: map[string]int{}}
	f := newCopiesFixture(t, st, 5, tr) // 4 sends at a time
	grey := f.contacts[4].Email
	var tries []time.Time
	tr.answer = func(to string) error {
		if to != grey {
			f.clk.Advance(2 * time.Minute) // a slow server for the others
			return nil
		}
		tries = append(tries, f.clk.Now())
		if f.clk.Now().Sub(tries[0]) < time.Minute {
			return &transport.SendError{Code: 450, Enhanced: "4.7.1", Text: "Greylisted for 60 seconds", Stage: transport.StageRcpt}
		}
		return nil
	}
	if _, err := f.w.RunPage(t.Context(), f.job(), "w/1"); err != nil {
		t.Fatal(err)
	}
	if len(tries) != 1 || !tries[0].After(f.b.StartedAt.Add(time.Minute)) {
		t.Fatalf("first attempt(s) at %v; want one, after the slow sends began", offsets(tries))
	}
	f.sweepEvery(t, tries[0].Add(time.Hour), time.Second, func() {})
	if len(tries) != 2 || tr.accepted[grey] != 1 {
		t.Fatalf("greylisted recipient tried at %v after its first attempt, accepted %d times; want once more, after 60 s, and sent", offsets(tries), tr.accepted[grey])
	}
}

// offsets are times as durations since the first.
func offsets(ts []time.Time) []time.Duration {
	out := make([]time.Duration, len(ts))
	for i, t := range ts {
		out[i] = t.Sub(ts[0])
	}
	return out
}

func TestGreylistWait(t *testing.T) {
	for _, c := range []struct {
		err  error
		want time.Duration
		ok   bool
	}{
		{&transport.SendError{Code: 450, Enhanced: "4.7.1", Text: "Greylisted, see http://postgrey.schweikert.ch/help/x.html", Stage: transport.StageRcpt}, 5 * time.Minute, true},
		{&transport.SendError{Code: 451, Enhanced: "4.7.1", Text: "Greylisted for 300 seconds", Stage: transport.StageRcpt}, 300 * time.Second, true},
		{&transport.SendError{Code: 451, Text: "greylisted, try again in 1 min", Stage: transport.StageData}, time.Minute, true},
		{&transport.SendError{Code: 450, Text: "greylisted for 99999 seconds", Stage: transport.StageRcpt}, 30 * time.Minute, true},
		{&transport.SendError{Code: 450, Text: "Greylisted, try again in 1 hour", Stage: transport.StageRcpt}, 30 * time.Minute, true},
		{&transport.SendError{Code: 450, Text: "Greylisted for 20 minutes", Stage: transport.StageRcpt}, 20 * time.Minute, true},
		{&transport.SendError{Code: 450, Enhanced: "4.7.1", Text: "graylisted 0s", Stage: transport.StageRcpt}, 5 * time.Minute, true},
		{&transport.SendError{Code: 451, Enhanced: "4.3.0", Text: "try again in 30 seconds", Stage: transport.StageRcpt}, 0, false},
		// Digits and a unit in the address or the help URL are no wait
		// (a tester's gaddr-30s-1 was tried every 35 s).
		{&transport.SendError{Code: 450, Enhanced: "4.7.1", Text: "<gaddr-30s-1@example.org>: Recipient address rejected: Greylisted, see http://postgrey.schweikert.ch/help/5m.example.html", Stage: transport.StageRcpt}, 5 * time.Minute, true},
		{&transport.SendError{Code: 450, Enhanced: "4.7.1", Text: "<a@b.example>: Greylisted for 90s, see https://example.org/in-30-seconds", Stage: transport.StageRcpt}, 90 * time.Second, true},
		{&transport.SendError{Code: 451, Enhanced: "4.7.1", Text: "Greylisted for 5m30s", Stage: transport.StageRcpt}, 5 * time.Minute, true},
		// rspamd's default greylisting reply; the same words in another
		// code, or with more said, are an ordinary deferral.
		{&transport.SendError{Code: 451, Enhanced: "4.7.1", Text: "Try again later", Stage: transport.StageRcpt}, 5 * time.Minute, true},
		{&transport.SendError{Code: 451, Enhanced: "4.7.1", Text: "Try again later", Stage: transport.StageMail}, 0, false},
		{&transport.SendError{Code: 451, Enhanced: "4.3.0", Text: "Try again later", Stage: transport.StageRcpt}, 0, false},
		{&transport.SendError{Code: 451, Enhanced: "4.7.1", Text: "Try again later: rate limit exceeded", Stage: transport.StageRcpt}, 0, false},
		{&transport.SendError{Code: 550, Enhanced: "5.7.1", Text: "greylist failure", Stage: transport.StageRcpt}, 0, false},
	} {
		got, ok := greylistWait(c.err, 5*time.Minute)
		if got != c.want || ok != c.ok {
			t.Errorf("greylistWait(%v) = %s, %v; want %s, %v", c.err, got, ok, c.want, c.ok)
		}
	}
}

// TestAboutOneMailbox: a full mailbox and greylisting are deferrals of one
// recipient, saying nothing of the provider's health; a plain 451 is not.
func TestAboutOneMailbox(t *testing.T) {
	for _, c := range []struct {
		err  *transport.SendError
		want bool
	}{
		{&transport.SendError{Code: 452, Enhanced: "4.2.2", Text: "mailbox full", Stage: transport.StageRcpt}, true},
		{&transport.SendError{Code: 450, Enhanced: "4.7.1", Text: "<a@example.org>: Recipient address rejected: Greylisted, see http://postgrey.schweikert.ch/help/example.org.html", Stage: transport.StageRcpt}, true},
		{&transport.SendError{Code: 451, Enhanced: "4.7.1", Text: "Please try again later (graylisting)", Stage: transport.StageData}, true},
		{&transport.SendError{Code: 451, Enhanced: "4.3.0", Text: "try again later", Stage: transport.StageRcpt}, false},
		{&transport.SendError{Code: 451, Enhanced: "4.7.1", Text: "Try again later", Stage: transport.StageRcpt}, true}, // rspamd
		{&transport.SendError{Code: 451, Enhanced: "4.7.1", Text: "Try again later; too many connections", Stage: transport.StageRcpt}, false},
		{&transport.SendError{Code: 421, Enhanced: "4.7.0", Text: "greylisted", Stage: transport.StageConnect}, false},
		{&transport.SendError{Code: 550, Enhanced: "5.7.1", Text: "greylist failure", Stage: transport.StageRcpt}, false},
	} {
		if got := aboutOneMailbox(c.err); got != c.want {
			t.Errorf("aboutOneMailbox(%v) = %v; want %v", c.err, got, c.want)
		}
	}
}
