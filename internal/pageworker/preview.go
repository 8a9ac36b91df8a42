package pageworker

import (
	"time"

	"github.com/rangecast/rangecast/internal/message"
	"github.com/rangecast/rangecast/internal/store"
)

// Render builds the message a page worker hands the transport for contact
// c of broadcast: the template rendered with the contact's one-click
// unsubscribe link, then DKIM-signed with the From domain's keys (nil
// unsub or dkim: none, as for a worker without them). It is the one render
// path: the worker's send and the API's preview and test copies call it,
// so a preview is byte for byte what the contact receives, but for what
// depends on when it is made (the Date field, the DKIM signature's time).
//
// A broadcast that relies on its body's unsubscribe link (not created with
// --no-unsubscribe-link) is not rendered for a contact whose branch of the
// template leaves the link out: a ValidationError for that contact.
func Render(compiled *message.Compiled, b store.Broadcast, c store.Contact, now time.Time, unsub *message.Unsubscribe, dkim *message.DKIM) (message.Rendered, error) {
	m, err := compiled.Render(message.Params{
		BroadcastID:            b.ID,
		Contact:                message.Contact{ID: c.ID, Email: c.Email, Name: c.Name, Attributes: c.Attributes},
		Date:                   now,
		UnsubscribeURL:         unsub.URL(b.ID, c.ID),
		RequireUnsubscribeLink: !b.NoUnsubscribeLink,
	})
	if err != nil {
		return m, err
	}
	m, _, err = dkim.Sign(m)
	return m, err
}
