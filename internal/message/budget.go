package message

import (
	"bytes"
	"fmt"
	"io"
	"strconv"
	"text/template/parse"
	"time"

	"github.com/rangecast/rangecast/internal/clock"
)

// Budget bounds what one execution of a template may cost, wherever a
// template runs (create, preview, page workers, transactional put and
// send): Go templates can loop, and {{range 100000000000}} or a loop that
// writes would otherwise pin a core or grow memory until the process dies.
//
// Loops are bounded three ways. A range over an integer literal above
// MaxRange is refused at parse, as is a template that calls itself. At run
// time every range iteration and every template call costs a step, output
// costs its bytes, and the clock is read every few steps: the first limit
// reached ends the execution with a *ValidationError.
type Budget struct {
	MaxSteps  int           // range iterations + template calls + writes
	MaxOutput int           // bytes of output of one part (subject, html, text)
	MaxTime   time.Duration // wall time of one part
	Clock     clock.Clock   // nil: clock.Real
}

// Limits of a template's source and loops, checked at parse.
const (
	// MaxSource is the largest template source of one part.
	MaxSource = 512 << 10
	// MaxRange is the largest integer a template may range over.
	MaxRange = 10_000
)

// DefaultBudget is generous for any real email (a broadcast renders in
// tens of microseconds) and stops a bomb in milliseconds.
var DefaultBudget = Budget{
	MaxSteps:  200_000,
	MaxOutput: 4 << 20,
	MaxTime:   250 * time.Millisecond,
}

// clockEvery is how many steps go between two clock reads.
const clockEvery = 64

// budgetWriter is one execution's meter, in front of the buffer the
// template writes to.
type budgetWriter struct {
	w        io.Writer
	b        *Budget
	field    string
	steps    int
	written  int
	deadline time.Time
	err      *ValidationError
}

func (b *Budget) writer(field string, w io.Writer) *budgetWriter {
	bw := &budgetWriter{w: w, b: b, field: field}
	if b.MaxTime > 0 {
		bw.deadline = b.clock().Now().Add(b.MaxTime)
	}
	return bw
}

func (b *Budget) clock() clock.Clock {
	if b.Clock == nil {
		return clock.Real{}
	}
	return b.Clock
}

// Write counts a step (every range iteration and template call writes,
// see instrument) and the bytes, and fails once a limit is passed; the
// template stops at the first failed write.
func (bw *budgetWriter) Write(p []byte) (int, error) {
	if bw.err != nil {
		return 0, bw.err
	}
	bw.steps++
	bw.written += len(p)
	switch {
	case bw.b.MaxSteps > 0 && bw.steps > bw.b.MaxSteps:
		bw.err = &ValidationError{Field: bw.field, Reason: fmt.Sprintf("takes more than %d steps to render (a loop too long for an email)", bw.b.MaxSteps)}
	case bw.b.MaxOutput > 0 && bw.written > bw.b.MaxOutput:
		bw.err = &ValidationError{Field: bw.field, Reason: fmt.Sprintf("renders to more than %d bytes", bw.b.MaxOutput)}
	case !bw.deadline.IsZero() && bw.steps%clockEvery == 0 && bw.b.clock().Now().After(bw.deadline):
		bw.err = bw.b.timeError(bw.field)
	}
	if bw.err != nil {
		return 0, bw.err
	}
	return bw.w.Write(p)
}

// timeError is the error of a part that rendered past MaxTime.
func (b *Budget) timeError(field string) *ValidationError {
	return &ValidationError{Field: field, Reason: fmt.Sprintf("takes longer than %s to render", b.MaxTime)}
}

// budgetErr returns the budget's own error when it ended the execution
// (the template package wraps it in its own words).
func (bw *budgetWriter) budgetErr() error {
	if bw.err != nil {
		return bw.err
	}
	return nil
}

// checkSource refuses a source too large to be a template.
func checkSource(field, src string) error {
	if len(src) > MaxSource {
		return &ValidationError{Field: field, Reason: fmt.Sprintf("is %d bytes; a template may have at most %d", len(src), MaxSource)}
	}
	return nil
}

// checkLoops refuses, at parse, a range over an integer literal above
// MaxRange (directly or through a variable the literal was assigned to)
// and templates that call themselves, directly or through others.
func checkLoops(field string, trees map[string]*parse.Tree) error {
	for name, tree := range trees {
		if tree == nil || tree.Root == nil {
			continue
		}
		if err := checkRanges(field, tree, tree.Root); err != nil {
			return err
		}
		if err := checkRecursion(field, name, trees, map[string]bool{}); err != nil {
			return err
		}
	}
	return nil
}

func checkRanges(field string, tree *parse.Tree, root parse.Node) error {
	var err error
	walk(root, func(n parse.Node) {
		if err != nil {
			return
		}
		var pipe *parse.PipeNode
		switch n := n.(type) {
		case *parse.RangeNode:
			pipe = n.Pipe
		case *parse.ActionNode:
			if len(n.Pipe.Decl) > 0 { // {{$n := 100000}}
				pipe = n.Pipe
			}
		default:
			return
		}
		if v, ok := intLiteral(pipe); ok && (v > MaxRange || v < -MaxRange) {
			loc, _ := tree.ErrorContext(n)
			err = &ValidationError{Field: field, Reason: fmt.Sprintf("%s: ranges over %s; a template may loop at most %d times", loc, strconv.FormatInt(v, 10), MaxRange)}
		}
	})
	return err
}

// intLiteral: the pipeline is one integer literal.
func intLiteral(p *parse.PipeNode) (int64, bool) {
	if p == nil || len(p.Cmds) != 1 || len(p.Cmds[0].Args) != 1 {
		return 0, false
	}
	num, ok := p.Cmds[0].Args[0].(*parse.NumberNode)
	if !ok {
		return 0, false
	}
	switch {
	case num.IsInt:
		return num.Int64, true
	case num.IsUint:
		return int64(min(num.Uint64, 1<<62)), true
	case num.IsFloat:
		return int64(min(num.Float64, 1<<62)), true
	}
	return 0, false
}

func checkRecursion(field, name string, trees map[string]*parse.Tree, active map[string]bool) error {
	if active[name] {
		return &ValidationError{Field: field, Reason: fmt.Sprintf("template %q calls itself; recursive templates are not allowed", name)}
	}
	tree := trees[name]
	if tree == nil || tree.Root == nil {
		return nil
	}
	active[name] = true
	defer delete(active, name)
	var err error
	walk(tree.Root, func(n parse.Node) {
		if t, ok := n.(*parse.TemplateNode); ok && err == nil {
			err = checkRecursion(field, t.Name, trees, active)
		}
	})
	return err
}

// instrument makes every range iteration and every template call write
// (an empty text), so the budget's meter sees each of them: a loop that
// writes nothing still costs steps and reads the clock.
func instrument(tree *parse.Tree) {
	if tree == nil || tree.Root == nil {
		return
	}
	tree.Root.Nodes = append([]parse.Node{emptyText(tree.Root.Pos)}, tree.Root.Nodes...)
	walk(tree.Root, func(n parse.Node) {
		if r, ok := n.(*parse.RangeNode); ok && r.List != nil {
			r.List.Nodes = append([]parse.Node{emptyText(r.List.Pos)}, r.List.Nodes...)
		}
	})
}

func emptyText(pos parse.Pos) *parse.TextNode {
	return &parse.TextNode{NodeType: parse.NodeText, Pos: pos, Text: []byte{}}
}

// walk calls f for n and every node below it.
func walk(n parse.Node, f func(parse.Node)) {
	if n == nil {
		return
	}
	switch n := n.(type) {
	case *parse.ListNode:
		if n == nil {
			return
		}
		f(n)
		for _, c := range n.Nodes {
			walk(c, f)
		}
		return
	case *parse.PipeNode:
		if n == nil {
			return
		}
	}
	f(n)
	switch n := n.(type) {
	case *parse.ActionNode:
		walk(n.Pipe, f)
	case *parse.IfNode:
		walkBranch(&n.BranchNode, f)
	case *parse.WithNode:
		walkBranch(&n.BranchNode, f)
	case *parse.RangeNode:
		walkBranch(&n.BranchNode, f)
	case *parse.TemplateNode:
		walk(n.Pipe, f)
	case *parse.PipeNode:
		for _, c := range n.Cmds {
			walk(c, f)
		}
	case *parse.CommandNode:
		for _, a := range n.Args {
			walk(a, f)
		}
	case *parse.ChainNode:
		walk(n.Node, f)
	}
}

func walkBranch(b *parse.BranchNode, f func(parse.Node)) {
	walk(b.Pipe, f)
	if b.List != nil {
		walk(b.List, f)
	}
	if b.ElseList != nil {
		walk(b.ElseList, f)
	}
}

// meter runs exec against a metered writer in front of buf and returns
// the budget's error when the budget ended it.
func (b *Budget) meter(field string, buf *bytes.Buffer, exec func(io.Writer) error) error {
	bw := b.writer(field, buf)
	if err := exec(bw); err != nil {
		if be := bw.budgetErr(); be != nil {
			return be
		}
		return err
	}
	return nil
}
