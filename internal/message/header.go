package message

import (
	"bytes"
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

// headerWriter writes folded header fields with CRLF endings. The first error
// sticks, so callers check once at the end.
type headerWriter struct {
	buf *bytes.Buffer
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
	line := name + ":"
	lineLen := len(line)
	h.buf.WriteString(line)
	words := strings.Split(value, " ")
	for i, w := range words {
		// Each word is preceded by the single space it was split on (the
		// space after the colon for the first one). Never fold before an
		// empty word: that would leave a whitespace-only line.
		if i > 0 && w != "" && lineLen+1+len(w) > softLineLimit {
			h.buf.WriteString("\r\n")
			lineLen = 0
		}
		h.buf.WriteByte(' ')
		h.buf.WriteString(w)
		lineLen += 1 + len(w)
		if lineLen > hardLineLimit {
			h.err = fmt.Errorf("header %s has a word longer than %d characters, which cannot be folded", name, hardLineLimit)
			return
		}
	}
	h.buf.WriteString("\r\n")
}
