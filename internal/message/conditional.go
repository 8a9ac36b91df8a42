package message

import (
	htmltemplate "html/template"
	"io"
	"regexp"
	"strconv"
	"strings"
	"text/template/parse"
)

// Outlook's conditional comments carry what Outlook for Windows alone
// shows: MJML's fixed-width "ghost tables", VML buttons and backgrounds,
// Office settings. Every email builder writes them (MJML, Stripo, BEE,
// Mailchimp):
//
//	<!--[if mso | IE]><table width="600"><tr><td><![endif]-->  shown to Outlook only
//	<!--[if !mso]><!--><div class="col">…</div><!--<![endif]-->  hidden from Outlook only
//
// html/template drops every comment, these too: Outlook lost its layout
// and its buttons, and saw what was written for every other client. So
// their markers are kept. Before the template is parsed each marker
// becomes an inert placeholder (conditionalMarkers), which the escaper
// reads as text; once it has escaped the tree, keep puts the markers back
// in the tree's text. What lies between them is escaped as the HTML it
// is. Other comments are dropped as before.
//
// The unsubscribe link check and the derived plain text read the markers
// as comments, as a mail client other than Outlook does: a link only
// Outlook shows does not count as shown. The check reads Outlook's view
// too (outlookView): a link every client but Outlook shows is refused.

// conditionalMarker matches the markers: an opening [if …]> (and the
// <!--> or <!-- --> that reveals the rest to other clients), and the
// closing [endif]-->, with the <!-- that hides it from them. One line each,
// so a template's line numbers stay as written.
var conditionalMarker = regexp.MustCompile(`(?i)<!--\[if [^\]\n{}]{1,64}\]>(?:<!--(?: ?--)?>)?|(?:<!--)?<!\[endif\]-->`)

// placeholderMark brackets a marker's index; private-use code points, which a
// template written by a person does not hold.
const placeholderMark = "\uF8FF"

// conditionalMarkers is a template's source with its conditional-comment
// markers replaced by placeholders, and the markers by index. A source
// holding placeholderMark already is left alone (its comments dropped, as
// before).
type conditionalMarkers struct {
	src     string
	markers []string
}

func markConditionals(src string) conditionalMarkers {
	if strings.Contains(src, placeholderMark) || !strings.Contains(src, "<!") {
		return conditionalMarkers{src: src}
	}
	var markers []string
	marked := conditionalMarker.ReplaceAllStringFunc(src, func(m string) string {
		markers = append(markers, m)
		return placeholderMark + strconv.Itoa(len(markers)-1) + placeholderMark
	})
	return conditionalMarkers{src: marked, markers: markers}
}

// keep makes t's escaper run (an execution into a writer that takes
// nothing stops at its first write; t's errors surface at the first real
// render) and then puts the markers back into the text of every template
// of t.
func (c conditionalMarkers) keep(t *htmltemplate.Template) {
	if len(c.markers) == 0 {
		return
	}
	t.Execute(refuseWrites{}, nil) //nolint:errcheck // only the escaping is wanted
	for _, tt := range t.Templates() {
		if tt.Tree == nil {
			continue
		}
		walk(tt.Tree.Root, func(n parse.Node) {
			if txt, ok := n.(*parse.TextNode); ok && strings.Contains(string(txt.Text), placeholderMark) {
				txt.Text = []byte(c.unmark(string(txt.Text)))
			}
		})
	}
}

// unmark puts the markers back in s in place of their placeholders.
func (c conditionalMarkers) unmark(s string) string {
	var b strings.Builder
	for {
		i := strings.Index(s, placeholderMark)
		if i < 0 {
			break
		}
		rest := s[i+len(placeholderMark):]
		j := strings.Index(rest, placeholderMark)
		n, err := strconv.Atoi(rest[:max(j, 0)])
		if j < 0 || err != nil || n < 0 || n >= len(c.markers) {
			break // not one of ours: left as it is
		}
		b.WriteString(s[:i])
		b.WriteString(c.markers[n])
		s = rest[j+len(placeholderMark):]
	}
	b.WriteString(s)
	return b.String()
}

// refuseWrites stops an execution at its first write.
type refuseWrites struct{}

func (refuseWrites) Write([]byte) (int, error) { return 0, io.ErrShortWrite }

// outlookView is rendered HTML as Outlook for Windows reads it: what its
// conditional comments show it revealed, and what they hide from it
// (<!--[if !mso]><!-->…<!--<![endif]-->) gone. The unsubscribe link check
// reads this as well as what every other client sees: a link only inside
// a !mso block is one Outlook's readers never see.
func outlookView(html string) string {
	if !strings.Contains(html, "[if ") {
		return html
	}
	html = notForOutlook.ReplaceAllString(html, "")
	return conditionalMarker.ReplaceAllString(html, "")
}

// notForOutlook is a conditional block whose condition excludes Outlook
// (!mso, alone or with others: [if !mso | IE]), to its [endif].
var notForOutlook = regexp.MustCompile(`(?is)<!--\[if [^\]\n]*!\s*mso[^\]\n]*\]>.*?<!\[endif\]-->`)

// linksToUnsubscribe reports a tag whose href is the unsubscribe link (a
// query or fragment after it allowed): Outlook's VML buttons
// (<v:roundrect href="…">) are links that are not <a>.
func linksToUnsubscribe(src string) bool {
	for i := 0; ; {
		start, end, ok := nextTag(src, i)
		if !ok {
			return false
		}
		i = end + 1
		href := strings.TrimSpace(attrHref(src[start+1 : end]))
		if rest, ok := strings.CutPrefix(href, SampleUnsubscribeURL); ok && (rest == "" || rest[0] == '?' || rest[0] == '#') {
			return true
		}
	}
}
