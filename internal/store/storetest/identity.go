package storetest

import (
	"fmt"

	"github.com/rangecast/rangecast/internal/store"
)

// identityCases pin one mailbox, one contact: the store keys an address by
// address.Key (NFC, case folded over all of Unicode) on every path, never
// by the database's own lower(), which under the C locale folds ASCII only.
var identityCases = []testCase{
	{"OneMailboxOneContact", testOneMailboxOneContact},
	{"OneMailboxOneReceipt", testOneMailboxOneReceipt},
}

// The spellings of each mailbox: composed and decomposed, and upper and
// lower case beyond ASCII.
var mailboxSpellings = [][]string{
	{"\u00e9mile@x.org", "e\u0301mile@x.org", "\u00c9MILE@X.org", "E\u0301mile@x.ORG"},
	{"Ü@umlaut.example", "ü@umlaut.example", "u\u0308@UMLAUT.example"},
}

func testOneMailboxOneContact(f *fixture) {
	var want []store.Contact
	for _, spellings := range mailboxSpellings {
		c := f.contact(spellings[0])
		want = append(want, c)
		f.upsert([]store.Contact{c}, at(0))
		for _, s := range spellings[1:] {
			if got := f.upsert([]store.Contact{f.contact(s)}, at(1))[0]; got != c.ID {
				f.t.Errorf("ImportContacts(%q) after %q: id %s, want %s (one mailbox)", s, spellings[0], got, c.ID)
			}
			d, err := f.s.ContactByEmail(f.ctx, s)
			if err != nil || d.ID != c.ID {
				f.t.Errorf("ContactByEmail(%q) = %s, %v; want %s", s, d.ID, err, c.ID)
			}
		}
		ids, err := f.s.ContactIDs(f.ctx, spellings)
		f.must(err, "ContactIDs")
		for i, id := range ids {
			if id != c.ID {
				f.t.Errorf("ContactIDs: %q -> %s, want %s", spellings[i], id, c.ID)
			}
		}
	}
	// The bulk path, too, in a batch large enough for its own statement.
	batch := make([]store.Contact, importBatch)
	for i := range batch {
		batch[i] = f.contact(fmt.Sprintf("bulk%05d@example.org", i))
	}
	batch[10] = f.contact(mailboxSpellings[0][3])
	batch[20] = f.contact(mailboxSpellings[1][2])
	ids, err := f.s.ImportContacts(f.ctx, batch, at(2))
	f.must(err, "ImportContacts")
	if ids[10] != want[0].ID || ids[20] != want[1].ID {
		f.t.Errorf("ImportContacts: ids %s, %s; want the existing %s, %s", ids[10], ids[20], want[0].ID, want[1].ID)
	}
	if n := len(f.eligible()); n != importBatch {
		f.t.Errorf("%d contacts, want %d (every spelling one contact)", n, importBatch)
	}

	f.must(f.unsubscribe(mailboxSpellings[1][1], at(3)), "Unsubscribe")
	if _, ok := f.eligible()[want[1].ID]; ok {
		f.t.Errorf("Unsubscribe(%q) left %q eligible", mailboxSpellings[1][1], mailboxSpellings[1][0])
	}
}

func testOneMailboxOneReceipt(f *fixture) {
	for _, spellings := range mailboxSpellings {
		first := f.receipt("k", spellings[0], at(0))
		for _, s := range spellings[1:] {
			r := first
			r.ID, r.Email = f.ids.next(), s
			got, created, err := f.s.CreateReceipt(f.ctx, r)
			f.must(err, "CreateReceipt(%q)", s)
			if created || got.ID != first.ID {
				f.t.Errorf("CreateReceipt(%q) after %q: created=%v id %s; want the first receipt", s, spellings[0], created, got.ID)
			}
			found, err := f.s.FindReceipt(f.ctx, "transactional", "k", s)
			if err != nil || found.ID != first.ID {
				f.t.Errorf("FindReceipt(%q) = %s, %v; want %s", s, found.ID, err, first.ID)
			}
		}
	}
}
