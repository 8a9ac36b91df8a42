package message

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	htmltemplate "html/template"
	"io"
	"mime"
	"net/mail"
	"strings"
	texttemplate "text/template"
	"text/template/parse"
	"time"

	"github.com/rangecast/rangecast/internal/address"
)

// Transactional is one message to one recipient, not part of a broadcast
// (a password reset, a receipt). Bodies are final text, not templates.
type Transactional struct {
	FromName, FromAddress string
	To, ToName            string
	Subject               string
	Text, HTML            string
	// Headers are extra header fields, in order. The fields rangecast
	// writes itself cannot be given (see ReservedHeader).
	Headers []Header
}

// Header is one extra header field.
type Header struct{ Name, Value string }

// ReservedHeader reports whether name is a field rangecast writes itself and
// a caller may not set: identity (Message-ID), addressing (From, To, Cc,
// Bcc, Sender, Return-Path), Subject and Date, the MIME structure, and every
// List-* field (unsubscribe links belong to broadcasts). Also the fields
// only a signer or a server on the way writes: DKIM-Signature (rangecast
// signs; a caller's would not verify, or would claim another domain's
// signature), the trace fields (Received, Authentication-Results, ARC-*)
// and the Resent-* fields, whose Resent-To and Resent-Bcc address mail
// anew.
func ReservedHeader(name string) bool {
	n := strings.ToLower(strings.TrimSpace(name))
	switch n {
	case "message-id", "from", "to", "cc", "bcc", "sender", "return-path", "subject", "date", "mime-version",
		"dkim-signature", "received", "authentication-results":
		return true
	}
	for _, p := range []string{"list-", "content-", "resent-", "arc-"} {
		if strings.HasPrefix(n, p) {
			return true
		}
	}
	return false
}

// MaxHeaders is the most extra header fields a transactional message may
// carry: real ones carry a handful, and every field is written into every
// attempt.
const MaxHeaders = 100

// validHeaderName: RFC 5322 field names are printable US-ASCII except colon.
func validHeaderName(name string) bool {
	if name == "" || len(name) > 76 {
		return false
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; c < 33 || c > 126 || c == ':' {
			return false
		}
	}
	return true
}

// Validate reports the first thing wrong with t, as a *ValidationError whose
// Field names the request field.
func (t Transactional) Validate() error {
	if err := ValidateHeaderValue(fieldFromName, t.FromName); err != nil {
		return err
	}
	// Names are read by the recipient's mail client: no control
	// characters or bidirectional overrides, as for a broadcast's.
	if err := cmp.Or(CheckControl(fieldFromName, t.FromName), CheckControl("to_name", t.ToName)); err != nil {
		return err
	}
	if len(t.Headers) > MaxHeaders {
		return &ValidationError{Field: "headers", Reason: fmt.Sprintf("are %d fields; at most %d", len(t.Headers), MaxHeaders)}
	}
	from, _, err := parseFromAddress(t.FromAddress)
	if err != nil {
		return err
	}
	if err := checkFolds(fieldFromName, "From", (&mail.Address{Name: t.FromName, Address: from}).String()); err != nil {
		return err
	}
	if err := ValidateHeaderValue("to_name", t.ToName); err != nil {
		return err
	}
	to, err := recipientAddress(t.To)
	if err != nil {
		return err
	}
	if err := checkFolds("to_name", "To", (&mail.Address{Name: t.ToName, Address: to}).String()); err != nil {
		return err
	}
	if err := ValidateHeaderValue(fieldSubject, t.Subject); err != nil {
		return err
	}
	if strings.TrimSpace(t.Subject) == "" {
		return &ValidationError{Field: fieldSubject, Reason: "is empty; every message needs a subject line"}
	}
	if strings.TrimSpace(t.Text) == "" && strings.TrimSpace(t.HTML) == "" {
		return &ValidationError{Field: "text", Reason: "and html are both empty; give a plain-text body, an HTML body, or both"}
	}
	for i, h := range t.Headers {
		field := fmt.Sprintf("headers[%d]", i)
		switch {
		case !validHeaderName(h.Name):
			return &ValidationError{Field: field, Reason: fmt.Sprintf("name %q is not a header field name (printable ASCII without spaces or ':')", h.Name)}
		case ReservedHeader(h.Name):
			return &ValidationError{Field: field, Reason: fmt.Sprintf("%s is set by rangecast and cannot be overridden", h.Name)}
		}
		if err := ValidateHeaderValue(field, h.Value); err != nil {
			return err
		}
		if err := checkFolds(field, h.Name, mime.QEncoding.Encode("utf-8", h.Value)); err != nil {
			return err
		}
	}
	return nil
}

func recipientAddress(s string) (string, error) {
	if strings.TrimSpace(s) == "" {
		return "", &ValidationError{Field: "to", Reason: "is empty; give the recipient's address"}
	}
	if err := ValidateHeaderValue("to", s); err != nil {
		return "", err
	}
	a, err := mail.ParseAddress(s)
	if err != nil || a.Name != "" || a.Address != strings.TrimSpace(s) {
		return "", &ValidationError{Field: "to", Reason: fmt.Sprintf("%q is not a bare email address; put the display name in to_name", s)}
	}
	if _, err := address.Canonical(a.Address); err != nil {
		var ae *address.Error
		if errors.As(err, &ae) {
			return "", &ValidationError{Field: "to", Reason: ae.Detail}
		}
		return "", &ValidationError{Field: "to", Reason: err.Error()}
	}
	return a.Address, nil
}

// TransactionalMessageID is the deterministic Message-ID of transactional
// message id (a ULID string) from sendingDomain, without angle brackets. Like a
// broadcast's, it is derivable from the stored row alone, so an in-doubt send
// can be looked up.
func TransactionalMessageID(id, sendingDomain string) string {
	return "tx." + id + "@" + strings.ToLower(sendingDomain)
}

// SendingDomain is the lowercased domain of the from address, or "" when
// it is not valid.
func (t Transactional) SendingDomain() string {
	_, d, err := parseFromAddress(t.FromAddress)
	if err != nil {
		return ""
	}
	return d
}

// RenderTransactional builds the message with Message-ID messageID. The
// bytes are a pure function of the arguments: a retry sends the same
// message, so a provider that deduplicates by Message-ID sees one.
func RenderTransactional(t Transactional, messageID string, date time.Time) (Rendered, error) {
	if err := t.Validate(); err != nil {
		return Rendered{}, err
	}
	if date.IsZero() {
		return Rendered{}, fmt.Errorf("message: render transactional: date is zero; pass the send time explicitly")
	}
	if messageID == "" || strings.ContainsAny(messageID, "<> \r\n\x00") {
		return Rendered{}, fmt.Errorf("message: render transactional: bad Message-ID %q", messageID)
	}
	from, _, _ := parseFromAddress(t.FromAddress)
	to, _ := recipientAddress(t.To)

	hw := headerWriter{b: make([]byte, 0, len(t.Text)+len(t.HTML)+1024)}
	hw.write("From", (&mail.Address{Name: t.FromName, Address: from}).String())
	hw.write("To", (&mail.Address{Name: t.ToName, Address: to}).String())
	hw.write("Subject", encodeSubject(t.Subject))
	hw.write("Date", date.Format(time.RFC1123Z))
	hw.write("Message-ID", "<"+messageID+">")
	hw.write("MIME-Version", "1.0")
	ownFeedbackID := false
	for _, h := range t.Headers {
		hw.write(h.Name, mime.QEncoding.Encode("utf-8", h.Value))
		ownFeedbackID = ownFeedbackID || strings.EqualFold(strings.TrimSpace(h.Name), "Feedback-ID")
	}
	if !ownFeedbackID {
		_, domain, _ := parseFromAddress(t.FromAddress)
		hw.write("Feedback-ID", TransactionalFeedbackID(domain))
	}

	text, html := t.Text, t.HTML
	if strings.TrimSpace(html) == "" {
		hw.write("Content-Type", "text/plain; charset=utf-8")
		hw.write("Content-Transfer-Encoding", "quoted-printable")
		if hw.err != nil {
			return Rendered{}, fmt.Errorf("message: render transactional: %w", hw.err)
		}
		b := append(hw.b, "\r\n"...)
		b = appendQP(b, []byte(text))
		return Rendered{MessageID: messageID, From: from, To: to, Bytes: b}, nil
	}
	if strings.TrimSpace(text) == "" {
		text = htmlToText(html)
	}
	// Derived from the message identity so a re-render gives the same bytes;
	// "=_" cannot occur in quoted-printable output (see Render).
	boundary := "=_rc." + strings.SplitN(messageID, "@", 2)[0]
	hw.write("Content-Type", mime.FormatMediaType("multipart/alternative", map[string]string{"boundary": boundary}))
	if hw.err != nil {
		return Rendered{}, fmt.Errorf("message: render transactional: %w", hw.err)
	}
	if err := checkBoundary(boundary); err != nil {
		return Rendered{}, fmt.Errorf("message: render transactional: boundary: %w", err)
	}
	b := append(hw.b, "\r\n"...)
	b = appendAlternative(b, boundary, []byte(text), []byte(html))
	return Rendered{MessageID: messageID, From: from, To: to, Bytes: b}, nil
}

// TransactionalTemplate is the source of a stored template: Subject and
// Text are text/template sources, HTML an html/template source. All three
// see the message's data (a JSON object) as ".".
type TransactionalTemplate struct{ Subject, Text, HTML string }

// CompiledTransactional is a parsed TransactionalTemplate, safe for
// concurrent use.
type CompiledTransactional struct {
	subject, text *texttemplate.Template
	html          *htmltemplate.Template
	budget        Budget
}

// CompileTransactional parses t. A field the template uses that the data
// lacks fails Execute, so nobody receives "<no value>".
func CompileTransactional(t TransactionalTemplate) (*CompiledTransactional, error) {
	for _, f := range [...]struct{ field, src string }{{fieldSubject, t.Subject}, {fieldText, t.Text}, {fieldHTML, t.HTML}} {
		if err := checkTemplateText(f.field, f.src); err != nil {
			return nil, err
		}
	}
	if strings.TrimSpace(t.Subject) == "" {
		return nil, &ValidationError{Field: fieldSubject, Reason: "is empty; a template needs a subject line"}
	}
	if err := ValidateHeaderValue(fieldSubject, t.Subject); err != nil {
		return nil, err
	}
	if strings.TrimSpace(t.Text) == "" && strings.TrimSpace(t.HTML) == "" {
		return nil, &ValidationError{Field: fieldText, Reason: "and html are both empty; a template needs a plain-text body, an HTML body, or both"}
	}
	c := &CompiledTransactional{}
	conditionals, err := markConditionals(t.HTML)
	if err != nil {
		return nil, err
	}
	if c.subject, err = texttemplate.New(fieldSubject).Funcs(checkedText).Option("missingkey=error").Parse(t.Subject); err != nil {
		return nil, dataTemplateError(fieldSubject, err)
	}
	if t.Text != "" {
		if c.text, err = texttemplate.New(fieldText).Funcs(checkedText).Option("missingkey=error").Parse(t.Text); err != nil {
			return nil, dataTemplateError(fieldText, err)
		}
	}
	if t.HTML != "" {
		if c.html, err = htmltemplate.New(fieldHTML).Funcs(checkedHTML).Funcs(conditionalFuncs).Option("missingkey=error").Parse(conditionals.src); err != nil {
			return nil, dataTemplateError(fieldHTML, err)
		}
	}
	c.budget = DefaultBudget
	sets := map[string]map[string]*parse.Tree{fieldSubject: {}, fieldText: {}, fieldHTML: {}}
	for _, st := range c.subject.Templates() {
		sets[fieldSubject][st.Name()] = st.Tree
	}
	if c.text != nil {
		for _, tt := range c.text.Templates() {
			sets[fieldText][tt.Name()] = tt.Tree
		}
	}
	if c.html != nil {
		for _, ht := range c.html.Templates() {
			sets[fieldHTML][ht.Name()] = ht.Tree
		}
	}
	for field, trees := range sets {
		if err := checkLoops("template "+field, trees); err != nil {
			return nil, err
		}
	}
	for _, trees := range sets {
		for _, tree := range trees {
			instrument(tree)
		}
	}
	printNoValueAsEmpty(c.subject, false)
	if c.text != nil {
		printNoValueAsEmpty(c.text, false)
	}
	if c.html != nil {
		if err := conditionals.keep(c.html); err != nil { // Outlook's conditional comments: conditional.go
			return nil, err
		}
	}
	if err := c.sampleRun(); err != nil {
		return nil, err
	}
	return c, nil
}

// sampleRun executes each part once with no data, so a loop that costs
// more than the budget whatever the data ({{range 1000}}{{range 1000}}…)
// is refused when the template is stored, not at every send. Other errors
// are expected here (a field the data will carry is missing from no data)
// and are left to the send.
func (c *CompiledTransactional) sampleRun() error {
	none := map[string]any{}
	run := func(field string, exec func(io.Writer) error) error {
		var buf bytes.Buffer
		var ve *ValidationError
		// meter returns the budget's own error as a *ValidationError and
		// the template package's errors as they are.
		if err := c.budget.meter("template "+field, &buf, exec); errors.As(err, &ve) {
			return ve
		}
		return nil
	}
	err := run(fieldSubject, func(w io.Writer) error { return c.subject.Execute(w, none) })
	if err == nil && c.text != nil {
		err = run(fieldText, func(w io.Writer) error { return c.text.Execute(w, none) })
	}
	if err == nil && c.html != nil {
		err = run(fieldHTML, func(w io.Writer) error { return c.html.Execute(w, none) })
	}
	return err
}

// Execute renders the template with data, within the template budget.
func (c *CompiledTransactional) Execute(data map[string]any) (subject, text, html string, err error) {
	var sb bytes.Buffer
	if err := c.budget.meter("template "+fieldSubject, &sb, func(w io.Writer) error { return c.subject.Execute(w, data) }); err != nil {
		return "", "", "", dataTemplateError(fieldSubject, err)
	}
	subject = sb.String()
	if err := ValidateHeaderValue(fieldSubject, subject); err != nil {
		return "", "", "", &ValidationError{Field: fieldSubject, Reason: "rendered subject contains a line break or NUL (check the data used in it)"}
	}
	if c.text != nil {
		sb.Reset()
		if err := c.budget.meter("template "+fieldText, &sb, func(w io.Writer) error { return c.text.Execute(w, data) }); err != nil {
			return "", "", "", dataTemplateError(fieldText, err)
		}
		text = sb.String()
	}
	if c.html != nil {
		sb.Reset()
		if err := c.budget.meter("template "+fieldHTML, &sb, func(w io.Writer) error { return c.html.Execute(w, data) }); err != nil {
			return "", "", "", dataTemplateError(fieldHTML, err)
		}
		html = sb.String()
	}
	return subject, text, html, nil
}

// dataTemplateError names the template part and, for a missing key, the
// fix.
func dataTemplateError(field string, err error) error {
	var ve *ValidationError
	if errors.As(err, &ve) {
		return ve
	}
	msg := strings.TrimPrefix(err.Error(), "template: ")
	if m := reMissingKey.FindStringSubmatch(msg); m != nil {
		msg = fmt.Sprintf("%s: data has no field %q; add it to data, or write {{index . %q}} in the template if it is optional", location(msg), m[1], m[1])
	}
	return &ValidationError{Field: "template " + field, Reason: msg}
}

// ValidateFromAddress checks a sending address as Validate does (a bare
// address on a host-name domain), for templates that carry a default one.
func ValidateFromAddress(s string) error {
	_, _, err := parseFromAddress(s)
	return err
}
