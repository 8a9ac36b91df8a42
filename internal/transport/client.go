package transport

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"

	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"
)

// client speaks the SMTP client side of one connection: just what SMTP.Send
// needs, written so a message costs as few writes, reads and copies as
// possible. Commands are collected in wbuf and leave in one Write (several
// commands at once with PIPELINING), replies are parsed in place from the
// read buffer, and the message body is dot-stuffed a line at a time rather
// than a byte at a time.
//
// A server's reply is returned as *smtp.SMTPError, parsed as go-smtp's
// client parses it, so stageError and Classify see exactly what they saw
// when go-smtp was the client. Any other error means no (valid) reply was
// read, and marks the client broken.
//
// client sets no deadlines: the caller sets one on the connection for a
// whole exchange.
type client struct {
	conn net.Conn // the connection, or TLS over it after STARTTLS
	br   *bufio.Reader
	wbuf []byte // commands (and a body) waiting for the next flush
	text []byte // the last reply's text, lines joined with '\n'
	ext  extensions

	// broken: the conversation can no longer be trusted to be in step
	// (an I/O or protocol error, a 421, a transaction abandoned mid-DATA),
	// so the connection must be closed rather than reused.
	broken bool
}

// extensions are the EHLO keywords the transport acts on.
type extensions struct {
	pipelining, startTLS, auth, size, eightBitMIME, smtpUTF8, chunking bool
	// authMechs are the SASL mechanisms AUTH offers, upper-cased, in the
	// server's order.
	authMechs []string
}

// maxReplyLine bounds one reply line. go-smtp's client allows 2000 bytes
// (twice RFC 5321's 512); the buffer is a little larger, so nothing go-smtp
// accepted is refused.
const maxReplyLine = 4096

// keepWriteBuf is the largest write buffer kept between messages, so a
// pooled connection does not pin the memory of one unusually large message.
const keepWriteBuf = 1 << 20

func newClient(nc net.Conn) *client {
	return &client{conn: nc, br: bufio.NewReaderSize(nc, maxReplyLine)}
}

// flush writes everything queued in one Write. n is how much of it was
// written, which decides whether a failed body write may have delivered.
func (c *client) flush() (n int, err error) {
	n, err = c.conn.Write(c.wbuf)
	if err != nil {
		c.broken = true
	}
	if cap(c.wbuf) > keepWriteBuf {
		c.wbuf = nil
	} else {
		c.wbuf = c.wbuf[:0]
	}
	return n, err
}

// queue adds one command line.
func (c *client) queue(parts ...string) {
	for _, p := range parts {
		c.wbuf = append(c.wbuf, p...)
	}
	c.wbuf = append(c.wbuf, '\r', '\n')
}

// cmd sends one command and reads its reply; a reply with another code
// than expect (as in textproto: 2 means 2xx, 25 means 25x) is returned as
// *smtp.SMTPError.
func (c *client) cmd(expect int, parts ...string) error {
	c.queue(parts...)
	if _, err := c.flush(); err != nil {
		return err
	}
	return c.expect(expect)
}

// expect reads one reply and checks its code.
func (c *client) expect(want int) error {
	code, err := c.readReply()
	if err != nil {
		return err
	}
	if !codeIs(code, want) {
		return c.replyError(code)
	}
	return nil
}

func codeIs(code, want int) bool {
	switch {
	case want < 10:
		return code/100 == want
	case want < 100:
		return code/10 == want
	}
	return code == want
}

// readReply reads one reply, single- or multi-line, and returns its code;
// the text is left in c.text. Continuation lines that are malformed or
// carry another code are kept verbatim, as textproto does.
func (c *client) readReply() (int, error) {
	c.text = c.text[:0]
	code := 0
	for more := true; more; {
		line, err := c.br.ReadSlice('\n')
		if err != nil {
			c.broken = true
			if errors.Is(err, bufio.ErrBufferFull) {
				return 0, fmt.Errorf("smtp: reply line longer than %d bytes", maxReplyLine)
			}
			return 0, err
		}
		line = bytes.TrimSuffix(bytes.TrimSuffix(line, []byte{'\n'}), []byte{'\r'})
		lc, cont, text, ok := parseReplyLine(line)
		switch {
		case code == 0 && !ok:
			c.broken = true
			return 0, fmt.Errorf("smtp: malformed reply %q", line)
		case code == 0:
			code, more = lc, cont
			c.text = append(c.text, text...)
		case !ok || lc != code:
			c.text = append(append(c.text, '\n'), bytes.TrimRight(line, "\r\n")...)
		default:
			more = cont
			c.text = append(append(c.text, '\n'), text...)
		}
	}
	if code == 421 {
		// RFC 5321 4.2.2: the server is closing the channel.
		c.broken = true
	}
	return code, nil
}

// parseReplyLine splits "250-text" / "250 text" / "250". A bare code is
// valid by RFC 5321's grammar although textproto refuses it.
func parseReplyLine(line []byte) (code int, more bool, text []byte, ok bool) {
	if len(line) < 3 || (len(line) > 3 && line[3] != ' ' && line[3] != '-') {
		return 0, false, nil, false
	}
	for _, d := range line[:3] {
		if d < '0' || d > '9' {
			return 0, false, nil, false
		}
		code = code*10 + int(d-'0')
	}
	if code < 100 {
		return 0, false, nil, false
	}
	if len(line) == 3 {
		return code, false, nil, true
	}
	return code, line[3] == '-', line[4:], true
}

// replyError turns the last reply into the error go-smtp's client would
// have returned for it: an RFC 3463 enhanced code in front of the text is
// parsed out, and removed where it repeats at the start of later lines.
func (c *client) replyError(code int) *smtp.SMTPError {
	msg := string(c.text)
	se := &smtp.SMTPError{Code: code, Message: msg}
	first, rest, ok := strings.Cut(msg, " ")
	if !ok {
		return se
	}
	var ec smtp.EnhancedCode
	parts := strings.Split(first, ".")
	if len(parts) != 3 {
		return se
	}
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil {
			return se
		}
		ec[i] = n
	}
	se.EnhancedCode = ec
	se.Message = strings.ReplaceAll(rest, "\n"+first+" ", "\n")
	return se
}

// greet reads the server's greeting.
func (c *client) greet() error { return c.expect(220) }

// hello says EHLO and records the extensions, falling back to HELO for a
// server that does not know EHLO.
func (c *client) hello(name string) error {
	err := c.cmd(250, "EHLO ", name)
	var se *smtp.SMTPError
	if errors.As(err, &se) && (se.Code == 500 || se.Code == 502) {
		c.ext = extensions{}
		return c.cmd(250, "HELO ", name)
	}
	if err != nil {
		return err
	}
	c.ext = parseEHLO(c.text)
	return nil
}

// parseEHLO reads the keywords of an EHLO reply; the first line is the
// server's greeting. Keywords are case-insensitive (RFC 5321 4.1.1.1).
func parseEHLO(text []byte) extensions {
	var e extensions
	lines := bytes.Split(text, []byte{'\n'})
	for _, l := range lines[1:] {
		kw, params, _ := bytes.Cut(l, []byte{' '})
		// "AUTH=LOGIN PLAIN" is how servers written for pre-RFC 2554
		// clients (old Outlook) announce AUTH; many relays send both forms.
		if k, old, ok := bytes.Cut(kw, []byte{'='}); ok && strings.EqualFold(string(k), "AUTH") {
			kw, params = k, slices.Concat(old, []byte{' '}, params)
		}
		switch strings.ToUpper(string(kw)) {
		case "PIPELINING":
			e.pipelining = true
		case "STARTTLS":
			e.startTLS = true
		case "AUTH":
			e.auth = true
			for _, m := range strings.Fields(strings.ToUpper(string(params))) {
				if !slices.Contains(e.authMechs, m) {
					e.authMechs = append(e.authMechs, m)
				}
			}
		case "SIZE":
			e.size = true
		case "8BITMIME":
			e.eightBitMIME = true
		case "SMTPUTF8":
			e.smtpUTF8 = true
		case "CHUNKING":
			e.chunking = true
		}
	}
	return e
}

// startTLS upgrades the connection. The caller says EHLO again afterwards:
// what was learned in plaintext must be forgotten (RFC 3207 4.2).
func (c *client) startTLS(conf *tls.Config) error {
	if err := c.cmd(220, "STARTTLS"); err != nil {
		return err
	}
	if c.br.Buffered() > 0 {
		// Bytes after the 220 were sent in plaintext but would be read as
		// if they came over TLS: an injection (CVE-2011-0411 and kin).
		c.broken = true
		return errors.New("smtp: server sent data after its STARTTLS reply")
	}
	tc := tls.Client(c.conn, conf)
	if err := tc.Handshake(); err != nil {
		c.broken = true
		return err
	}
	c.conn = tc
	c.br.Reset(tc)
	c.ext = extensions{}
	return nil
}

func (c *client) isTLS() bool {
	_, ok := c.conn.(*tls.Conn)
	return ok
}

// maxAuthLine is RFC 4954 4's bound on the AUTH command line: an initial
// response that would make the line longer (an OAuth token, typically) is
// sent after the server's empty challenge instead.
const maxAuthLine = 512

// auth runs one SASL exchange (RFC 4954) with sc. A mechanism's error
// cancels the exchange with "*" before it is returned, so the connection
// stays in step.
func (c *client) auth(sc sasl.Client) error {
	mech, ir, err := sc.Start()
	if err != nil {
		return err
	}
	c.queue("AUTH ", mech)
	pending := []byte(nil) // an initial response held back until the first challenge
	switch {
	case ir == nil:
	case len(ir) == 0:
		c.wbuf = append(c.wbuf[:len(c.wbuf)-2], " =\r\n"...) // an empty initial response
	case len("AUTH ")+len(mech)+1+base64.StdEncoding.EncodedLen(len(ir))+2 > maxAuthLine:
		pending = ir
	default:
		c.wbuf = append(c.wbuf[:len(c.wbuf)-2], ' ')
		c.wbuf = base64.StdEncoding.AppendEncode(c.wbuf, ir)
		c.wbuf = append(c.wbuf, '\r', '\n')
	}
	if _, err := c.flush(); err != nil {
		return err
	}
	for {
		code, err := c.readReply()
		switch {
		case err != nil:
			return err
		case code == 235:
			return nil
		case code != 334:
			return c.replyError(code)
		}
		var resp []byte
		if pending != nil {
			resp, pending = pending, nil
		} else {
			challenge, derr := base64.StdEncoding.DecodeString(strings.TrimSpace(string(c.text)))
			if derr != nil {
				err = fmt.Errorf("smtp: AUTH %s challenge is not base64: %w", mech, derr)
			} else {
				resp, err = sc.Next(challenge)
			}
		}
		if err != nil {
			// Cancel the exchange (RFC 4954 4): the server answers 501.
			if cerr := c.cmd(5, "*"); cerr != nil {
				var se *smtp.SMTPError
				if !errors.As(cerr, &se) {
					return cerr
				}
			}
			return fmt.Errorf("smtp: AUTH %s: %w", mech, err)
		}
		c.queue(base64.StdEncoding.EncodeToString(resp))
		if _, err := c.flush(); err != nil {
			return err
		}
	}
}

// queueMail adds MAIL FROM with the parameters go-smtp added: BODY=8BITMIME
// and SIZE when the server offers them, SMTPUTF8 when asked for.
func (c *client) queueMail(from string, size int, utf8 bool) {
	c.wbuf = append(c.wbuf, "MAIL FROM:<"...)
	c.wbuf = append(c.wbuf, from...)
	c.wbuf = append(c.wbuf, '>')
	if c.ext.eightBitMIME {
		c.wbuf = append(c.wbuf, " BODY=8BITMIME"...)
	}
	if c.ext.size && size > 0 {
		c.wbuf = append(c.wbuf, " SIZE="...)
		c.wbuf = strconv.AppendInt(c.wbuf, int64(size), 10)
	}
	if utf8 {
		c.wbuf = append(c.wbuf, " SMTPUTF8"...)
	}
	c.wbuf = append(c.wbuf, '\r', '\n')
}

func (c *client) reset() error { return c.cmd(250, "RSET") }

func (c *client) quit() error { return c.cmd(221, "QUIT") }

// appendData appends body as a DATA section ending with the final dot: a
// '.' doubled at the start of every line, a bare LF written as CRLF, and a
// line break added when the body does not end with one. This is what
// textproto's DotWriter (which go-smtp used) produces. Turning bare LFs
// into CRLF also keeps "\n.\n" in a body from reading as the end of the
// data to a lenient server (SMTP smuggling).
func appendData(dst, body []byte) []byte {
	return append(appendLines(dst, body, true), ".\r\n"...)
}

// appendChunk appends "BDAT n LAST" and body as the one chunk it names
// (RFC 3030): the lines as appendData writes them, but with no dot
// stuffed, since the server counts bytes instead of looking for a final
// dot; both paths deliver the same bytes.
func appendChunk(dst, body []byte) []byte {
	start := len(dst)
	dst = appendLines(dst, body, false)
	header := fmt.Appendf(nil, "BDAT %d LAST\r\n", len(dst)-start)
	return slices.Insert(dst, start, header...)
}

// appendLines appends body with every bare LF written as CRLF, a line
// break added when it does not end with one, and, with stuff, a '.'
// doubled at the start of every line. It copies whole runs between the
// places that need a change instead of going byte by byte.
func appendLines(dst, body []byte, stuff bool) []byte {
	if n := len(dst) + len(body) + len(body)/32 + 5; n > cap(dst) {
		grown := make([]byte, len(dst), n)
		copy(grown, dst)
		dst = grown
	}
	if stuff && len(body) > 0 && body[0] == '.' {
		dst = append(dst, '.')
	}
	done := 0 // body[:done] has been copied
	for i := 0; ; {
		j := bytes.IndexByte(body[i:], '\n')
		if j < 0 {
			break
		}
		j += i
		if j == 0 || body[j-1] != '\r' {
			dst = append(dst, body[done:j]...)
			dst = append(dst, '\r')
			done = j
		}
		if stuff && j+1 < len(body) && body[j+1] == '.' {
			dst = append(dst, body[done:j+1]...)
			dst = append(dst, '.')
			done = j + 1
		}
		i = j + 1
	}
	dst = append(dst, body[done:]...)
	switch {
	case len(body) > 0 && body[len(body)-1] == '\n':
		return dst
	case len(body) > 0 && body[len(body)-1] == '\r':
		return append(dst, '\n')
	}
	return append(dst, '\r', '\n')
}

// validateLine refuses a command argument that would end the command line
// early and smuggle in another command.
func validateLine(s string) error {
	if strings.ContainsAny(s, "\r\n") {
		return errors.New("smtp: a line must not contain CR or LF")
	}
	return nil
}
