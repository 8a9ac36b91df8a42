package message

import (
	"errors"
	"strings"
)

// The MIME body is written directly rather than with mime/multipart and
// mime/quotedprintable: for a few kilobytes of body those writers cost more
// in allocations (part headers as maps, sorted keys, a random boundary that
// is immediately replaced, per-line flushes) than the encoding itself, and
// this runs once per recipient. The output is exactly theirs, byte for byte;
// FuzzAppendQP and the golden files hold it to that.

const qpLineMax = 76 // RFC 2045 §6.7, including the '=' of a soft break

// appendAlternative appends a multipart/alternative body with a plain-text
// and an HTML part, both quoted-printable, framed as multipart.Writer frames
// them.
func appendAlternative(dst []byte, boundary string, text, html []byte) []byte {
	dst = append(dst, "--"...)
	dst = appendQPPart(dst, boundary, "text/plain; charset=utf-8", text)
	dst = append(dst, "\r\n--"...)
	dst = appendQPPart(dst, boundary, "text/html; charset=utf-8", html)
	dst = append(dst, "\r\n--"...)
	dst = append(dst, boundary...)
	return append(dst, "--\r\n"...)
}

// appendQPPart appends the rest of a part's delimiter line, its header
// (fields in the sorted order multipart.Writer uses) and its encoded body.
func appendQPPart(dst []byte, boundary, contentType string, body []byte) []byte {
	dst = append(dst, boundary...)
	dst = append(dst, "\r\nContent-Transfer-Encoding: quoted-printable\r\nContent-Type: "...)
	dst = append(dst, contentType...)
	dst = append(dst, "\r\n\r\n"...)
	return appendQP(dst, body)
}

// appendQP appends src quoted-printable encoded as quotedprintable.Writer
// (not Binary) encodes it: CR, LF and CRLF all become CRLF, lines are soft
// broken before 76 characters, and a space or tab before a line break is
// encoded. It also keeps that writer's quirk that an encoded byte between CR
// and LF leaves the LF swallowed; changing it would change sent bytes.
func appendQP(dst, src []byte) []byte {
	e := qpEncoder{dst: dst}
	for len(src) > 0 {
		// Runs of plain characters are the bulk of any body; copy each run
		// up to the next soft break in one go.
		run := 0
		for run < len(src) && qpLiteral[src[run]] {
			run++
		}
		for run > 0 {
			if e.n == qpLineMax-1 {
				e.softBreak()
			}
			k := min(run, qpLineMax-1-e.n)
			e.dst = append(e.dst, src[:k]...)
			e.n += k
			e.cr = false
			src, run = src[k:], run-k
		}
		if len(src) == 0 {
			break
		}
		if b := src[0]; b == '\n' || b == '\r' {
			e.lineBreak(b)
		} else {
			e.encode(b)
		}
		src = src[1:]
	}
	e.encodeTrailingSpace()
	return e.dst
}

// qpLiteral holds the bytes written as themselves.
var qpLiteral = func() (t [256]bool) {
	for b := '!'; b <= '~'; b++ {
		t[b] = b != '='
	}
	t[' '], t['\t'] = true, true
	return t
}()

type qpEncoder struct {
	dst []byte
	n   int  // length of the current output line
	cr  bool // the last input byte was a CR already turned into CRLF
}

func (e *qpEncoder) lineBreak(b byte) {
	if e.cr && b == '\n' {
		e.cr = false
		return
	}
	if b == '\r' {
		e.cr = true
	}
	e.encodeTrailingSpace()
	e.dst = append(e.dst, '\r', '\n')
	e.n = 0
}

func (e *qpEncoder) encode(b byte) {
	if qpLineMax-1-e.n < 3 {
		e.softBreak()
	}
	const hex = "0123456789ABCDEF"
	e.dst = append(e.dst, '=', hex[b>>4], hex[b&0x0f])
	e.n += 3
}

// encodeTrailingSpace encodes a space or tab ending the line, which mail
// transports may strip.
func (e *qpEncoder) encodeTrailingSpace() {
	if e.n == 0 {
		return
	}
	if b := e.dst[len(e.dst)-1]; b == ' ' || b == '\t' {
		e.dst = e.dst[:len(e.dst)-1]
		e.n--
		e.encode(b)
	}
}

func (e *qpEncoder) softBreak() {
	e.dst = append(e.dst, '=', '\r', '\n')
	e.n = 0
}

// checkBoundary applies multipart.Writer.SetBoundary's rules (RFC 2046
// §5.1.1), with its error messages, to a boundary built from caller input.
func checkBoundary(boundary string) error {
	if len(boundary) < 1 || len(boundary) > 70 {
		return errors.New("mime: invalid boundary length")
	}
	for i := 0; i < len(boundary); i++ {
		b := boundary[i]
		if 'A' <= b && b <= 'Z' || 'a' <= b && b <= 'z' || '0' <= b && b <= '9' ||
			strings.IndexByte(`'()+_,-./:=?`, b) >= 0 || b == ' ' && i != len(boundary)-1 {
			continue
		}
		return errors.New("mime: invalid boundary character")
	}
	return nil
}
