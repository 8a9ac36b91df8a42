package message

import (
	"html"
	"regexp"
	"testing"
)

// The cases below pin paths of htmlToText that the golden files do not
// reach: skipped elements with capitals and non-ASCII text around their
// closing tag, and whitespace unicode.IsSpace knows but ASCII does not.
func TestHTMLToTextSkippedElements(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"<HEAD><TITLE>Title</TITLE><STYLE>p{}</STYLE></HEAD><P>Body</P>", "Body\n"},
		{"<style>Caps Before</Style >after", "after\n"},
		{"<style>x</style", "\n"},
		{"<style>ü</STYLE>after ü", "after ü\n"},
		// Characters whose lowercase has another length (İ, the Kelvin
		// sign) neither end the element nor shift where it ends; a tag
		// name with them in it is not the closing tag.
		{"<title>İ</tİtle>after</title>rest", "rest\n"},
		{"<script>\u212a</SCRİPT>a</script>b", "b\n"},
		{"<style>İİİ</STYLE>after", "after\n"},
		{"<script>x</\u212aEY></script>y", "y\n"},
		{"a\u00a0\u00a0b&nbsp;c\u2003 d\t\ne", "a b c d e\n"},
		{"<p>  lead</p>\n\n\n<p>trail  </p>  <br><br><br>x", "lead\n\ntrail\n\nx\n"},
		{"<a href=\"https://x.example/\">  https://x.example/  </a> <a href=\"mailto:a@b\">a@b</a>", "https://x.example/  a@b\n"},
		// mailto: in any case keeps the text alone; a target that only
		// starts like it is a link like any other.
		{"<a href=\"MAILTO:a@b\">write</a> <a href=\"MailTo:c@d\">us</a>", "write us\n"},
		{"<a href=\"mailt\">m</a> <a href=\"mailto\">n</a>", "m (mailt) n (mailto)\n"},
	} {
		if got := htmlToText(tc.in); got != tc.want {
			t.Errorf("htmlToText(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// reHref is the pattern attrHref implements by hand: an href attribute of
// its own, after white space, a quote or a slash (not data-href's end).
var reHref = regexp.MustCompile(`(?i)(?:^|[\s"'/])href\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s>]+))`)

func FuzzAttrHref(f *testing.F) {
	for _, s := range []string{
		`a href="https://x.example/?a=1&amp;b=2"`, `a HREF='#top'`, `a href=bare class=x`, `a data-href="x" href="y"`,
		`a xhref="n" href = "y"`, `a href="unterminated`, `a href= >`, `a href=`, `a href=""`, `a href=''`, `a href`,
		"a href=\v\"x\"", "a\thref\n=\r\"x\"", `a ſhref="x"`, `a éhref="x"`, `a hr`, `a href=x"y`, `a href ="x`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, tag string) {
		want := ""
		if m := reHref.FindStringSubmatch(tag); m != nil {
			want = html.UnescapeString(m[1] + m[2] + m[3])
		}
		if got := attrHref(tag); got != want {
			t.Fatalf("attrHref(%q) = %q, want %q", tag, got, want)
		}
	})
}
