package message

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/rangecast/rangecast/internal/clock"
)

// flatTemplates put fields in every HTML context html/template escapes
// for. The ones a flat template cannot take (script, CSS values, a field
// in a comment, srcset, functions, branches) are here too: they must fall back, not
// render differently.
var flatTemplates = []struct {
	html, subject, text string
	flat                bool // every part is expected to be flat
}{
	{html: `<p>Hi {{.Name}}, {{.Attributes.a}}</p>`, subject: "Hi {{.Name}} {{.Attributes.a}}", text: "Hi {{.Name}}\n{{.Attributes.b}} {{.ID}} {{.Email}}\n", flat: true},
	{html: `<p title="{{.Name}}" data-x='{{.Attributes.a}}' y={{.Attributes.b}}>{{.Email}} {{.ID}}</p>`, subject: "{{.Email}}", flat: true},
	{html: `<a href="{{.UnsubscribeURL}}">u</a><a href="{{.Attributes.a}}">a</a><a href={{.Attributes.b}}>b</a>`, subject: "s", flat: true},
	{html: `<a href="https://x.example/p?e={{.Email}}&n={{.Name}}&a={{.Attributes.a}}">q</a><a href="/path/{{.Attributes.b}}">p</a>`, subject: "s {{.ID}}", flat: true},
	{html: `<textarea>{{.Name}}</textarea><title>{{.Attributes.a}}</title><img alt={{.Attributes.b}} src="{{.Attributes.a}}">`, subject: "s", flat: true},
	{html: `<!doctype html><html><head><meta charset="utf-8"></head><body>{{.Name}}<br>{{.Attributes.a}}{{.Attributes.b}}</body></html>`, subject: "{{.Attributes.a}}{{.Attributes.b}}", flat: true},
	// CSS url() is a URL context, and html/template drops comments.
	{html: `<!--[if mso | IE]><table width="600"><tr><td title="{{.Name}}"><![endif]--><!--[if !mso]><!--><div>{{.Attributes.a}}</div><!--<![endif]--><!--[if mso | IE]></td></tr></table><![endif]-->`, subject: "s", flat: true},
	{html: `<style>p { background: url({{.Attributes.a}}) }</style><p style="background: url('{{.Attributes.b}}')">x</p><!-- note -->{{.Name}}`, subject: "s", flat: true},
	// Not flat: they must render as the template package does.
	{html: `<script>var n = {{.Name}};</script><p>{{.Attributes.a}}</p>`, subject: "s"},
	{html: `<style>p { color: {{.Attributes.a}} }</style><p style="x: {{.Name}}">{{.Attributes.b}}</p>`, subject: "s"},
	{html: `<!-- {{.Name}} --><p onclick="f({{.Attributes.a}})">x</p><img srcset="{{.Attributes.b}}">`, subject: "s"},
	{html: `{{if .Name}}<p>{{.Name}}</p>{{else}}<p>none</p>{{end}}{{with index .Attributes "b"}}{{.}}{{end}}`, subject: `{{printf "%s!" .Name}}`},
	{html: `<p>{{.Name | html}} {{.Attributes.a | urlquery}} {{len .Name}}</p>`, subject: "s", text: `{{range $i, $c := .Attributes}}{{$i}}={{$c}} {{end}}`},
	{html: `{{define "x"}}<b>{{.}}</b>{{end}}<p>{{template "x" .Name}}{{.Attributes.a}}</p>`, subject: "s"},
	{html: `<p>{{$.Name}} {{.Attributes.a.b}}</p>`, subject: "s"},
}

// flatValues are the strings that exercise html/template's escapers: each
// escaper's specials, entities, percent escapes (valid and not), URLs with
// safe and unsafe schemes, empty, NUL, invalid UTF-8 and the noncharacters
// the unquoted-attribute escaper writes as references.
var flatValues = []string{
	"Ada Lovelace", "", " ", "O'Brien & \"Sons\" <b>+</b>", "a=b`c d\te\nf\rg\vh\fi",
	"https://example.com/a b?c=d&e=f#g", "javascript:alert(1)", "JavaScript:x", "mailto:a@b.example",
	"HTTP://X.EXAMPLE/%41%zz%4", "/rel/path:colon", "data:text/html,x", "%", "%%41",
	"Zoë Ångström 日本 🎉", "\x00nul", "bad\xffutf8\xc3", "\ufdd0\ufdef\ufff0\uffff", "&amp;&lt;",
	"!#$&*+,/:;=?@[]-._~'()", strings.Repeat("<&>", 50),
}

// slowOnly is c with no flat templates: everything through the template
// package, as before flat templates existed.
func slowOnly(c *Compiled) *Compiled {
	cp := *c
	cp.flatSubject, cp.flatHTML, cp.flatText = nil, nil, nil
	cp.derivedText = nil
	return &cp
}

// renderParts renders the subject and both bodies for d, or the error.
func renderParts(c *Compiled, d templateData) string {
	var subject, html, text bytes.Buffer
	var written []string
	s, err := c.execSubject(d, &subject)
	if err != nil {
		return "subject error: " + err.Error()
	}
	if err := c.execBodies(d, &html, &text, &written); err != nil {
		return "body error: " + err.Error()
	}
	return s + "\x00" + html.String() + "\x00" + text.String()
}

func flatCompile(t testing.TB, i int) *Compiled {
	t.Helper()
	ft := flatTemplates[i]
	c, err := Compile(Template{FromName: "N", FromAddress: "news@example.com", Subject: ft.subject, HTML: ft.html, Text: ft.text})
	if err != nil {
		t.Fatalf("template %d: %v", i, err)
	}
	return c
}

func flatData(name, a, b string) templateData {
	return templateData{
		ID: testContact, Email: "ada@example.org", Name: name,
		Attributes:     map[string]any{"a": a, "b": b},
		UnsubscribeURL: "https://example.com/u/" + a,
	}
}

func TestFlatMatchesTemplate(t *testing.T) {
	t.Parallel()
	for i, ft := range flatTemplates {
		c := flatCompile(t, i)
		slow := slowOnly(c)
		gotFlat := c.flatSubject != nil && c.flatHTML != nil && (ft.text == "" || c.flatText != nil)
		if gotFlat != ft.flat {
			t.Errorf("template %d: flat = %v, want %v (%q)", i, gotFlat, ft.flat, ft.html)
		}
		for _, name := range flatValues {
			for _, a := range flatValues {
				d := flatData(name, a, flatValues[(len(a)+len(name))%len(flatValues)])
				if got, want := renderParts(c, d), renderParts(slow, d); got != want {
					t.Fatalf("template %d, name %q, a %q:\nflat     %q\ntemplate %q", i, name, a, got, want)
				}
			}
		}
	}
}

// TestFlatFallsBack: values a flat template does not write itself
// (not a string, absent, past the output budget) render, or fail, exactly
// as through the template package.
func TestFlatFallsBack(t *testing.T) {
	t.Parallel()
	c := flatCompile(t, 0)
	if c.flatHTML == nil {
		t.Fatal("template 0 is not flat")
	}
	slow := slowOnly(c)
	for _, attrs := range []map[string]any{
		{"a": 42.5, "b": "x"}, {"a": true, "b": nil}, {"a": "x"}, nil,
		{"a": []any{"x", 1}, "b": map[string]any{"k": "v"}}, {"a": ulid.ULID{}, "b": "y"},
	} {
		d := templateData{ID: testContact, Email: "e@example.org", Name: "N", Attributes: attrs}
		if got, want := renderParts(c, d), renderParts(slow, d); got != want {
			t.Errorf("attributes %v:\nflat     %q\ntemplate %q", attrs, got, want)
		}
	}

	small := *c
	small.budget.MaxOutput = 64
	d := flatData(strings.Repeat("n", 100), "a", "b")
	got := renderParts(&small, d)
	if want := renderParts(slowOnly(&small), d); got != want || !strings.Contains(got, "renders to more than 64 bytes") {
		t.Errorf("past the output budget:\nflat     %q\ntemplate %q", got, want)
	}
}

// TestFlatStopsAtOutputBudget: a value repeated in many escaping contexts
// stops at MaxOutput, not after the whole part was written (2,000 links
// holding a 24 KB escaped value are 48 MB).
func TestFlatStopsAtOutputBudget(t *testing.T) {
	t.Parallel()
	c, err := Compile(Template{FromName: "N", FromAddress: "news@example.com", Subject: "s",
		HTML: strings.Repeat(`<a href="/?q={{.Attributes.a}}">x</a>`, 2000)})
	if err != nil {
		t.Fatal(err)
	}
	if c.flatHTML == nil {
		t.Fatal("the links template is not flat")
	}
	c.budget.MaxTime = 0 // the output's limit alone, however slow the box
	d := flatData("N", strings.Repeat("🎉", 2048), "b")
	onePart := len(processURL(d.Attributes["a"].(string), false)) + 64
	var buf bytes.Buffer
	ok, err := c.flatHTML.execute(&buf, &d, &c.budget, fieldHTML, nil)
	if ok || err != nil {
		t.Fatalf("execute = %v, %v; want a fallback past the output budget", ok, err)
	}
	if buf.Len() > c.budget.MaxOutput+onePart {
		t.Errorf("wrote %d bytes before stopping; the budget is %d and one part at most %d", buf.Len(), c.budget.MaxOutput, onePart)
	}
	if got := renderParts(c, d); !strings.Contains(got, "renders to more than") {
		t.Errorf("render past the output budget: %q", got)
	}
}

// steppingClock moves on by step at every reading.
type steppingClock struct {
	clock.Real
	now  time.Time
	step time.Duration
}

func (s *steppingClock) Now() time.Time { s.now = s.now.Add(s.step); return s.now }

// TestFlatMaxTime: the flat path keeps the budget's time, reading the
// clock as the template package's meter does, and fails with its error.
func TestFlatMaxTime(t *testing.T) {
	t.Parallel()
	c, err := Compile(Template{FromName: "N", FromAddress: "news@example.com", Subject: "s",
		HTML: strings.Repeat(`<p>{{.Name}}</p>`, 2000)})
	if err != nil {
		t.Fatal(err)
	}
	if c.flatHTML == nil {
		t.Fatal("the paragraphs template is not flat")
	}
	c.budget.MaxTime = time.Second
	d := flatData("N", "a", "b")
	for _, cc := range []*Compiled{c, slowOnly(c)} {
		cc.budget.Clock = &steppingClock{step: 100 * time.Millisecond}
		got := renderParts(cc, d)
		if !strings.Contains(got, "body error: ") || !strings.Contains(got, "takes longer than 1s to render") {
			t.Errorf("flat %v: %q", cc.flatHTML != nil, got)
		}
	}
	// A fast clock: the same template renders.
	c.budget.Clock = &steppingClock{step: time.Microsecond}
	if got := renderParts(c, d); strings.Contains(got, "error") {
		t.Errorf("with time to spare: %q", got)
	}
}

// TestFlatRenderIdentical compares whole messages, headers and MIME parts
// included, for the golden templates.
func TestFlatRenderIdentical(t *testing.T) {
	t.Parallel()
	c := mustCompile(t, baseTemplate())
	if c.flatSubject == nil || c.flatHTML == nil || c.flatText == nil {
		t.Fatal("the base template is not flat")
	}
	for i, name := range []string{"Ada", "Zoë <Ångström> & \"co\"", "x+y=z"} {
		p := baseParams()
		p.Contact.Name = name
		p.Contact.ID = ulid.MustNew(uint64(i), bytes.NewReader(make([]byte, 16)))
		got, err := c.Render(p)
		if err != nil {
			t.Fatal(err)
		}
		want, err := slowOnly(c).Render(p)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Bytes, want.Bytes) {
			t.Errorf("name %q: flat and template renders differ:\n%s\n---\n%s", name, got.Bytes, want.Bytes)
		}
	}
}

func FuzzFlatMatchesTemplate(f *testing.F) {
	for i := range flatTemplates {
		f.Add(uint8(i), "Ada", "https://x.example/?a=b", "<&>")
	}
	f.Add(uint8(2), "x", "javascript:y", "%zz")
	compiled := make([]*Compiled, len(flatTemplates))
	for i := range flatTemplates {
		compiled[i] = flatCompile(f, i)
	}
	f.Fuzz(func(t *testing.T, i uint8, name, a, b string) {
		c := compiled[int(i)%len(compiled)]
		d := flatData(name, a, b)
		if got, want := renderParts(c, d), renderParts(slowOnly(c), d); got != want {
			t.Fatalf("template %d:\nflat     %q\ntemplate %q", int(i)%len(compiled), got, want)
		}
	})
}
