package message

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"text/template/parse"
	"unicode/utf8"
)

// ValidationError says which input is wrong and what to do about it. Reason
// is written for the person who typed the template, not for a log parser.
type ValidationError struct {
	Field  string
	Reason string
}

func (e *ValidationError) Error() string {
	return "invalid " + e.Field + ": " + e.Reason
}

// ValidateHeaderValue returns an error if v contains CR, LF or NUL. Any of
// them in a header value lets the value start a new header (or end the
// header block), so every package that puts user data into a header checks
// with this one function.
func ValidateHeaderValue(field, v string) error {
	if i := indexLineBreakOrNUL(v); i >= 0 {
		what := "a line break (CR or LF)"
		if v[i] == 0 {
			what = "a NUL byte"
		}
		return &ValidationError{Field: field, Reason: fmt.Sprintf("contains %s at byte %d; header values must be a single line", what, i)}
	}
	return nil
}

// CheckControl refuses a control character other than tab in text a
// person gives once and others read: a broadcast's name, subject and from
// name, a suppression's reason, a segment's name. Encoded into a header
// such a character reaches every recipient's mail client; printed by the
// CLI, an escape sequence or a line break rewrites the terminal (a reason
// holding "\nsegments FAKE" printed a fake line in contacts show). Not for
// every rendered header: a contact's data is checked at import.
//
// Also refused: the line and paragraph separators (U+2028, U+2029), which
// break a line where JSON and some terminals and mail clients do not
// expect one, and the bidirectional embeddings and overrides (U+202A to
// U+202E), which make text display in another order than it is written:
// a subject that reads one way in a preview and another in a filter.
// Marks (U+200E, U+200F) and isolates stay: right-to-left text uses them.
func CheckControl(field, v string) error {
	for i, r := range v {
		switch {
		case r < 0x20 && r != '\t' || r >= 0x7f && r < 0xa0:
			return &ValidationError{Field: field, Reason: fmt.Sprintf("contains the control character %U at byte %d; remove it", r, i)}
		case r == 0x2028 || r == 0x2029:
			return &ValidationError{Field: field, Reason: fmt.Sprintf("contains the line or paragraph separator %U at byte %d; remove it", r, i)}
		case r >= 0x202a && r <= 0x202e:
			return &ValidationError{Field: field, Reason: fmt.Sprintf("contains the bidirectional override %U at byte %d, which makes the text display in another order than it is written; remove it", r, i)}
		}
	}
	return nil
}

// indexLineBreakOrNUL is strings.IndexAny(v, "\r\n\x00"), which builds
// its byte set anew on every call: every header of every message passes
// here.
func indexLineBreakOrNUL(v string) int {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c <= '\r' && (c == '\r' || c == '\n' || c == 0) {
			return i
		}
	}
	return -1
}

var (
	reUnknownField = regexp.MustCompile(`can't evaluate field (\w+) in type [\w.]*templateData`)
	reMissingKey   = regexp.MustCompile(`map has no entry for key "([^"]*)"`)
)

// templateError turns a text/template or html/template error into a
// ValidationError whose reason names the template and the fix. attrs are
// the contact's attributes, when a contact's render failed: a key that
// differs from the missing one only in case is named ({{.Attributes.city}}
// against a file's "City" column read as no hint; tester).
func templateError(field string, err error, attrs map[string]any) error {
	var ve *ValidationError
	if errors.As(err, &ve) {
		return ve // the budget's own, already in a person's words
	}
	msg := strings.TrimPrefix(err.Error(), "template: ")
	if m := reUnknownField.FindStringSubmatch(msg); m != nil {
		msg = fmt.Sprintf("%s: unknown field .%s; available fields are %s", location(msg), m[1], availableFields)
	} else if m := reMissingKey.FindStringSubmatch(msg); m != nil {
		msg = fmt.Sprintf("%s: the contact has no attribute %q; use {{index .Attributes %q}} if it is optional", location(msg), m[1], m[1])
		for k := range attrs {
			if strings.EqualFold(k, m[1]) {
				msg += fmt.Sprintf(" (it has %q: attribute names are case-sensitive)", k)
				break
			}
		}
	}
	return &ValidationError{Field: field, Reason: msg}
}

// location extracts "name:line:col" from a template error message.
func location(msg string) string {
	if i := strings.Index(msg, ": "); i > 0 {
		return msg[:i]
	}
	return msg
}

const availableFields = ".Name, .Email, .ID, .UnsubscribeURL and .Attributes.<key>"

type namedTree struct {
	field string // ValidationError field
	name  string // template name; equals field for the top-level template
	tree  *parse.Tree
}

func (c *Compiled) trees() []namedTree {
	var out []namedTree
	for _, t := range c.subject.Templates() {
		out = append(out, namedTree{fieldSubject, t.Name(), t.Tree})
	}
	for _, t := range c.html.Templates() {
		out = append(out, namedTree{fieldHTML, t.Name(), t.Tree})
	}
	if c.text != nil {
		for _, t := range c.text.Templates() {
			out = append(out, namedTree{fieldText, t.Name(), t.Tree})
		}
	}
	return out
}

// checkFields walks a parse tree and rejects field references that cannot
// exist on the contact, in every branch, not only the ones a sample render
// happens to execute. It also records every .Attributes.<key> chain in attrs
// (as placeholder values) so the sample render can run templates that use
// required attributes.
//
// Only references whose dot is known to be the contact are checked: the
// top level of the main template, if/else bodies, the else branch of
// with/range, and $.X anywhere in the main template. Inside with/range
// bodies and {{define}}d templates the dot is something else.
func checkFields(field, name string, tree *parse.Tree, attrs map[string]any) error {
	if tree == nil || tree.Root == nil {
		return nil
	}
	w := &fieldWalker{field: field, tree: tree, attrs: attrs, main: name == field}
	w.node(tree.Root, w.main)
	return w.err
}

type fieldWalker struct {
	field string
	tree  *parse.Tree
	attrs map[string]any
	main  bool
	err   error
}

func (w *fieldWalker) node(n parse.Node, dotIsContact bool) {
	if w.err != nil || n == nil {
		return
	}
	switch n := n.(type) {
	case *parse.ListNode:
		if n == nil {
			return
		}
		for _, c := range n.Nodes {
			w.node(c, dotIsContact)
		}
	case *parse.ActionNode:
		w.node(n.Pipe, dotIsContact)
	case *parse.IfNode:
		w.branch(&n.BranchNode, dotIsContact, dotIsContact)
	case *parse.WithNode:
		w.branch(&n.BranchNode, false, dotIsContact)
	case *parse.RangeNode:
		w.branch(&n.BranchNode, false, dotIsContact)
	case *parse.TemplateNode:
		w.node(n.Pipe, dotIsContact)
	case *parse.PipeNode:
		if n == nil {
			return
		}
		for _, c := range n.Cmds {
			w.node(c, dotIsContact)
		}
	case *parse.CommandNode:
		for _, a := range n.Args {
			w.node(a, dotIsContact)
		}
	case *parse.ChainNode:
		w.node(n.Node, dotIsContact)
	case *parse.FieldNode:
		if dotIsContact {
			w.check(n, n.Ident)
		}
	case *parse.VariableNode:
		if w.main && len(n.Ident) > 1 && n.Ident[0] == "$" {
			w.check(n, n.Ident[1:])
		}
	}
}

func (w *fieldWalker) branch(b *parse.BranchNode, bodyDot, elseDot bool) {
	w.node(b.Pipe, elseDot)
	w.node(b.List, bodyDot)
	w.node(b.ElseList, elseDot)
}

func (w *fieldWalker) check(n parse.Node, ident []string) {
	loc, _ := w.tree.ErrorContext(n)
	switch ident[0] {
	case "ID":
	case "Name", "Email", "UnsubscribeURL":
		if len(ident) > 1 {
			w.err = &ValidationError{Field: w.field, Reason: fmt.Sprintf("%s: .%s is text and has no field .%s", loc, ident[0], ident[1])}
		}
	case "Attributes":
		addSampleAttr(w.attrs, ident[1:])
	default:
		w.err = &ValidationError{Field: w.field, Reason: fmt.Sprintf("%s: unknown field .%s; available fields are %s", loc, ident[0], availableFields)}
	}
}

// addSampleAttr makes path resolvable in m: intermediate keys become maps,
// the last one a placeholder string.
func addSampleAttr(m map[string]any, path []string) {
	for i, k := range path {
		if i == len(path)-1 {
			if _, ok := m[k]; !ok {
				m[k] = "sample " + k
			}
			return
		}
		next, ok := m[k].(map[string]any)
		if !ok {
			next = map[string]any{}
			m[k] = next
		}
		m = next
	}
}

// checkTemplateText refuses a template source no store can hold or no
// renderer should parse: a NUL byte, invalid UTF-8, or more than MaxSource
// bytes.
func checkTemplateText(field, src string) error {
	if i := strings.IndexByte(src, 0); i >= 0 {
		return &ValidationError{Field: field, Reason: fmt.Sprintf("contains a NUL byte at byte %d", i)}
	}
	if !utf8.ValidString(src) {
		return &ValidationError{Field: field, Reason: "is not valid UTF-8"}
	}
	return checkSource(field, src)
}

// limitLoops checks each template set's loops and instruments every tree
// for the budget's meter. It runs before the first execution: html/template
// escapes (and copies) the trees then.
func (c *Compiled) limitLoops() error {
	sets := map[string]map[string]*parse.Tree{}
	for _, tr := range c.trees() {
		if sets[tr.field] == nil {
			sets[tr.field] = map[string]*parse.Tree{}
		}
		sets[tr.field][tr.name] = tr.tree
	}
	for field, trees := range sets {
		if err := checkLoops(field, trees); err != nil {
			return err
		}
	}
	for _, tr := range c.trees() {
		instrument(tr.tree)
	}
	return nil
}
