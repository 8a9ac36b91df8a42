package message

import (
	"fmt"
	htmltemplate "html/template"
	"regexp"
	"strings"
	texttemplate "text/template"
)

// printf replaces the templates' built-in printf, which prints fmt's own
// complaint into the message where a verb does not fit its argument or the
// arguments do not match the verbs ({{printf "%d" .Name}} gives
// "%!d(string=Ann)", a missing one "%!s(MISSING)"): a template with such a
// call would send that text to every recipient. This one fails the render
// instead, with the format named, as any other template mistake does, so
// the sample render at create time refuses the template (found by a
// tester). A complaint is told by its form ("%!d(", "%!(EXTRA …") from
// contact data that holds "%!" ("Save 20%!"), and by counting: the output
// holds more complaints than the format's literal text and the arguments,
// printed, account for.
func printf(format string, args ...any) (string, error) {
	out := fmt.Sprintf(format, args...)
	n := len(fmtComplaint.FindAllStringIndex(out, -1))
	if n == 0 {
		return out, nil
	}
	expected := len(fmtComplaint.FindAllStringIndex(strings.ReplaceAll(format, "%%", "%"), -1))
	for _, a := range args {
		expected += len(fmtComplaint.FindAllStringIndex(fmt.Sprint(a), -1))
	}
	if n > expected {
		return "", fmt.Errorf("printf %q: its verbs do not fit its %d argument(s) (fmt would print %q into the message)", format, len(args), out)
	}
	return out, nil
}

// fmtComplaint is what fmt prints for a verb that does not fit
// ("%!d(string=Ann)", "%!s(MISSING)") or arguments left over or missing
// ("%!(EXTRA string=x)", "%!(NOVERB)", "%!(BADWIDTH)").
var fmtComplaint = regexp.MustCompile(`%!(?:[a-zA-Z]\(|\((?:EXTRA |NOVERB|BADWIDTH|BADPREC|BADINDEX))`)

// checkedText and checkedHTML give a template the checked printf; set
// before Parse, they take the place of the built-in.
var (
	checkedText = texttemplate.FuncMap{"printf": printf}
	checkedHTML = htmltemplate.FuncMap{"printf": printf}
)
