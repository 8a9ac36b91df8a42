package message

import (
	"html"
	"regexp"
	"strconv"
	"strings"
	"unicode"
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
		inner := src[end+1 : after]
		// A link's own content is judged with what hides inside it taken
		// out: <a><span style="font-size:0">Unsubscribe</span></a> has
		// nothing to click (verifier).
		if !neverShown[name] && !hiddenTag(name, tag, inner) && (name != "a" || !emptyLink(withoutHidden(inner))) {
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
// shows nothing to click: no letter or digit (white space, a lone "."),
// and no image. Its target alone is in the derived text, not on the
// reader's screen.
func emptyLink(inner string) bool {
	return !strings.ContainsFunc(htmlToText(inner), func(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) }) &&
		!showsImage(inner)
}

// showsImage reports whether src holds an image bigger than a tracking
// pixel (no width or height given counts as big), or an SVG.
func showsImage(src string) bool {
	if strings.Contains(strings.ToLower(src), "<svg") {
		return true
	}
	for i := 0; ; {
		start, end, ok := nextTag(src, i)
		if !ok {
			return false
		}
		i = end + 1
		tag := src[start+1 : end]
		if !strings.EqualFold(tagName(tag), "img") {
			continue
		}
		tiny := false
		for attr, value := range attributes(tag[len(tagName(tag)):]) {
			if a := strings.ToLower(attr); a == "width" || a == "height" {
				if n, _, ok := length(strings.TrimSpace(value)); ok && n <= 2 {
					tiny = true
				}
			}
		}
		if !tiny {
			return true
		}
	}
}

// neverShown are elements whose content no reader sees, or sees only as
// inert text

// neverShown are elements whose content no reader sees, or sees only as
// inert text: a link inside a <template> passed the visible-link check,
// and inside a <textarea> or <xmp> it is text nobody can click (tester).
var neverShown = map[string]bool{"template": true, "head": true, "title": true, "script": true, "style": true,
	"textarea": true, "xmp": true, "iframe": true, "object": true, "noembed": true, "noframes": true, "select": true}

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

// hiddenTag reports whether the start tag (without its angle brackets) of
// element name, whose content is inner, hides it: the hidden attribute, a
// <details> not open, or an inline style that does (hiddenStyle).
func hiddenTag(name, tag, inner string) bool {
	open := false
	for attr, value := range attributes(tag[len(tagName(tag)):]) {
		switch strings.ToLower(attr) {
		case "hidden":
			return true
		case "open":
			open = true
		case "style":
			if hiddenStyle(html.UnescapeString(value), inner) {
				return true
			}
		}
	}
	// A closed <details> shows its summary only; a link inside it is
	// behind a click on something else (tester).
	return name == "details" && !open
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

// hiddenStyle reports whether an inline style hides its element, whose
// content is inner. Some declarations hide it whatever its content says
// (display:none, opacity:0, no height or width with nothing overflowing,
// scaled to nothing, moved far off the page, its text pushed off its box);
// others only unless something inside sets the property again
// (visibility:hidden, a font too small to read, transparent text or text
// the color of its own background): MJML sets font-size:0 on every column
// and the size again inside, and a child may be visibility:visible.
func hiddenStyle(style, inner string) bool {
	d := declarations(style)
	overflowHidden := d["overflow"] == "hidden"
	switch {
	case d["display"] == "none",
		nearlyZero(d["opacity"]), isZero(d["zoom"]),
		strings.HasPrefix(d["filter"], "opacity(") && nearlyZero(strings.TrimSuffix(strings.TrimPrefix(d["filter"], "opacity("), ")")),
		strings.HasPrefix(d["clip-path"], "inset(") && farIn(strings.TrimSuffix(strings.TrimPrefix(d["clip-path"], "inset("), ")")),
		overflowHidden && (isZero(d["height"]) || isZero(d["max-height"]) || isZero(d["width"]) || isZero(d["max-width"])),
		scaledToNothing.MatchString(d["transform"]),
		(d["position"] == "absolute" || d["position"] == "fixed") && (farOff(d["left"]) || farOff(d["top"])),
		farOff(d["text-indent"]), farOff(d["margin-left"]), farOff(d["margin-top"]),
		clippedToNothing.MatchString(d["clip"]):
		return true
	}
	switch {
	case (d["visibility"] == "hidden" || d["visibility"] == "collapse") && !setsAgain["visibility"].MatchString(inner),
		tooSmall(d["font-size"]) && !setsAgain["font-size"].MatchString(inner) && !sizedByClass.MatchString(inner) && !showsImage(inner),
		invisibleColor(d) && !setsAgain["color"].MatchString(inner):
		return true
	}
	return false
}

// setsAgain finds a declaration of the property inside an element (not
// background-color for color).
var setsAgain = map[string]*regexp.Regexp{
	"visibility": regexp.MustCompile(`(?i)(?:^|[\s;"'])visibility\s*:`),
	"font-size":  regexp.MustCompile(`(?i)(?:^|[\s;"'])font(?:-size)?\s*:`), // or the font shorthand
	"color":      regexp.MustCompile(`(?i)(?:^|[\s;"'])color\s*:`),
}

// declarations reads an inline style: each property, lowercased, to its
// value, lowercased and without !important; the last of a property wins.
func declarations(style string) map[string]string {
	out := map[string]string{}
	for decl := range strings.SplitSeq(style, ";") {
		prop, value, ok := strings.Cut(decl, ":")
		if !ok {
			continue
		}
		value = strings.ToLower(strings.TrimSpace(value))
		value = strings.TrimSpace(strings.TrimSuffix(value, "!important"))
		out[strings.ToLower(strings.TrimSpace(prop))] = value
	}
	return out
}

// length reads a CSS length or number: its value and unit ("" for none).
func length(v string) (float64, string, bool) {
	i := strings.IndexFunc(v, func(r rune) bool { return !(r >= '0' && r <= '9' || r == '.' || r == '-' || r == '+') })
	if i < 0 {
		i = len(v)
	}
	n, err := strconv.ParseFloat(v[:i], 64)
	return n, strings.TrimSpace(v[i:]), err == nil
}

// nearlyZero: an opacity under 0.1 (0.01 is as good as hidden), or under
// 10 %.
func nearlyZero(v string) bool {
	n, unit, ok := length(v)
	return ok && (unit == "%" && n < 10 || unit != "%" && n < 0.1)
}

// farIn: a clip-path inset of 50 % or more, which leaves nothing.
func farIn(v string) bool {
	n, unit, ok := length(strings.Fields(v + " x")[0])
	return ok && unit == "%" && n >= 50
}

// isZero: 0, 0px, 0.0em, 0%; not 0.5em.
func isZero(v string) bool {
	n, _, ok := length(v)
	return ok && n == 0
}

// tooSmall: a font size nobody reads (under 4px, 3pt, a quarter em or
// 25 %): the 1px link text of a hidden footer.
func tooSmall(v string) bool {
	n, unit, ok := length(v)
	if !ok {
		return false
	}
	switch unit {
	case "px", "":
		return n < 4
	case "pt":
		return n < 3
	case "em", "rem":
		return n < 0.25
	case "%":
		return n < 25
	}
	return false
}

// farOff: a negative offset or indent of 100px (or 10em) or more, which
// puts its text off the reader's screen (-9999px).
func farOff(v string) bool {
	n, unit, ok := length(v)
	if !ok {
		return false
	}
	switch unit {
	case "px":
		return n <= -100
	case "em", "rem":
		return n <= -10
	case "%":
		return n <= -100
	}
	return false
}

// scaledToNothing is a transform that scales to (nearly) nothing in either
// direction: scale(0), scaleX(0.01), scale(1, 0).
var scaledToNothing = regexp.MustCompile(`scale[xy]?\((?:[^)]*,)?\s*0*\.?0[0-9]?\s*[,)]`)

// clippedToNothing is the screen-reader-only idiom: clip: rect(0 0 0 0).
var clippedToNothing = regexp.MustCompile(`^rect\(\s*0[a-z]*[\s,]+0[a-z]*[\s,]+0[a-z]*[\s,]+0[a-z]*\s*\)$`)

// sizedByClass: something inside may get its size back from a style sheet
// or an old <font size>, as the hybrid ("spongy") layouts do under a
// font-size:0 cell; it is taken to be visible.
var sizedByClass = regexp.MustCompile(`(?i)<[a-z][^>]*\sclass\s*=|<font\s[^>]*size\s*=`)

// invisibleColor: transparent text, or text the color of the element's own
// background (white on white). A background set on an element outside
// this one is not seen.
func invisibleColor(d map[string]string) bool {
	c := d["color"]
	if c == "" {
		return false
	}
	if c == "transparent" || transparentRGBA.MatchString(c) {
		return true
	}
	bg := d["background-color"]
	if bg == "" {
		bg = d["background"]
	}
	return canonicalColor(c) == canonicalColor(bg)
}

var transparentRGBA = regexp.MustCompile(`^(?:rgba|hsla)\(.*,\s*0*\.?0*\s*\)$`)

// canonicalColor writes #abc as #aabbcc and drops spaces, so that two
// spellings of one color compare equal; anything else is as given.
func canonicalColor(c string) string {
	c = strings.ReplaceAll(c, " ", "")
	if len(c) == 4 && c[0] == '#' {
		return string([]byte{'#', c[1], c[1], c[2], c[2], c[3], c[3]})
	}
	switch c {
	case "white":
		return "#ffffff"
	case "black":
		return "#000000"
	}
	return c
}
