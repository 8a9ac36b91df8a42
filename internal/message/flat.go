package message

import (
	"bytes"
	"fmt"
	"strings"
	"text/template/parse"
	"time"
	"unicode/utf8"
)

// A flat template is a parsed template that is only text and contact
// fields ({{.Name}}, {{.Attributes.city}}, {{.UnsubscribeURL}}), each
// followed by html/template's escapers where it has any: nearly every real
// email. text/template executes such a template through reflection (a
// reflect.Value.Call per escaper), which was the largest share of a page
// worker's rendering; a flat template writes the same bytes with direct
// field reads and the escapers below.
//
// It is an optimisation only, never a second meaning: anything it does not
// know (another node, a function, an escaper it lacks, a value that is not
// a string, a missing attribute, output past the budget) makes
// flattenTree return nil or execute say no, and the template package
// renders that message as before. TestFlatMatchesTemplate and FuzzFlatMatchesTemplate
// compare the two byte for byte.
type flatTemplate struct {
	parts []flatPart
}

// flatPart is literal text, or one field passed through escapers.
type flatPart struct {
	text    string
	field   flatField
	attr    string // the key, for flatAttr
	escapes []func(string) string
	// htmlEscaped says the last escaper is one of HTML's (text, attribute,
	// RCDATA, unquoted attribute), which leave no '<', '>' or bare '&' in
	// the value: only then can the value not change the markup around it
	// (derivedtext.go). A URL in CSS, url(…) in a <style>, has no HTML
	// escaper after its URL ones.
	htmlEscaped bool
}

// htmlEscapers are the escapers htmlEscaped asks for, by name.
var htmlEscapers = map[string]bool{
	"_html_template_htmlescaper":    true,
	"_html_template_attrescaper":    true,
	"_html_template_rcdataescaper":  true,
	"_html_template_nospaceescaper": true,
}

type flatField uint8

const (
	flatText flatField = iota
	flatID
	flatEmail
	flatName
	flatUnsubscribeURL
	flatAttr
)

var flatFields = map[string]flatField{
	"ID":             flatID,
	"Email":          flatEmail,
	"Name":           flatName,
	"UnsubscribeURL": flatUnsubscribeURL,
}

// flatEscapers are html/template's escapers that a flat template may use,
// by the names html/template gives them in the escaped tree: text, quoted
// and unquoted attributes, RCDATA (title, textarea), and URLs, in href and
// src as in CSS url(). A field in any other context (script and event
// handlers, CSS values, srcset, inside an HTML comment) has an escaper
// missing here and keeps its template on the template package. Comments
// themselves are no obstacle: html/template drops them from the tree.
var flatEscapers = map[string]func(string) string{
	"_html_template_htmlescaper":    htmlEscaper,
	"_html_template_attrescaper":    htmlEscaper, // the same for a plain string
	"_html_template_rcdataescaper":  htmlEscaper, // the same for a plain string
	"_html_template_nospaceescaper": htmlNospaceEscaper,
	"_html_template_urlfilter":      urlFilter,
	"_html_template_urlnormalizer":  func(s string) string { return processURL(s, true) },
	"_html_template_urlescaper":     func(s string) string { return processURL(s, false) },
}

// flattenTree returns tree as a flat template, or nil when it is more
// than text and fields. escaped says the tree is html/template's, after
// its escaping: every action must then carry escapers, all of them known
// here, and a tree that has none was not escaped and is not flat. A
// text/template tree's pipelines are a field alone.
//
// The budget's steps need no check here: a flat template writes once per
// part whatever the contact, and the sample render, which the budget
// meters, wrote exactly as many.
func flattenTree(tree *parse.Tree, escaped bool) *flatTemplate {
	if tree == nil || tree.Root == nil {
		return nil
	}
	f := &flatTemplate{}
	for _, n := range tree.Root.Nodes {
		switch n := n.(type) {
		case *parse.TextNode:
			if len(n.Text) > 0 {
				f.parts = append(f.parts, flatPart{text: string(n.Text)})
			}
		case *parse.ActionNode:
			p, ok := flatAction(n.Pipe, escaped)
			if !ok {
				return nil
			}
			f.parts = append(f.parts, p)
		default:
			return nil
		}
	}
	return f
}

func flatAction(pipe *parse.PipeNode, escaped bool) (flatPart, bool) {
	if pipe == nil || len(pipe.Decl) > 0 || len(pipe.Cmds) == 0 || len(pipe.Cmds[0].Args) != 1 {
		return flatPart{}, false
	}
	if escaped != (len(pipe.Cmds) > 1) {
		// An HTML action without an escaper, or a text action with a
		// function: neither is a field alone.
		return flatPart{}, false
	}
	field, ok := pipe.Cmds[0].Args[0].(*parse.FieldNode)
	if !ok {
		return flatPart{}, false
	}
	var p flatPart
	switch {
	case len(field.Ident) == 1:
		if p.field, ok = flatFields[field.Ident[0]]; !ok {
			return flatPart{}, false
		}
	case len(field.Ident) == 2 && field.Ident[0] == "Attributes":
		p.field, p.attr = flatAttr, field.Ident[1]
	default:
		return flatPart{}, false
	}
	for _, cmd := range pipe.Cmds[1:] {
		if len(cmd.Args) != 1 {
			return flatPart{}, false
		}
		id, ok := cmd.Args[0].(*parse.IdentifierNode)
		if !ok {
			return flatPart{}, false
		}
		esc, ok := flatEscapers[id.Ident]
		if !ok {
			return flatPart{}, false
		}
		p.escapes = append(p.escapes, esc)
		p.htmlEscaped = htmlEscapers[id.Ident]
	}
	return p, true
}

// execute writes the template for d to buf and reports true; or reports
// false, having written some or none of it, when this execution needs the
// template package: a value that is not a string (it prints differently,
// or fails), a missing attribute (an error), output past the budget (the
// template package stops at the same byte and says so). Past the budget's
// time it returns the budget's error itself: rendering again would spend
// the time twice.
//
// The limits are checked after every part, as the template package's meter
// checks every write, so a value repeated in a thousand escaping contexts
// stops at MaxOutput instead of being written whole first.
//
// A non-nil written gets, for every part in order, the string written for
// it: what the plain text derived from the HTML reads a contact's values
// from (derivedtext.go).
func (f *flatTemplate) execute(buf *bytes.Buffer, d *templateData, b *Budget, field string, written *[]string) (bool, error) {
	start := buf.Len()
	var deadline time.Time
	if b.MaxTime > 0 && len(f.parts) >= clockEvery {
		// Fewer parts than the meter's clock interval: the template package
		// would not read the clock either.
		deadline = b.clock().Now().Add(b.MaxTime)
	}
	for i := range f.parts {
		p := &f.parts[i]
		var v string
		switch p.field {
		case flatText:
			v = p.text
		case flatID:
			v = d.ID.String()
		case flatEmail:
			v = d.Email
		case flatName:
			v = d.Name
		case flatUnsubscribeURL:
			v = d.UnsubscribeURL
		case flatAttr:
			s, ok := d.Attributes[p.attr].(string)
			if !ok {
				return false, nil
			}
			v = s
		}
		for _, esc := range p.escapes {
			v = esc(v)
		}
		buf.WriteString(v)
		if written != nil {
			*written = append(*written, v)
		}
		if b.MaxOutput > 0 && buf.Len()-start > b.MaxOutput {
			return false, nil
		}
		if !deadline.IsZero() && (i+1)%clockEvery == 0 && b.clock().Now().After(deadline) {
			return false, b.timeError(field)
		}
	}
	return true, nil
}

// The escapers below are html/template's (Go's html/template/html.go and
// url.go, BSD licence) for a plain string argument, which is all a flat
// template passes them: a contact's fields are strings, and each escaper's
// output is a plain string for the next.

// filterFailsafe is what html/template writes in place of a value it
// refuses in its context.
const filterFailsafe = "ZgotmplZ"

func htmlEscaper(s string) string { return htmlReplacer(s, htmlReplacementTable, true) }

func htmlNospaceEscaper(s string) string {
	if s == "" {
		return filterFailsafe
	}
	return htmlReplacer(s, htmlNospaceReplacementTable, false)
}

var htmlReplacementTable = []string{
	0:    "\uFFFD",
	'"':  "&#34;",
	'&':  "&amp;",
	'\'': "&#39;",
	'+':  "&#43;",
	'<':  "&lt;",
	'>':  "&gt;",
}

var htmlNospaceReplacementTable = []string{
	0:    "&#xfffd;",
	'\t': "&#9;",
	'\n': "&#10;",
	'\v': "&#11;",
	'\f': "&#12;",
	'\r': "&#13;",
	' ':  "&#32;",
	'"':  "&#34;",
	'&':  "&amp;",
	'\'': "&#39;",
	'+':  "&#43;",
	'<':  "&lt;",
	'=':  "&#61;",
	'>':  "&gt;",
	'`':  "&#96;",
}

func htmlReplacer(s string, table []string, badRunes bool) string {
	written, b := 0, new(strings.Builder)
	r, w := rune(0), 0
	for i := 0; i < len(s); i += w {
		// Not a range loop: a decoding error's width is not RuneLen's.
		r, w = utf8.DecodeRuneInString(s[i:])
		if int(r) < len(table) {
			if repl := table[r]; len(repl) != 0 {
				if written == 0 {
					b.Grow(len(s))
				}
				b.WriteString(s[written:i])
				b.WriteString(repl)
				written = i + w
			}
		} else if badRunes {
			// Allowed through unescaped.
		} else if 0xfdd0 <= r && r <= 0xfdef || 0xfff0 <= r && r <= 0xffff {
			if written == 0 {
				b.Grow(len(s))
			}
			fmt.Fprintf(b, "%s&#x%x;", s[written:i], r)
			written = i + w
		}
	}
	if written == 0 {
		return s
	}
	b.WriteString(s[written:])
	return b.String()
}

func urlFilter(s string) string {
	if protocol, _, ok := strings.Cut(s, ":"); ok && !strings.Contains(protocol, "/") {
		if !strings.EqualFold(protocol, "http") && !strings.EqualFold(protocol, "https") && !strings.EqualFold(protocol, "mailto") {
			return "#" + filterFailsafe
		}
	}
	return s
}

// processURL normalizes (norm) or escapes s as a URL part.
func processURL(s string, norm bool) string {
	var b strings.Builder
	written := 0
	for i, n := 0, len(s); i < n; i++ {
		c := s[i]
		switch c {
		case '!', '#', '$', '&', '*', '+', ',', '/', ':', ';', '=', '?', '@', '[', ']':
			if norm {
				continue
			}
		case '-', '.', '_', '~':
			continue
		case '%':
			if norm && i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2]) {
				continue
			}
		default:
			if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' {
				continue
			}
		}
		if written == 0 {
			b.Grow(len(s) + 16)
		}
		b.WriteString(s[written:i])
		// html/template writes fmt's "%%%02x": lower-case hex.
		b.WriteByte('%')
		b.WriteByte(lowerHex[c>>4])
		b.WriteByte(lowerHex[c&0xf])
		written = i + 1
	}
	if written == 0 {
		return s
	}
	b.WriteString(s[written:])
	return b.String()
}

const lowerHex = "0123456789abcdef"

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}
