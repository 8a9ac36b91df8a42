// Package message turns a broadcast's template and one contact into the exact
// bytes handed to a transport. It owns everything that must be decided once per
// broadcast (is this template valid?) and everything that must be identical
// every time the same (broadcast, contact) pair is rendered (Message-ID, MIME
// boundary), so a retried or reconciled send is recognisably the same message.
//
// Templates see one value with the fields .ID, .Email, .Name, .Attributes and
// .UnsubscribeURL (the contact's one-click link, the same URL as the
// List-Unsubscribe header).
// A field chain such as {{.Attributes.plan}} declares a required attribute:
// rendering fails for a contact that lacks it, rather than sending "<no value>"
// to a person. Optional attributes are read with index, which yields nothing
// when the key is absent: {{with index .Attributes "plan"}}…{{end}}.
package message

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	htmltemplate "html/template"
	"io"
	"net/mail"
	"net/url"
	"strings"
	"sync"
	texttemplate "text/template"
	"time"
	"unicode/utf8"

	"github.com/oklog/ulid/v2"

	"github.com/rangecast/rangecast/internal/address"
)

// Template is a broadcast's content, validated at create time.
// MaxSubject is the most characters a subject template may hold.
const MaxSubject = 2000

// Subject and Text are text/template sources, HTML is an html/template source.
type Template struct {
	FromName    string
	FromAddress string
	Subject     string
	HTML        string
	Text        string
}

// Contact is the recipient-side data a template can refer to.
type Contact struct {
	ID         ulid.ULID
	Email      string
	Name       string
	Attributes map[string]any
}

// Params are the per-message inputs to Render. Date is passed in rather than
// read from the clock so rendering is a pure function of its inputs.
type Params struct {
	BroadcastID ulid.ULID
	Contact     Contact
	Date        time.Time
	// UnsubscribeURL is the one-click unsubscribe link for this contact
	// (Unsubscribe.URL). Every broadcast message should carry one; empty
	// writes no List-Unsubscribe fields at all rather than a link that
	// could not work.
	UnsubscribeURL string
	// RequireUnsubscribeLink says the broadcast relies on the body's link
	// (it was not created with --no-unsubscribe-link): a body rendered for
	// this contact without UnsubscribeURL is this contact's ValidationError.
	// Compile judges the link by a sample contact; a branch the sample does
	// not take ({{if .Name}}…link…{{else}}…{{end}}) could leave it out for
	// others, and the message must not go without it.
	RequireUnsubscribeLink bool
}

// Rendered is one message ready for a transport.
type Rendered struct {
	MessageID string // without angle brackets
	From      string // envelope sender (MAIL FROM)
	To        string // envelope recipient (RCPT TO)
	Bytes     []byte // RFC 5322 message, CRLF line endings
}

// Compiled is a validated Template. It is safe for concurrent use: page
// workers render many contacts from one Compiled in parallel.
type Compiled struct {
	tmpl    Template
	from    string // bare addr-spec
	domain  string // lowercased domain of from
	subject *texttemplate.Template
	html    *htmltemplate.Template
	text    *texttemplate.Template // nil when Template.Text is empty

	fromHeader string // From field value; the same for every contact
	budget     Budget

	// The parts as flat templates (flat.go), each nil where its template
	// is more than text and fields.
	flatSubject, flatHTML, flatText *flatTemplate
	// The plain part derived from flatHTML where there is no Text
	// template and it can be worked out once (derivedtext.go), or nil.
	derivedText *derivedText

	// unsubLink is why the sample render shows no unsubscribe link, or nil
	// when it shows one (CheckUnsubscribeLink).
	unsubLink error
	// sampleLink: the first sample's render carries the link, so the
	// content means to carry one; Render holds each contact's message to it
	// (Params.RequireUnsubscribeLink). Content from before the link was
	// required at create shows none and is left as it was.
	sampleLink bool
}

// templateData is what templates see. Field names are part of the template
// language users write, so they must not change.
type templateData struct {
	ID             ulid.ULID
	Email          string
	Name           string
	Attributes     map[string]any
	UnsubscribeURL string
}

// Template names double as the Field of a ValidationError.
const (
	fieldFromName    = "from_name"
	fieldFromAddress = "from_address"
	fieldSubject     = "subject"
	fieldHTML        = "html"
	fieldText        = "text"
)

// Compile parses and validates t. Everything that can be wrong with a template
// independently of the contact is reported here, at create time, rather than
// halfway through a broadcast. Errors are *ValidationError.
func Compile(t Template) (*Compiled, error) { return CompileBudget(t, DefaultBudget) }

// CompileBudget is Compile with the budget every execution of the
// template gets, at compile and in Render.
func CompileBudget(t Template, budget Budget) (*Compiled, error) {
	for _, f := range [...]struct{ field, src string }{
		{fieldFromName, t.FromName}, {fieldFromAddress, t.FromAddress}, {fieldSubject, t.Subject}, {fieldHTML, t.HTML}, {fieldText, t.Text},
	} {
		if err := checkTemplateText(f.field, f.src); err != nil {
			return nil, err
		}
	}
	if err := ValidateHeaderValue(fieldFromName, t.FromName); err != nil {
		return nil, err
	}
	from, domain, err := parseFromAddress(t.FromAddress)
	if err != nil {
		return nil, err
	}
	if strings.TrimSpace(t.Subject) == "" {
		return nil, &ValidationError{Field: fieldSubject, Reason: "is empty; every broadcast needs a subject line"}
	}
	if n := utf8.RuneCountInString(t.Subject); n > MaxSubject {
		// A 500,000-character subject went out as a 620 KB header, which
		// relays refuse far below that (tester).
		return nil, &ValidationError{Field: fieldSubject, Reason: fmt.Sprintf("is %d characters long; at most %d (mail clients show the first 60 to 80)", n, MaxSubject)}
	}
	// A literal newline in the subject source would end up in the header even
	// before any contact data is substituted.
	if err := ValidateHeaderValue(fieldSubject, t.Subject); err != nil {
		return nil, err
	}
	if strings.TrimSpace(t.HTML) == "" {
		return nil, &ValidationError{Field: fieldHTML, Reason: "is empty; the HTML body is required (the plain-text part can be derived from it)"}
	}

	c := &Compiled{tmpl: t, from: from, domain: domain, budget: budget}
	c.fromHeader = (&mail.Address{Name: t.FromName, Address: from}).String()
	if err := checkFolds(fieldFromName, "From", c.fromHeader); err != nil {
		return nil, err
	}

	if c.subject, err = texttemplate.New(fieldSubject).Funcs(checkedText).Option("missingkey=error").Parse(t.Subject); err != nil {
		return nil, templateError(fieldSubject, err, nil)
	}
	conditionals, err := markConditionals(t.HTML)
	if err != nil {
		return nil, err
	}
	if c.html, err = htmltemplate.New(fieldHTML).Funcs(checkedHTML).Funcs(conditionalFuncs).Option("missingkey=error").Parse(conditionals.src); err != nil {
		return nil, templateError(fieldHTML, err, nil)
	}
	if t.Text != "" {
		if c.text, err = texttemplate.New(fieldText).Funcs(checkedText).Option("missingkey=error").Parse(t.Text); err != nil {
			return nil, templateError(fieldText, err, nil)
		}
	}

	if err := c.limitLoops(); err != nil {
		return nil, err
	}
	printNoValueAsEmpty(c.subject, true)
	if c.text != nil {
		printNoValueAsEmpty(c.text, true)
	}

	// Static check first: it sees every branch, while the sample render below
	// only executes the branches the sample takes.
	attrs := map[string]any{}
	for _, tr := range c.trees() {
		if err := checkFields(tr.field, tr.name, tr.tree, attrs); err != nil {
			return nil, err
		}
	}

	if err := conditionals.keep(c.html); err != nil { // Outlook's conditional comments: conditional.go
		return nil, err
	}

	// Render once against a sample contact, so execution-time mistakes
	// (wrong argument types, fields on strings) surface now. Required
	// attributes get placeholder values; see the package comment.
	sample := templateData{Email: "sample@example.com", Name: "Sample", Attributes: attrs, UnsubscribeURL: SampleUnsubscribeURL}
	var subject, html, text bytes.Buffer
	if _, err := c.execSubject(sample, &subject); err != nil {
		return nil, err
	}
	if err := c.execBodies(sample, &html, &text, nil); err != nil {
		return nil, err
	}
	c.unsubLink = checkUnsubscribeLink(html.String(), text.String(), c.text != nil)
	// Whether the content carries the link at all, visible or not: a
	// broadcast accepted before a stricter visibility rule still has each
	// contact's message held to it (review).
	c.sampleLink = strings.Contains(html.String(), SampleUnsubscribeURL) && (c.text == nil || strings.Contains(text.String(), SampleUnsubscribeURL))
	if c.unsubLink == nil {
		// A second sample, with no name and another address: a link in a
		// branch only the first takes ({{if .Name}}…{{end}}; a list
		// imported without names) reached some contacts and not others.
		// Render refuses such a message per contact; this says so at create.
		other := templateData{Email: "other@example.net", Attributes: attrs, UnsubscribeURL: SampleUnsubscribeURL}
		var html, text bytes.Buffer
		if c.execBodies(other, &html, &text, nil) == nil && checkUnsubscribeLink(html.String(), text.String(), c.text != nil) != nil {
			c.unsubLink = &ValidationError{Field: fieldHTML, Reason: "shows its unsubscribe link to some contacts only (a sample contact with a name sees it, one with no name and another address does not): " +
				"a branch of the template ({{if}}, {{with}}, {{range}}) leaves out {{.UnsubscribeURL}}; put the link outside such branches" + OrNoUnsubscribeLink}
		}
	}
	c.flatten()
	return c, nil
}

// flatten finds the parts that are flat templates. It runs after the sample
// render, which made html/template escape the HTML tree: the escapers are
// part of the tree a flat template is made from.
func (c *Compiled) flatten() {
	if len(c.subject.Templates()) == 1 {
		c.flatSubject = flattenTree(c.subject.Tree, false)
	}
	if len(c.html.Templates()) == 1 {
		c.flatHTML = flattenTree(c.html.Tree, true)
	}
	if c.text == nil {
		c.derivedText = deriveText(c.flatHTML)
	}
	if c.text != nil && len(c.text.Templates()) == 1 {
		c.flatText = flattenTree(c.text.Tree, false)
	}
}

// execPart renders one part into buf: as a flat template where it is one
// and this contact's values allow, otherwise with the template package,
// metered by the budget.
// It reports whether the flat template wrote it; written is as for
// flatTemplate.execute.
func (c *Compiled) execPart(field string, flat *flatTemplate, buf *bytes.Buffer, d *templateData, exec func(io.Writer) error, written *[]string) (bool, error) {
	if flat != nil {
		start := buf.Len()
		ok, err := flat.execute(buf, d, &c.budget, field, written)
		if ok || err != nil {
			return ok, err
		}
		buf.Truncate(start)
	}
	return false, c.budget.meter(field, buf, exec)
}

// SampleUnsubscribeURL stands in for .UnsubscribeURL in the sample render
// (and in preflight's renders for real contacts, which have no link yet).
// Its characters need no escaping in any HTML or URL context, so wherever
// a template puts the link as a link or as text, it appears verbatim.
const SampleUnsubscribeURL = "https://unsubscribe.invalid/u/rangecast-sample-link"

// OrNoUnsubscribeLink ends the error of content without a visible
// unsubscribe link: the way out at create, which an edit of a started
// broadcast (whose setting stays) leaves off.
const OrNoUnsubscribeLink = "; or, if the body already links to a preference page of your own, create the broadcast with --no-unsubscribe-link"

// checkUnsubscribeLink says whether a reader of either part can see the
// link: in the HTML as a link target or text outside comments, scripts,
// styles, the head (what the derived plain text keeps) and elements an
// inline style or the hidden attribute hides (withoutHidden), and in the
// plain-text part written for the broadcast, if there is one.
func checkUnsubscribeLink(html, text string, ownText bool) error {
	const how = `add <a href="{{.UnsubscribeURL}}">Unsubscribe</a> to the HTML body`
	const orFlag = OrNoUnsubscribeLink
	visible := withoutHidden(html)
	if href, ok := changedLink(visible); ok {
		return changedLinkError(href)
	}
	if !intactLinkText(htmlToText(visible)) {
		reason := "has no visible unsubscribe link, which Gmail, Yahoo and Microsoft require of bulk mail; " + how
		switch all := htmlToText(html); {
		case !intactLinkText(all) && strings.Contains(all, SampleUnsubscribeURL):
			reason = "shows its unsubscribe link run on into more text ({{.UnsubscribeURL}}XX), which a reader's client opens as a link that does not work; put white space or punctuation after {{.UnsubscribeURL}}"
		case intactLinkText(all):
			reason = "hides its unsubscribe link (inside an element with display:none, opacity:0, visibility:hidden, a font too small to read, text the color of its background, a closed <details>, no height or the hidden attribute, or as a link with no text to click), and Gmail, Yahoo and Microsoft require a visible one of bulk mail; move the link out of that element"
		}
		if ownText {
			reason += " and {{.UnsubscribeURL}} to the text part"
		}
		return &ValidationError{Field: fieldHTML, Reason: reason + orFlag}
	}
	if outlook := outlookView(html); outlook != html {
		// Outlook for Windows reads its conditional comments (conditional.go).
		outlook = withoutHidden(outlook)
		if href, ok := changedLink(outlook); ok {
			return changedLinkError(href)
		}
		if !intactLinkText(htmlToText(outlook)) {
			return &ValidationError{Field: fieldHTML, Reason: "shows its unsubscribe link to every client but Outlook for Windows, which reads the conditional comments (<!--[if …]>) and skips, or is shown hidden, the part that holds it (<!--[if !mso]><!-->…<!--<![endif]-->); " +
				"put the link outside such blocks, or in an <!--[if mso]> block for Outlook too" + orFlag}
		}
	}
	if ownText && !intactLinkText(text) {
		if strings.Contains(text, SampleUnsubscribeURL) {
			return &ValidationError{Field: fieldText, Reason: "shows its unsubscribe link run on into more text ({{.UnsubscribeURL}}XX), which a reader's client opens as a link that does not work; put white space or punctuation after {{.UnsubscribeURL}}" + orFlag}
		}
		return &ValidationError{Field: fieldText, Reason: "has no unsubscribe link, so a plain-text reader cannot unsubscribe; add {{.UnsubscribeURL}} to the text part" + orFlag}
	}
	return nil
}

// changedLinkError refuses a link to href, the unsubscribe link changed
// (changedLink), in every client's view or in Outlook's.
func changedLinkError(href string) error {
	return &ValidationError{Field: fieldHTML, Reason: fmt.Sprintf("links to %q, the unsubscribe link with something added before or after it, which does not unsubscribe anyone; use {{.UnsubscribeURL}} as the whole link target (a query string or #fragment after it is fine)", href)}
}

// changedLink returns the first link target in the HTML that starts with
// the sample unsubscribe URL and adds to it (href="{{.UnsubscribeURL}}XX",
// a path after it): a link shown to the reader that does not work (tester).
// A query string or a #fragment after it is kept by the link's handler.
func changedLink(src string) (string, bool) {
	for tag, after := range tags(src) {
		if name := strings.ToLower(tagName(tag)); name != "a" && name != "area" { // an end tag's name is ""
			continue
		}
		href := strings.TrimSpace(attrHref(tag))
		i := strings.Index(href, SampleUnsubscribeURL)
		if i < 0 {
			// The unsubscribe URL shown as a link's text while the link
			// goes elsewhere (verifier).
			inner := src[after:skipNested(src, after, "a")]
			if strings.Contains(htmlToText(inner), SampleUnsubscribeURL) {
				return href, true
			}
			continue
		}
		// Anything before it (x…, /…, https://elsewhere/…) makes another
		// link, as anything after it but a query or fragment does (tester).
		if rest := href[i+len(SampleUnsubscribeURL):]; i > 0 || rest != "" && rest[0] != '?' && rest[0] != '#' {
			return href, true
		}
	}
	return "", false
}

// intactLinkText reports whether the sample unsubscribe URL appears in
// text as a whole link: not run on into more of a URL ("…linkXX", "…link/x"),
// which a reader's client would open as a link that does not work. A
// sentence's full stop or comma after it is not part of it.
func intactLinkText(text string) bool {
	for rest := text; ; {
		i := strings.Index(rest, SampleUnsubscribeURL)
		if i < 0 {
			return false
		}
		// Nor run into from before ("x…", "/…"): a client would open
		// another link (tester).
		before := byte(' ')
		if i > 0 {
			before = rest[i-1]
		}
		rest = rest[i+len(SampleUnsubscribeURL):]
		if urlByte(before) && strings.IndexByte("*!,;:", before) < 0 { // "Unsubscribe:" is not a URL's
			continue
		}
		if rest == "" {
			return true
		}
		c := rest[0]
		switch {
		case c == '.' || c == ',' || c == ';' || c == ':' || c == '!':
			if len(rest) == 1 || !urlByte(rest[1]) {
				return true
			}
		case !urlByte(c) || c == '?' || c == '#':
			return true
		}
	}
}

// urlByte reports whether c would carry a URL on in running text.
func urlByte(c byte) bool {
	// Not a byte of a non-ASCII character: the link's base and token are
	// ASCII, and Japanese or Chinese text runs on right after a URL
	// (配信停止は…よりお手続きください, review).
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		strings.IndexByte("-._~/%&=+$@*!,;:?#", c) >= 0
}

// checkLinkRendered is the per-message check of RequireUnsubscribeLink: the
// link's token (its last path segment: base64url, which no HTML, URL or
// quoted-printable escaping changes, whatever the base URL holds) is in the
// HTML, and in the plain text written for the broadcast if there is one.
// Whether the link is visible is judged once, at Compile and at preflight
// (a full HTML scan per message would cost more than the render).
func (c *Compiled) checkLinkRendered(unsub string, html, text []byte) error {
	token := []byte(unsub[strings.LastIndexByte(unsub, '/')+1:])
	const why = "; a branch of the template ({{if}}, {{with}}, {{range}}) that this contact takes leaves out {{.UnsubscribeURL}}; put the link outside such branches"
	if !bytes.Contains(html, token) {
		return &ValidationError{Field: fieldHTML, Reason: "has no unsubscribe link for this contact" + why}
	}
	if c.text != nil && !bytes.Contains(text, token) {
		return &ValidationError{Field: fieldText, Reason: "has no unsubscribe link for this contact" + why}
	}
	return nil
}

// CheckUnsubscribeLink returns a *ValidationError saying how to add one
// when a message rendered from the template would show its reader no
// unsubscribe link. It judges by the sample render Compile made, so a link
// inside a branch the sample does not take counts as missing only if
// every branch the sample takes lacks it.
func (c *Compiled) CheckUnsubscribeLink() error { return c.unsubLink }

// SendingDomain is the lowercased domain of the from address. It names the
// Message-ID domain.
func (c *Compiled) SendingDomain() string { return c.domain }

// MessageID returns the deterministic id "<broadcast>.<contact>@<sending-domain>"
// without angle brackets. The reconciler relies on it being derivable from the
// ledger row alone, so it must not depend on anything else.
func MessageID(broadcast, contact ulid.ULID, sendingDomain string) string {
	return broadcast.String() + "." + contact.String() + "@" + strings.ToLower(sendingDomain)
}

// FeedbackSenderID is the SenderId field of every Feedback-ID rangecast
// writes: the constant Gmail's Feedback Loop groups a sender's mail by.
const FeedbackSenderID = "rangecast"

// BroadcastFeedbackID is the Feedback-ID field of a broadcast's messages,
// "broadcast:domain:broadcast:rangecast" (Gmail's
// CampaignId:CustomerId:MailType:SenderId): Gmail's Postmaster Tools then
// reports complaint rates per broadcast and per sending domain.
func BroadcastFeedbackID(broadcast ulid.ULID, sendingDomain string) string {
	return broadcast.String() + ":" + strings.ToLower(sendingDomain) + ":broadcast:" + FeedbackSenderID
}

// TransactionalFeedbackID is the Feedback-ID of transactional mail from
// sendingDomain, unless the caller set its own.
func TransactionalFeedbackID(sendingDomain string) string {
	return "transactional:" + strings.ToLower(sendingDomain) + ":transactional:" + FeedbackSenderID
}

// Render builds the full message for one contact.
func (c *Compiled) Render(p Params) (Rendered, error) {
	if p.Date.IsZero() {
		return Rendered{}, errors.New("message: render: Params.Date is zero; pass the send time explicitly")
	}
	to, err := contactAddress(p.Contact)
	if err != nil {
		return Rendered{}, fmt.Errorf("message: render for contact %s: %w", p.Contact.ID, err)
	}
	unsub := p.UnsubscribeURL
	if unsub != "" {
		if err := validateUnsubscribeURL(unsub); err != nil {
			return Rendered{}, fmt.Errorf("message: render for contact %s: %w", p.Contact.ID, err)
		}
	}

	data := templateData{ID: p.Contact.ID, Email: p.Contact.Email, Name: p.Contact.Name, Attributes: p.Contact.Attributes, UnsubscribeURL: unsub}
	rb := getRenderBuf()
	defer putRenderBuf(rb)
	subject, err := c.execSubject(data, &rb.subject)
	if err != nil {
		return Rendered{}, fmt.Errorf("message: render for contact %s: %w", p.Contact.ID, err)
	}
	if err := c.execBodies(data, &rb.html, &rb.text, &rb.written); err != nil {
		return Rendered{}, fmt.Errorf("message: render for contact %s: %w", p.Contact.ID, err)
	}
	if p.RequireUnsubscribeLink && c.sampleLink && unsub != "" {
		if err := c.checkLinkRendered(unsub, rb.html.Bytes(), rb.text.Bytes()); err != nil {
			return Rendered{}, fmt.Errorf("message: render for contact %s: %w", p.Contact.ID, err)
		}
	}

	id := MessageID(p.BroadcastID, p.Contact.ID, c.domain)
	toHdr := (&mail.Address{Name: p.Contact.Name, Address: headerAddress(to)}).String()

	hw := headerWriter{b: rb.msg[:0]}
	hw.write("From", c.fromHeader)
	hw.write("To", toHdr)
	hw.write("Subject", encodeSubject(subject))
	hw.write("Date", p.Date.Format(time.RFC1123Z))
	hw.write("Message-ID", "<"+id+">")
	hw.write("MIME-Version", "1.0")
	if unsub != "" {
		hw.write("List-Unsubscribe", "<"+unsub+">")
		hw.write("List-Unsubscribe-Post", "List-Unsubscribe=One-Click")
	}
	hw.write("Feedback-ID", BroadcastFeedbackID(p.BroadcastID, c.domain))

	// The boundary is derived from the message identity so re-rendering gives
	// identical bytes. It starts with "=_", which quoted-printable output can
	// never contain ('=' is always escaped as =3D, soft breaks are "=\r\n"),
	// so no body can collide with it. It is ULID characters and "=_." only,
	// so the quoted parameter below is what mime.FormatMediaType would write.
	boundary := "=_rc." + p.BroadcastID.String() + "." + p.Contact.ID.String()
	hw.write("Content-Type", `multipart/alternative; boundary="`+boundary+`"`)
	rb.msg = hw.b
	if hw.err != nil {
		return Rendered{}, fmt.Errorf("message: render for contact %s: %w", p.Contact.ID, hw.err)
	}
	rb.msg = append(rb.msg, "\r\n"...)
	rb.msg = appendAlternative(rb.msg, boundary, rb.text.Bytes(), rb.html.Bytes())

	// The buffer goes back to the pool; the caller keeps its own copy.
	return Rendered{MessageID: id, From: c.from, To: to, Bytes: bytes.Clone(rb.msg)}, nil
}

// renderBuf is one Render's scratch space. Pooled because a page worker
// renders every contact of a broadcast, and growing these buffers anew for
// each message was a large share of its allocations.
type renderBuf struct {
	subject, html, text bytes.Buffer // template output
	msg                 []byte
	written             []string // the HTML's parts as written (derivedText)
}

var renderBufs = sync.Pool{New: func() any { return new(renderBuf) }}

// maxPooledRenderBuf keeps one unusually large broadcast from pinning its
// buffers in the pool for the rest of the process.
const maxPooledRenderBuf = 1 << 20

func getRenderBuf() *renderBuf {
	rb := renderBufs.Get().(*renderBuf)
	rb.subject.Reset()
	rb.html.Reset()
	rb.text.Reset()
	rb.msg = rb.msg[:0]
	rb.written = rb.written[:0]
	return rb
}

func putRenderBuf(rb *renderBuf) {
	for _, n := range []int{rb.subject.Cap(), rb.html.Cap(), rb.text.Cap(), cap(rb.msg)} {
		if n > maxPooledRenderBuf {
			return
		}
	}
	renderBufs.Put(rb)
}

// execSubject renders the subject, using buf as scratch space.
func (c *Compiled) execSubject(d templateData, buf *bytes.Buffer) (string, error) {
	if _, err := c.execPart(fieldSubject, c.flatSubject, buf, &d, func(w io.Writer) error { return c.subject.Execute(w, d) }, nil); err != nil {
		return "", templateError(fieldSubject, err, d.Attributes)
	}
	s := buf.String()
	// Contact data can smuggle a newline into the subject; that would let a
	// contact record inject headers, so it fails this contact.
	if err := ValidateHeaderValue(fieldSubject, s); err != nil {
		return "", &ValidationError{Field: fieldSubject, Reason: "rendered subject contains a line break or NUL (check the contact data used in it)"}
	}
	if strings.TrimSpace(s) == "" {
		return "", &ValidationError{Field: fieldSubject, Reason: "renders to an empty subject line"}
	}
	return s, nil
}

// execBodies renders the HTML and plain-text bodies into html and text.
// Without a Text template the plain part is derived from the rendered HTML,
// so it carries the same personalisation.
// written is scratch space for the HTML's values (derivedText).
func (c *Compiled) execBodies(d templateData, html, text *bytes.Buffer, written *[]string) error {
	var values *[]string
	if c.text == nil && c.derivedText != nil && written != nil {
		*written = (*written)[:0]
		values = written
	}
	flat, err := c.execPart(fieldHTML, c.flatHTML, html, &d, func(w io.Writer) error { return c.html.Execute(w, d) }, values)
	if err != nil {
		return templateError(fieldHTML, err, d.Attributes)
	}
	if c.text == nil {
		if flat && values != nil {
			if out, ok := c.derivedText.appendTo(text.AvailableBuffer(), *values); ok {
				text.Write(out)
				return nil
			}
		}
		text.Write(appendHTMLText(text.AvailableBuffer(), html.String(), nil))
		return nil
	}
	if _, err := c.execPart(fieldText, c.flatText, text, &d, func(w io.Writer) error { return c.text.Execute(w, d) }, nil); err != nil {
		return templateError(fieldText, err, d.Attributes)
	}
	return nil
}

// parseFromAddress accepts exactly one bare addr-spec with a host-name domain.
func parseFromAddress(s string) (addr, domain string, err error) {
	if err := ValidateHeaderValue(fieldFromAddress, s); err != nil {
		return "", "", err
	}
	if strings.TrimSpace(s) == "" {
		return "", "", &ValidationError{Field: fieldFromAddress, Reason: "is empty; give the sending address, e.g. news@example.com"}
	}
	if at := strings.LastIndexByte(s, '@'); at >= 0 && strings.TrimSpace(s[at+1:]) == "" {
		// mail.ParseAddress says "missing '@'" of "news@" (tester).
		return "", "", &ValidationError{Field: fieldFromAddress, Reason: fmt.Sprintf("%q has no domain after the @; give the whole sending address, e.g. news@example.com", s)}
	}
	a, perr := mail.ParseAddress(s)
	if perr != nil {
		return "", "", &ValidationError{Field: fieldFromAddress, Reason: fmt.Sprintf("%q is not a valid email address (%v)", s, perr)}
	}
	if a.Name != "" || a.Address != strings.TrimSpace(s) {
		return "", "", &ValidationError{Field: fieldFromAddress, Reason: fmt.Sprintf("%q must be a bare address like news@example.com; put the display name in from_name", s)}
	}
	at := strings.LastIndexByte(a.Address, '@')
	domain = strings.ToLower(a.Address[at+1:])
	if ascii, _, err := address.ASCIIDomain(a.Address); err == nil && ascii != a.Address && !isHostname(domain) {
		return "", "", &ValidationError{Field: fieldFromAddress, Reason: fmt.Sprintf("domain %q is internationalized; give it in its ASCII form, %s (what DNS and DKIM know it by)", domain, ascii[strings.LastIndexByte(ascii, '@')+1:])}
	}
	if !isHostname(domain) {
		return "", "", &ValidationError{Field: fieldFromAddress, Reason: fmt.Sprintf("domain %q is not a host name; the sending domain names Message-IDs and unsubscribe links", domain)}
	}
	return a.Address, domain, nil
}

func isHostname(d string) bool {
	if d == "" || len(d) > 253 || d[0] == '.' || d[len(d)-1] == '.' || d[0] == '-' {
		return false
	}
	for _, label := range strings.Split(d, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, r := range label {
			if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') {
				return false
			}
		}
	}
	return true
}

// contactAddress checks that the contact's email is a usable recipient: it
// becomes both the To header and the RCPT TO argument.
func contactAddress(c Contact) (string, error) {
	if err := ValidateHeaderValue("contact name", c.Name); err != nil {
		return "", err
	}
	if err := ValidateHeaderValue("contact email", c.Email); err != nil {
		return "", err
	}
	if c.Email == "" {
		return "", &ValidationError{Field: "contact email", Reason: "is empty"}
	}
	addr := c.Email
	if !plainAddrSpec(addr) {
		a, err := mail.ParseAddress(c.Email)
		if err != nil || a.Name != "" || a.Address != strings.TrimSpace(c.Email) {
			return "", &ValidationError{Field: "contact email", Reason: fmt.Sprintf("%q is not a bare email address", c.Email)}
		}
		addr = a.Address
	}
	// An address stored before import refused the undeliverable (an IP
	// literal, percent routing, an invisible character) fails here, for
	// that contact alone, rather than reach the relay.
	var ae *address.Error
	if _, err := address.Canonical(addr); errors.As(err, &ae) {
		return "", &ValidationError{Field: "contact email", Reason: ae.Detail}
	}
	return addr, nil
}

// plainAddrSpec says s is local@domain with both sides dot-atoms of ASCII
// (RFC 5322 atext; the domain's labels letters, digits and hyphens): the
// shape of nearly every address on a list, which mail.ParseAddress returns
// as it is, with no name. Parsing it was a visible share of rendering; any
// other shape is parsed. TestPlainAddrSpecIsParsedAsItIs holds the two to
// each other.
func plainAddrSpec(s string) bool {
	at := strings.IndexByte(s, '@')
	if at <= 0 || at == len(s)-1 {
		return false
	}
	return dotAtom(s[:at], isAtext) && dotAtom(s[at+1:], isLabelByte)
}

// dotAtom says s is non-empty runs of bytes ok accepts, joined by single
// dots.
func dotAtom(s string, ok func(byte) bool) bool {
	if s == "" || s[0] == '.' || s[len(s)-1] == '.' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '.' {
			if s[i-1] == '.' {
				return false
			}
		} else if !ok(c) {
			return false
		}
	}
	return true
}

func isLabelByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-'
}

// isAtext is RFC 5322's atext, ASCII only.
func isAtext(c byte) bool {
	return isLabelByte(c) || strings.IndexByte("!#$%&'*+/=?^_`{|}~", c) >= 0
}

// headerAddress writes an address's domain as IDNA A-labels, as the
// transport does in the envelope, so a message to an ASCII mailbox at an
// IDN domain is plain ASCII and needs no SMTPUTF8. A non-ASCII local part
// needs SMTPUTF8 anyway and keeps its domain as written.
func headerAddress(addr string) string {
	if a, utf8Local, err := address.ASCIIDomain(addr); err == nil && !utf8Local {
		return a
	}
	return addr
}

func validateUnsubscribeURL(s string) error {
	if strings.ContainsAny(s, "\r\n\x00<> \t") {
		return &ValidationError{Field: "unsubscribe_url", Reason: "contains whitespace, a line break or angle brackets"}
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return &ValidationError{Field: "unsubscribe_url", Reason: fmt.Sprintf("%q is not an absolute http(s) URL", s)}
	}
	return nil
}

// CheckBroadcast is the create-time check of a broadcast's content: it
// compiles, and, unless noUnsubscribeLink, shows its reader an unsubscribe
// link. Transactional mail has no such rule.
func CheckBroadcast(t Template, noUnsubscribeLink bool) error {
	c, err := Compile(t)
	if err != nil {
		return err
	}
	// The envelope sender and From of every message: a non-ASCII local
	// part needs SMTPUTF8 of every server on the way, and a relay without
	// it refused the broadcast's first message, which halted the whole
	// broadcast at send. Refused at create and update, where the sender
	// can change it; not in Compile, which workers run on broadcasts made
	// before this rule (and transactional mail, whose relay may offer
	// SMTPUTF8).
	if _, utf8Local, err := address.ASCIIDomain(t.FromAddress); err == nil && utf8Local {
		return &ValidationError{Field: fieldFromAddress, Reason: fmt.Sprintf("%q has a non-ASCII local part, which an SMTP server without SMTPUTF8 refuses for every message; give an ASCII sending address", t.FromAddress)}
	}
	// The rules a contact's address meets: news@localhost was taken, and
	// mail from a domain nobody can look up (SPF, DKIM, DMARC, a bounce's
	// way back) is refused or junked by every receiving server.
	if _, err := address.Canonical(t.FromAddress); err != nil {
		return &ValidationError{Field: fieldFromAddress, Reason: err.Error() + "; give an address at a public domain you send from"}
	}
	// After Compile, which says "line break" of a CR or LF.
	if err := cmp.Or(CheckControl(fieldSubject, t.Subject), CheckControl(fieldFromName, t.FromName)); err != nil {
		return err
	}
	if noUnsubscribeLink {
		return nil
	}
	return c.CheckUnsubscribeLink()
}
