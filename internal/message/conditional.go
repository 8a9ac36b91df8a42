package message

import (
	"errors"
	"fmt"
	htmltemplate "html/template"
	"io"
	"regexp"
	"slices"
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
// becomes an action, {{_cc N}}; once the escaper has run, each such action
// it found in HTML text, between elements, becomes the marker's text again
// (keep). What lies between markers is escaped as the HTML it is, which is
// how Outlook reads it.
//
// Every other client reads a block shown to Outlook only as a comment,
// from its <!--[if …]> to the first -->. For the escaper's reading to hold
// for them too, a marker must stand in HTML text (not in a tag, an
// attribute, a script, a style, a title or another comment), and such a
// block must hold no --> of its own before its <![endif]-->: otherwise
// the rest of the block is live HTML to them in a context the escaper did
// not see (<!--[if mso]><a title="--><img onerror={{.Name}}>">, review).
// Either is refused. A field's value cannot end a comment: every escaper
// escapes '>'.
//
// The unsubscribe link check reads what other clients see (the markers are
// comments) and what Outlook sees (outlookView).

// conditionalMarker matches the markers: an opening [if …]> (and the
// <!--> or <!-- --> that reveals the rest to other clients), and the
// closing [endif]-->, with the <!-- that hides it from them. One line each,
// so a template's lines stay as written.
var conditionalMarker = regexp.MustCompile(`(?i)<!--\[if [^\]\n{}]{1,64}\]>(?:<!--(?: ?--)?>)?|(?:<!--)?<!\[endif\]-->`)

// conditionalFunc is the function a marker's action calls. Executed, it
// writes nothing: only a copy of a template the escaper made for another
// context ({{template}} in an attribute) keeps the action, and there the
// marker would be text, not a comment.
const conditionalFunc = "_cc"

var conditionalFuncs = htmltemplate.FuncMap{conditionalFunc: func(int) string { return "" }}

// conditionalMarkers is a template's source with its conditional-comment
// markers replaced by actions, and the markers by index.
type conditionalMarkers struct {
	src     string
	markers []string
}

// markConditionals replaces src's markers by actions, each padded to the
// marker's length so that an error's column is as written; a block shown
// to Outlook only that holds a --> of its own is refused.
func markConditionals(src string) (conditionalMarkers, error) {
	if !strings.Contains(src, "<!") {
		return conditionalMarkers{src: src}, nil
	}
	at := conditionalMarker.FindAllStringIndex(src, -1)
	if len(at) == 0 {
		return conditionalMarkers{src: src}, nil
	}
	var b strings.Builder
	c := conditionalMarkers{markers: make([]string, len(at))}
	last, open := 0, -1 // open: where the block being read began, -1 for none
	for i, m := range at {
		marker := src[m[0]:m[1]]
		c.markers[i] = marker
		if err := pairs(src, m[0], marker, &open); err != nil {
			return c, err
		}
		if hidesFromOthers(marker) {
			if err := endsEarly(src, m[1], at[i+1:]); err != nil {
				return c, err
			}
		}
		action := "{{" + conditionalFunc + " " + strconv.Itoa(i)
		b.WriteString(src[last:m[0]])
		b.WriteString(action + strings.Repeat(" ", max(len(marker)-len(action)-2, 0)) + "}}")
		last = m[1]
	}
	if open >= 0 {
		return c, unpaired(src, open, "is never closed by its <![endif]-->: every client but Outlook would hide the rest of the message as a comment")
	}
	b.WriteString(src[last:])
	c.src = b.String()
	return c, nil
}

// pairs checks that a closing marker, at src[at:], closes a block opened
// before it; open is where the block being read began (-1 for none). A
// misspelt opening (<!--[ifmso]>, which no client reads as one) leaves
// its closing marker alone, and html/template's error for that ("ends in
// a non-text context") says nothing of the cause. Two openings in a row
// are let be: each of a template's branches may open the block one way
// ({{if}}<!--[if mso]><table width="600">{{else}}<!--[if mso]><table
// width="500">{{end}}), and only one is output.
func pairs(src string, at int, marker string, open *int) error {
	switch {
	case closes(marker) && *open < 0:
		return unpaired(src, at, "closes no <!--[if …]> before it: is the condition misspelt (it must read <!--[if mso]>, a space after if, or <!--[if !mso]><!--> for every client but Outlook), or is it a block inside another (conditional comments do not nest)?")
	case closes(marker):
		*open = -1
	default:
		*open = at
	}
	return nil
}

// unpaired is the error for a conditional comment's marker at src[at:].
func unpaired(src string, at int, why string) error {
	line := strings.Count(src[:at], "\n") + 1
	marker := conditionalMarker.FindString(src[at:])
	return &ValidationError{Field: fieldHTML, Reason: fmt.Sprintf("line %d: the Outlook conditional comment %s %s", line, marker, why)}
}

// hidesFromOthers: an opening marker whose block other clients read as a
// comment (<!--[if mso]>, not <!--[if !mso]><!-->).
func hidesFromOthers(marker string) bool {
	return strings.HasPrefix(marker, "<!--[") && strings.HasSuffix(marker, "]>")
}

// closes: a closing marker ([endif]-->, in any case).
func closes(marker string) bool { return strings.HasSuffix(strings.ToLower(marker), "[endif]-->") }

// endsEarly refuses a block, from from in src to the next closing marker
// among next, that holds a --> (or --!>) other than its own comments'.
func endsEarly(src string, from int, next [][]int) error {
	end := len(src)
	for _, m := range next {
		if closes(src[m[0]:m[1]]) {
			end = m[0]
			break
		}
	}
	block := plainComment.ReplaceAllString(src[from:end], "")
	if strings.Contains(block, "-->") || strings.Contains(block, "--!>") {
		return &ValidationError{Field: fieldHTML, Reason: "has a --> inside an Outlook conditional comment (<!--[if …]> … <![endif]-->): every client but Outlook reads the block as a comment that ends there, and what follows as HTML; remove it, or end the block before it"}
	}
	return nil
}

var plainComment = regexp.MustCompile(`(?s)<!--.*?-->`)

// keep makes t's escaper run (an execution into a writer that takes
// nothing stops at its first write, which is the empty text instrument
// puts first; t's errors surface at the first real render) and then turns
// each marker's action that stands in HTML text back into the marker's
// text, in every template of t. A marker anywhere else is refused.
func (c conditionalMarkers) keep(t *htmltemplate.Template) error {
	if len(c.markers) == 0 {
		return nil
	}
	t.Execute(refuseWrites{}, nil) //nolint:errcheck // only the escaping is wanted
	for _, tt := range t.Templates() {
		if tt.Tree == nil {
			continue
		}
		if err := c.restore(tt.Tree.Root); err != nil {
			return err
		}
	}
	return nil
}

// restore replaces, in list and the lists below it, each marker's action
// that the escaper found in HTML text by the marker's text.
func (c conditionalMarkers) restore(list *parse.ListNode) error {
	if list == nil {
		return nil
	}
	for i, n := range list.Nodes {
		switch n := n.(type) {
		case *parse.ActionNode:
			marker, ok, err := c.marker(n)
			if err != nil {
				return err
			}
			if ok {
				list.Nodes[i] = &parse.TextNode{NodeType: parse.NodeText, Pos: n.Pos, Text: []byte(marker)}
			}
		case *parse.IfNode:
			if err := errors.Join(c.restore(n.List), c.restore(n.ElseList)); err != nil {
				return err
			}
		case *parse.RangeNode:
			if err := errors.Join(c.restore(n.List), c.restore(n.ElseList)); err != nil {
				return err
			}
		case *parse.WithNode:
			if err := errors.Join(c.restore(n.List), c.restore(n.ElseList)); err != nil {
				return err
			}
		}
	}
	return nil
}

// marker is the marker an action stands for (ok false: another action),
// or an error when it does not stand in HTML text, where the escaper puts
// the HTML text escaper alone after it.
func (c conditionalMarkers) marker(a *parse.ActionNode) (string, bool, error) {
	cmds := a.Pipe.Cmds
	if len(cmds) == 0 || len(cmds[0].Args) != 2 {
		return "", false, nil
	}
	if id, ok := cmds[0].Args[0].(*parse.IdentifierNode); !ok || id.Ident != conditionalFunc {
		return "", false, nil
	}
	n, ok := cmds[0].Args[1].(*parse.NumberNode)
	if !ok || !n.IsInt || n.Int64 < 0 || n.Int64 >= int64(len(c.markers)) {
		return "", false, &ValidationError{Field: fieldHTML, Reason: fmt.Sprintf("calls %s, which is rangecast's own", conditionalFunc)}
	}
	marker := c.markers[n.Int64]
	if len(cmds) == 1 && len(a.Pipe.Decl) == 0 {
		// Not escaped: a template only ever called in another context
		// ({{template}} in an attribute), never executed as it is; the
		// escaper's copy of it keeps the action, which writes nothing.
		return "", false, nil
	}
	if len(a.Pipe.Decl) > 0 || len(cmds) != 2 || len(cmds[1].Args) != 1 {
		return "", false, misplaced(marker)
	}
	if id, ok := cmds[1].Args[0].(*parse.IdentifierNode); !ok || id.Ident != "_html_template_htmlescaper" {
		return "", false, misplaced(marker)
	}
	return marker, true, nil
}

func misplaced(marker string) error {
	return &ValidationError{Field: fieldHTML, Reason: fmt.Sprintf("has the Outlook conditional comment %s inside a tag, an attribute, <script>, <style>, <title>, <textarea> or another comment: "+
		"Outlook reads it there, and every other client differently; put it between elements", marker)}
}

// refuseWrites stops an execution at its first write.
type refuseWrites struct{}

func (refuseWrites) Write([]byte) (int, error) { return 0, io.ErrShortWrite }

// outlookView is rendered HTML as Outlook for Windows (2016 and later,
// which says it is mso 16) reads it: a block whose condition holds for it
// shown, any other gone (<!--[if !mso]><!-->…, and any condition not
// known to hold: [if gte mso 99]), the markers themselves gone. The
// unsubscribe link check reads this as well as what every other client
// sees: a link only in a block Outlook skips is one its readers never see.
func outlookView(html string) string {
	at := conditionalMarker.FindAllStringIndex(html, -1)
	if len(at) == 0 {
		return html
	}
	var b strings.Builder
	var open []bool // the blocks around, innermost last: does Outlook show each
	shown := func() bool { return !slices.Contains(open, false) }
	last := 0
	for _, m := range at {
		if shown() {
			b.WriteString(html[last:m[0]])
		}
		last = m[1]
		marker := html[m[0]:m[1]]
		if closes(marker) {
			if len(open) > 0 {
				open = open[:len(open)-1]
			}
			continue
		}
		cond := marker[len("<!--[if "):strings.Index(marker, "]>")]
		open = append(open, forOutlook(cond))
	}
	if shown() {
		b.WriteString(html[last:])
	}
	return b.String()
}

// forOutlook reports a condition that holds for Outlook 2016 and later
// (mso 16): mso, mso | IE, gte mso 9, (mso)|(IE), lt mso 17…; anything it
// does not know (a !, IE alone, another product) does not.
func forOutlook(cond string) bool {
	const version = 16
	cond = strings.NewReplacer("(", " ", ")", " ").Replace(strings.ToLower(cond))
	for _, term := range strings.Split(cond, "|") {
		f := strings.Fields(term)
		switch {
		case len(f) == 1 && f[0] == "mso":
			return true
		case len(f) == 2 && f[0] == "mso":
			if n, err := strconv.Atoi(f[1]); err == nil && n == version {
				return true
			}
		case len(f) == 3 && f[1] == "mso":
			n, err := strconv.Atoi(f[2])
			if err != nil {
				continue
			}
			switch f[0] {
			case "gte":
				if version >= n {
					return true
				}
			case "gt":
				if version > n {
					return true
				}
			case "lte":
				if version <= n {
					return true
				}
			case "lt":
				if version < n {
					return true
				}
			}
		}
	}
	return false
}
