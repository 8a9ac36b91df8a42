package message

import (
	"fmt"
	htmltemplate "html/template"
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
// tester). A complaint is told from contact data that happens to hold
// "%!" by counting: the output holds more of them than the format's
// literal "%%!" and the arguments, printed, account for.
func printf(format string, args ...any) (string, error) {
	out := fmt.Sprintf(format, args...)
	n := strings.Count(out, "%!")
	if n == 0 {
		return out, nil
	}
	expected := strings.Count(format, "%%!")
	for _, a := range args {
		expected += strings.Count(fmt.Sprint(a), "%!")
	}
	if n > expected {
		return "", fmt.Errorf("printf %q: its verbs do not fit its %d argument(s) (fmt would print %q into the message)", format, len(args), out)
	}
	return out, nil
}

// checkedText and checkedHTML give a template the checked printf; set
// before Parse, they take the place of the built-in.
var (
	checkedText = texttemplate.FuncMap{"printf": printf}
	checkedHTML = htmltemplate.FuncMap{"printf": printf}
)
