package message

import (
	"html"
	"strings"
	"unicode"
	"unicode/utf8"
)

// A derivedText is the plain part that htmlToText derives from a flat HTML
// template, worked out once per broadcast instead of once per contact:
// converting every recipient's rendered HTML was the largest share of
// rendering a message.
//
// It is made by converting the template's HTML with a marker in place of
// each field, then splitting the result at the markers. For a contact, each
// marker becomes what the conversion would have made of the value the HTML
// got there. That is the same text as converting the contact's HTML only
// while the value cannot change how the text around it converts, so:
//
//   - deriveText refuses a template where a field follows the start of a
//     character reference ("&am") or a tag ("<"), or sits in an <a> tag
//     anywhere but its href (a value there can decide which href the
//     conversion reads), or has no HTML escaper last (a URL in a <style>:
//     its value may hold '<' or a bare '&'), or whose text holds the
//     markers' code points, as characters or as references;
//   - appendTo says no for a contact whose value is empty, or starts or ends
//     with white space (it would merge with the text around it), or puts
//     white space in a link target, or makes a link's target equal to its
//     text, or a fragment or mailto: where the markers made neither, or is
//     not UTF-8 (a broken character could join the text around it).
//
// Where it says no, Render converts the contact's HTML as before. It is an
// optimisation only: TestDerivedTextMatchesConversion and
// FuzzDerivedTextMatchesConversion compare the two byte for byte.
type derivedText struct {
	ops   []textOp
	links []textLink // links whose target or text holds a field
	// target[i] says the HTML's part i is read from a link target:
	// unescaped, and not collapsed as character data is.
	target []bool
}

// textOp is literal text, or the value of the HTML's part number part.
type textOp struct {
	lit  string
	part int // -1 for literal text
}

// textLink is one link as the conversion met it with markers in place of
// the values: whether its target followed its text then must hold for the
// contact's values too.
type textLink struct {
	text, href []textOp
	shown      bool
}

// markerBase is the first of the code points standing for the HTML's
// parts, one each, in Supplementary Private Use Area-A: not white space,
// not markup, untouched by unescaping, and never in a real email.
const (
	markerBase = 0xF0000
	markerEnd  = 0xFFFFE // exclusive
)

func isMarker(r rune) bool { return r >= markerBase && r < markerEnd }

// linkWatch collects what the conversion sees of links (appendHTMLText's
// seen).
type linkWatch struct {
	refused bool // a field sits in an <a> tag outside its href
	links   []seenLink
	targets []string // every href read
}

type seenLink struct {
	text, href string
	shown      bool
}

func (w *linkWatch) opened(tag, href string) {
	if countMarkers(tag) != countMarkers(href) {
		w.refused = true
	}
	w.targets = append(w.targets, href)
}

func (w *linkWatch) closed(text, href string, shown bool) {
	if countMarkers(text)+countMarkers(href) > 0 {
		w.links = append(w.links, seenLink{text, href, shown})
	}
}

func countMarkers(s string) (n int) {
	for _, r := range s {
		if isMarker(r) {
			n++
		}
	}
	return n
}

// deriveText returns f's plain part as a derivedText, or nil where a field
// stands where its value could change the conversion around it.
func deriveText(f *flatTemplate) *derivedText {
	if f == nil || len(f.parts) > markerEnd-markerBase {
		return nil
	}
	var src strings.Builder
	for i, p := range f.parts {
		if p.field != flatText {
			if !p.htmlEscaped {
				// A value that may hold '<', '>' or a bare '&' (a URL
				// in a <style>) could open markup or end a character
				// reference, where the conversion and html/template do
				// not agree on what is markup.
				return nil
			}
			src.WriteRune(markerBase + rune(i))
			continue
		}
		// Bytes that are not UTF-8 could make one character with a
		// value's first bytes, and that character could be white space.
		// A marker's code point, even written as a character reference
		// ("&#983041;"), would read as a field.
		if !utf8.ValidString(p.text) || countMarkers(html.UnescapeString(p.text)) > 0 {
			return nil
		}
		if i+1 < len(f.parts) && opensBeforeField(p.text) {
			return nil
		}
		src.WriteString(p.text)
	}
	var w linkWatch
	out := string(appendHTMLText(nil, src.String(), &w))
	if w.refused {
		return nil
	}
	d := &derivedText{ops: splitMarkers(out), target: make([]bool, len(f.parts))}
	for _, href := range w.targets {
		for _, op := range splitMarkers(href) {
			if op.part >= 0 {
				d.target[op.part] = true
			}
		}
	}
	for _, l := range w.links {
		d.links = append(d.links, textLink{text: splitMarkers(l.text), href: splitMarkers(l.href), shown: l.shown})
	}
	return d
}

// opensBeforeField says text ends where a field's value would continue
// something the conversion reads across it: a character reference ("&",
// "&am", "&#3") or the start of a tag or comment ("<", "</", "<!-").
func opensBeforeField(text string) bool {
	if amp := strings.LastIndexByte(text, '&'); amp >= 0 {
		rest := text[amp+1:]
		if strings.IndexFunc(rest, func(r rune) bool {
			return !(r == '#' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z')
		}) < 0 {
			return true
		}
	}
	if lt := strings.LastIndexByte(text, '<'); lt >= 0 {
		switch text[lt:] {
		case "<", "</", "<!", "<!-":
			return true
		}
	}
	return false
}

// splitMarkers splits s into literal text and markers.
func splitMarkers(s string) []textOp {
	var ops []textOp
	lit := 0
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if isMarker(r) {
			if i > lit {
				ops = append(ops, textOp{lit: s[lit:i], part: -1})
			}
			ops = append(ops, textOp{part: int(r - markerBase)})
			lit = i + size
		}
		i += size
	}
	if lit < len(s) {
		ops = append(ops, textOp{lit: s[lit:], part: -1})
	}
	return ops
}

// appendTo appends the plain part for the HTML whose parts were written as
// written (flatTemplate.execute), or reports false, having appended
// nothing, where this contact's values need the conversion itself.
func (d *derivedText) appendTo(dst []byte, written []string) ([]byte, bool) {
	start := len(dst)
	dst, ok := d.appendOps(dst, d.ops, written)
	if !ok {
		return dst[:start], false
	}
	if len(d.links) > 0 {
		scratch := dst[len(dst):]
		for _, l := range d.links {
			var text, href []byte
			if text, ok = d.appendOps(scratch[:0], l.text, written); !ok {
				return dst[:start], false
			}
			// href after text in the same spare capacity.
			if href, ok = d.appendOps(text[len(text):], l.href, written); !ok {
				return dst[:start], false
			}
			if linkShown(string(text), string(href)) != l.shown {
				return dst[:start], false
			}
		}
	}
	return dst, true
}

func (d *derivedText) appendOps(dst []byte, ops []textOp, written []string) ([]byte, bool) {
	for _, op := range ops {
		var ok bool
		if dst, ok = d.appendOp(dst, op, written); !ok {
			return dst, false
		}
	}
	return dst, true
}

// appendOp appends literal text, or a value as the conversion turns it
// into text: unescaped, and collapsed as character data unless it is read
// from a link target.
func (d *derivedText) appendOp(dst []byte, op textOp, written []string) ([]byte, bool) {
	if op.part < 0 {
		return append(dst, op.lit...), true
	}
	if op.part >= len(written) {
		return dst, false
	}
	v := written[op.part]
	if !utf8.ValidString(v) {
		// See deriveText: a broken character at an end could join the
		// text around it.
		return dst, false
	}
	if d.target[op.part] {
		v = html.UnescapeString(v)
		if v == "" || hasSpace(v) {
			return dst, false
		}
		return append(dst, v...), true
	}
	at := len(dst)
	dst = appendCollapsed(dst, v)
	// Collapsing turns white space at either end into a space; without
	// any, the value's text starts and ends with what it does.
	if got := dst[at:]; len(got) == 0 || got[0] == ' ' || got[len(got)-1] == ' ' {
		return dst, false
	}
	return dst, true
}

// hasSpace says s holds white space as unicode.IsSpace defines it; a link
// target, URL-escaped, is ASCII, so the table answers for nearly every byte.
func hasSpace(s string) bool {
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if asciiSpace[c] {
				return true
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if unicode.IsSpace(r) {
			return true
		}
		i += size
	}
	return false
}
