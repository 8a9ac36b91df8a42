package pageworker

import (
	"strings"
	"testing"
	"time"

	"github.com/rangecast/rangecast/internal/bus"
	"github.com/rangecast/rangecast/internal/store"
	"github.com/rangecast/rangecast/internal/transport"
)

// TestSweepNeverFailsARowInDoubt: a row the reconciler released to be sent
// again after an attempt that may have been delivered (store.InDoubtResent)
// ends unknown, not failed, when its resend is refused for good or given
// up on: "not delivered" may be untrue. The mark outlives a resend deferred
// in between. A row only ever deferred by a 451 still fails.
func TestSweepNeverFailsARowInDoubt(t *testing.T) {
	t.Parallel()
	for name, open := range bothStores {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			st := open(t)
			tr := &scripted{accepted: map[string]int{}}
			f := newCopiesFixture(t, st, 4, tr)
			f.w.cfg.MaxAttempts, f.w.cfg.RetryFor = 3, time.Nanosecond
			f.w.giveUpAt = f.w.cfg.giveUpAttempts()
			refused := &transport.SendError{Code: 550, Enhanced: "5.1.1", Text: "no such user", Stage: transport.StageRcpt}
			later := &transport.SendError{Code: 451, Enhanced: "4.3.0", Text: "try again later", Stage: transport.StageRcpt}
			answers := map[string]error{
				f.contacts[0].Email: refused, // in doubt, refused for good
				f.contacts[1].Email: later,   // in doubt, deferred to the end
				f.contacts[3].Email: refused, // a plain deferral, refused
			}
			tr.answer = func(to string) error { return answers[to] }
			ctx := t.Context()
			now := f.clk.Now()
			claims := make([]store.Claim, len(f.contacts))
			for i, c := range f.contacts {
				claims[i] = store.Claim{ContactID: c.ID, Email: c.Email, MessageID: "<" + c.ID.String() + "@example.com>"}
			}
			if _, err := st.Claim(ctx, f.b.ID, "w/A", claims, now); err != nil {
				t.Fatal(err)
			}
			// w/A died; the reconciler released three in doubt, and the
			// fourth had been deferred by a 451.
			outcomes := make([]store.Outcome, len(f.contacts))
			for i, c := range f.contacts {
				outcomes[i] = store.Outcome{ContactID: c.ID, Status: store.SendDeferred, RetryAt: now, Error: store.InDoubtResent}
			}
			outcomes[3].Error = "451 4.3.0 try again later"
			if err := st.RecordOutcomes(ctx, f.b.ID, "w/A", outcomes, now); err != nil {
				t.Fatal(err)
			}
			sweep := bus.PageJob{Broadcast: f.b.ID.String(), Range: bus.SweepRange, Limit: 100, Sweep: true}
			for round := range 3 {
				f.clk.Advance(24 * time.Hour)
				if _, err := f.w.runSweep(ctx, ctx, sweep, "w/S"); err != nil {
					t.Fatalf("sweep %d: %v", round, err)
				}
			}
			want := []struct {
				status store.SendStatus
				error  string
			}{
				{store.SendUnknown, store.InDoubtEndedPrefix + "smtp rcpt: 550"},
				{store.SendUnknown, store.InDoubtEndedPrefix + store.GaveUpPrefix + "3 attempts"},
				{store.SendSent, ""},
				{store.SendFailed, "smtp rcpt: 550"},
			}
			for i, c := range f.contacts {
				row, err := st.GetSend(ctx, f.b.ID, c.ID)
				if err != nil {
					t.Fatal(err)
				}
				if row.Status != want[i].status || !strings.HasPrefix(row.Error, want[i].error) {
					t.Errorf("contact %d: %s %q; want %s %q...", i, row.Status, row.Error, want[i].status, want[i].error)
				}
			}
			if tr.accepted[f.contacts[2].Email] != 1 {
				t.Errorf("the accepted resend went out %d times", tr.accepted[f.contacts[2].Email])
			}
		})
	}
}
