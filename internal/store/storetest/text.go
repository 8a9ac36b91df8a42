package storetest

import (
	"errors"

	"github.com/rangecast/rangecast/internal/store"
)

// textCases pin that a NUL byte or invalid UTF-8 is refused by every write
// that takes text, with store.ErrInvalid and nothing written, the same on
// every store (Postgres cannot hold a NUL; SQLite could).
var textCases = []testCase{
	{"RefusedEverywhere", testTextRefused},
}

func testTextRefused(f *fixture) {
	for _, bad := range []string{"a\x00b", "a\xffb"} {
		wantInvalid := func(what string, err error) {
			f.t.Helper()
			if !errors.Is(err, store.ErrInvalid) {
				f.t.Errorf("%s with %q: error %v, want store.ErrInvalid", what, bad, err)
			}
		}
		c := f.contact("text@example.org")
		c.Name = bad
		_, err := f.s.ImportContacts(f.ctx, []store.Contact{c}, at(0))
		wantInvalid("ImportContacts name", err)

		c = f.contact("text@example.org")
		c.Attributes = map[string]any{"city": bad}
		_, err = f.s.ImportContacts(f.ctx, []store.Contact{c}, at(0))
		wantInvalid("ImportContacts small-batch attribute", err)

		batch := make([]store.Contact, importBatch)
		for i := range batch {
			batch[i] = f.contact("bulk" + string(rune('a'+i%26)) + f.ids.next().String() + "@example.org")
		}
		batch[importBatch/2].Attributes = map[string]any{"nested": map[string]any{"k": []any{bad}}}
		_, err = f.s.ImportContacts(f.ctx, batch, at(0))
		wantInvalid("ImportContacts attribute", err)

		_, err = f.s.CreateSegment(f.ctx, bad, at(0))
		wantInvalid("CreateSegment", err)

		b := store.Broadcast{ID: f.ids.next(), Name: "b", Content: store.Content{FromAddress: "a@example.org", Subject: "s", HTML: bad}, CreatedAt: at(0)}
		_, _, err = f.s.CreateBroadcast(f.ctx, b)
		wantInvalid("CreateBroadcast html", err)

		_, err = f.s.PutTemplate(f.ctx, store.Template{Name: "t", Subject: "s", HTML: bad}, at(0))
		wantInvalid("PutTemplate html", err)

		r := store.Receipt{ID: f.ids.next(), Kind: "transactional", Key: bad, Email: "a@example.org", PayloadHash: "h",
			Payload: []byte(`{}`), MessageID: "m@x", NextAttemptAt: at(0), CreatedAt: at(0)}
		_, _, err = f.s.CreateReceipt(f.ctx, r)
		wantInvalid("CreateReceipt key", err)
	}
	if n := len(f.eligible()); n != 0 {
		f.t.Errorf("%d contacts written, want none", n)
	}
}
