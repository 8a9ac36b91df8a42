package message

import (
	"bytes"
	"math/rand/v2"
	"strings"
	"testing"
)

// derivedValues add to flatValues what could change the conversion around
// a value: white space at an end, a link target equal to its text, a
// fragment or mailto: target, half a character, and "href" inside an
// attribute.
var derivedValues = append([]string{
	"Ada", " lead", "trail ", "\u00a0nbsp", "nbsp\u00a0", "\u0085", "a\u00a0\u2003b", "#frag", "mailto:x@y.example", "MAILTO:X",
	"u", "q", "Unsubscribe", "href=https://evil.example/", "--", "r", "&amp", "https://example.com/u/u", "\xc2", "\xa0x", "x href=y", "amp;", "lt;", "-->", "<!--",
	"a\n\nb", "x\ty", "\ufffd", "&", "&amp", "#", "a.example/b c",
}, flatValues...)

// derivedTemplates are HTML bodies without a Text template. want says
// whether deriveText must take the template: the common shapes it must, and
// the ones where a value could change the text around it it must refuse.
var derivedTemplates = []struct {
	html string
	want bool
}{
	{`<p>Hello {{.Name}},</p><p>News for {{.Attributes.a}}.</p><a href="{{.UnsubscribeURL}}">Unsubscribe</a>`, true},
	{`<h1>Hi {{.Name}}</h1><p><a href="https://x.example/read?e={{.Email}}&amp;id={{.ID}}">Read</a> {{.Attributes.a}}{{.Attributes.b}}</p>`, true},
	{`<a href="{{.Attributes.a}}">{{.Attributes.b}}</a> <a href="{{.Attributes.b}}">u</a><a href={{.Attributes.a}}>q</a>`, true},
	{`<ul><li>{{.Name}}</li><li> {{.Attributes.a}} </li></ul><table><tr><td>{{.Email}}</td><td>x</td></tr></table>`, true},
	{`<title>{{.Name}}</title><head>{{.Attributes.a}}</head><textarea>{{.Attributes.b}}</textarea><br>{{.ID}}`, true},
	{`<p>&amp;{{.Name}}&nbsp;{{.Attributes.a}}&lt;</p>`, true},
	{`<a href="mailto:{{.Email}}">{{.Email}}</a><a href="#{{.Attributes.a}}">top</a><a href="https://{{.Attributes.b}}">https://{{.Attributes.b}}</a>`, true},
	// A field after an unfinished character reference or inside an <a>
	// tag outside its href: refused.
	{`<p>&am{{.Name}}</p>`, false},
	{`<p>&#{{.Attributes.a}}</p>`, false},
	{`<p>x&{{.Attributes.a}}</p>`, false},
	{`<a title="{{.Name}}" href="/x">y</a>`, false},
	{`<a data-a="{{.Attributes.a}}">y</a>`, false},
	// Found by review: a reference that decodes to a marker's code point
	// read as a field, and let a field into an <a> tag outside its href;
	// a URL in a <style> the conversion does not skip (html/template ends
	// the element only at "</style" and a delimiter) carried a bare '&',
	// '<' or "--" into the text.
	{`<p>Hi {{.Name}} &#983041;</p>`, false},
	{`<p>Hi {{.Name}} &#xF0001;</p>`, false},
	{`<a title="{{.Name}}" href="&#983041;">t</a>`, false},
	{`<style>a{x:y}</stylex>p{background:url({{.Attributes.a}}amp;)}</style>`, false},
	{`<head><style></head>p{background:url({{.Attributes.a}}amp;)}</style>`, false},
	{`<!DOCTYPE html <style>p{background:url({{.Attributes.a}};x)}</style>`, false},
	{`<style></stylex>p{background:url(a<b{{.Attributes.a}}>b)}</style>`, false},
	{`<style></stylex>p{background:url(<!--{{.Attributes.a}}>after)}</style>`, false},
	{`<p style="background: url('{{.Attributes.a}}')">{{.Name}}</p>`, true},
}

func derivedCompile(t testing.TB, html string) (*Compiled, bool) {
	t.Helper()
	c, err := Compile(Template{FromName: "N", FromAddress: "news@example.com", Subject: "s", HTML: html})
	if err != nil {
		return nil, false
	}
	return c, true
}

// checkDerived fails t where c's text part for d differs from converting
// d's rendered HTML.
func checkDerived(t testing.TB, c *Compiled, d templateData) {
	t.Helper()
	if got, want := renderParts(c, d), renderParts(slowOnly(c), d); got != want {
		t.Fatalf("html %q, name %q, a %q, b %q:\nderived   %q\nconverted %q", c.tmpl.HTML, d.Name, d.Attributes["a"], d.Attributes["b"], got, want)
	}
}

func TestDerivedTextMatchesConversion(t *testing.T) {
	t.Parallel()
	for _, dt := range derivedTemplates {
		c, ok := derivedCompile(t, dt.html)
		if !ok {
			t.Fatalf("%q does not compile", dt.html)
		}
		if got := c.derivedText != nil; got != dt.want {
			t.Errorf("%q: derived = %v, want %v", dt.html, got, dt.want)
		}
		for i, name := range derivedValues {
			for j, a := range derivedValues {
				checkDerived(t, c, flatData(name, a, derivedValues[(i+2*j)%len(derivedValues)]))
			}
		}
	}
}

// TestDerivedTextIsUsed: for ordinary values the derived text is what
// Render writes, not a fallback each time.
func TestDerivedTextIsUsed(t *testing.T) {
	t.Parallel()
	c, _ := derivedCompile(t, derivedTemplates[0].html)
	run := func(name string) bool {
		d := flatData(name, "Oslo", "b")
		var html bytes.Buffer
		var written []string
		if ok, err := c.flatHTML.execute(&html, &d, &c.budget, fieldHTML, &written); err != nil || !ok {
			t.Fatalf("flat execute for %q: %v %v", name, ok, err)
		}
		_, ok := c.derivedText.appendTo(nil, written)
		return ok
	}
	if !run("Ada Lovelace") {
		t.Error("the derived text fell back for ordinary values")
	}
	for _, v := range []string{" Ada", "", "x\xc2"} {
		if run(v) {
			t.Errorf("name %q: the derived text did not fall back", v)
		}
	}
}

// derivedFragments build random bodies: markup, text, character references
// whole and cut, links whose target or text holds a field, and fields.
var derivedFragments = []string{
	"<p>", "</p>", "<br>", "<li>", "<td>", "</td>", "<b>", "</b>", "<div>\n</div>", "<title>", "</title>",
	`<a href="{{.UnsubscribeURL}}">`, `<a href="https://x.example/?n={{.Name}}">`, `<a href="{{.Attributes.a}}">`,
	`<a href={{.Attributes.b}}>`, `<a href="#top">`, `<a href="mailto:{{.Email}}">`, `<a title="{{.Name}}" href="/x">`, "</a>",
	"{{.Name}}", "{{.Attributes.a}}", "{{.Attributes.b}}", "{{.Email}}", "{{.ID}}", "{{.UnsubscribeURL}}",
	" ", "\n", "  text ", "&amp;", "&am", "&#3", "&", "x<", "Unsubscribe", "u", "#", "mailto:", "\u00a0", "é", "\xc2",
	"<!-- c -->", "https://example.com/u/", "&#983041;", "&#xF0000;", "<style>", "</stylex>", "</style>",
	"p{background:url({{.Attributes.a}})}", "<!DOCTYPE html ", "amp;", "<!--",
}

// TestDerivedTextRandomTemplates compares the derived text with the
// conversion on random bodies and values.
func TestDerivedTextRandomTemplates(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(18, 10))
	derived := 0
	for range 3000 {
		var b strings.Builder
		for range 1 + rng.IntN(14) {
			b.WriteString(derivedFragments[rng.IntN(len(derivedFragments))])
		}
		c, ok := derivedCompile(t, b.String())
		if !ok || c.flatHTML == nil {
			continue
		}
		if c.derivedText != nil {
			derived++
		}
		for range 20 {
			pick := func() string { return derivedValues[rng.IntN(len(derivedValues))] }
			checkDerived(t, c, flatData(pick(), pick(), pick()))
		}
	}
	if derived < 500 {
		t.Errorf("only %d of the random bodies were derived: the test no longer tests much", derived)
	}
}

func FuzzDerivedTextMatchesConversion(f *testing.F) {
	for _, dt := range derivedTemplates {
		f.Add(dt.html, "Ada", "https://x.example/?a=b", "<&>")
	}
	f.Fuzz(func(t *testing.T, html, name, a, b string) {
		c, ok := derivedCompile(t, html)
		if !ok {
			return
		}
		checkDerived(t, c, flatData(name, a, b))
	})
}
