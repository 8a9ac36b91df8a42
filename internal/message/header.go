package message

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

const (
	// RFC 5322 §2.1.1: lines SHOULD be at most 78 characters and MUST be at
	// most 998, excluding CRLF.
	softLineLimit = 78
	hardLineLimit = 998
)

// encodeSubject RFC 2047-encodes a subject that is not plain printable ASCII.
// mime.QEncoding splits long text into several encoded words separated by
// spaces, which headerWriter then folds. Plain ASCII it leaves alone, so a
// subject with a word too long to fold (a run of more than 998 characters
// without a space, from the template or from a contact's data) is encoded
// too: as encoded words it folds like any other, where as is it failed every
// recipient's render. So is one holding "=?": left as it is, a contact's
// name "=?utf-8?q?Admin?= <admin@bank.com>" would be decoded by mail
// clients as an encoded word of the name's choosing (tester); encoded, it
// shows as typed.
//
// The first encoded word is kept short enough to share its line with
// "Subject: " within the soft limit: mime.QEncoding's words of 75 made
// that line 84 characters (tester).
func encodeSubject(s string) string {
	if longestWord(s) > foldableWord || strings.Contains(s, "=?") || needsEncoding(s) {
		return encodeWords(s, softLineLimit-len("Subject: "))
	}
	return s
}

// needsEncoding is mime's rule: a byte outside printable ASCII but tab.
func needsEncoding(s string) bool {
	for i := 0; i < len(s); i++ {
		if b := s[i]; (b < ' ' || b > '~') && b != '\t' {
			return true
		}
	}
	return false
}

// foldableWord is the longest word headerWriter can always fold: a line
// of the hard limit that holds only the field name ("Subject:", or any of
// the few this package writes), its space and the word.
const foldableWord = hardLineLimit - len("List-Unsubscribe-Post: ")

// longestWord is the length in bytes of the longest run of s without a
// space.
func longestWord(s string) int {
	longest := 0
	for w := range strings.SplitSeq(s, " ") {
		longest = max(longest, len(w))
	}
	return longest
}

// encodeWords writes all of s as RFC 2047 Q-encoded words (UTF-8), each at
// most the 75 characters the RFC allows, split between runes and separated
// by spaces: mime.WordEncoder does the same, but only for text that is not
// plain ASCII. A space in s is encoded ('_'), so decoding restores s.
// first bounds the first word, which shares its line with the field name.
func encodeWords(s string, first int) string {
	const open, end = "=?utf-8?q?", "?="
	maxWord := min(75, first)
	var b strings.Builder
	word := 0 // bytes of the current encoded word written, open included
	var enc [utf8.UTFMax * 3]byte
	for _, r := range s {
		var rb [utf8.UTFMax]byte
		n := utf8.EncodeRune(rb[:], r)
		e := enc[:0]
		for _, c := range rb[:n] {
			switch {
			case c == ' ':
				e = append(e, '_')
			case c > ' ' && c <= '~' && c != '=' && c != '?' && c != '_':
				e = append(e, c)
			default:
				e = append(e, '=', upperhex[c>>4], upperhex[c&15])
			}
		}
		if word > 0 && word+len(e)+len(end) > maxWord {
			b.WriteString(end)
			b.WriteByte(' ')
			word, maxWord = 0, 75
		}
		if word == 0 {
			b.WriteString(open)
			word = len(open)
		}
		b.Write(e)
		word += len(e)
	}
	if word > 0 {
		b.WriteString(end)
	}
	return b.String()
}

const upperhex = "0123456789ABCDEF"

// headerWriter appends folded header fields with CRLF endings to b. The
// first error sticks, so callers check once at the end.
type headerWriter struct {
	b   []byte
	err error
}

// write folds value at spaces so lines stay under the soft limit where the
// value allows it. Folding only at existing whitespace is always safe: an
// encoded word never contains a space, and unfolding (removing the CRLF)
// restores the original value exactly.
func (h *headerWriter) write(name, value string) {
	if h.err != nil {
		return
	}
	if err := ValidateHeaderValue(name, value); err != nil {
		h.err = err
		return
	}
	h.b = append(h.b, name...)
	h.b = append(h.b, ':')
	lineLen := len(name) + 1
	for i, rest := 0, value; ; i++ {
		w, after, more := strings.Cut(rest, " ")
		// Each word is preceded by the single space it was split on (the
		// space after the colon for the first one). Never fold before an
		// empty word: that would leave a whitespace-only line.
		if i > 0 && w != "" && lineLen+1+len(w) > softLineLimit {
			h.b = append(h.b, "\r\n"...)
			lineLen = 0
		}
		h.b = append(h.b, ' ')
		h.b = append(h.b, w...)
		lineLen += 1 + len(w)
		if lineLen > hardLineLimit {
			// A *ValidationError, like every other render error the
			// content causes: the same one on many contacts pauses the
			// broadcast instead of failing each of them (pageworker).
			h.err = &ValidationError{Field: name + " header", Reason: fmt.Sprintf("has a word longer than %d characters, which cannot be folded; add spaces or shorten it", hardLineLimit)}
			return
		}
		if !more {
			break
		}
		rest = after
	}
	h.b = append(h.b, "\r\n"...)
}

// checkFolds returns a *ValidationError naming field when the header
// "name: value" could not be written: a word in it too long to fold. A
// value fixed before any message is rendered (a from name) is checked so,
// at create, instead of failing every recipient's render.
func checkFolds(field, name, value string) error {
	hw := headerWriter{}
	hw.write(name, value)
	if ve, ok := hw.err.(*ValidationError); ok {
		return &ValidationError{Field: field, Reason: ve.Reason}
	}
	return hw.err
}
