package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/oklog/ulid/v2"
	"google.golang.org/grpc"

	"github.com/rangecast/rangecast/internal/sinkproc"
	pb "github.com/rangecast/rangecast/proto/rangecast/v1"
)

// erasure is one EraseContacts call the harness made mid-broadcast.
type erasure struct {
	ids  map[string][16]byte // email → contact id, read before the call
	done time.Time           // when the call returned: the erasure had committed
	// inFlight is how many of them were claimed or deferred when picked.
	inFlight int
}

// erasures is what the harness erased, for the verdict.
type erasures struct {
	mu   sync.Mutex
	list []erasure
	of   map[string]int // email → index in list
}

// eraseContacts erases ErasePerEvent contacts through CatalogService while
// the broadcast runs: half of them among the rows claimed or deferred at
// that moment (a send in flight, a retry waiting: the cases the ledger must
// get right), the rest at random from the eligible audience.
func (h *harness) eraseContacts(chaosCtx context.Context) error {
	ctx := context.WithoutCancel(chaosCtx)
	pick, inFlight, err := h.pickForErasure(ctx)
	if err != nil {
		return fmt.Errorf("pick contacts: %w", err)
	}
	if len(pick) == 0 {
		return nil
	}
	var resp *pb.EraseContactsResponse
	err = h.call(ctx, 30*time.Second, func(cctx context.Context, conn *grpc.ClientConn) error {
		var err error
		resp, err = pb.NewCatalogServiceClient(conn).EraseContacts(cctx, &pb.EraseContactsRequest{Emails: keysOf(pick)})
		return err
	})
	var sends int64
	if err != nil {
		// No answer, but the erasure may have committed: the verdict must
		// know whom it erased, or it would take them for skipped.
		gone, gerr := h.stillErased(ctx, pick)
		if gerr != nil {
			return fmt.Errorf("erase %d contacts: %w; and cannot tell which were erased: %v", len(pick), err, gerr)
		}
		h.logf("t=%s erasure of %d contacts unanswered (%v); %d of them are gone, and are held to erasure's rules", h.elapsed(), len(pick), err, len(gone))
		if pick = gone; len(pick) == 0 {
			return nil
		}
	}
	e := erasure{ids: pick, done: time.Now(), inFlight: inFlight}
	for _, c := range resp.GetErased() {
		sends += c.GetSends()
	}
	h.erased.mu.Lock()
	for email := range pick {
		h.erased.of[email] = len(h.erased.list)
	}
	h.erased.list = append(h.erased.list, e)
	h.erased.mu.Unlock()
	h.logf("t=%s erased %d contacts (%d of them claimed or deferred when picked; %d ledger rows anonymised, as the answer counts them)", h.elapsed(), len(pick), inFlight, sends)
	return nil
}

// pickForErasure chooses the contacts of one erasure and reads their ids.
func (h *harness) pickForErasure(ctx context.Context) (map[string][16]byte, int, error) {
	id, err := ulid.ParseStrict(h.broadcastID)
	if err != nil {
		return nil, 0, err
	}
	conn, err := h.pg(ctx)
	if err != nil {
		return nil, 0, err
	}
	defer conn.Close(ctx)
	n := h.cfg.ErasePerEvent
	h.erased.mu.Lock()
	taken := func(email string) bool { _, ok := h.erased.of[email]; return ok }
	defer h.erased.mu.Unlock()

	rows, err := conn.Query(ctx, `SELECT email FROM broadcast_sends
WHERE broadcast_id = $1 AND status IN ('claimed', 'deferred') AND email NOT LIKE 'erased:%'
ORDER BY random() LIMIT $2`, [16]byte(id), n/2)
	if err != nil {
		return nil, 0, err
	}
	emails, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, 0, err
	}
	want := map[string]bool{}
	for _, e := range emails {
		if !taken(e) {
			want[e] = true
		}
	}
	inFlight := len(want)
	for tries := 0; len(want) < n && tries < 100*n; tries++ {
		if e := h.eligible[h.randInt(len(h.eligible))]; !taken(e) {
			want[e] = true
		}
	}
	rows, err = conn.Query(ctx, `SELECT email, id FROM contacts WHERE email = ANY($1)`, keysOf(want))
	if err != nil {
		return nil, 0, err
	}
	out := map[string][16]byte{}
	var email string
	var cid [16]byte
	if _, err := pgx.ForEachRow(rows, []any{&email, &cid}, func() error {
		out[strings.ToLower(email)] = cid
		return nil
	}); err != nil {
		return nil, 0, err
	}
	return out, inFlight, nil
}

// stillErased returns those of pick whose contact row is gone (an erasure
// deletes it).
func (h *harness) stillErased(ctx context.Context, pick map[string][16]byte) (map[string][16]byte, error) {
	conn, err := h.pg(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close(ctx)
	ids := make([][16]byte, 0, len(pick))
	for _, id := range pick {
		ids = append(ids, id)
	}
	rows, err := conn.Query(ctx, `SELECT id FROM contacts WHERE id = ANY($1)`, ids)
	if err != nil {
		return nil, err
	}
	present, err := pgx.CollectRows(rows, pgx.RowTo[[16]byte])
	if err != nil {
		return nil, err
	}
	left := map[[16]byte]bool{}
	for _, id := range present {
		left[id] = true
	}
	gone := map[string][16]byte{}
	for email, id := range pick {
		if !left[id] {
			gone[email] = id
		}
	}
	return gone, nil
}

func keysOf[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// byContact maps the ids of the contacts erased to their addresses.
func (e *erasures) byContact() map[[16]byte]string {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := map[[16]byte]string{}
	for email, i := range e.of {
		out[e.list[i].ids[email]] = email
	}
	return out
}

// checkErasures holds the contacts erased mid-broadcast to what erasure
// promises (docs/operations.md, Erasure): nothing is claimed for them after
// the erasure committed, so nothing reaches them after it but a send
// already claimed; one that received its message is never recorded failed;
// one that did not is never recorded sent, and an open row (a claim, a
// retry) ends failed "not sent", or unknown, never left open. ledger is
// keyed by address, erased rows under the address they had.
func (h *harness) checkErasures(ctx context.Context, recs []sinkproc.Record, ledger map[string]ledgerRow) (Check, error) {
	h.erased.mu.Lock()
	defer h.erased.mu.Unlock()
	c := Check{OK: true, Name: "erased mid-broadcast (GDPR Art. 17): no claim after the erasure, none received recorded failed, none left open"}
	if len(h.erased.list) == 0 {
		c.Detail = "no erasure in this run"
		return c, nil
	}
	all := make(map[string][16]byte, len(h.erased.of))
	for email, i := range h.erased.of {
		all[email] = h.erased.list[i].ids[email]
	}
	gone, err := h.stillErased(ctx, all)
	if err != nil {
		return c, err
	}
	left := len(all) - len(gone)
	received := map[string][]time.Time{}
	for _, rec := range recs {
		if _, ok := h.erased.of[rec.Recipient]; ok {
			received[rec.Recipient] = append(received[rec.Recipient], rec.Time)
		}
	}

	var breaches []string
	breach := func(email, format string, args ...any) {
		if len(breaches) < 5 {
			breaches = append(breaches, email+": "+fmt.Sprintf(format, args...))
		}
		c.OK = false
	}
	if left > 0 {
		breach("contacts", "%d erased contacts still have their row", left)
	}
	var inFlight, before, after, notSent, unknown, never int
	for email, i := range h.erased.of {
		e := h.erased.list[i]
		row, claimed := ledger[email]
		if claimed && row.claimedAt.After(e.done) {
			breach(email, "claimed at %s, after its erasure returned at %s", row.claimedAt.Format(time.StampMilli), e.done.Format(time.StampMilli))
		}
		got := received[email]
		switch {
		case len(got) > 0 && !claimed:
			breach(email, "received with no ledger row")
		case len(got) > 0:
			if row.status != "sent" && row.status != "unknown" {
				breach(email, "received its message but is recorded %s (%s)", row.status, row.error)
			}
			if got[len(got)-1].After(e.done) {
				after++
			} else {
				before++
			}
		case !claimed:
			never++
		case row.status == "unknown":
			unknown++
		case row.status == "failed" && strings.HasPrefix(row.error, "not sent: the contact was erased"):
			notSent++
		default:
			breach(email, "never received, recorded %s (%s)", row.status, row.error)
		}
	}
	for _, e := range h.erased.list {
		inFlight += e.inFlight
	}
	c.Detail = fmt.Sprintf("%d erased in %d calls (%d claimed or deferred when picked): received before the erasure returned %d, after it %d; never received: failed \"not sent: the contact was erased …\" %d, unknown %d, never claimed %d",
		len(h.erased.of), len(h.erased.list), inFlight, before, after, notSent, unknown, never)
	if !c.OK {
		c.Detail += "; breaches: " + strings.Join(breaches, "; ")
	}
	return c, nil
}
