package message

import (
	texttemplate "text/template"
	"text/template/parse"
)

// text/template prints a value that is nothing as "<no value>": an
// optional attribute read with {{index .Attributes "x"}} (the form this
// package's own errors recommend for one) where the contact has no x, or a
// JSON null in a transactional send's data. html/template prints nothing
// for it. So that no reader finds "<no value>" in a subject or a text
// part, every action of a text template that prints ends with nilAsEmpty,
// which turns nothing into "" and passes anything else through as it was:
// "{{index .Attributes "nick"}}" becomes "{{index .Attributes "nick" |
// _rc_nil_as_empty}}". {{if}} and {{with}} see the value before it, so an
// absent attribute is still false there.
const nilAsEmptyFunc = "_rc_nil_as_empty"

// nilAsEmptyFuncs is the function the rewritten actions call. A function
// added to a template after Parse is found at execution, as any is.
var nilAsEmptyFuncs = texttemplate.FuncMap{nilAsEmptyFunc: nilAsEmpty}

func nilAsEmpty(v any) any {
	if v == nil {
		return ""
	}
	return v
}

// printNoValueAsEmpty rewrites t's printing actions (see nilAsEmptyFunc)
// and gives t the function they call. Actions that only read one field
// ({{.Name}}, {{.Attributes.city}}) are left as they are where keepFields:
// a contact's fields are strings and a missing attribute is an error
// (missingkey=error), so they never print "<no value>", and left alone
// they stay flat templates (flat.go), which render without reflection.
func printNoValueAsEmpty(t *texttemplate.Template, keepFields bool) {
	t.Funcs(nilAsEmptyFuncs)
	for _, tt := range t.Templates() {
		if tt.Tree == nil || tt.Tree.Root == nil {
			continue
		}
		walk(tt.Tree.Root, func(n parse.Node) {
			a, ok := n.(*parse.ActionNode)
			if !ok || a.Pipe == nil || len(a.Pipe.Decl) > 0 || len(a.Pipe.Cmds) == 0 || (keepFields && oneField(a.Pipe)) {
				return
			}
			fn := parse.NewIdentifier(nilAsEmptyFunc).SetTree(tt.Tree).SetPos(a.Pos)
			a.Pipe.Cmds = append(a.Pipe.Cmds, &parse.CommandNode{NodeType: parse.NodeCommand, Pos: a.Pos, Args: []parse.Node{fn}})
		})
	}
}

// oneField says pipe is a single field read, such as .Name or
// .Attributes.city.
func oneField(pipe *parse.PipeNode) bool {
	if len(pipe.Cmds) != 1 || len(pipe.Cmds[0].Args) != 1 {
		return false
	}
	_, ok := pipe.Cmds[0].Args[0].(*parse.FieldNode)
	return ok
}
