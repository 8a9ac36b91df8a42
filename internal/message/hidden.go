package message

import (
	"html"
	"regexp"
	"strings"
)

// withoutHidden returns src without the elements a reader cannot see: those
// with the hidden attribute, or an inline style that hides them and that
// nothing inside can undo (hiddenStyle), and links with nothing to click
// (emptyLink). It reads inline styles only: a class a <style> sheet hides
// is not seen, so this catches the usual mistake (an unsubscribe link
// inside a display:none block copied from another template, or a
// preheader), not every way to hide text. It errs toward visible: a
// refused template is a person's time, a missed hidden link is the old
// behaviour. It runs once per broadcast, on the sample render
// (checkUnsubscribeLink), never per recipient.
func withoutHidden(src string) string {
	var out strings.Builder
	i, kept := 0, 0
	for {
		start, end, ok := nextTag(src, i)
		if !ok {
			break
		}
		tag := src[start+1 : end]
		name := strings.ToLower(tagName(tag))
		if name == "" || strings.HasSuffix(tag, "/") || voidElements[name] {
			i = end + 1
			continue
		}
		after := skipNested(src, end+1, name)
		if !neverShown[name] && !hiddenTag(tag) && (name != "a" || !emptyLink(src[end+1:after])) {
			i = end + 1
			continue
		}
		out.WriteString(src[kept:start])
		i, kept = after, after
	}
	out.WriteString(src[kept:])
	return out.String()
}

// nextTag finds the next tag at or after i, skipping comments (MSO
// conditional comments included): the index of its '<' and of its '>'.
func nextTag(src string, i int) (start, end int, ok bool) {
	for i < len(src) {
		lt := strings.IndexByte(src[i:], '<')
		if lt < 0 {
			return 0, 0, false
		}
		i += lt
		if strings.HasPrefix(src[i:], "<!--") {
			e := strings.Index(src[i+4:], "-->")
			if e < 0 {
				return 0, 0, false
			}
			i += 4 + e + 3
			continue
		}
		e := tagEnd(src, i)
		if e < 0 {
			i++ // a lone '<' is text
			continue
		}
		return i, e, true
	}
	return 0, 0, false
}

// emptyLink reports whether a link's element (its content and end tag)
// shows nothing to click: no text but white space, and no image. Its
// target alone is in the derived text, not on the reader's screen.
func emptyLink(inner string) bool {
	lower := strings.ToLower(inner)
	return strings.TrimSpace(htmlToText(inner)) == "" && !strings.Contains(lower, "<img") && !strings.Contains(lower, "<svg")
}

// neverShown are elements whose content no reader sees: a link inside a
// <template> passed the visible-link check (tester).
var neverShown = map[string]bool{"template": true, "head": true, "title": true, "script": true, "style": true}

// voidElements have no content, so hiding one hides nothing that follows.
var voidElements = map[string]bool{"area": true, "base": true, "br": true, "col": true, "embed": true, "hr": true,
	"img": true, "input": true, "link": true, "meta": true, "source": true, "track": true, "wbr": true}

// selfClosing are elements whose end tag may be left out and that a start
// tag of the same name ends (a browser closes an open <p> at the next <p>,
// an <li> at the next <li>): there, that start tag closes the element
// instead of nesting in it.
var selfClosing = map[string]bool{"p": true, "li": true, "dt": true, "dd": true, "tr": true, "td": true, "th": true,
	"option": true, "optgroup": true, "thead": true, "tbody": true, "tfoot": true, "rt": true, "rp": true}

// skipNested returns the index just after the element name opened just
// before i ends: its end tag, counting elements of the same name opened
// inside it, or the start of the next element that closes it
// (selfClosing); the end of src when it is never closed (a browser hides
// the rest too).
func skipNested(src string, i int, name string) int {
	depth := 1
	for {
		start, end, ok := nextTag(src, i)
		if !ok {
			return len(src)
		}
		tag := src[start+1 : end]
		closing := strings.HasPrefix(tag, "/")
		if asciiEqualFold(tagName(strings.TrimPrefix(tag, "/")), name) {
			switch {
			case closing:
				depth--
			case selfClosing[name] && depth == 1:
				return start
			case !strings.HasSuffix(tag, "/"):
				depth++
			}
		}
		i = end + 1
		if depth == 0 {
			return i
		}
	}
}

// hiddenTag reports whether the start tag (without its angle brackets)
// hides its element: the hidden attribute, or an inline style that does.
func hiddenTag(tag string) bool {
	for name, value := range attributes(tag[len(tagName(tag)):]) {
		switch strings.ToLower(name) {
		case "hidden":
			return true
		case "style":
			if hiddenStyle(html.UnescapeString(value)) {
				return true
			}
		}
	}
	return false
}

// attributes yields a start tag's attributes (the text after its name):
// name, then the value unquoted, or "" when it has none.
func attributes(s string) func(yield func(name, value string) bool) {
	return func(yield func(name, value string) bool) {
		for i := 0; i < len(s); {
			for i < len(s) && (reSpace(s[i]) || s[i] == '/') {
				i++
			}
			start := i
			for i < len(s) && !reSpace(s[i]) && s[i] != '=' && s[i] != '/' {
				i++
			}
			name := s[start:i]
			if name == "" {
				return
			}
			j := skipRESpace(s, i)
			value := ""
			if j < len(s) && s[j] == '=' {
				j = skipRESpace(s, j+1)
				if j < len(s) && (s[j] == '"' || s[j] == '\'') {
					q := s[j]
					k := strings.IndexByte(s[j+1:], q)
					if k < 0 {
						value, i = s[j+1:], len(s)
					} else {
						value, i = s[j+1:j+1+k], j+2+k
					}
				} else {
					k := j
					for k < len(s) && !reSpace(s[k]) {
						k++
					}
					value, i = s[j:k], k
				}
			}
			if !yield(name, value) {
				return
			}
		}
	}
}

var (
	// A zero length or opacity: 0, 0px, 0.0em, 0%; not 0.5em.
	zero = `0*(?:\.0*)?(?:px|pt|em|rem|%)?\s*(?:!important)?\s*(?:;|$)`
	// hidingDeclaration are the declarations that hide an element and
	// everything in it whatever its children say: not displayed, or fully
	// transparent. Not font-size:0 (MJML sets it on every column and sets
	// the size again inside) nor visibility:hidden (a child may be
	// visible again).
	hidingDeclaration = regexp.MustCompile(`(?i)(?:^|;)\s*(?:display\s*:\s*none|opacity\s*:\s*` + zero + `)`)
	// The preheader idiom: no height and nothing overflowing it.
	zeroHeight     = regexp.MustCompile(`(?i)(?:^|;)\s*(?:max-)?height\s*:\s*` + zero)
	overflowHidden = regexp.MustCompile(`(?i)(?:^|;)\s*overflow\s*:\s*hidden`)
)

// hiddenStyle reports whether an inline style hides its element.
func hiddenStyle(style string) bool {
	return hidingDeclaration.MatchString(style) || zeroHeight.MatchString(style) && overflowHidden.MatchString(style)
}
