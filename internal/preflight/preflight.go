// Package preflight renders a broadcast against a sample of the real
// contacts it would go to before anyone is sent anything: a template that
// reads an attribute the list does not have ({{.Attributes.cty}} for city)
// passes a compile against placeholder data, and after start would fail
// every contact of a million. Create runs the check and Start repeats it
// (the list may have changed in between).
package preflight

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/rangecast/rangecast/internal/message"
	"github.com/rangecast/rangecast/internal/ranges"
	"github.com/rangecast/rangecast/internal/store"
)

// PerRange is how many contacts are sampled from each of the ranges the
// audience is cut into: with the first contact, at most about 100.
const PerRange = 3

// Pages is the part of the store the check reads.
type Pages interface {
	EligiblePage(ctx context.Context, b store.Broadcast, from, until ulid.ULID, limit int) ([]store.Contact, error)
	LastEligible(ctx context.Context, b store.Broadcast, until ulid.ULID) (store.Contact, bool, error)
}

// Failure is a sampled contact the template cannot render for.
type Failure struct {
	Contact ulid.ULID
	Email   string
	Field   string // the template part: subject, html, text
	Reason  string
}

func (f *Failure) Error() string {
	return fmt.Sprintf("the content does not render for contact %s (%s): %s: %s", f.Contact, f.Email, f.Field, f.Reason)
}

// Check renders c for the first and the last eligible contact of b's
// audience and a few from each of the ranges between them (contact ids
// are ULIDs, so time-ordered), and returns a *Failure for the first that fails in a
// template. A contact whose own address or name cannot be used is not the
// template's fault (the page worker fails that contact alone) and does not
// fail the check. An empty audience passes: there is nothing to render.
func Check(ctx context.Context, pages Pages, b store.Broadcast, c *message.Compiled, now time.Time) error {
	all := maxID()
	first, err := pages.EligiblePage(ctx, b, ulid.ULID{}, all, 1)
	if err != nil {
		return fmt.Errorf("preflight: read contacts: %w", err)
	}
	if len(first) == 0 {
		return nil
	}
	sample := first
	upper := idAt(now.Add(time.Hour))
	if first[0].ID.Compare(upper) > 0 {
		upper = all
	}
	last, ok, err := pages.LastEligible(ctx, b, upper)
	if err != nil {
		return fmt.Errorf("preflight: read contacts: %w", err)
	}
	if ok {
		sample = append(sample, last)
	}
	if rs, err := ranges.Split(first[0].ID, upper); err == nil {
		for _, r := range rs {
			page, err := pages.EligiblePage(ctx, b, r.Start, r.End, PerRange)
			if err != nil {
				return fmt.Errorf("preflight: read contacts: %w", err)
			}
			sample = append(sample, page...)
		}
	}
	return CheckContacts(b, c, sample, now)
}

// CheckContacts renders c for each of contacts (an edit's new content for
// the contacts the old content held back) and returns a *Failure for the
// first that fails in a template, or whose message would leave out the
// unsubscribe link the broadcast relies on.
func CheckContacts(b store.Broadcast, c *message.Compiled, contacts []store.Contact, now time.Time) error {
	for _, ct := range contacts {
		_, err := c.Render(message.Params{
			BroadcastID: b.ID,
			Contact:     message.Contact{ID: ct.ID, Email: ct.Email, Name: ct.Name, Attributes: ct.Attributes},
			Date:        now,
			// A contact whose branch of the template leaves the link out
			// would fail at send: say so now.
			UnsubscribeURL:         message.SampleUnsubscribeURL,
			RequireUnsubscribeLink: !b.NoUnsubscribeLink,
		})
		if f := templateFailure(ct, err); f != nil {
			return f
		}
	}
	return nil
}

// templateFailure is err as a Failure when it is the template's.
func templateFailure(ct store.Contact, err error) *Failure {
	var ve *message.ValidationError
	if err == nil || !errors.As(err, &ve) {
		return nil
	}
	switch ve.Field {
	case "contact email", "contact name":
		return nil
	}
	return &Failure{Contact: ct.ID, Email: ct.Email, Field: ve.Field, Reason: ve.Reason}
}

func maxID() ulid.ULID {
	var u ulid.ULID
	for i := range u {
		u[i] = 0xff
	}
	return u
}

// idAt is the largest id made at t.
func idAt(t time.Time) ulid.ULID {
	u := maxID()
	if err := u.SetTime(ulid.Timestamp(t)); err != nil {
		return maxID()
	}
	return u
}
