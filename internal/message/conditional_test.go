package message

import (
	"strings"
	"testing"
)

// FuzzConditionalMarkers: marking keeps a template's lines and columns (an
// error's position is as written), and a template that compiles renders
// every marker as written or not at all: never a field's value outside the
// context the escaper saw, never the action itself.
func FuzzConditionalMarkers(f *testing.F) {
	for _, s := range []string{
		`<!--[if mso | IE]><table><tr><td><![endif]--><p>{{.Name}}</p><!--[if mso | IE]></td></tr></table><![endif]-->`,
		`<!--[if !mso]><!--><a href="{{.UnsubscribeURL}}">u</a><!--<![endif]-->`,
		`<!--[if !mso]><!-- --><b>x</b><!--<![endif]--><!-- plain -->`,
		`<!--[if gte mso 9]><xml></xml><![endif]-->`,
		"<!--[if mso]>\n<![endif]-->",
		`<!--[if mso]><a title="<![endif]--><script>{{.Name}}</script><!--[if mso]>"></a><![endif]-->`,
		`{{define "m"}}<!--[if mso]>x<![endif]-->{{end}}<a title="{{template "m"}}">`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		m, err := markConditionals(src)
		if err != nil {
			return
		}
		if strings.Count(m.src, "\n") != strings.Count(src, "\n") {
			t.Fatalf("marking %q moved its lines", src)
		}
		for i, line := range strings.Split(src, "\n") {
			if got := strings.Split(m.src, "\n")[i]; len(got) < len(line) {
				t.Fatalf("marking %q shortened line %d: %q", src, i+1, got)
			}
		}
		tmpl := baseTemplate()
		tmpl.HTML = src + `<p><a href="{{.UnsubscribeURL}}">Unsubscribe</a></p>`
		c, err := Compile(tmpl)
		if err != nil {
			return
		}
		p := baseParams()
		p.Contact.Name = "</script><script>alert(1)</script>"
		r, err := c.Render(p)
		if err != nil {
			return
		}
		_, body := parts(t, r.Bytes)
		if html := body["text/html"]; strings.Contains(html, "{{"+conditionalFunc) || strings.Contains(html, "<script>alert(1)") {
			t.Fatalf("%q rendered an action or the name unescaped:\n%s", src, html)
		}
	})
}
