package web

import (
	"errors"
	"net/http"

	"github.com/rangecast/rangecast/internal/message"
	"github.com/rangecast/rangecast/internal/store"
)

// The pages are constants. Whatever a token that verifies names (a
// contact, one since erased, one unsubscribed already), the answer has the
// same status and the same bytes, so the endpoint tells nobody whom a link
// belongs to or whether they are still on the list. A token that does not
// verify (cut short by a mail client, altered, or signed with a key no
// longer listed) gets brokenPage instead: it names nobody, and saying
// "unsubscribed" to a person whose link changed nothing would have them
// keep getting mail they asked to stop (a tester). The form has no
// action: it posts back to the URL it was served from.
const (
	formPage = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="robots" content="noindex"><title>Unsubscribe</title></head>
<body style="font-family: system-ui, sans-serif; max-width: 32rem; margin: 4rem auto; padding: 0 1rem">
<h1>Unsubscribe</h1>
<p>Stop receiving these emails at this address?</p>
<form method="post"><input type="hidden" name="List-Unsubscribe" value="One-Click">
<button type="submit" style="font-size: 1rem; padding: .5rem 1rem">Unsubscribe</button></form>
</body></html>
`
	donePage = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="robots" content="noindex"><title>Unsubscribed</title></head>
<body style="font-family: system-ui, sans-serif; max-width: 32rem; margin: 4rem auto; padding: 0 1rem">
<h1>Unsubscribed</h1>
<p>If this link was ours, the address it was sent to will get no more of these emails.</p>
</body></html>
`
	brokenPage = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="robots" content="noindex"><title>Link not recognised</title></head>
<body style="font-family: system-ui, sans-serif; max-width: 32rem; margin: 4rem auto; padding: 0 1rem">
<h1>This unsubscribe link is not complete</h1>
<p>Nothing was changed: the link may have been cut short or altered on its way here, or it is from an old email.
Open the unsubscribe link of a recent email from the sender, or reply to it asking to be removed.</p>
</body></html>
`
	// oneClickField and oneClickValue are the body RFC 8058 prescribes.
	oneClickField = "List-Unsubscribe"
	oneClickValue = "One-Click"
	// maxUnsubscribeBody bounds a one-click POST body: it carries one field.
	maxUnsubscribeBody = 4 << 10
)

func page(w http.ResponseWriter, status int, body string) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Content-Type-Options", "nosniff")
	// The form must not be framed (a click on someone else's page must not
	// unsubscribe), and posts only back here.
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'")
	w.WriteHeader(status)
	w.Write([]byte(body)) //nolint:errcheck
}

// unsubscribeForm answers a GET: mail scanners follow links, so a GET only
// shows a form; the person's click POSTs it.
func (h *Handler) unsubscribeForm(w http.ResponseWriter, r *http.Request) {
	if _, _, ok := message.VerifyUnsubscribeToken(h.cfg.UnsubscribeKeys, r.PathValue("token")); !ok {
		unsubscribeRequests.WithLabelValues("invalid").Inc()
		page(w, http.StatusBadRequest, brokenPage)
		return
	}
	unsubscribeRequests.WithLabelValues("form").Inc()
	page(w, http.StatusOK, formPage)
}

// unsubscribe answers the one-click POST (RFC 8058: the body is
// List-Unsubscribe=One-Click, form-urlencoded or multipart).
func (h *Handler) unsubscribe(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxUnsubscribeBody)
	if r.PostFormValue(oneClickField) != oneClickValue {
		unsubscribeRequests.WithLabelValues("bad_request").Inc()
		http.Error(w, "an unsubscribe request carries List-Unsubscribe=One-Click", http.StatusBadRequest)
		return
	}
	broadcast, contact, ok := message.VerifyUnsubscribeToken(h.cfg.UnsubscribeKeys, r.PathValue("token"))
	if !ok {
		unsubscribeRequests.WithLabelValues("invalid").Inc()
		page(w, http.StatusBadRequest, brokenPage)
		return
	}
	err := h.cfg.Store.UnsubscribeContact(r.Context(), contact, broadcast, h.cfg.Clock.Now())
	switch {
	case errors.Is(err, store.ErrNotFound):
		unsubscribeRequests.WithLabelValues("unknown_contact").Inc()
	case err != nil:
		// Saying "unsubscribed" when it did not happen would be worse than
		// asking the person to try again.
		unsubscribeRequests.WithLabelValues("error").Inc()
		h.cfg.Log.Error("unsubscribe not recorded", "broadcast", broadcast, "contact", contact, "err", err)
		http.Error(w, "unsubscribe could not be recorded just now; please try again in a minute", http.StatusServiceUnavailable)
		return
	default:
		unsubscribeRequests.WithLabelValues("unsubscribed").Inc()
		h.cfg.Log.Info("contact unsubscribed by one-click link", "broadcast", broadcast, "contact", contact)
	}
	page(w, http.StatusOK, donePage)
}
