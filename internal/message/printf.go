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
	if n := printfBound(format, args); n > maxFuncResult {
		return "", tooLarge("printf", n)
	}
	out := fmt.Sprintf(format, args...)
	if len(out) > maxFuncResult {
		return "", tooLarge("printf", len(out))
	}
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

// maxFuncResult bounds the string one call of a function that builds text
// (printf, print, println, html, js, urlquery) may return. The budget
// meters what a template writes, not what it holds: a chain of printf
// calls kept in variables ({{$b := printf "%s%s%s%s" $a $a $a $a}}) grew a
// string fourfold a level without writing a byte, and five levels took a
// tester's coordinator to 6 GB at create. A result larger than a part may
// render (DefaultBudget.MaxOutput) can never be sent anyway.
const maxFuncResult = 4 << 20

func tooLarge(fn string, n int) error {
	return fmt.Errorf("%s would build a string of at least %d bytes; a function's result may be at most %d (more than a whole part may render)", fn, n, maxFuncResult)
}

// printfBound is an upper bound of what printf would build, found before
// it builds it: each verb prints at most one argument, padded to its
// width or precision (a "%0900000000d" builds 900 MB from a 0), and an
// explicit index ("%[1]s%[1]s…") may print the largest one every time.
// A "*" takes its width from the arguments, so every integer argument is
// counted as one.
func printfBound(format string, args []any) int {
	largest, stars := 0, 0
	for _, a := range args {
		largest = max(largest, printedSize(a))
		if n, ok := a.(int); ok {
			stars += max(n, -n)
		}
	}
	n := len(format)
	for i := 0; i < len(format); i++ {
		if format[i] != '%' {
			continue
		}
		n += largest
		for i++; i < len(format); i++ {
			c := format[i]
			switch {
			case c >= '0' && c <= '9':
				w := 0
				for ; i < len(format) && format[i] >= '0' && format[i] <= '9'; i++ {
					w = min(w*10+int(format[i]-'0'), 1<<40)
				}
				i--
				n += w
			case c == '*':
				n += stars
			case strings.IndexByte("+-# .[]", c) >= 0:
			default:
				goto verb // the verb ends this one
			}
		}
	verb:
	}
	return n
}

// printedSize is how many bytes fmt prints for a, or a bound of it: a
// string or bytes as they are, anything else by printing it (what the
// template holds already exists, so printing it once costs its own size).
func printedSize(a any) int {
	switch v := a.(type) {
	case string:
		return len(v)
	case []byte:
		return len(v)
	}
	return len(fmt.Sprint(a))
}

// capped wraps a built-in that builds text from its arguments (print,
// println, html, js, urlquery) so that its result is bounded: the
// escapers grow a string at most sixfold, so checking the arguments'
// printed size first keeps the allocation bounded too.
func capped(name string, f func(...any) string) func(...any) (string, error) {
	return func(args ...any) (string, error) {
		n := 0
		for _, a := range args {
			n += printedSize(a) + 1
		}
		if n > maxFuncResult {
			return "", tooLarge(name, n)
		}
		out := f(args...)
		if len(out) > maxFuncResult {
			return "", tooLarge(name, len(out))
		}
		return out, nil
	}
}

// checkedText and checkedHTML give a template the checked printf and the
// bounded text builders; set before Parse, they take the place of the
// built-ins.
var (
	checkedText = texttemplate.FuncMap{
		"printf": printf,
		"print":  capped("print", fmt.Sprint), "println": capped("println", fmt.Sprintln),
		"html": capped("html", texttemplate.HTMLEscaper), "js": capped("js", texttemplate.JSEscaper),
		"urlquery": capped("urlquery", texttemplate.URLQueryEscaper),
	}
	checkedHTML = htmltemplate.FuncMap(checkedText)
)
