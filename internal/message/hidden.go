package message

import (
	"html"
	"regexp"
	"strings"
)

// withoutHidden returns src without the elements a reader cannot see: those
// with the hidden attribute, or an inline style that hides them
// (hiddenStyle), and links with nothing to click (emptyLink). It reads inline styles only: a class a <style> sheet
// hides is not seen, so this catches the usual mistake (an unsubscribe
// link inside a display:none block copied from another template, or a
// preheader), not every way to hide text. It runs once per broadcast, on
// the sample render (checkUnsubscribeLink), never per recipient.
func withoutHidden(src string) string {
	var out strings.Builder
	i, kept := 0, 0
	for i < len(src) {
		lt := strings.IndexByte(src[i:], '<')
		if lt < 0 {
			break
		}
		i += lt
		if strings.HasPrefix(src[i:], "<!--") {
			end := strings.Index(src[i+4:], "-->")
			if end < 0 {
				break
			}
			i += 4 + end + 3
			continue
		}
		end := tagEnd(src, i)
		if end < 0 {
			break
		}
		tag := src[i+1 : end]
		name := strings.ToLower(tagName(tag))
		if name == "" || strings.HasSuffix(tag, "/") || voidElements[name] {
			i = end + 1
			continue
		}
		after := skipNested(src, end+1, name)
		if !hiddenTag(tag) && (name != "a" || !emptyLink(src[end+1:after])) {
			i = end + 1
			continue
		}
		out.WriteString(src[kept:i])
		i, kept = after, after
	}
	out.WriteString(src[kept:])
	return out.String()
}

// emptyLink reports whether a link's element (its content and end tag)
// shows nothing to click: no text but white space, and no image. Its
// target alone is in the derived text, not on the reader's screen.
func emptyLink(inner string) bool {
	return strings.TrimSpace(htmlToText(inner)) == "" && !strings.Contains(strings.ToLower(inner), "<img")
}

// voidElements have no content, so hiding one hides nothing that follows.
var voidElements = map[string]bool{"area": true, "base": true, "br": true, "col": true, "embed": true, "hr": true,
	"img": true, "input": true, "link": true, "meta": true, "source": true, "track": true, "wbr": true}

// skipNested returns the index just after the end tag that closes an
// element name opened just before i, counting elements of the same name
// opened inside it; the end of src when it is never closed (a browser
// hides the rest too).
func skipNested(src string, i int, name string) int {
	depth := 1
	for i < len(src) {
		lt := strings.IndexByte(src[i:], '<')
		if lt < 0 {
			return len(src)
		}
		i += lt
		end := tagEnd(src, i)
		if end < 0 {
			return len(src)
		}
		tag := src[i+1 : end]
		closing := strings.HasPrefix(tag, "/")
		if asciiEqualFold(tagName(strings.TrimPrefix(tag, "/")), name) {
			switch {
			case closing:
				depth--
			case !strings.HasSuffix(tag, "/"):
				depth++
			}
		}
		i = end + 1
		if depth == 0 {
			return i
		}
	}
	return len(src)
}

// hiddenTag reports whether the start tag (without its angle brackets)
// hides its element: the hidden attribute, or an inline style that does.
func hiddenTag(tag string) bool {
	attrs := tag[len(tagName(tag)):]
	if hiddenAttr.MatchString(attrs) {
		return true
	}
	m := styleAttr.FindStringSubmatch(attrs)
	if m == nil {
		return false
	}
	return hiddenStyle(html.UnescapeString(m[1] + m[2] + m[3]))
}

var (
	hiddenAttr = regexp.MustCompile(`(?i)(^|\s)hidden(\s|=|/|$)`)
	styleAttr  = regexp.MustCompile(`(?i)(?:^|\s)style\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s>]+))`)
	// A zero length or opacity: 0, 0px, 0.0em, 0%; not 0.5em.
	zero = `0*(?:\.0*)?(?:px|pt|em|rem|%)?\s*(?:!important)?\s*(?:;|$)`
	// hidingDeclaration are the declarations that hide an element from a
	// reader: not displayed, invisible, fully transparent, or text of no
	// size.
	hidingDeclaration = regexp.MustCompile(`(?i)(?:^|;)\s*(?:display\s*:\s*none|visibility\s*:\s*hidden|opacity\s*:\s*` + zero +
		`|font-size\s*:\s*` + zero + `)`)
	// The preheader idiom: no height and nothing overflowing it.
	zeroHeight     = regexp.MustCompile(`(?i)(?:^|;)\s*(?:max-)?height\s*:\s*` + zero)
	overflowHidden = regexp.MustCompile(`(?i)(?:^|;)\s*overflow\s*:\s*hidden`)
)

// hiddenStyle reports whether an inline style hides its element.
func hiddenStyle(style string) bool {
	return hidingDeclaration.MatchString(style) || zeroHeight.MatchString(style) && overflowHidden.MatchString(style)
}
