package message

import (
	"fmt"
	"mime"
	"strings"
)

const (
	// RFC 5322 §2.1.1: lines SHOULD be at most 78 characters and MUST be at
	// most 998, excluding CRLF.
	softLineLimit = 78
	hardLineLimit = 998
)

// encodeSubject RFC 2047-encodes a subject that is not plain printable ASCII.
// mime.QEncoding splits long text into several encoded words separated by
// spaces, which headerWriter then folds.
func encodeSubject(s string) string {
	return mime.QEncoding.Encode("utf-8", s)
}

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
			h.err = fmt.Errorf("header %s has a word longer than %d characters, which cannot be folded", name, hardLineLimit)
			return
		}
		if !more {
			break
		}
		rest = after
	}
	h.b = append(h.b, "\r\n"...)
}
