package cli

import (
	"fmt"
	"strings"
	"unicode"
)

// shown is how text that comes from data (a contact's name, an attribute,
// a server's reply, a broadcast's name) is written to a terminal: control
// characters (ESC sequences that recolour, move the cursor or set the
// window title; CR that overwrites a line; C1 controls) and bidi overrides
// become visible \x.. / \u.... escapes, so data can never drive the
// terminal or disguise what is printed. Everything else, non-ASCII text
// included, is written as it is.
func shown(s string) string {
	if !needsEscape(s) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		switch {
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == unicode.ReplacementChar:
			b.WriteRune(r)
		case r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0):
			fmt.Fprintf(&b, `\x%02x`, r)
		case unicode.Is(unicode.Bidi_Control, r) || r == 0x2028 || r == 0x2029:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

func needsEscape(s string) bool {
	for _, r := range s {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) || unicode.Is(unicode.Bidi_Control, r) || r == 0x2028 || r == 0x2029 {
			return true
		}
	}
	return false
}
