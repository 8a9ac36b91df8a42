package preflight

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/rangecast/rangecast/internal/message"
	"github.com/rangecast/rangecast/internal/ranges"
	"github.com/rangecast/rangecast/internal/store"
)

// fakePages is an audience in id order, with a count of reads.
type fakePages struct {
	contacts []store.Contact
	reads    int
}

func (p *fakePages) EligiblePage(_ context.Context, _ store.Broadcast, from, until ulid.ULID, limit int) ([]store.Contact, error) {
	p.reads++
	var out []store.Contact
	for _, c := range p.contacts {
		if c.ID.Compare(from) >= 0 && c.ID.Compare(until) <= 0 && len(out) < limit {
			out = append(out, c)
		}
	}
	return out, nil
}

func (p *fakePages) LastEligible(_ context.Context, _ store.Broadcast, until ulid.ULID) (store.Contact, bool, error) {
	p.reads++
	for i := len(p.contacts) - 1; i >= 0; i-- {
		if p.contacts[i].ID.Compare(until) <= 0 {
			return p.contacts[i], true, nil
		}
	}
	return store.Contact{}, false, nil
}

func audience(n int, now time.Time) *fakePages {
	p := &fakePages{}
	for i := range n {
		at := now.Add(-time.Duration(n-i) * time.Hour)
		p.contacts = append(p.contacts, store.Contact{ID: ulid.MustNew(ulid.Timestamp(at), ulid.DefaultEntropy()),
			Email: fmt.Sprintf("c%04d@example.org", i), Attributes: map[string]any{"city": "Lyon"}})
	}
	slices.SortFunc(p.contacts, func(a, b store.Contact) int { return a.ID.Compare(b.ID) })
	return p
}

// The check finds a template mistake on the first contact, on the last,
// and in the middle of a range, reads a bounded number of pages, and
// passes an empty audience.
func TestCheck(t *testing.T) {
	t.Parallel()
	now := time.Now()
	c, err := message.Compile(message.Template{FromAddress: "news@example.com", Subject: "Hi", HTML: "<p>{{.Attributes.city}}</p>"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, i := range []int{0, 999, -1} {
		p := audience(1000, now)
		if i >= 0 {
			p.contacts[i].Attributes = nil
		}
		err := Check(ctx, p, store.Broadcast{}, c, now)
		var f *Failure
		switch {
		case i < 0 && err != nil:
			t.Errorf("every contact renders: %v", err)
		case i >= 0 && (!errors.As(err, &f) || f.Contact != p.contacts[i].ID || f.Field != "html"):
			t.Errorf("contact %d cannot render: Check = %v; want a Failure naming it and html", i, err)
		}
		if p.reads > 2+ranges.Count {
			t.Errorf("%d reads of the store; want the first, the last and one per range", p.reads)
		}
	}
	if err := Check(ctx, &fakePages{}, store.Broadcast{}, c, now); err != nil {
		t.Errorf("empty audience: %v", err)
	}
	// A contact's own bad address is not the template's fault.
	p := audience(10, now)
	p.contacts[0].Email = "not an address"
	if err := Check(ctx, p, store.Broadcast{}, c, now); err != nil {
		t.Errorf("a bad address failed the check: %v", err)
	}
}

// A sampled contact whose branch of the template leaves out the
// unsubscribe link the broadcast relies on fails the check (it would fail
// at send); with --no-unsubscribe-link the body's link is the sender's own.
func TestCheckFindsAContactWithoutTheLink(t *testing.T) {
	t.Parallel()
	now := time.Now()
	c, err := message.Compile(message.Template{FromAddress: "news@example.com", Subject: "Hi",
		HTML: `<p>Hi</p>{{if .Attributes.city}}<a href="{{.UnsubscribeURL}}">Unsubscribe</a>{{end}}`})
	if err != nil {
		t.Fatal(err)
	}
	p := audience(100, now)
	p.contacts[99].Attributes["city"] = ""
	var f *Failure
	if err := Check(context.Background(), p, store.Broadcast{}, c, now); !errors.As(err, &f) || f.Contact != p.contacts[99].ID || f.Field != "html" {
		t.Errorf("Check = %v; want a Failure naming the last contact and html", err)
	}
	if err := Check(context.Background(), p, store.Broadcast{NoUnsubscribeLink: true}, c, now); err != nil {
		t.Errorf("with --no-unsubscribe-link: %v", err)
	}
}
