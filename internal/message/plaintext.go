package message

import (
	"bytes"
	"html"
	"iter"
	"strings"
	"unicode"
	"unicode/utf8"
)

// htmlToText derives a readable plain-text alternative from rendered HTML.
// It is deliberately simple (no DOM): drop markup, script/style/head content
// and comments; turn block boundaries into line breaks; keep link targets,
// because a text reader has no other way to follow a call-to-action.
func htmlToText(src string) string {
	return string(appendHTMLText(nil, src, nil))
}

// appendHTMLText appends htmlToText(src) to dst. Render keeps dst in a pool:
// this runs on every recipient's HTML, so it works in one buffer instead of
// building and splitting intermediate strings. A non-nil seen is told
// about every link (derivedtext.go); rendering passes nil.
func appendHTMLText(dst []byte, src string, seen *linkWatch) []byte {
	start := len(dst)
	out := dst
	var linkHref string
	var linkStart int
	i := 0
	for i < len(src) {
		lt := strings.IndexByte(src[i:], '<')
		if lt < 0 {
			out = appendCollapsed(out, src[i:])
			break
		}
		out = appendCollapsed(out, src[i:i+lt])
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
			// A lone '<' that opens no tag is text.
			out = appendCollapsed(out, src[i:])
			break
		}
		tag := src[i+1 : end]
		i = end + 1
		closing := strings.HasPrefix(tag, "/")
		name := strings.ToLower(tagName(strings.TrimPrefix(tag, "/")))
		switch name {
		case "script", "style", "head", "title":
			if !closing {
				i = skipElement(src, i, name)
			}
		case "br":
			out = append(out, '\n')
		case "p", "div", "h1", "h2", "h3", "h4", "h5", "h6", "table", "tr", "ul", "ol", "blockquote", "section", "article", "header", "footer", "hr":
			out = append(out, "\n\n"...)
		case "li":
			if !closing {
				out = append(out, "\n- "...)
			}
		case "td", "th":
			if closing {
				out = append(out, ' ')
			}
		case "a":
			if !closing {
				linkHref = attrHref(tag)
				linkStart = len(out)
				if seen != nil {
					seen.opened(tag, linkHref)
				}
			} else if linkHref != "" {
				text := bytes.TrimSpace(out[linkStart:])
				shown := linkShown(string(text), linkHref)
				if seen != nil {
					seen.closed(string(text), linkHref, shown)
				}
				if shown {
					out = append(out, " ("...)
					out = append(out, linkHref...)
					out = append(out, ')')
				}
				linkHref = ""
			}
		}
	}
	n := tidyLines(out[start:])
	return append(out[:start+n], '\n')
}

// linkShown says whether a link's target follows its text in the plain
// part: where the text is not the target already, and the target leads
// somewhere a reader of plain text could go.
func linkShown(text, href string) bool {
	return text != href && !strings.HasPrefix(href, "#") && !hasPrefixFold(href, "mailto:")
}

// appendCollapsed appends character data with HTML's whitespace collapsing:
// any run of whitespace (as unicode.IsSpace defines it) becomes one space.
func appendCollapsed(out []byte, s string) []byte {
	if s == "" {
		return out
	}
	s = html.UnescapeString(s)
	space := false // a whitespace run is pending
	for i := 0; i < len(s); {
		// j ends the run of non-space characters starting at i.
		j := i
		for j < len(s) && s[j] < utf8.RuneSelf && !asciiSpace[s[j]] {
			j++
		}
		if j == i {
			r, size := rune(s[i]), 1
			if r >= utf8.RuneSelf {
				r, size = utf8.DecodeRuneInString(s[i:])
			}
			if unicode.IsSpace(r) {
				space = true
				i += size
				continue
			}
			j += size
		}
		if space {
			out = append(out, ' ')
			space = false
		}
		out = append(out, s[i:j]...)
		i = j
	}
	if space {
		out = append(out, ' ')
	}
	return out
}

// hasPrefixFold is strings.HasPrefix(strings.ToLower(s), prefix) for an
// ASCII prefix in lower case, without lowering (a copy of) all of s: link
// targets here hold upper-case ULIDs.
func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && asciiEqualFold(s[:len(prefix)], prefix)
}

// asciiSpace holds the ASCII characters unicode.IsSpace accepts.
var asciiSpace = [utf8.RuneSelf]bool{'\t': true, '\n': true, '\v': true, '\f': true, '\r': true, ' ': true}

// tagEnd returns the index of the '>' closing the tag that starts at i,
// skipping quoted attribute values, or -1 if src[i] does not start a tag.
func tagEnd(src string, i int) int {
	if i+1 >= len(src) {
		return -1
	}
	c := src[i+1]
	if !(c == '/' || c == '!' || c == '?' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
		return -1
	}
	var quote byte
	for j := i + 1; j < len(src); j++ {
		switch {
		case quote != 0:
			if src[j] == quote {
				quote = 0
			}
		case src[j] == '"' || src[j] == '\'':
			quote = src[j]
		case src[j] == '>':
			return j
		}
	}
	return -1
}

// tags yields each tag of src in order, skipping comments as nextTag does:
// its text between '<' and '>', and the index just past its '>'.
func tags(src string) iter.Seq2[string, int] {
	return func(yield func(string, int) bool) {
		for i := 0; ; {
			start, end, ok := nextTag(src, i)
			if !ok || !yield(src[start+1:end], end+1) {
				return
			}
			i = end + 1
		}
	}
}

func tagName(tag string) string {
	for j, r := range tag {
		// A hyphen is part of a custom element's name (<x-y>).
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' && j > 0) {
			return tag[:j]
		}
	}
	return tag
}

// skipElement returns the index just after the closing tag of name, or the
// end of src if it is never closed.
func skipElement(src string, i int, name string) int {
	if end, ok := closeTag(src[i:], name); ok {
		return i + end
	}
	return len(src)
}

// closeTag finds the end tag "</name" in s, the name matched ASCII-case-
// insensitively as HTML parsers match it (no Unicode folding: "</SCRİPT>"
// and "</KEY>" are text), and returns the index just after the next
// '>'. Working on the bytes as they are keeps the offsets those of src;
// lowercasing first shifted them wherever lowercasing changes a
// character's length (İ, the Kelvin sign), and the skip ended early.
func closeTag(s, name string) (int, bool) {
	for k := 0; ; {
		lt := strings.Index(s[k:], "</")
		if lt < 0 {
			return 0, false
		}
		k += lt
		if k+2+len(name) <= len(s) && asciiEqualFold(s[k+2:k+2+len(name)], name) {
			gt := strings.IndexByte(s[k:], '>')
			if gt < 0 {
				return 0, false
			}
			return k + gt + 1, true
		}
		k += 2
	}
}

// asciiEqualFold reports whether a and b are equal with ASCII letters
// compared without case; other bytes must be equal.
func asciiEqualFold(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		x, y := a[i], b[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

// attrHref returns the unescaped value of the tag's href attribute: the
// first match of (?i)\bhref\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s>]+)), found by
// hand because a regexp per link was a visible share of rendering. An
// unterminated quote is part of an unquoted value, as in that pattern.
func attrHref(tag string) string {
	for i := 0; i+4 <= len(tag); i++ {
		// An attribute of its own: after white space, a quote or a slash,
		// not the end of data-href or xlink:href (verifier: a link to
		// elsewhere read as the unsubscribe link).
		if i > 0 && !reSpace(tag[i-1]) && tag[i-1] != '"' && tag[i-1] != '\'' && tag[i-1] != '/' || !strings.EqualFold(tag[i:i+4], "href") {
			continue
		}
		j := skipRESpace(tag, i+4)
		if j == len(tag) || tag[j] != '=' {
			continue
		}
		j = skipRESpace(tag, j+1)
		if j == len(tag) {
			continue
		}
		if q := tag[j]; q == '"' || q == '\'' {
			if k := strings.IndexByte(tag[j+1:], q); k >= 0 {
				return html.UnescapeString(tag[j+1 : j+1+k])
			}
		}
		k := j
		for k < len(tag) && !reSpace(tag[k]) && tag[k] != '>' {
			k++
		}
		if k > j {
			return html.UnescapeString(tag[j:k])
		}
	}
	return ""
}

// isWordByte and reSpace are regexp's \w and \s, which are ASCII-only.
func isWordByte(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_'
}

func reSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\f' || c == '\r'
}

func skipRESpace(s string, i int) int {
	for i < len(s) && reSpace(s[i]) {
		i++
	}
	return i
}

// tidyLines trims each line of b, keeps at most one blank line in a row and
// drops leading and trailing blank lines, leaving the lines joined by LF (no
// final one) in b[:n]. It works in place: every line moves towards the front.
func tidyLines(b []byte) (n int) {
	emitted, blank := false, false
	for pos := 0; pos <= len(b); {
		end := bytes.IndexByte(b[pos:], '\n')
		if end < 0 {
			end = len(b)
		} else {
			end += pos
		}
		line := bytes.TrimSpace(b[pos:end])
		pos = end + 1
		if len(line) == 0 {
			blank = true
			continue
		}
		if emitted {
			b[n] = '\n'
			n++
			if blank {
				b[n] = '\n'
				n++
			}
		}
		n += copy(b[n:], line)
		emitted, blank = true, false
	}
	return n
}
