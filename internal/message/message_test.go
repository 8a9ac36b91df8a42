package message

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"mime"
	"mime/multipart"
	"mime/quotedprintable"
	"net/mail"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
)

var (
	testBroadcast = ulid.MustParse("01J9ZQ7Y3M8B5N4K2H1G0F9E8D")
	testContact   = ulid.MustParse("01J9ZQ8A6C5D4E3F2G1H0J9K8M")
	testDate      = time.Date(2025, 3, 14, 15, 9, 26, 0, time.FixedZone("CET", 3600))
)

func baseTemplate() Template {
	return Template{
		FromName:    "Rangecast News",
		FromAddress: "news@Example.com",
		Subject:     "Hello {{.Name}}",
		HTML:        `<p>Hi {{.Name}},</p><p>Your plan: {{.Attributes.plan}}. <a href="https://example.com/go?a=1&amp;b=2">Open</a></p>`,
		Text:        "Hi {{.Name}},\nYour plan: {{.Attributes.plan}}.\n",
	}
}

func baseParams() Params {
	return Params{
		BroadcastID: testBroadcast,
		Contact: Contact{
			ID:         testContact,
			Email:      "ada@example.org",
			Name:       "Ada Lovelace",
			Attributes: map[string]any{"plan": "pro"},
		},
		Date:           testDate,
		UnsubscribeURL: "https://example.com/unsub?t=abc",
	}
}

func mustCompile(t *testing.T, tmpl Template) *Compiled {
	t.Helper()
	c, err := Compile(tmpl)
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	return c
}

func mustRender(t *testing.T, c *Compiled, p Params) Rendered {
	t.Helper()
	r, err := c.Render(p)
	if err != nil {
		t.Fatalf("Render: %v", err)
	}
	return r
}

// parts returns the decoded bodies of a multipart/alternative message keyed
// by media type, checking that each part is declared quoted-printable UTF-8.
func parts(t *testing.T, raw []byte) (*mail.Message, map[string]string) {
	t.Helper()
	msg, err := mail.ReadMessage(bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("ReadMessage: %v", err)
	}
	mt, params, err := mime.ParseMediaType(msg.Header.Get("Content-Type"))
	if err != nil || mt != "multipart/alternative" {
		t.Fatalf("Content-Type = %q (%v), want multipart/alternative", msg.Header.Get("Content-Type"), err)
	}
	mr := multipart.NewReader(msg.Body, params["boundary"])
	out := map[string]string{}
	var order []string
	for {
		p, err := mr.NextRawPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("NextRawPart: %v", err)
		}
		pt, pp, err := mime.ParseMediaType(p.Header.Get("Content-Type"))
		if err != nil {
			t.Fatalf("part Content-Type: %v", err)
		}
		if pp["charset"] != "utf-8" {
			t.Errorf("%s charset = %q, want utf-8", pt, pp["charset"])
		}
		if cte := p.Header.Get("Content-Transfer-Encoding"); cte != "quoted-printable" {
			t.Errorf("%s Content-Transfer-Encoding = %q", pt, cte)
		}
		b, err := io.ReadAll(quotedprintable.NewReader(p))
		if err != nil {
			t.Fatalf("decode %s: %v", pt, err)
		}
		out[pt] = string(b)
		order = append(order, pt)
	}
	// RFC 2046 §5.1.4: alternatives in increasing order of preference.
	if strings.Join(order, ",") != "text/plain,text/html" {
		t.Errorf("part order = %v, want text/plain then text/html", order)
	}
	return msg, out
}

func TestRenderRoundTrip(t *testing.T) {
	t.Parallel()
	c := mustCompile(t, baseTemplate())
	r := mustRender(t, c, baseParams())

	if bytes.Contains(bytes.ReplaceAll(r.Bytes, []byte("\r\n"), nil), []byte("\n")) ||
		bytes.Contains(bytes.ReplaceAll(r.Bytes, []byte("\r\n"), nil), []byte("\r")) {
		t.Fatal("message contains a bare LF or CR; all line endings must be CRLF")
	}
	for _, line := range strings.Split(string(r.Bytes), "\r\n") {
		if len(line) > 998 {
			t.Fatalf("line longer than 998: %q", line[:80])
		}
	}

	msg, body := parts(t, r.Bytes)
	h := msg.Header
	wantID := testBroadcast.String() + "." + testContact.String() + "@example.com"
	checks := map[string]string{
		"From":                  `"Rangecast News" <news@Example.com>`,
		"To":                    `"Ada Lovelace" <ada@example.org>`,
		"Subject":               "Hello Ada Lovelace",
		"Date":                  "Fri, 14 Mar 2025 15:09:26 +0100",
		"Message-Id":            "<" + wantID + ">",
		"Mime-Version":          "1.0",
		"List-Unsubscribe":      "<https://example.com/unsub?t=abc>",
		"List-Unsubscribe-Post": "List-Unsubscribe=One-Click",
	}
	for k, want := range checks {
		if got := h.Get(k); got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
	if d, err := h.Date(); err != nil || !d.Equal(testDate) {
		t.Errorf("Date parses to %v (%v), want %v", d, err, testDate)
	}
	if r.MessageID != wantID || r.From != "news@Example.com" || r.To != "ada@example.org" {
		t.Errorf("Rendered = {%q %q %q}", r.MessageID, r.From, r.To)
	}
	if want := "Hi Ada Lovelace,\r\nYour plan: pro.\r\n"; body["text/plain"] != want {
		t.Errorf("text part = %q, want %q", body["text/plain"], want)
	}
	if want := `<p>Hi Ada Lovelace,</p><p>Your plan: pro. <a href="https://example.com/go?a=1&amp;b=2">Open</a></p>`; body["text/html"] != want {
		t.Errorf("html part = %q, want %q", body["text/html"], want)
	}
}

func TestRenderIsDeterministic(t *testing.T) {
	t.Parallel()
	c := mustCompile(t, baseTemplate())
	a := mustRender(t, c, baseParams())
	b := mustRender(t, c, baseParams())
	if !bytes.Equal(a.Bytes, b.Bytes) {
		t.Fatal("rendering the same (broadcast, contact) twice gave different bytes")
	}
	if got, want := MessageID(testBroadcast, testContact, "Example.COM"), "01J9ZQ7Y3M8B5N4K2H1G0F9E8D.01J9ZQ8A6C5D4E3F2G1H0J9K8M@example.com"; got != want {
		t.Errorf("MessageID = %q, want %q", got, want)
	}
	if a.MessageID != MessageID(testBroadcast, testContact, c.SendingDomain()) {
		t.Errorf("Rendered.MessageID %q disagrees with MessageID()", a.MessageID)
	}
	other := baseParams()
	other.Contact.ID = ulid.MustParse("01J9ZQ8A6C5D4E3F2G1H0J9K8N")
	if mustRender(t, c, other).MessageID == a.MessageID {
		t.Error("different contacts share a Message-ID")
	}
}

func TestSendingDomainLowercased(t *testing.T) {
	t.Parallel()
	if got := mustCompile(t, baseTemplate()).SendingDomain(); got != "example.com" {
		t.Errorf("SendingDomain = %q", got)
	}
}

// Without a link there is no List-Unsubscribe at all: a made-up link would
// look valid to receivers and unsubscribe nobody.
func TestNoUnsubscribeURLNoHeader(t *testing.T) {
	t.Parallel()
	c := mustCompile(t, baseTemplate())
	p := baseParams()
	p.UnsubscribeURL = ""
	msg, _ := parts(t, mustRender(t, c, p).Bytes)
	for _, h := range []string{"List-Unsubscribe", "List-Unsubscribe-Post"} {
		if got, ok := msg.Header[h]; ok {
			t.Errorf("%s = %q without an unsubscribe URL", h, got)
		}
	}
}

func TestBadUnsubscribeURLRejected(t *testing.T) {
	t.Parallel()
	c := mustCompile(t, baseTemplate())
	for _, u := range []string{"https://x/\r\nBcc: a@b", "javascript:alert(1)", "/relative", "https://x/<y>"} {
		p := baseParams()
		p.UnsubscribeURL = u
		if _, err := c.Render(p); err == nil {
			t.Errorf("UnsubscribeURL %q accepted", u)
		}
	}
}

func TestNonASCIIHeadersEncoded(t *testing.T) {
	t.Parallel()
	tmpl := baseTemplate()
	tmpl.FromName = "Ünïcode Néws"
	tmpl.Subject = "Grüße, {{.Name}} — 🎉 " + strings.Repeat("ein langer Betreff ", 8)
	c := mustCompile(t, tmpl)
	p := baseParams()
	p.Contact.Name = "Zoë"
	r := mustRender(t, c, p)

	head := string(r.Bytes[:bytes.Index(r.Bytes, []byte("\r\n\r\n"))])
	for _, line := range strings.Split(head, "\r\n") {
		for _, b := range []byte(line) {
			if b >= 0x80 {
				t.Fatalf("raw 8-bit byte in header line %q", line)
			}
		}
		// Encoded words are at most 75 characters and are never split, so
		// a line holds at most a header name plus one of them.
		if len(line) > len("Message-ID: ")+75 {
			t.Errorf("header line not folded (%d chars): %q", len(line), line)
		}
	}
	if !strings.Contains(head, "\r\n =?utf-8?q?") {
		t.Errorf("long Subject was not folded between encoded words:\n%s", head)
	}
	msg, _ := parts(t, r.Bytes)
	dec := new(mime.WordDecoder)
	subj, err := dec.DecodeHeader(msg.Header.Get("Subject"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "Grüße, Zoë — 🎉 " + strings.Repeat("ein langer Betreff ", 8); subj != want {
		t.Errorf("decoded Subject = %q, want %q", subj, want)
	}
	if !strings.Contains(msg.Header.Get("Subject"), "=?utf-8?q?") {
		t.Errorf("Subject not RFC 2047 Q-encoded: %q", msg.Header.Get("Subject"))
	}
	from, err := msg.Header.AddressList("From")
	if err != nil || len(from) != 1 || from[0].Name != "Ünïcode Néws" || from[0].Address != "news@Example.com" {
		t.Errorf("From = %v (%v)", from, err)
	}
	to, err := msg.Header.AddressList("To")
	if err != nil || len(to) != 1 || to[0].Name != "Zoë" {
		t.Errorf("To = %v (%v)", to, err)
	}
}

func TestHTMLIsEscapedAndTextFallback(t *testing.T) {
	t.Parallel()
	tmpl := baseTemplate()
	tmpl.Text = ""
	tmpl.HTML = `<html><head><title>T</title><style>p{color:red}</style></head><body>
<h1>Hi {{.Name}}</h1><!-- hidden -->
<p>Line one<br>line&nbsp;two &amp; more</p>
<ul><li>first</li><li>second</li></ul>
<p><a href="https://example.com/cta">Read it</a></p>
<script>alert("x")</script></body></html>`
	c := mustCompile(t, tmpl)
	p := baseParams()
	p.Contact.Name = `<b>Bobby</b> & "Tables"`
	_, body := parts(t, mustRender(t, c, p).Bytes)

	if strings.Contains(body["text/html"], "<b>Bobby</b>") {
		t.Errorf("contact name not HTML-escaped in HTML part: %q", body["text/html"])
	}
	want := "Hi <b>Bobby</b> & \"Tables\"\r\n\r\nLine one\r\nline two & more\r\n\r\n- first\r\n- second\r\n\r\nRead it (https://example.com/cta)\r\n"
	got := body["text/plain"]
	for _, bad := range []string{"hidden", "alert", "color:red"} {
		if strings.Contains(got, bad) {
			t.Errorf("text fallback contains %q: %q", bad, got)
		}
	}
	if got != want {
		t.Errorf("text fallback =\n%q\nwant\n%q", got, want)
	}
}

func TestDotLinesSurviveInBody(t *testing.T) {
	t.Parallel()
	tmpl := baseTemplate()
	tmpl.Text = "before\n.\n.hidden\nafter\n"
	c := mustCompile(t, tmpl)
	_, body := parts(t, mustRender(t, c, baseParams()).Bytes)
	if body["text/plain"] != "before\r\n.\r\n.hidden\r\nafter\r\n" {
		t.Errorf("text part = %q", body["text/plain"])
	}
}

func TestCompileRejects(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name      string
		mod       func(*Template)
		field     string
		reasonHas string
	}{
		{"CRLF in subject", func(tp *Template) { tp.Subject = "Hi\r\nBcc: evil@example.net" }, "subject", "line break"},
		{"LF in subject", func(tp *Template) { tp.Subject = "Hi\nthere" }, "subject", "line break"},
		{"NUL in subject", func(tp *Template) { tp.Subject = "Hi\x00" }, "subject", "NUL"},
		{"CRLF in from name", func(tp *Template) { tp.FromName = "News\r\nBcc: evil@example.net" }, "from_name", "line break"},
		{"empty subject", func(tp *Template) { tp.Subject = "  " }, "subject", "empty"},
		{"subject of half a megabyte", func(tp *Template) { tp.Subject = strings.Repeat("Sale! ", 500_000/6) }, "subject", "at most 2000"},
		{"empty html", func(tp *Template) { tp.HTML = "" }, "html", "empty"},
		{"from missing at", func(tp *Template) { tp.FromAddress = "news.example.com" }, "from_address", "not a valid email"},
		{"from without a domain", func(tp *Template) { tp.FromAddress = "news@" }, "from_address", "has no domain after the @"},
		{"from with name", func(tp *Template) { tp.FromAddress = "News <news@example.com>" }, "from_address", "bare address"},
		{"from two addresses", func(tp *Template) { tp.FromAddress = "a@example.com, b@example.com" }, "from_address", ""},
		{"from empty", func(tp *Template) { tp.FromAddress = "" }, "from_address", "empty"},
		{"from no domain", func(tp *Template) { tp.FromAddress = "news@" }, "from_address", ""},
		{"from ip literal", func(tp *Template) { tp.FromAddress = "news@[192.0.2.1]" }, "from_address", ""},
		{"from CRLF", func(tp *Template) { tp.FromAddress = "news@example.com\r\nBcc: x@y" }, "from_address", "line break"},
		{"from IDN domain", func(tp *Template) { tp.FromAddress = "news@exämple.com" }, "from_address", "give it in its ASCII form, xn--exmple-cua.com"},
		{"unknown field in subject", func(tp *Template) { tp.Subject = "Hi {{.Nmae}}" }, "subject", "unknown field .Nmae"},
		{"unknown field in html", func(tp *Template) { tp.HTML = "<p>{{.Emial}}</p>" }, "html", "unknown field .Emial"},
		{"unknown field in text", func(tp *Template) { tp.Text = "{{.Attrs.x}}" }, "text", "unknown field .Attrs"},
		{"unknown field in untaken branch", func(tp *Template) {
			tp.HTML = `{{if eq .Name "nobody"}}{{.Nmae}}{{else}}hi{{end}}`
		}, "html", "unknown field .Nmae"},
		{"unknown field via $", func(tp *Template) { tp.HTML = `{{range .Attributes}}{{$.Nmae}}{{end}}x` }, "html", "unknown field .Nmae"},
		{"field on text", func(tp *Template) { tp.Subject = "{{.Name.First}}" }, "subject", "has no field .First"},
		{"undefined function", func(tp *Template) { tp.Subject = "{{shout .Name}}" }, "subject", "not defined"},
		{"syntax error", func(tp *Template) { tp.HTML = "<p>{{if .Name}}</p>" }, "html", ""},
		{"execution error", func(tp *Template) { tp.Subject = `{{printf "%d" (len 3)}}` }, "subject", ""},
		{"subject renders empty", func(tp *Template) { tp.Subject = `{{if false}}x{{end}}` }, "subject", "empty"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tmpl := baseTemplate()
			tc.mod(&tmpl)
			_, err := Compile(tmpl)
			var ve *ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("Compile error = %v (%T), want *ValidationError", err, err)
			}
			if ve.Field != tc.field {
				t.Errorf("Field = %q, want %q (reason %q)", ve.Field, tc.field, ve.Reason)
			}
			if !strings.Contains(ve.Reason, tc.reasonHas) {
				t.Errorf("Reason = %q, want it to mention %q", ve.Reason, tc.reasonHas)
			}
		})
	}
}

func TestCompileAcceptsAttributes(t *testing.T) {
	t.Parallel()
	tmpl := baseTemplate()
	tmpl.Subject = `{{.Attributes.company.name}} news{{with index .Attributes "city"}} from {{.}}{{end}}`
	tmpl.HTML = `{{with .Attributes}}{{.plan}}{{end}}{{if .Attributes.vip}}VIP{{end}} {{.ID}} {{.Email}}`
	c := mustCompile(t, tmpl)

	p := baseParams()
	p.Contact.Attributes = map[string]any{"company": map[string]any{"name": "Acme"}, "plan": "pro", "vip": true}
	msg, body := parts(t, mustRender(t, c, p).Bytes)
	if got := msg.Header.Get("Subject"); got != "Acme news" {
		t.Errorf("Subject = %q", got)
	}
	if want := "proVIP " + testContact.String() + " ada@example.org"; body["text/html"] != want {
		t.Errorf("html = %q, want %q", body["text/html"], want)
	}

	p.Contact.Attributes["city"] = "Oslo"
	msg, _ = parts(t, mustRender(t, c, p).Bytes)
	if got := msg.Header.Get("Subject"); got != "Acme news from Oslo" {
		t.Errorf("Subject = %q", got)
	}
}

func TestRenderMissingRequiredAttribute(t *testing.T) {
	t.Parallel()
	c := mustCompile(t, baseTemplate())
	p := baseParams()
	p.Contact.Attributes = nil
	_, err := c.Render(p)
	var ve *ValidationError
	if !errors.As(err, &ve) || !strings.Contains(ve.Reason, `no attribute "plan"`) || !strings.Contains(ve.Reason, "index .Attributes") {
		t.Fatalf("Render error = %v, want a ValidationError naming the missing attribute", err)
	}
}

func TestRenderedSubjectInjectionRejected(t *testing.T) {
	t.Parallel()
	tmpl := baseTemplate()
	tmpl.Subject = "News for {{.Attributes.plan}}"
	c := mustCompile(t, tmpl)
	p := baseParams()
	p.Contact.Attributes = map[string]any{"plan": "pro\r\nBcc: everyone@example.net"}
	_, err := c.Render(p)
	var ve *ValidationError
	if !errors.As(err, &ve) || ve.Field != "subject" {
		t.Fatalf("Render error = %v, want subject ValidationError", err)
	}
}

func TestRenderRejectsBadContact(t *testing.T) {
	t.Parallel()
	c := mustCompile(t, baseTemplate())
	for name, mod := range map[string]func(*Params){
		"name with CRLF":  func(p *Params) { p.Contact.Name = "Ada\r\nBcc: x@y" },
		"email with LF":   func(p *Params) { p.Contact.Email = "ada@example.org\nBcc: x@y" },
		"email empty":     func(p *Params) { p.Contact.Email = "" },
		"email with name": func(p *Params) { p.Contact.Email = "Ada <ada@example.org>" },
		"email invalid":   func(p *Params) { p.Contact.Email = "not an address" },
		"zero date":       func(p *Params) { p.Date = time.Time{} },
	} {
		p := baseParams()
		mod(&p)
		if _, err := c.Render(p); err == nil {
			t.Errorf("%s: Render succeeded", name)
		}
	}
}

func TestValidateHeaderValue(t *testing.T) {
	t.Parallel()
	for _, v := range []string{"a\rb", "a\nb", "a\x00b"} {
		if err := ValidateHeaderValue("x", v); err == nil {
			t.Errorf("%q accepted", v)
		}
	}
	if err := ValidateHeaderValue("x", "ordinary value\twith tab, ünïcode"); err != nil {
		t.Errorf("ordinary value rejected: %v", err)
	}
}

func TestConcurrentRender(t *testing.T) {
	t.Parallel()
	c := mustCompile(t, baseTemplate())
	want := mustRender(t, c, baseParams()).Bytes
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 50 {
				r, err := c.Render(baseParams())
				if err != nil || !bytes.Equal(r.Bytes, want) {
					t.Errorf("concurrent render differs: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// An ASCII mailbox at an IDN domain is addressed in A-labels in the To
// field, as in the envelope, so the message needs no SMTPUTF8.
func TestToHeaderIDNDomain(t *testing.T) {
	t.Parallel()
	c, err := Compile(Template{FromAddress: "news@example.com", Subject: "Hi", HTML: "<p>hi</p>"})
	if err != nil {
		t.Fatal(err)
	}
	m, err := c.Render(Params{Contact: Contact{Email: "joerg@bücher.example"}, Date: time.Unix(0, 0)})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(m.Bytes, []byte("To: <joerg@xn--bcher-kva.example>\r\n")) {
		t.Errorf("To field not in A-labels:\n%s", m.Bytes)
	}
}

// A contact stored before import refused undeliverable addresses fails at
// render, as that contact's own error, and never reaches the relay.
func TestRenderRefusesUndeliverable(t *testing.T) {
	t.Parallel()
	c, err := Compile(Template{FromAddress: "news@example.com", Subject: "Hi", HTML: "<p>hi</p>"})
	if err != nil {
		t.Fatal(err)
	}
	for _, email := range []string{"ip@[127.0.0.1]", "a%b@example.org", "a@-x.com"} {
		_, err := c.Render(Params{Contact: Contact{Email: email}, Date: time.Unix(0, 0)})
		var ve *ValidationError
		if !errors.As(err, &ve) || ve.Field != "contact email" {
			t.Errorf("Render to %q: %v; want a contact email error", email, err)
		}
	}
}

// TestIndexLineBreakOrNUL holds the header check's loop to the IndexAny it
// replaced, on random bytes (control characters, UTF-8, and not).
func TestIndexLineBreakOrNUL(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []byte{0, '\t', '\n', '\v', '\f', '\r', ' ', 'a', 0x7f, 0x80, 0xc3, 0xa9, 0xe2, 0x80, 0xa8, 0xff}
	for range 20000 {
		b := make([]byte, rng.IntN(12))
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		if got, want := indexLineBreakOrNUL(string(b)), strings.IndexAny(string(b), "\r\n\x00"); got != want {
			t.Fatalf("%q: %d, want %d", b, got, want)
		}
	}
}

// TestPlainAddrSpecIsParsedAsItIs: whatever plainAddrSpec takes,
// mail.ParseAddress takes too, with no name and the address unchanged, so
// skipping the parse for it changes nothing.
func TestPlainAddrSpecIsParsedAsItIs(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(3, 4))
	// An atext local part and a domain of label bytes, dots in both, and
	// now and then something else anywhere.
	local, domain := "aZ09.-_+!#$%&'*/=?^`{|}~..", "aZ09-.."
	rare := " \"()<>[]:;,\\\x00\xc3\xa9@_"
	part := func(alphabet string) []byte {
		b := make([]byte, 1+rng.IntN(8))
		for i := range b {
			if rng.IntN(30) == 0 {
				b[i] = rare[rng.IntN(len(rare))]
			} else {
				b[i] = alphabet[rng.IntN(len(alphabet))]
			}
		}
		return b
	}
	took := 0
	for range 200000 {
		s := string(part(local)) + "@" + string(part(domain))
		if !plainAddrSpec(s) {
			continue
		}
		took++
		a, err := mail.ParseAddress(s)
		if err != nil || a.Name != "" || a.Address != s {
			t.Fatalf("plainAddrSpec(%q) but mail.ParseAddress gives %+v, %v", s, a, err)
		}
	}
	if took < 20000 {
		t.Fatalf("only %d random strings were plain: the test tests little", took)
	}
	for _, s := range []string{"ada@example.org", "o'brien+x@mail.example.co.uk", "a.b.c@x-y.example"} {
		if !plainAddrSpec(s) {
			t.Errorf("plainAddrSpec(%q) = false", s)
		}
	}
	for _, s := range []string{"@x", "a@", "a..b@x", ".a@x", "a.@x", "a@x..y", "a@[1.2.3.4]", `"a b"@x`, "a@b@c", "Ada <a@x>", "é@x", "a@x_y"} {
		if plainAddrSpec(s) {
			t.Errorf("plainAddrSpec(%q) = true", s)
		}
	}
}

// TestFromAddressUTF8LocalPart: a broadcast whose from address has a
// non-ASCII local part is refused at create (CheckBroadcast): a relay
// without SMTPUTF8 refused its first message, which halted the whole
// broadcast at send. Compile, which workers run on broadcasts made before
// the rule and transactional mail runs too, still takes it.
func TestFromAddressUTF8LocalPart(t *testing.T) {
	t.Parallel()
	tmpl := baseTemplate()
	tmpl.FromAddress = "nëws@example.com"
	tmpl.HTML += `<a href="{{.UnsubscribeURL}}">Unsubscribe</a>`
	err := CheckBroadcast(tmpl, false)
	var ve *ValidationError
	if !errors.As(err, &ve) || ve.Field != "from_address" || !strings.Contains(err.Error(), "non-ASCII local part") {
		t.Errorf("CheckBroadcast = %v; want the from address refused for its non-ASCII local part", err)
	}
	if _, err := Compile(tmpl); err != nil {
		t.Errorf("Compile = %v; want it to take a broadcast made before the rule", err)
	}
}

// TestFromAddressAtAPublicDomain: the from address meets a contact's
// rules: a domain with no dot (news@localhost, taken before) or an IP
// literal is refused at create, naming it; an IDN domain is not refused
// for being one.
func TestFromAddressAtAPublicDomain(t *testing.T) {
	t.Parallel()
	for from, want := range map[string]string{
		"news@localhost":   "no dot",
		"news@[127.0.0.1]": "from_address",
		"news@mail":        "no dot",
		"news@example.com": "",
	} {
		tmpl := baseTemplate()
		tmpl.FromAddress = from
		err := CheckBroadcast(tmpl, true)
		var ve *ValidationError
		switch {
		case want == "" && err != nil:
			t.Errorf("%s: CheckBroadcast = %v; want it taken", from, err)
		case want != "" && (!errors.As(err, &ve) || ve.Field != "from_address" || !strings.Contains(err.Error(), want)):
			t.Errorf("%s: CheckBroadcast = %v; want the from address refused (%q)", from, err, want)
		}
	}
}

// TestOutlookConditionalCommentsKept: Outlook's conditional comments (MJML's
// ghost tables, VML buttons) reach the message as written, with the fields
// between their markers escaped as the HTML they are in; other comments
// are dropped, and the derived plain text leaves out what Outlook alone
// shows. html/template dropped them all, so Outlook lost its layout.
func TestOutlookConditionalCommentsKept(t *testing.T) {
	t.Parallel()
	tmpl := baseTemplate()
	tmpl.Text = ""
	tmpl.HTML = `<html><head><!--[if gte mso 9]><xml><o:OfficeDocumentSettings><o:PixelsPerInch>96</o:PixelsPerInch></o:OfficeDocumentSettings></xml><![endif]--></head><body>
<!--[if mso | IE]><table role="presentation" width="600"><tr><td><![endif]-->
<!--[if mso]><v:roundrect href="{{.UnsubscribeURL}}" style="height:40px;width:200px"><center>Outlook only {{.Name}}</center></v:roundrect><![endif]-->
<!--[if !mso]><!-- --><p>Hi {{.Name}}</p><!--<![endif]-->
<!-- a note for the designer -->
<p><a href="{{.UnsubscribeURL}}">Unsubscribe</a></p>
<!--[if mso | IE]></td></tr></table><![endif]--></body></html>`
	c := mustCompile(t, tmpl)
	p := baseParams()
	p.Contact.Name = `<b>Bobby</b>`
	_, body := parts(t, mustRender(t, c, p).Bytes)
	html := body["text/html"]
	for _, want := range []string{
		`<!--[if gte mso 9]><xml><o:OfficeDocumentSettings>`, `</xml><![endif]-->`,
		`<!--[if mso | IE]><table role="presentation" width="600"><tr><td><![endif]-->`,
		`<center>Outlook only &lt;b&gt;Bobby&lt;/b&gt;</center></v:roundrect><![endif]-->`,
		`<!--[if !mso]><!-- --><p>Hi &lt;b&gt;Bobby&lt;/b&gt;</p><!--<![endif]-->`,
		`<!--[if mso | IE]></td></tr></table><![endif]-->`,
	} {
		if !strings.Contains(html, want) {
			t.Errorf("HTML part lacks %q:\n%s", want, html)
		}
	}
	if strings.Contains(html, "designer") {
		t.Errorf("a plain comment reached the message: %s", html)
	}
	if text := body["text/plain"]; strings.Contains(text, "Outlook only") || !strings.Contains(text, "Hi <b>Bobby</b>") {
		t.Errorf("derived text = %q; want the other clients' text, not Outlook's", text)
	}
}

// TestTransactionalKeepsOutlookConditionalComments: a stored transactional
// template keeps them too, its data escaped between the markers.
func TestTransactionalKeepsOutlookConditionalComments(t *testing.T) {
	t.Parallel()
	ct, err := CompileTransactional(TransactionalTemplate{Subject: "s",
		HTML: `<!--[if mso]><v:roundrect href="{{.url}}"><center>{{.name}}</center></v:roundrect><![endif]--><!--[if !mso]><!--><a href="{{.url}}">{{.name}}</a><!--<![endif]--><!-- note -->`})
	if err != nil {
		t.Fatal(err)
	}
	_, _, html, err := ct.Execute(map[string]any{"url": "https://x.example/r?a=1&b=2", "name": "<Ann>"})
	if err != nil {
		t.Fatal(err)
	}
	want := `<!--[if mso]><v:roundrect href="https://x.example/r?a=1&amp;b=2"><center>&lt;Ann&gt;</center></v:roundrect><![endif]--><!--[if !mso]><!--><a href="https://x.example/r?a=1&amp;b=2">&lt;Ann&gt;</a><!--<![endif]-->`
	if html != want {
		t.Fatalf("html = %q\nwant %q", html, want)
	}
}

// TestOutlookConditionalCommentsOutOfPlace: a marker that does not stand
// in HTML text, or a block shown to Outlook only that ends early for every
// other client, is refused at compile: either lets a field's value reach
// those clients in a context the escaper did not see (review: a script
// run from the contact's name).
func TestOutlookConditionalCommentsOutOfPlace(t *testing.T) {
	t.Parallel()
	link := `<p><a href="{{.UnsubscribeURL}}">Unsubscribe</a></p>`
	for _, tc := range []struct{ name, html, want string }{
		{"closed inside an attribute", `<!--[if mso]><a title="<![endif]--><script>{{.Name}}</script><!--[if mso]>"></a><![endif]-->`, "inside a tag, an attribute"},
		{"opened inside a script", "<script><!--[if mso]><script></script>\n{{.Name}}</script><![endif]-->", "inside a tag, an attribute"},
		{"inside a title", `<title><!--[if mso]>x<![endif]--></title>`, "inside a tag, an attribute"},
		{"inside a textarea", `<textarea><!--[if mso]>x<![endif]--></textarea>`, "inside a tag, an attribute"},
		{"inside another comment", `<!-- note <!--[if mso]>x<![endif]--> -->`, "or another comment"},
		{"a --> of its own", `<!--[if mso]><a title="--><img src=x onerror={{.Name}}>"></a><![endif]-->`, "has a --> inside"},
		{"a --!> of its own", `<!--[if mso]>x --!><img src=x onerror={{.Name}}><![endif]-->`, "has a --> inside"},
		{"the function called by hand", `<!--[if mso]>x<![endif]-->{{_cc 7}}`, "rangecast's own"},
		{"a misspelt condition", "<p>x</p>\n<!--[ifmso]><table><tr><td><![endif]-->", "line 2: the Outlook conditional comment <![endif]--> closes no <!--[if …]> before it: is the condition misspelt"},
		{"never closed", "<p>x</p>\n<!--[if mso]><table><tr><td>", "line 2: the Outlook conditional comment <!--[if mso]> is never closed"},
		{"nested", `<!--[if mso]><table><!--[if gte mso 12]>x<![endif]--><![endif]-->`, "conditional comments do not nest"},
		{"opened one way in each branch", `{{if .Name}}<!--[if mso]><table width="600">{{else}}<!--[if mso]><table width="500">{{end}}<tr><td><![endif]-->` + link + `<!--[if mso]></td></tr></table><![endif]-->`, ""},
	} {
		tmpl := baseTemplate()
		tmpl.Text = ""
		tmpl.HTML = tc.html + link
		_, err := Compile(tmpl)
		if tc.want == "" {
			if err != nil {
				t.Errorf("%s: %v; want it accepted", tc.name, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v; want one saying %q", tc.name, err, tc.want)
		}
		if _, err := CompileTransactional(TransactionalTemplate{Subject: "s", HTML: tc.html}); err == nil {
			t.Errorf("%s: a transactional template took it", tc.name)
		}
	}

	// A block a plain comment sits in is fine; a template called in an
	// attribute loses its markers (as html/template dropped them), never
	// showing the action.
	for _, html := range []string{
		`<!--[if mso]><!-- for Outlook --><table><tr><td><![endif]-->` + link + `<!--[if mso]></td></tr></table><![endif]-->`,
		`{{define "m"}}<!--[if mso]>x<![endif]-->{{end}}<a title="{{template "m"}}">t</a>` + link,
	} {
		tmpl := baseTemplate()
		tmpl.Text = ""
		tmpl.HTML = html
		c := mustCompile(t, tmpl)
		_, body := parts(t, mustRender(t, c, baseParams()).Bytes)
		if strings.Contains(body["text/html"], "_cc") {
			t.Errorf("%q rendered the marker's action: %s", html, body["text/html"])
		}
	}
}
