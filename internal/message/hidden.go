package message

import (
	"html"
	"math"
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
		if name == "" || voidElements[name] || strings.HasSuffix(tag, "/") && svgShapes[name] {
			// A "/>" ends only void elements and SVG's: a browser keeps
			// <div style="display:none"/> open, hiding what follows
			// (verifier).
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
	return !strings.ContainsFunc(htmlToText(inner), visibleLetter) && !showsImage(inner)
}

// visibleLetter is a letter or digit that draws something: not the Hangul
// fillers, which Unicode counts as letters and which show nothing (a link
// of U+3164 passed as text to click, verifier).
func visibleLetter(r rune) bool {
	switch r {
	case '\u115F', '\u1160', '\u3164', '\uFFA0':
		return false
	}
	return unicode.IsLetter(r) || unicode.IsDigit(r)
}

// showsImage reports whether src holds an image a reader sees: an <img>
// with a source, not hidden, and bigger than a tracking pixel (no width or
// height given counts as big), or an <svg> not sized to nothing.
func showsImage(src string) bool {
	for tag := range tags(src) {
		name := strings.ToLower(tagName(tag))
		if name != "img" && name != "svg" {
			continue
		}
		if hiddenTag(name, tag, "") {
			continue
		}
		shown, hasSrc := true, name == "svg"
		for attr, value := range attributes(tag[len(tagName(tag)):]) {
			switch a := strings.ToLower(attr); a {
			case "src", "srcset":
				hasSrc = hasSrc || strings.TrimSpace(value) != ""
			case "width", "height":
				if tiny(strings.TrimSpace(value)) {
					shown = false
				}
			case "style":
				d := declarations(html.UnescapeString(value))
				if tiny(d["width"]) || tiny(d["height"]) {
					shown = false
				}
			}
		}
		if shown && hasSrc {
			return true
		}
	}
	return false
}

// neverShown are elements whose content no reader sees, or sees only as
// inert text: a link inside a <template> passed the visible-link check,
// and inside a <textarea> or <xmp> it is text nobody can click (tester).
var neverShown = map[string]bool{"template": true, "head": true, "title": true, "script": true, "style": true,
	"textarea": true, "xmp": true, "iframe": true, "object": true, "noembed": true, "noframes": true, "select": true,
	"datalist": true, "audio": true, "video": true, "canvas": true}

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
	// nest counts the containers (a table, a list) opened inside the
	// element: a <td> or <li> there is a nested one's, not a sibling that
	// closes this one (verifier: a hidden cell holding a table ended at
	// the inner table's first cell).
	nest := 0
	for {
		start, end, ok := nextTag(src, i)
		if !ok {
			return len(src)
		}
		tag := src[start+1 : end]
		closing := strings.HasPrefix(tag, "/")
		other := strings.ToLower(tagName(strings.TrimPrefix(tag, "/")))
		switch {
		case other == name:
			switch {
			case closing:
				depth--
			case selfClosing[name] && depth == 1 && nest == 0:
				return start
			case !strings.HasSuffix(tag, "/") || !svgShapes[name]:
				depth++
			}
		case name == "p" && !closing && closesP[other] && depth == 1:
			return start // a block start tag ends an open <p>
		case containers[other] && selfClosing[name]:
			if closing {
				nest = max(nest-1, 0)
			} else {
				nest++
			}
		}
		i = end + 1
		if depth == 0 {
			return i
		}
	}
}

// containers hold their own cells, rows and items.
var containers = map[string]bool{"table": true, "ul": true, "ol": true, "dl": true, "select": true, "ruby": true}

// closesP are the start tags that end an open <p> (HTML's "p end tag may
// be omitted" rule), for a hidden preheader <p> left open.
var closesP = map[string]bool{"address": true, "article": true, "aside": true, "blockquote": true, "div": true, "dl": true,
	"fieldset": true, "footer": true, "form": true, "h1": true, "h2": true, "h3": true, "h4": true, "h5": true, "h6": true,
	"header": true, "hr": true, "main": true, "nav": true, "ol": true, "pre": true, "section": true, "table": true, "ul": true}

// svgShapes are the SVG elements a "/>" ends.
var svgShapes = map[string]bool{"path": true, "circle": true, "rect": true, "line": true, "polyline": true, "polygon": true,
	"ellipse": true, "use": true, "stop": true, "image": true, "text": true, "g": true}

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
			if hiddenStyle(name, html.UnescapeString(value), inner) {
				return true
			}
		}
	}
	// A closed <details> shows its summary only; a link inside it is
	// behind a click on something else (tester). A <dialog> shows only
	// when open.
	return (name == "details" || name == "dialog") && !open
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

// hiddenStyle reports whether an inline style hides its element (name),
// whose content is inner. Some declarations hide it whatever its content
// says (display:none, opacity near 0, no height or width with nothing
// overflowing, scaled to nearly nothing, moved or clipped off the page,
// its text pushed off its box, no pointer to click it); others only unless
// something inside sets the property again (visibility:hidden, a font too
// small to read, transparent text or text the color of its own
// background): MJML sets font-size:0 on every column and the size again
// inside, and a child may be visibility:visible.
func hiddenStyle(name, style, inner string) bool {
	d := declarations(style)
	overflowHidden := d["overflow"] == "hidden" || d["overflow"] == "clip" || d["overflow-y"] == "hidden" || d["overflow-x"] == "hidden"
	sized := !inlineElements[name] || strings.Contains(d["display"], "block") || strings.Contains(d["display"], "flex") || strings.Contains(d["display"], "table")
	switch {
	case d["display"] == "none", d["content-visibility"] == "hidden", d["mso-hide"] == "all",
		nearlyZero(d["opacity"]), nearlyZero(d["zoom"]), nearlyZero(d["scale"]),
		strings.HasPrefix(d["filter"], "opacity(") && nearlyZero(strings.TrimSuffix(strings.TrimPrefix(d["filter"], "opacity("), ")")),
		clipsAll(d["clip-path"]), clippedToNothing(d["clip"]),
		sized && overflowHidden && (tiny(d["height"]) || tiny(d["max-height"]) || tiny(d["width"]) || tiny(d["max-width"])),
		transformedAway(d["transform"]),
		farOff(d["left"]) || farOff(d["top"]) || d["position"] != "" && d["position"] != "static" && (farOut(d["right"]) || farOut(d["bottom"])),
		farOff(d["text-indent"]), farOff(d["margin-left"]), farOff(d["margin-top"]), anyFarOff(d["margin"]),
		tooTight(d["letter-spacing"]),
		name == "a" && d["pointer-events"] == "none":
		return true
	}
	switch {
	case (d["visibility"] == "hidden" || d["visibility"] == "collapse") && !setsAgain["visibility"].MatchString(inner),
		tooSmall(fontSize(d)) && !setsAgain["font-size"].MatchString(inner) && !sizedByClass.MatchString(inner) && !showsImage(inner),
		invisibleColor(d) && !setsAgain["color"].MatchString(inner) && (name == "a" || !strings.Contains(strings.ToLower(inner), "<a")):
		// A link inside an element with invisible text keeps its own
		// link color unless it inherits.
		return true
	}
	return false
}

// inlineElements take no height or width unless displayed as a block.
var inlineElements = map[string]bool{"a": true, "span": true, "b": true, "i": true, "u": true, "em": true, "strong": true,
	"small": true, "font": true, "sup": true, "sub": true, "big": true, "code": true, "abbr": true}

// fontSize is the font size a style sets, from font-size or the font
// shorthand (font:0/0 a, font:bold 12px Arial).
func fontSize(d map[string]string) string {
	if v, ok := d["font-size"]; ok {
		return v
	}
	for _, f := range strings.Fields(d["font"]) {
		size, _, _ := strings.Cut(f, "/")
		if n, unit, ok := length(size); ok && (unit != "" || n == 0) {
			return size
		}
	}
	return ""
}

// setsAgain finds a declaration of the property inside an element (not
// background-color for color).
var setsAgain = map[string]*regexp.Regexp{
	"visibility": regexp.MustCompile(`(?i)(?:^|[\s;"'])visibility\s*:`),
	"font-size":  regexp.MustCompile(`(?i)(?:^|[\s;"'])font(?:-size)?\s*:`), // or the font shorthand
	"color":      regexp.MustCompile(`(?i)(?:^|[\s;"'])color\s*:`),
}

// declarations reads an inline style: each property, lowercased, to its
// value, lowercased and without !important; the last of a property wins,
// unless an earlier one was !important and it is not.
func declarations(style string) map[string]string {
	// Comments and escapes are nothing to a browser's reading of a
	// property (display:/**/none, d\isplay:none; verifier).
	style = cssComment.ReplaceAllString(style, "")
	style = strings.ReplaceAll(style, "\\", "")
	out := map[string]string{}
	important := map[string]bool{}
	for decl := range strings.SplitSeq(style, ";") {
		prop, value, ok := strings.Cut(decl, ":")
		if !ok {
			continue
		}
		prop = strings.ToLower(strings.TrimSpace(prop))
		value = strings.ToLower(strings.TrimSpace(value))
		imp := cssImportant.MatchString(value)
		value = strings.TrimSpace(cssImportant.ReplaceAllString(value, ""))
		if important[prop] && !imp {
			continue // an !important one wins over a later plain one
		}
		out[prop], important[prop] = value, imp
	}
	return out
}

var (
	cssComment   = regexp.MustCompile(`/\*.*?\*/`)
	cssImportant = regexp.MustCompile(`!\s*important\s*$`)
)

// length reads a CSS length or number: its value and unit ("" for none).
func length(v string) (float64, string, bool) {
	num := cssNumber.FindString(v)
	if num == "" {
		return 0, "", false
	}
	n, err := strconv.ParseFloat(num, 64)
	return n, strings.TrimSpace(v[len(num):]), err == nil
}

// cssNumber is a CSS number at the start of a value: 12, -1.5, .5, 1e-9.
var cssNumber = regexp.MustCompile(`^[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:e[+-]?[0-9]+)?`)

// nearlyZero: an opacity under 0.1 (0.01 is as good as hidden), or under
// 10 %.
func nearlyZero(v string) bool {
	n, unit, ok := length(v)
	return ok && (unit == "%" && n < 10 || unit != "%" && n < 0.1)
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
	case "mm":
		return n < 1
	case "vw", "vh", "vmin", "vmax":
		return n < 0.5
	}
	return false
}

// tiny: a size of 2px or less (0, 1px), where nothing can be read.
func tiny(v string) bool {
	n, unit, ok := length(v)
	return ok && (n == 0 || (unit == "px" || unit == "") && n <= 2)
}

// tooTight: letters drawn on top of each other (letter-spacing:-1em).
func tooTight(v string) bool {
	n, unit, ok := length(v)
	return ok && (unit == "em" || unit == "rem") && n <= -0.5 || ok && unit == "px" && n <= -8
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
	case "%", "vw", "vh":
		return n <= -50
	}
	return false
}

// farOut: an offset from the right or bottom that pushes an element off
// the other side (right:9999px).
func farOut(v string) bool {
	n, unit, ok := length(v)
	return ok && (unit == "px" && n >= 2000 || (unit == "em" || unit == "rem") && n >= 100 || (unit == "%" || unit == "vw" || unit == "vh") && n >= 100)
}

// anyFarOff: a margin shorthand with a side far off (margin:0 0 0 -9999px).
func anyFarOff(v string) bool {
	for _, f := range strings.Fields(v) {
		if farOff(f) {
			return true
		}
	}
	return false
}

// transformedAway: a transform that scales to (nearly) nothing in either
// direction (scale(0.001), scale3d(0,0,0), a matrix that flattens) or
// translates far off (translateX(-9999px)). A negative scale mirrors
// (scaleX(-1), an arrow flipped for right-to-left text) and a matrix that
// rotates has zeros on its diagonal: both show the text, so a scale is
// judged by its size and a matrix by its area (its determinant).
func transformedAway(v string) bool {
	for _, m := range cssFunction.FindAllStringSubmatch(v, -1) {
		fn, args := m[1], strings.FieldsFunc(m[2], func(r rune) bool { return r == ',' || r == ' ' })
		switch {
		case fn == "matrix" && len(args) == 6:
			// e and f translate, in px.
			if flattens(args[0], args[1], args[2], args[3]) || farOff(args[4]+"px") || farOut(args[4]+"px") || farOff(args[5]+"px") || farOut(args[5]+"px") {
				return true
			}
		case fn == "matrix3d" && len(args) == 16:
			// Column-major: the plane's part is a1 b1 (0, 1) and a2 b2 (4, 5).
			if flattens(args[0], args[1], args[4], args[5]) {
				return true
			}
		case strings.HasPrefix(fn, "scale"):
			for _, a := range args {
				if nearlyZero(strings.TrimPrefix(strings.TrimSpace(a), "-")) {
					return true
				}
			}
		case strings.HasPrefix(fn, "translate"):
			for _, a := range args {
				if farOff(a) || farOut(a) {
					return true
				}
			}
		}
	}
	return false
}

// flattens: a 2-D matrix (a b c d) that squashes text to (nearly)
// nothing in some direction: its smaller singular value, the least it
// scales any direction by, is under a tenth, as scale()'s rule has it
// (matrix(1,0,0,0.02,0,0) is scaleY(0.02); review). A rotation or a
// mirror scales every direction by 1.
func flattens(a, b, c, d string) bool {
	var n [4]float64
	for i, x := range []string{a, b, c, d} {
		v, unit, ok := length(x)
		if !ok || unit != "" {
			return false
		}
		n[i] = v
	}
	sum := n[0]*n[0] + n[1]*n[1] + n[2]*n[2] + n[3]*n[3]
	det := n[0]*n[3] - n[1]*n[2]
	least := math.Sqrt(max(0, (sum-math.Sqrt(max(0, sum*sum-4*det*det)))/2))
	return least < 0.1
}

var cssFunction = regexp.MustCompile(`([a-z0-9]+)\(([^)]*)\)`)

// clippedToNothing: clip: rect() with no area (rect(0 0 0 0),
// rect(1px,1px,1px,1px): top at or below bottom, or left at or past right).
func clippedToNothing(v string) bool {
	m := cssFunction.FindStringSubmatch(v)
	if m == nil || m[1] != "rect" {
		return false
	}
	f := strings.FieldsFunc(m[2], func(r rune) bool { return r == ',' || r == ' ' })
	if len(f) != 4 {
		return false
	}
	var n [4]float64
	for i, x := range f {
		v, _, ok := length(x)
		if !ok {
			return false // auto
		}
		n[i] = v
	}
	return n[0] >= n[2] || n[3] >= n[1]
}

// clipsAll: a clip-path that leaves nothing: an inset whose opposite sides
// meet (inset(50%), inset(0 0 0 100%)) or a shape of no size (circle(0)).
func clipsAll(v string) bool {
	m := cssFunction.FindStringSubmatch(v)
	if m == nil {
		return false
	}
	f := strings.Fields(m[2])
	switch m[1] {
	case "circle", "ellipse":
		return len(f) > 0 && isZero(f[0])
	case "inset":
		var p []float64
		for _, x := range f {
			if x == "round" {
				break
			}
			n, unit, ok := length(x)
			if !ok || unit != "%" && n != 0 {
				return false // a length in px: not judged
			}
			p = append(p, n)
		}
		switch len(p) {
		case 1:
			return p[0] >= 50
		case 2:
			return p[0] >= 50 || p[1] >= 50
		case 3:
			return p[0]+p[2] >= 100 || p[1] >= 50
		case 4:
			return p[0]+p[2] >= 100 || p[1]+p[3] >= 100
		}
	}
	return false
}

// sizedByClass: something inside may get its size back from a style sheet
// or an old <font size>, as the hybrid ("spongy") layouts do under a
// font-size:0 cell; it is taken to be visible.
var sizedByClass = regexp.MustCompile(`(?i)<[a-z][^>]*\sclass\s*=|<font\s[^>]*size\s*=`)

// invisibleColor: transparent text (or nearly: an alpha under 0.1, a fill
// color that is), or text the color of the element's own background, near
// enough (white on white, #fefefe on #fff). A background set on an
// element outside this one is not seen.
func invisibleColor(d map[string]string) bool {
	if fill := d["-webkit-text-fill-color"]; fill != "" {
		if c, ok := parseColor(fill); ok && c.a < 0.1 {
			return true
		}
	}
	fg, ok := parseColor(d["color"])
	if !ok {
		return false
	}
	if fg.a < 0.1 {
		return true
	}
	bgText := d["background-color"]
	if bgText == "" {
		bgText = d["background"]
	}
	bg, ok := parseColor(strings.Fields(bgText + " x")[0])
	return ok && bg.a >= 0.9 && near(fg.r, bg.r) && near(fg.g, bg.g) && near(fg.b, bg.b)
}

type rgba struct{ r, g, b, a float64 }

func near(x, y float64) bool { return x-y < 10 && y-x < 10 }

// parseColor reads #rgb, #rgba, #rrggbb, #rrggbbaa, rgb()/rgba() (commas
// or spaces, an alpha after / or a fourth value), transparent, white and
// black; anything else (inherit, a name) is unknown.
func parseColor(c string) (rgba, bool) {
	c = strings.TrimSpace(c)
	switch c {
	case "transparent":
		return rgba{a: 0}, true
	case "white":
		return rgba{255, 255, 255, 1}, true
	case "black":
		return rgba{0, 0, 0, 1}, true
	}
	if strings.HasPrefix(c, "#") {
		h := c[1:]
		if len(h) == 3 || len(h) == 4 {
			var b strings.Builder
			for _, x := range h {
				b.WriteRune(x)
				b.WriteRune(x)
			}
			h = b.String()
		}
		if len(h) != 6 && len(h) != 8 {
			return rgba{}, false
		}
		v, err := strconv.ParseUint(h, 16, 64)
		if err != nil {
			return rgba{}, false
		}
		if len(h) == 6 {
			return rgba{float64(v >> 16 & 255), float64(v >> 8 & 255), float64(v & 255), 1}, true
		}
		return rgba{float64(v >> 24 & 255), float64(v >> 16 & 255), float64(v >> 8 & 255), float64(v&255) / 255}, true
	}
	m := cssFunction.FindStringSubmatch(c)
	if m == nil || m[1] != "rgb" && m[1] != "rgba" {
		return rgba{}, false
	}
	f := strings.FieldsFunc(m[2], func(r rune) bool { return r == ',' || r == ' ' || r == '/' })
	if len(f) < 3 {
		return rgba{}, false
	}
	var out rgba
	for i, dst := range []*float64{&out.r, &out.g, &out.b} {
		n, unit, ok := length(f[i])
		if !ok {
			return rgba{}, false
		}
		if unit == "%" {
			n = n * 255 / 100
		}
		*dst = n
	}
	out.a = 1
	if len(f) > 3 {
		n, unit, ok := length(f[3])
		if !ok {
			return rgba{}, false
		}
		if unit == "%" {
			n /= 100
		}
		out.a = n
	}
	return out, true
}
