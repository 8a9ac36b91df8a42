package storetest

import (
	"fmt"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/rangecast/rangecast/internal/store"
)

var broadcastOpsCases = []testCase{
	{"UpdateAndDeleteDraftsOnly", testUpdateDeleteDrafts},
	{"EditPausedContentOnly", testEditPaused},
	{"SetThrottleStartedOnly", testSetThrottle},
	{"Schedule", testScheduleDraft},
	{"Report", testReport},
	{"ExportKeyset", testExportPage},
	{"ReopenGaveUpOnly", testReopen},
}

// A draft can be edited and deleted; a started broadcast can be neither, and
// the refusal carries it as it is.
func testUpdateDeleteDrafts(f *fixture) {
	d := f.draft("to edit", 0)
	seg, err := f.s.EnsureSegment(f.ctx, "vip", t0)
	f.must(err, "EnsureSegment")
	changed := store.Draft{Name: "edited", Content: store.Content{FromName: "N", FromAddress: "n@example.org", Subject: "S2", HTML: "<p>2</p>", Text: "2"},
		SegmentID: seg, ThrottlePerHour: 60, InDoubtPolicy: "resend", NoUnsubscribeLink: true}
	b, err := f.s.UpdateDraft(f.ctx, d.ID, changed, at(2))
	f.must(err, "UpdateDraft")
	if b.Name != "edited" || b.Content != changed.Content || b.SegmentID != seg || b.Segment != "vip" || b.ThrottlePerHour != 60 ||
		b.InDoubtPolicy != "resend" || !b.NoUnsubscribeLink || b.State != store.StateDraft {
		f.t.Fatalf("UpdateDraft = %+v; want the new definition, still a draft", b)
	}
	r := f.running("started", 0)
	got, err := f.s.UpdateDraft(f.ctx, r.ID, changed, at(2))
	f.wantErr(err, store.ErrConflict, "UpdateDraft of a running broadcast")
	if got.State != store.StateRunning || got.Name != "started" {
		f.t.Fatalf("refused UpdateDraft returned %s %q; want the running broadcast unchanged", got.State, got.Name)
	}
	_, err = f.s.DeleteDraft(f.ctx, r.ID)
	f.wantErr(err, store.ErrConflict, "DeleteDraft of a running broadcast")
	gone, err := f.s.DeleteDraft(f.ctx, d.ID)
	f.must(err, "DeleteDraft")
	if gone.ID != d.ID || gone.Name != "edited" {
		f.t.Fatalf("DeleteDraft returned %s %q; want the deleted draft", gone.ID, gone.Name)
	}
	_, err = f.s.GetBroadcast(f.ctx, d.ID)
	f.wantErr(err, store.ErrNotFound, "GetBroadcast after DeleteDraft")
	_, err = f.s.DeleteDraft(f.ctx, d.ID)
	f.wantErr(err, store.ErrNotFound, "DeleteDraft twice")
	_, err = f.s.UpdateDraft(f.ctx, d.ID, changed, at(3))
	f.wantErr(err, store.ErrNotFound, "UpdateDraft of a deleted draft")
}

// A running, paused or failed broadcast's throttle can change, and nothing
// else of it; a draft (UpdateDraft's), a finished broadcast or a negative throttle
// are refused, the refusal carrying the broadcast as it is.
func testSetThrottle(f *fixture) {
	r := f.running("slow down", 0)
	b, err := f.s.SetThrottle(f.ctx, r.ID, 3600, at(2))
	f.must(err, "SetThrottle of a running broadcast")
	if b.ThrottlePerHour != 3600 || b.State != store.StateRunning || b.Content != r.Content || b.ContentRevision != r.ContentRevision {
		f.t.Fatalf("SetThrottle = %+v; want throttle 3600, the rest as it was", b)
	}
	_, err = f.s.SetState(f.ctx, r.ID, []store.State{store.StateRunning}, store.StatePaused, "", at(3))
	f.must(err, "SetState paused")
	if b, err = f.s.SetThrottle(f.ctx, r.ID, 0, at(4)); err != nil || b.ThrottlePerHour != 0 || b.State != store.StatePaused {
		f.t.Fatalf("SetThrottle(0) of a paused broadcast = %+v, %v; want no throttle, still paused", b, err)
	}
	_, err = f.s.SetThrottle(f.ctx, r.ID, -1, at(4))
	f.wantErr(err, store.ErrInvalid, "SetThrottle(-1)")
	d := f.draft("draft", 0)
	got, err := f.s.SetThrottle(f.ctx, d.ID, 60, at(5))
	f.wantErr(err, store.ErrConflict, "SetThrottle of a draft")
	if got.State != store.StateDraft || got.ThrottlePerHour != d.ThrottlePerHour {
		f.t.Fatalf("refused SetThrottle returned %s %d; want the draft as it was", got.State, got.ThrottlePerHour)
	}
	_, err = f.s.SetState(f.ctx, r.ID, []store.State{store.StatePaused}, store.StateFailed, "no progress", at(5))
	f.must(err, "SetState failed")
	if b, err = f.s.SetThrottle(f.ctx, r.ID, 120, at(5)); err != nil || b.ThrottlePerHour != 120 || b.State != store.StateFailed {
		f.t.Fatalf("SetThrottle of a failed broadcast (resumable) = %+v, %v; want throttle 120, still failed", b, err)
	}
	_, err = f.s.SetState(f.ctx, r.ID, []store.State{store.StateFailed}, store.StateCancelled, "", at(6))
	f.must(err, "SetState cancelled")
	_, err = f.s.SetThrottle(f.ctx, r.ID, 60, at(7))
	f.wantErr(err, store.ErrConflict, "SetThrottle of a cancelled broadcast")
	_, err = f.s.SetThrottle(f.ctx, ulid.Make(), 60, at(7))
	f.wantErr(err, store.ErrNotFound, "SetThrottle of no broadcast")
}

// A paused broadcast's content can be replaced, each edit counting a
// content revision; nothing else of it changes, and a broadcast in any
// other state is refused as it is. The rows the old content could not be
// rendered for go back to deferred, due at once; no other row changes.
func testEditPaused(f *fixture) {
	ids := f.subscribers("edit", 5)
	r := f.running("to fix", 0)
	f.claim(r, ids, at(1))
	const unrendered, refused = store.RenderFailedPrefix + `invalid html: the contact has no attribute "city"`, "smtp rcpt: 550 5.1.1 no such user"
	f.must(f.s.RecordOutcomes(f.ctx, r.ID, "w1/1", []store.Outcome{
		{ContactID: ids[0], Status: store.SendFailed, Error: unrendered},
		{ContactID: ids[1], Status: store.SendFailed, Error: refused},
		{ContactID: ids[2], Status: store.SendSent},
		{ContactID: ids[3], Status: store.SendDeferred, RetryAt: at(2), Error: store.TemplateMistakePrefix + `3 contacts (a configuration mistake, not theirs): …`},
	}, at(1)), "RecordOutcomes")
	// ids[4] is still claimed: a window that began before the pause.
	held, err := f.s.HeldByContent(f.ctx, r.ID, 10)
	f.must(err, "HeldByContent")
	if got := contactIDs(held); len(got) != 2 || !got[ids[0]] || !got[ids[3]] {
		f.t.Errorf("HeldByContent = %v; want the row that failed to render and the one the template mistake deferred", got)
	}
	if held, err := f.s.HeldByContent(f.ctx, r.ID, 1); err != nil || len(held) != 1 {
		f.t.Errorf("HeldByContent(limit 1) = %d contacts, %v; want 1", len(held), err)
	}
	c := store.Content{FromName: "N", FromAddress: "n@example.org", Subject: "Fixed", HTML: "<p>fixed</p>", Text: "fixed"}
	got, _, err := f.s.EditPaused(f.ctx, r.ID, c, at(2))
	f.wantErr(err, store.ErrConflict, "EditPaused of a running broadcast")
	if got.State != store.StateRunning || got.Content != r.Content || got.ContentRevision != 0 {
		f.t.Fatalf("refused EditPaused returned %s, revision %d, %+v; want the running broadcast unchanged", got.State, got.ContentRevision, got.Content)
	}
	_, err = f.s.SetState(f.ctx, r.ID, []store.State{store.StateRunning}, store.StatePaused, "halted", at(3))
	f.must(err, "SetState paused")
	// A claim without an outcome: the window may yet record a render
	// failure, which an edit now would leave failed for good.
	got, _, err = f.s.EditPaused(f.ctx, r.ID, c, at(3))
	f.wantErr(err, store.ErrClaimsOut, "EditPaused with a claim out")
	if got.Content != r.Content || got.ContentRevision != 0 {
		f.t.Fatalf("EditPaused refused for a claim out changed the content: revision %d, %+v", got.ContentRevision, got.Content)
	}
	f.must(f.s.RecordOutcomes(f.ctx, r.ID, "w1/1", []store.Outcome{{ContactID: ids[4], Status: store.SendSent}}, at(3)), "RecordOutcomes of the last")
	b, n, err := f.s.EditPaused(f.ctx, r.ID, c, at(4))
	f.must(err, "EditPaused")
	if b.Content != c || b.ContentRevision != 1 || b.State != store.StatePaused || b.Reason != "halted" || b.Name != r.Name ||
		b.MinID != r.MinID || b.MaxID != r.MaxID || b.SnapshotTotal != r.SnapshotTotal {
		f.t.Fatalf("EditPaused = %+v; want the new content, revision 1, the rest as it was (%+v)", b, r)
	}
	if n != 1 {
		f.t.Errorf("EditPaused rerendered %d rows; want 1, the one the old content failed to render for", n)
	}
	if s := f.send(r, ids[0]); s.Status != store.SendDeferred || s.Attempt != 0 || s.Error != store.EditedPrefix+unrendered {
		f.t.Errorf("the row that failed to render, after the edit: %s, attempt %d, %q; want deferred, no attempt, its error kept behind %q",
			s.Status, s.Attempt, s.Error, store.EditedPrefix)
	}
	if due, _, err := f.s.NextDue(f.ctx, r.ID, at(4)); err != nil || due != 2 {
		f.t.Errorf("NextDue at the edit = %d, %v; want the row to render again due at once, and the one the template mistake deferred", due, err)
	}
	// A second edit while still paused renders for them too: the row the
	// first edit made due again is still held.
	if held, err := f.s.HeldByContent(f.ctx, r.ID, 10); err != nil || len(held) != 2 || !contactIDs(held)[ids[0]] || !contactIDs(held)[ids[3]] {
		f.t.Errorf("HeldByContent after the edit = %v, %v; want the row it made due again and the one the mistake deferred", contactIDs(held), err)
	}
	if s := f.send(r, ids[1]); s.Status != store.SendFailed || s.Error != refused {
		f.t.Errorf("the row refused for good, after the edit: %s %q; want failed as it was", s.Status, s.Error)
	}
	if s := f.send(r, ids[2]); s.Status != store.SendSent {
		f.t.Errorf("the row sent, after the edit: %s; want sent", s.Status)
	}
	c.Subject = "Fixed again"
	b, _, err = f.s.EditPaused(f.ctx, r.ID, c, at(5))
	f.must(err, "EditPaused again")
	if b.ContentRevision != 2 || b.Content.Subject != "Fixed again" {
		f.t.Fatalf("second EditPaused = revision %d, subject %q; want 2, the newer subject", b.ContentRevision, b.Content.Subject)
	}
	if again, err := f.s.GetBroadcast(f.ctx, r.ID); err != nil || again.ContentRevision != 2 || again.Content != c {
		f.t.Fatalf("GetBroadcast after the edits = revision %d, %+v, %v; want what EditPaused returned", again.ContentRevision, again.Content, err)
	}
	if n, err := f.s.ContentRevision(f.ctx, r.ID); err != nil || n != 2 {
		f.t.Fatalf("ContentRevision after the edits = %d, %v; want 2", n, err)
	}
	_, err = f.s.ContentRevision(f.ctx, ulid.Make())
	f.wantErr(err, store.ErrNotFound, "ContentRevision of no broadcast")
	d := f.draft("draft", 0)
	_, _, err = f.s.EditPaused(f.ctx, d.ID, c, at(6))
	f.wantErr(err, store.ErrConflict, "EditPaused of a draft (UpdateDraft's)")
	_, _, err = f.s.EditPaused(f.ctx, ulid.Make(), c, at(6))
	f.wantErr(err, store.ErrNotFound, "EditPaused of no broadcast")
}

// A schedule is kept with the draft, listed once due, cleared by a zero
// time, and refused for a broadcast that already started; starting a
// scheduled draft takes it off the due list.
func testScheduleDraft(f *fixture) {
	d := f.draft("later", 0)
	e := f.draft("later still", 0)
	b, err := f.s.ScheduleDraft(f.ctx, d.ID, at(10), at(1))
	f.must(err, "ScheduleDraft")
	if !b.ScheduledAt.Equal(at(10)) {
		f.t.Fatalf("ScheduledAt = %v; want %v", b.ScheduledAt, at(10))
	}
	_, err = f.s.ScheduleDraft(f.ctx, e.ID, at(20), at(1))
	f.must(err, "ScheduleDraft")
	due := func(now time.Time, want ...ulid.ULID) {
		f.t.Helper()
		got, err := f.s.DueScheduled(f.ctx, now, 10)
		f.must(err, "DueScheduled")
		if fmt.Sprint(got) != fmt.Sprint(want) {
			f.t.Fatalf("DueScheduled(%v) = %v; want %v", now, got, want)
		}
	}
	due(at(9))
	due(at(10), d.ID)
	due(at(30), d.ID, e.ID)
	if list, err := f.s.BroadcastPage(f.ctx, ulid.ULID{}, 10); err != nil || len(list) < 2 || !list[0].ScheduledAt.Equal(at(20)) {
		f.t.Fatalf("BroadcastPage = %v, %v; want the schedule listed", list, err)
	}
	b, err = f.s.ScheduleDraft(f.ctx, e.ID, time.Time{}, at(2))
	f.must(err, "unschedule")
	if !b.ScheduledAt.IsZero() {
		f.t.Fatalf("unscheduled ScheduledAt = %v; want zero", b.ScheduledAt)
	}
	due(at(30), d.ID)
	_, err = f.s.AcceptBroadcast(f.ctx, d.ID, at(10))
	f.must(err, "AcceptBroadcast")
	due(at(30))
	_, err = f.s.ScheduleDraft(f.ctx, d.ID, at(40), at(11))
	f.wantErr(err, store.ErrConflict, "ScheduleDraft of a running broadcast")
	_, err = f.s.ScheduleDraft(f.ctx, f.ids.next(), at(40), at(11))
	f.wantErr(err, store.ErrNotFound, "ScheduleDraft of no broadcast")
}

// outcomesAs records one outcome per id as owner w1/1.
func (f *fixture) outcomesAs(b store.Broadcast, outs []store.Outcome, now time.Time) {
	f.t.Helper()
	f.must(f.s.RecordOutcomes(f.ctx, b.ID, "w1/1", outs, now), "RecordOutcomes")
}

// A report counts statuses, the contacts each event type reached, and
// groups failures by reply with the address masked.
func testReport(f *fixture) {
	ids := f.subscribers("rep", 8)
	b := f.running("report", 0)
	f.claim(b, ids, at(2))
	em := func(i int) string { return "c-" + ids[i].String() + "@example.org" }
	f.outcomesAs(b, []store.Outcome{
		{ContactID: ids[0], Status: store.SendSent}, {ContactID: ids[1], Status: store.SendSent},
		{ContactID: ids[2], Status: store.SendSent}, {ContactID: ids[3], Status: store.SendSent},
		{ContactID: ids[4], Status: store.SendFailed, Error: "550 5.1.1 <" + em(4) + ">: no such user"},
		{ContactID: ids[5], Status: store.SendFailed, Error: "550 5.1.1 <" + em(5) + ">: no such user"},
		{ContactID: ids[6], Status: store.SendFailed, Error: store.GaveUpPrefix + "10 attempts; last: 451 try later"},
		{ContactID: ids[7], Status: store.SendUnknown},
	}, at(3))
	f.event(b, ids[0], store.EventDelivered, "")
	f.event(b, ids[0], store.EventOpened, "")
	f.event(b, ids[0], store.EventOpened, "") // a second open of the same message
	f.event(b, ids[1], store.EventClicked, "")
	f.event(b, ids[2], store.EventBounced, "")
	f.event(b, ids[3], store.EventComplained, "")
	r, err := f.s.Report(f.ctx, b.ID, 10)
	f.must(err, "Report")
	wantStatuses := map[store.SendStatus]int64{store.SendOpened: 1, store.SendClicked: 1, store.SendBounced: 1, store.SendComplained: 1,
		store.SendFailed: 3, store.SendUnknown: 1}
	if fmt.Sprint(r.Statuses) != fmt.Sprint(wantStatuses) {
		f.t.Errorf("Statuses = %v; want %v", r.Statuses, wantStatuses)
	}
	if c := f.counts(b); r.Counts != c {
		f.t.Errorf("Report's Counts = %+v; want Counts' %+v", r.Counts, c)
	}
	wantEvents := map[store.EventType]int64{store.EventDelivered: 1, store.EventOpened: 1, store.EventClicked: 1, store.EventBounced: 1, store.EventComplained: 1}
	if fmt.Sprint(r.Events) != fmt.Sprint(wantEvents) {
		f.t.Errorf("Events = %v; want %v", r.Events, wantEvents)
	}
	if want := (store.Reputation{Accepted: 4, Delivered: 3, Bounced: 1, Complained: 1}); r.Reputation != want {
		f.t.Errorf("Reputation = %+v; want %+v", r.Reputation, want)
	}
	if len(r.Failures) != 2 || r.Failures[0].Count != 2 || r.Failures[0].Reply != "550 5.1.1 <address>: no such user" || r.Failures[1].Count != 1 {
		f.t.Errorf("Failures = %+v; want the 550 group of 2 (address masked), then the gave-up one", r.Failures)
	}
	if r.Retryable != 1 {
		f.t.Errorf("Retryable = %d; want 1", r.Retryable)
	}
	if r, err := f.s.Report(f.ctx, b.ID, 1); err != nil || len(r.Failures) != 1 {
		f.t.Errorf("Report(groups 1) = %+v, %v; want one group", r.Failures, err)
	}
	_, err = f.s.Report(f.ctx, f.ids.next(), 10)
	f.wantErr(err, store.ErrNotFound, "Report of no broadcast")
}

// Keyset pages walk every ledger row once, in contact id order.
func testExportPage(f *fixture) {
	b, ids := f.sentRows("export", 7)
	var got []ulid.ULID
	after := ulid.ULID{}
	for range 10 {
		page, err := f.s.ExportPage(f.ctx, b.ID, after, 3)
		f.must(err, "ExportPage")
		if len(page) > 3 {
			f.t.Fatalf("ExportPage(limit 3) returned %d rows", len(page))
		}
		for _, s := range page {
			got = append(got, s.ContactID)
			if s.Status != store.SendSent || s.Attempt != 1 || s.Email == "" || s.ClaimedAt.IsZero() {
				f.t.Fatalf("exported row %+v; want a sent row with its address, attempt and times", s)
			}
		}
		if len(page) < 3 {
			break
		}
		after = page[len(page)-1].ContactID
	}
	if fmt.Sprint(got) != fmt.Sprint(ids) {
		f.t.Fatalf("export walked %v; want %v", got, ids)
	}
}

// Reopen moves only the rows whose transient attempts ran out or that were
// never handed to a server (and, when asked, the unknown ones) back to deferred, due now with the attempts
// reset, and a completed broadcast back to running; a sent row or one
// refused for good is never touched, and only a completed broadcast is
// reopened.
func testReopen(f *fixture) {
	ids := f.subscribers("reopen", 6)
	b := f.running("reopen", 0)
	f.claim(b, ids, at(2))
	f.outcomesAs(b, []store.Outcome{
		{ContactID: ids[0], Status: store.SendSent},
		{ContactID: ids[1], Status: store.SendFailed, Error: "550 5.1.1 no such user"},
		{ContactID: ids[2], Status: store.SendFailed, Error: store.GaveUpPrefix + "10 attempts; last: 451 later"},
		{ContactID: ids[3], Status: store.SendUnknown},
		{ContactID: ids[4], Status: store.SendFailed, Error: store.NotSentPrefix + "smtp rcpt: the server does not support SMTPUTF8"},
		{ContactID: ids[5], Status: store.SendFailed, Error: store.ErasedBeforeSend}, // never retried
	}, at(3))
	_, err := f.s.Reopen(f.ctx, b.ID, false, "retry", at(4))
	f.wantErr(err, store.ErrConflict, "Reopen of a running broadcast")
	_, err = f.s.SetState(f.ctx, b.ID, []store.State{store.StateRunning}, store.StateCompleted, "", at(4))
	f.must(err, "complete")

	r, err := f.s.Reopen(f.ctx, b.ID, false, "retrying 2", at(5))
	f.must(err, "Reopen")
	if r.Failed != 2 || r.Unknown != 0 || r.Broadcast.State != store.StateRunning || r.Broadcast.Reason != "retrying 2" || !r.Broadcast.FinishedAt.IsZero() {
		f.t.Fatalf("Reopen = %+v; want 2 failed rows (gave up, never handed to a server), the broadcast running again", r)
	}
	if c := f.counts(b); c.Sent != 1 || c.Failed != 2 || c.Deferred != 2 || c.Unknown != 1 {
		f.t.Fatalf("counts after Reopen = %+v; want 1 sent, 2 failed (refused for good, erased), 2 deferred, 1 unknown", c)
	}
	b.State = store.StateRunning
	due, err := f.s.ClaimDue(f.ctx, b, "w2/1", at(5), 10, nil, nil)
	f.must(err, "ClaimDue")
	if len(due) != 2 || due[0].ID != ids[2] || due[0].Attempt != 1 || due[1].ID != ids[4] {
		f.t.Fatalf("ClaimDue = %+v; want the reopened rows at attempt 1", due)
	}
	f.must(f.s.RecordOutcomes(f.ctx, b.ID, "w2/1", []store.Outcome{{ContactID: ids[2], Status: store.SendSent}, {ContactID: ids[4], Status: store.SendSent}}, at(6)), "RecordOutcomes")
	_, err = f.s.SetState(f.ctx, b.ID, []store.State{store.StateRunning}, store.StateCompleted, "", at(7))
	f.must(err, "complete again")

	// Nothing left that gave up: nothing moves, the broadcast stays completed.
	r, err = f.s.Reopen(f.ctx, b.ID, false, "retrying 0", at(8))
	f.must(err, "Reopen with nothing to retry")
	if r.Failed != 0 || r.Broadcast.State != store.StateCompleted {
		f.t.Fatalf("Reopen with nothing to retry = %+v; want nothing moved, still completed", r)
	}
	r, err = f.s.Reopen(f.ctx, b.ID, true, "retrying unknown", at(9))
	f.must(err, "Reopen unknown")
	if r.Failed != 0 || r.Unknown != 1 || r.Broadcast.State != store.StateRunning {
		f.t.Fatalf("Reopen(unknown) = %+v; want the unknown row, running", r)
	}
	for i, want := range []store.SendStatus{store.SendSent, store.SendFailed, store.SendSent, store.SendDeferred, store.SendSent, store.SendFailed} {
		if got := f.status(b, ids[i]); got != want {
			f.t.Errorf("row %d is %s; want %s", i, got, want)
		}
	}
	// The unknown row, sent again, may have reached its contact twice:
	// the counts say so (a retried give-up does not).
	b.State = store.StateRunning
	due, err = f.s.ClaimDue(f.ctx, b, "w3/1", at(10), 10, nil, nil)
	f.must(err, "ClaimDue (unknown)")
	if len(due) != 1 || due[0].ID != ids[3] || !due[0].InDoubt {
		f.t.Fatalf("ClaimDue = %+v; want the reopened unknown row, in doubt", due)
	}
	f.must(f.s.RecordOutcomes(f.ctx, b.ID, "w3/1", []store.Outcome{{ContactID: ids[3], Status: store.SendSent}}, at(11)), "RecordOutcomes (unknown)")
	if c := f.counts(b); c.Sent != 4 || c.SentAgainInDoubt != 1 {
		f.t.Errorf("counts after the unknown row was sent again = %+v; want 4 sent, 1 of them sent again in doubt", c)
	}
	_, err = f.s.Reopen(f.ctx, f.ids.next(), false, "", at(9))
	f.wantErr(err, store.ErrNotFound, "Reopen of no broadcast")
}

// contactIDs is the set of cs's ids.
func contactIDs(cs []store.Contact) map[ulid.ULID]bool {
	out := make(map[ulid.ULID]bool, len(cs))
	for _, c := range cs {
		out[c.ID] = true
	}
	return out
}
