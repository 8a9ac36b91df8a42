package message

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
)

// The golden files pin the exact bytes of rendered messages: a resent or
// reconciled message must be byte-for-byte the one sent before, so any change
// to them has to be deliberate. Regenerate with
//
//	go test ./internal/message/ -run Golden -update
var updateGolden = flag.Bool("update", false, "rewrite the golden files under testdata/golden")

func TestRenderGolden(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("word ", 40)
	noSpaces := strings.Repeat("x", 1100)
	cases := []struct {
		name string
		tmpl Template
		mod  func(*Params)
	}{
		{name: "html-and-text", tmpl: baseTemplate()},
		{name: "no-unsubscribe", tmpl: baseTemplate(), mod: func(p *Params) { p.UnsubscribeURL = "" }},
		{name: "html-only-derived-text", tmpl: Template{
			FromName:    "News",
			FromAddress: "news@example.com",
			Subject:     "Derived {{.Name}}",
			HTML: `<!DOCTYPE html><html><HEAD><title>T</title><style>p{color:red}</style></head><Body>
<h1>Hi {{.Name}}</h1><!-- hidden --><!--[if mso]>x<![endif]-->
<P CLASS="a">Line one<br/>line&nbsp;two &amp; more &lt;tag&gt; &#233;&eacute; &bogus;</p>
<ul><li>first</li><li>  second  <li>third</ul><ol><li>one</ol>
<table><tr><td>a</td><td>b</td></tr><tr><th>c</th><TD>d</TD></tr></table>
<p><a href="https://example.com/cta?a=1&amp;b=2">Read it</a> <a href='https://example.com/same'>https://example.com/same</a>
<a href=https://example.com/bare>bare</a> <a href="#top">top</a> <a href="MAILTO:x@example.com">mail</a> <a name="n">anchor</a>
<a title="x>y" href="https://example.com/q">quoted gt</a></p>
<div>   spaced    out	text   </div><blockquote>quote</blockquote><hr><section>s</section><article>a</article><header>h</header><footer>f</footer>
<h2>x</h2><h3>y</h3><h4>z</h4><h5>v</h5><h6>w</h6><span>inline</span><b>bold</b><i>it</i>
<script type="text/javascript">alert("<p>x</p>")</script><SCRIPT>y</script >
1 < 2 and 3 > 2 <3 <
</body></html>`,
		}},
		{name: "non-ascii", tmpl: Template{
			FromName:    "Ünïcode Néws, Inc.",
			FromAddress: "news@example.com",
			Subject:     "Grüße, {{.Name}} — 🎉 " + strings.Repeat("ein langer Betreff ", 8),
			HTML:        "<p>Grüße {{.Name}}, 日本語のテキスト " + strings.Repeat("äöü ß € 🎉 ", 20) + "</p>",
			Text:        "Grüße {{.Name}}\n" + strings.Repeat("äöü ß € 🎉 ", 20) + "\n",
		}, mod: func(p *Params) { p.Contact.Name = "Zoë Ångström" }},
		{name: "specials-in-names", tmpl: Template{
			FromName:    `Doe, "Jane" (News)`,
			FromAddress: "news@example.com",
			Subject:     "Hi {{.Name}} = {{.Email}}",
			HTML:        "<p>{{.Name}}</p>",
			Text:        "{{.Name}} <{{.Email}}>\n",
		}, mod: func(p *Params) { p.Contact.Name = `O'Brien, \ "Pat"` }},
		{name: "empty-names", tmpl: Template{
			FromAddress: "news@example.com",
			Subject:     "x",
			HTML:        "<p>x</p>",
		}, mod: func(p *Params) { p.Contact.Name = "" }},
		{name: "long-lines", tmpl: Template{
			FromName:    "News",
			FromAddress: "news@example.com",
			Subject:     "Long " + long + "{{.Name}} " + long,
			HTML:        "<p>" + long + "</p><p>" + noSpaces + "</p><p>" + strings.Repeat("=", 100) + "</p>",
			Text:        long + "\n" + noSpaces + "\n" + strings.Repeat("a", 75) + " \n" + strings.Repeat("b", 74) + "\t\n" + strings.Repeat("c", 76) + "\n" + strings.Repeat("d", 73) + "=\n",
		}},
		{name: "dots-and-line-endings", tmpl: Template{
			FromName:    "News",
			FromAddress: "news@example.com",
			Subject:     "Dots",
			HTML:        "<p>.</p>\n.starts with dot\r\n..two\n",
			Text:        "before\n.\n.hidden\nFrom the start\r\ncrlf\r\nbare\rcr\r\r\n\ntrailing space \ntrailing tab\t\nnul\x7fdel=eq\r=\n\n\n",
		}},
		{name: "attributes", tmpl: Template{
			FromName:    "News",
			FromAddress: "news@example.com",
			Subject:     `{{.Attributes.company.name}} news{{with index .Attributes "city"}} from {{.}}{{end}}`,
			HTML:        `{{with .Attributes}}{{.plan}}{{end}}{{if .Attributes.vip}}VIP{{end}} {{.ID}} {{.Email}} <a href="https://example.com/{{.Attributes.plan}}?n={{.Name}}">go</a> {{range $k, $v := index .Attributes "tags"}}[{{$k}}={{$v}}]{{end}}`,
		}, mod: func(p *Params) {
			p.Contact.Attributes = map[string]any{
				"company": map[string]any{"name": "Acme & Co"},
				"plan":    "pro <b>",
				"vip":     true,
				"city":    "Oslo",
				"tags":    map[string]any{"b": 2, "a": "x&y"},
			}
		}},
		{name: "other-zone", tmpl: baseTemplate(), mod: func(p *Params) {
			p.Date = time.Date(2031, 12, 1, 23, 59, 59, 999, time.FixedZone("X", -(9*3600+30*60)))
			p.Contact.ID = ulid.MustParse("7ZZZZZZZZZZZZZZZZZZZZZZZZZ")
			p.UnsubscribeURL = "http://example.com/u/" + strings.Repeat("T", 80)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := mustCompile(t, tc.tmpl)
			p := baseParams()
			if tc.mod != nil {
				tc.mod(&p)
			}
			r := mustRender(t, c, p)
			checkGolden(t, "render-"+tc.name, renderedGolden(r))
		})
	}
}

func TestRenderTransactionalGolden(t *testing.T) {
	t.Parallel()
	base := Transactional{
		FromName:    "Shop",
		FromAddress: "receipts@Shop.example",
		To:          "ada@example.org",
		ToName:      "Ada Lovelace",
		Subject:     "Your receipt",
	}
	cases := []struct {
		name string
		mod  func(*Transactional)
	}{
		{"text-only", func(m *Transactional) { m.Text = "Thanks.\n.\nTotal = 3 €\n" + strings.Repeat("line ", 30) + "\n" }},
		{"html-only", func(m *Transactional) {
			m.HTML = `<p>Thanks <b>Ada</b>.</p><p><a href="https://shop.example/r/1">View receipt</a></p>`
		}},
		{"both", func(m *Transactional) {
			m.Text = "Thanks.\r\n"
			m.HTML = "<p>Thanks.</p>"
			m.Subject = "Ihre Bestellbestätigung — " + strings.Repeat("sehr lang ", 10)
			m.ToName = "Zoë"
			m.FromName = "Shöp"
			m.Headers = []Header{{"X-Campaign", "spring"}, {"X-Note", "grüße " + strings.Repeat("w ", 50)}}
		}},
		// html/template rejects or strips these, so only transactional
		// bodies (final HTML, not templates) reach htmlToText with them.
		{"html-unclosed-style", func(m *Transactional) { m.HTML = "<p>text before<style>never closed" }},
		{"html-unterminated-comment", func(m *Transactional) { m.HTML = "<p>a</p><!-- c --><p>b</p><!-- never ends <p>c</p>" }},
		{"html-lone-lt", func(m *Transactional) {
			m.HTML = "<p>a <b>b</b> <a href=\"https://x.example/\">link text <i>inner</i></a> <a href=\"https://x.example/2\"></a> <tag attr='unterminated"
		}},
		{"whitespace-html", func(m *Transactional) {
			m.Text = "plain\n"
			m.HTML = "  \n "
		}},
	}
	date := time.Date(2025, 3, 14, 15, 9, 26, 0, time.UTC)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := base
			tc.mod(&m)
			r, err := RenderTransactional(m, TransactionalMessageID("01J9ZQ7Y3M8B5N4K2H1G0F9E8D", m.SendingDomain()), date)
			if err != nil {
				t.Fatal(err)
			}
			checkGolden(t, "transactional-"+tc.name, renderedGolden(r))
		})
	}
}

// renderedGolden puts the envelope fields in front of the message so the
// golden file pins them too.
func renderedGolden(r Rendered) []byte {
	var b bytes.Buffer
	b.WriteString("MessageID=" + r.MessageID + "\nFrom=" + r.From + "\nTo=" + r.To + "\n\n")
	b.Write(r.Bytes)
	return b.Bytes()
}

func checkGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", "golden", name+".eml")
	if *updateGolden {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		i := 0
		for i < len(got) && i < len(want) && got[i] == want[i] {
			i++
		}
		lo := max(0, i-60)
		t.Errorf("%s differs from %s at byte %d:\n got: %q\nwant: %q", name, path, i, got[lo:min(len(got), i+60)], want[lo:min(len(want), i+60)])
	}
}
