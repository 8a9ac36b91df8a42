package message

import (
	"html"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"
)

// htmlToText derives a readable plain-text alternative from rendered HTML.
// It is deliberately simple (no DOM): drop markup, script/style/head content
// and comments; turn block boundaries into line breaks; keep link targets,
// because a text reader has no other way to follow a call-to-action.
func htmlToText(src string) string {
	var out strings.Builder
	var linkHref string
	var linkStart int
	i := 0
	for i < len(src) {
		lt := strings.IndexByte(src[i:], '<')
		if lt < 0 {
			writeText(&out, src[i:])
			break
		}
		writeText(&out, src[i:i+lt])
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
			writeText(&out, src[i:])
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
			out.WriteString("\n")
		case "p", "div", "h1", "h2", "h3", "h4", "h5", "h6", "table", "tr", "ul", "ol", "blockquote", "section", "article", "header", "footer", "hr":
			out.WriteString("\n\n")
		case "li":
			if !closing {
				out.WriteString("\n- ")
			}
		case "td", "th":
			if closing {
				out.WriteString(" ")
			}
		case "a":
			if !closing {
				linkHref = attrHref(tag)
				linkStart = out.Len()
			} else if linkHref != "" {
				text := strings.TrimSpace(out.String()[linkStart:])
				if text != linkHref && !strings.HasPrefix(linkHref, "#") && !strings.HasPrefix(strings.ToLower(linkHref), "mailto:") {
					out.WriteString(" (" + linkHref + ")")
				}
				linkHref = ""
			}
		}
	}
	return tidyLines(out.String())
}

// writeText appends character data with HTML's whitespace collapsing: any
// run of whitespace becomes one space.
func writeText(out *strings.Builder, s string) {
	if s == "" {
		return
	}
	s = html.UnescapeString(s)
	fields := strings.Fields(s)
	if len(fields) == 0 {
		out.WriteString(" ")
		return
	}
	first, _ := utf8.DecodeRuneInString(s)
	last, _ := utf8.DecodeLastRuneInString(s)
	if unicode.IsSpace(first) {
		out.WriteString(" ")
	}
	out.WriteString(strings.Join(fields, " "))
	if unicode.IsSpace(last) {
		out.WriteString(" ")
	}
}

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

func tagName(tag string) string {
	for j, r := range tag {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return tag[:j]
		}
	}
	return tag
}

// skipElement returns the index just after the closing tag of name, or the
// end of src if it is never closed.
func skipElement(src string, i int, name string) int {
	lower := strings.ToLower(src[i:])
	end := strings.Index(lower, "</"+name)
	if end < 0 {
		return len(src)
	}
	gt := strings.IndexByte(lower[end:], '>')
	if gt < 0 {
		return len(src)
	}
	return i + end + gt + 1
}

var reHref = regexp.MustCompile(`(?i)\bhref\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s>]+))`)

func attrHref(tag string) string {
	m := reHref.FindStringSubmatch(tag)
	if m == nil {
		return ""
	}
	return html.UnescapeString(m[1] + m[2] + m[3])
}

// tidyLines trims each line and keeps at most one blank line in a row.
func tidyLines(s string) string {
	lines := strings.Split(s, "\n")
	out := make([]string, 0, len(lines))
	blank := true // drop leading blank lines
	for _, l := range lines {
		l = strings.TrimSpace(l)
		if l == "" {
			if !blank {
				out = append(out, "")
			}
			blank = true
			continue
		}
		out = append(out, l)
		blank = false
	}
	for len(out) > 0 && out[len(out)-1] == "" {
		out = out[:len(out)-1]
	}
	return strings.Join(out, "\n") + "\n"
}
