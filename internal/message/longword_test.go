package message

import (
	"bytes"
	"errors"
	"fmt"
	"mime"
	"strings"
	"testing"
	"time"
)

// A subject with a run of more than 998 characters without a space, from
// the template or from a contact's data, renders: it is written as encoded
// words, which fold. Before, every recipient failed with "header Subject
// has a word longer than 998 characters".
func TestSubjectWithAnUnfoldableWordRenders(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("S", 1200)
	for name, tc := range map[string]struct {
		subject string
		name    string
		attrs   map[string]any
		want    string
	}{
		"in the template":    {subject: "Hi {{.Name}} " + long, want: "Hi Ada " + long},
		"from the data":      {subject: "Hi {{.Attributes.code}}", attrs: map[string]any{"plan": "pro", "code": long + "=?_é"}, want: "Hi " + long + "=?_é"},
		"non-ASCII and long": {subject: "Grüße " + long, want: "Grüße " + long},
		// A name that looks like an encoded word shows as typed, not
		// decoded into text of its choosing.
		"encoded-word lookalike": {subject: "Hi {{.Name}}", name: "=?utf-8?q?Admin?= <admin@bank.com>", want: "Hi =?utf-8?q?Admin?= <admin@bank.com>"},
	} {
		t.Run(name, func(t *testing.T) {
			tmpl := baseTemplate()
			tmpl.Subject = tc.subject
			c := mustCompile(t, tmpl)
			p := baseParams()
			p.Contact.Name = "Ada"
			if tc.name != "" {
				p.Contact.Name = tc.name
			}
			if tc.attrs != nil {
				p.Contact.Attributes = tc.attrs
			}
			r := mustRender(t, c, p)
			head := string(r.Bytes[:bytes.Index(r.Bytes, []byte("\r\n\r\n"))])
			for _, line := range strings.Split(head, "\r\n") {
				if len(line) > hardLineLimit {
					t.Fatalf("header line of %d characters", len(line))
				}
			}
			msg, _ := parts(t, r.Bytes)
			got, err := new(mime.WordDecoder).DecodeHeader(msg.Header.Get("Subject"))
			if err != nil || got != tc.want {
				t.Errorf("decoded Subject = %.40q… (%d bytes, %v), want %.40q… (%d bytes)", got, len(got), err, tc.want, len(tc.want))
			}
		})
	}
}

// encodeWords' words are at most 75 characters (the first at most the
// bound it is given), split between runes, and decode to the text.
func TestEncodeWords(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"", "a", "a b", strings.Repeat("é", 100), strings.Repeat("x=?_ ", 90), "🎉" + strings.Repeat("y", 200)} {
		enc := encodeWords(s, 69)
		for i, w := range strings.Fields(enc) {
			if len(w) > 75 || i == 0 && len(w) > 69 || !strings.HasPrefix(w, "=?utf-8?q?") || !strings.HasSuffix(w, "?=") {
				t.Errorf("encodeWords(%.20q…): word %d %q", s, i, w)
			}
		}
		got, err := new(mime.WordDecoder).DecodeHeader(enc)
		if err != nil || got != s {
			t.Errorf("encodeWords(%.20q…) decodes to %.20q… (%v)", s, got, err)
		}
	}
}

// A from name that cannot be written as a header is refused at create,
// naming the field; it used to pass and fail every recipient.
func TestFromNameThatCannotFoldRefused(t *testing.T) {
	t.Parallel()
	tmpl := baseTemplate()
	tmpl.FromName = strings.Repeat("F", 1200)
	_, err := Compile(tmpl)
	var ve *ValidationError
	if !errors.As(err, &ve) || ve.Field != fieldFromName || !strings.Contains(ve.Reason, "998") {
		t.Fatalf("Compile = %v; want a from_name ValidationError about the 998-character limit", err)
	}
	tr := Transactional{FromName: strings.Repeat("F", 1200), FromAddress: "a@example.com", To: "b@example.org", Subject: "s", Text: "t"}
	if err := tr.Validate(); !errors.As(err, &ve) || ve.Field != fieldFromName {
		t.Fatalf("Transactional.Validate = %v; want a from_name ValidationError", err)
	}
	tr.FromName, tr.Headers = "", []Header{{Name: "X-Ref", Value: strings.Repeat("r", 1200)}}
	if err := tr.Validate(); !errors.As(err, &ve) || ve.Field != "headers[0]" {
		t.Fatalf("Transactional.Validate = %v; want a headers[0] ValidationError", err)
	}
	tr.Headers, tr.Subject = nil, strings.Repeat("s", 1200)
	if _, err := RenderTransactional(tr, "id@example.com", time.Now()); err != nil {
		t.Fatalf("a long transactional subject: %v", err)
	}
}

// An optional attribute read with index prints nothing when the contact
// has none, in the subject and the text part as in the HTML: text/template
// printed "<no value>", which went out to readers.
func TestAbsentOptionalAttributePrintsNothing(t *testing.T) {
	t.Parallel()
	tmpl := baseTemplate()
	tmpl.Subject = `Hey {{index .Attributes "nick"}}!`
	tmpl.Text = `Hi {{index .Attributes "nick"}}{{if index .Attributes "nick"}} (nick){{end}} {{.UnsubscribeURL}}`
	tmpl.HTML = `<p>Hi {{index .Attributes "nick"}}</p><a href="{{.UnsubscribeURL}}">u</a>`
	c := mustCompile(t, tmpl)
	for _, tc := range []struct {
		attrs             map[string]any
		subject, textHead string
	}{
		{map[string]any{}, "Hey !", "Hi  https:"},
		{map[string]any{"nick": nil}, "Hey !", "Hi  https:"},
		{map[string]any{"nick": "Bo"}, "Hey Bo!", "Hi Bo (nick) https:"},
	} {
		p := baseParams()
		p.Contact.Attributes = tc.attrs
		r := mustRender(t, c, p)
		if bytes.Contains(r.Bytes, []byte("no value")) {
			t.Errorf("attributes %v: the message says <no value>", tc.attrs)
		}
		msg, body := parts(t, r.Bytes)
		if got := msg.Header.Get("Subject"); got != tc.subject {
			t.Errorf("attributes %v: Subject %q, want %q", tc.attrs, got, tc.subject)
		}
		if !strings.HasPrefix(body["text/plain"], tc.textHead) {
			t.Errorf("attributes %v: text %q, want it to start %q", tc.attrs, body["text/plain"], tc.textHead)
		}
	}

	ct, err := CompileTransactional(TransactionalTemplate{Subject: `Hello {{index . "name"}}`, Text: `Dear {{.title}} {{index . "name"}}`})
	if err != nil {
		t.Fatal(err)
	}
	for _, data := range []map[string]any{{"title": "Dr"}, {"title": nil, "name": nil}} {
		subject, text, _, err := ct.Execute(data)
		if err != nil || strings.Contains(subject+text, "no value") || subject != "Hello " {
			t.Errorf("data %v: subject %q, text %q, %v", data, subject, text, err)
		}
	}
}

// A transactional template whose loops cost more than the budget whatever
// the data is refused when it is stored, as a broadcast's is at create; a
// template that only misses data it will be sent with is not.
func TestTransactionalConstantBombRefusedAtPut(t *testing.T) {
	t.Parallel()
	for _, part := range []TransactionalTemplate{
		{Subject: "s", Text: `{{range $i := 1000}}{{range 1000}}x{{end}}{{end}}`},
		{Subject: `{{range $i := 1000}}{{range 1000}}x{{end}}{{end}}`, Text: "t"},
		{Subject: "s", HTML: `{{range $i := 1000}}{{range 1000}}<b>x</b>{{end}}{{end}}`},
	} {
		start := time.Now()
		_, err := CompileTransactional(part)
		var ve *ValidationError
		if !errors.As(err, &ve) || !strings.Contains(ve.Reason, "render") {
			t.Errorf("CompileTransactional(%+v) = %v; want the budget's ValidationError", part, err)
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("refused after %s", d)
		}
	}
	if _, err := CompileTransactional(TransactionalTemplate{Subject: "Order {{.order}}", Text: "{{range .items}}{{.}}{{end}}"}); err != nil {
		t.Errorf("a template that needs its data: %v", err)
	}
}

// Validate refuses what a caller of transactional mail must not give: the
// fields only a signer or a server on the way writes, more than MaxHeaders
// fields, and names with control characters or bidirectional overrides
// (tester: DKIM-Signature, Received, Resent-Bcc and 10,000 fields were
// accepted).
func TestTransactionalValidateRefusesWhatOnlyOthersWrite(t *testing.T) {
	t.Parallel()
	base := Transactional{FromAddress: "app@example.com", To: "ann@example.org", Subject: "Hi", Text: "hello"}
	if err := base.Validate(); err != nil {
		t.Fatalf("base: %v", err)
	}
	many := make([]Header, MaxHeaders+1)
	for i := range many {
		many[i] = Header{Name: fmt.Sprintf("X-N%d", i), Value: "v"}
	}
	for _, tc := range []struct {
		name  string
		edit  func(*Transactional)
		field string
	}{
		{"DKIM-Signature", func(m *Transactional) { m.Headers = []Header{{"DKIM-Signature", "v=1; d=bank.example"}} }, "headers[0]"},
		{"Received", func(m *Transactional) { m.Headers = []Header{{"X-Ok", "1"}, {"received", "from x"}} }, "headers[1]"},
		{"Resent-Bcc", func(m *Transactional) { m.Headers = []Header{{"Resent-Bcc", "eve@example.org"}} }, "headers[0]"},
		{"ARC-Seal", func(m *Transactional) { m.Headers = []Header{{"ARC-Seal", "i=1"}} }, "headers[0]"},
		{"too many fields", func(m *Transactional) { m.Headers = many }, "headers"},
		{"to_name override", func(m *Transactional) { m.ToName = "Ann \u202egnp.exe" }, "to_name"},
		{"from_name bell", func(m *Transactional) { m.FromName = "App\a" }, fieldFromName},
	} {
		m := base
		tc.edit(&m)
		var ve *ValidationError
		if err := m.Validate(); !errors.As(err, &ve) || ve.Field != tc.field {
			t.Errorf("%s: %v; want a ValidationError on %s", tc.name, err, tc.field)
		}
	}
	ok := base
	ok.Headers = []Header{{"Reply-To", "help@example.com"}, {"X-Entity-Ref-ID", "42"}, {"Feedback-ID", "a:b:c:d"}}
	if err := ok.Validate(); err != nil {
		t.Errorf("ordinary extra fields: %v", err)
	}
}
