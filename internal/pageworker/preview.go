package pageworker

import (
	"time"

	"github.com/oklog/ulid/v2"

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
func Render(compiled *message.Compiled, broadcast ulid.ULID, c store.Contact, now time.Time, unsub *message.Unsubscribe, dkim *message.DKIM) (message.Rendered, error) {
	m, err := compiled.Render(message.Params{
		BroadcastID:    broadcast,
		Contact:        message.Contact{ID: c.ID, Email: c.Email, Name: c.Name, Attributes: c.Attributes},
		Date:           now,
		UnsubscribeURL: unsub.URL(broadcast, c.ID),
	})
	if err != nil {
		return m, err
	}
	m, _, err = dkim.Sign(m)
	return m, err
}
