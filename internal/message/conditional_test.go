package message

import (
	"strings"
	"testing"
)

// FuzzConditionalMarkers: putting the markers back gives the source as
// written, whatever it holds, and a placeholder never survives a render of
// a template that parses.
func FuzzConditionalMarkers(f *testing.F) {
	for _, s := range []string{
		`<!--[if mso | IE]><table><tr><td><![endif]--><p>{{.Name}}</p><!--[if mso | IE]></td></tr></table><![endif]-->`,
		`<!--[if !mso]><!--><a href="{{.UnsubscribeURL}}">u</a><!--<![endif]-->`,
		`<!--[if !mso]><!-- --><b>x</b><!--<![endif]--><!-- plain -->`,
		`<!--[if gte mso 9]><xml></xml><![endif]-->`,
		"<!--[if mso]>\n<![endif]-->",
		`<!--[if {{.Name}}]>x<![endif]-->`,
		"\uF8FF0\uF8FF<!--[if mso]>",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		m := markConditionals(src)
		if got := m.unmark(m.src); got != src {
			t.Fatalf("unmark(mark(%q)) = %q", src, got)
		}
		if strings.Count(m.src, "\n") != strings.Count(src, "\n") {
			t.Fatalf("marking %q moved its lines", src)
		}
	})
}
