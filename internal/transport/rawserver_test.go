package transport

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// rawServer is a scripted SMTP server on a real loopback socket, written
// byte by byte instead of with go-smtp, so a test controls exactly what is
// advertised and answered and can see how the client's bytes arrived: with
// record set, every Read the server makes is kept, so commands that came in
// one write show up as one chunk.
type rawServer struct {
	t   testing.TB
	ln  net.Listener
	ext []string // EHLO keywords after the greeting line, e.g. "PIPELINING"

	// Optional hooks; nil accepts. Each returns a complete reply line
	// without CRLF, e.g. "550 5.1.1 no such user".
	mail func(from string) string
	rcpt func(to string) string
	// data answers the DATA command itself; without it DATA is 354 when
	// MAIL and RCPT were accepted and 554 otherwise, like a real server.
	data func(mailOK, rcptOK bool) string
	// end answers the final dot, and a BDAT LAST chunk (advertise
	// CHUNKING in ext for the client to use it).
	end func(body []byte) string
	// afterChunk, when set, is called once a BDAT chunk has been read, before
	// any reply is written; false closes the connection without answering
	// what is still unanswered (a server or link that dies with the
	// message in hand).
	afterChunk func() bool
	// chunkAnyway takes a BDAT chunk whatever MAIL and RCPT were
	// answered, as a server that does not follow RFC 3030 might.
	chunkAnyway bool

	record bool
	// maxConns, when set, greets a connection past that many open at once
	// with 421 and closes it, as a relay limiting concurrent connections.
	maxConns int

	mu     sync.Mutex
	over   int // connections refused for maxConns
	conns  int
	reads  [][]byte // every Read, in order, when record is set
	bodies [][]byte // each message received, dot-unstuffed
	cmds   []string // every command line received
}

// startRaw listens on loopback and serves s until the test ends.
func startRaw(t testing.TB, s *rawServer) *rawServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.t, s.ln = t, ln
	var wg sync.WaitGroup
	open := map[net.Conn]bool{}
	closed := false
	t.Cleanup(func() {
		ln.Close()
		s.mu.Lock()
		closed = true
		for c := range open {
			c.Close() // pooled client connections would otherwise keep serve running
		}
		s.mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			if closed {
				s.mu.Unlock()
				c.Close()
				return
			}
			if s.maxConns > 0 && len(open) >= s.maxConns {
				s.over++
				s.mu.Unlock()
				c.Write([]byte("421 4.7.0 raw.example Too many concurrent SMTP connections; try again later\r\n"))
				c.Close()
				continue
			}
			s.conns++
			open[c] = true
			s.mu.Unlock()
			wg.Go(func() {
				s.serve(c)
				c.Close()
				s.mu.Lock()
				delete(open, c)
				s.mu.Unlock()
			})
		}
	})
	return s
}

func (s *rawServer) url() string { return "smtp://" + s.ln.Addr().String() + "?tls=none" }

type recordingConn struct {
	net.Conn
	s *rawServer
}

func (c recordingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.s.mu.Lock()
		c.s.reads = append(c.s.reads, bytes.Clone(p[:n]))
		c.s.mu.Unlock()
	}
	return n, err
}

func (s *rawServer) serve(c net.Conn) {
	var rc net.Conn = c
	if s.record {
		rc = recordingConn{c, s}
	}
	br := bufio.NewReader(rc)
	bw := bufio.NewWriter(c)
	// Replies are flushed only when no further command is waiting, so a
	// pipelined group is answered in one write, as real servers do.
	reply := func(lines ...string) bool {
		for _, l := range lines {
			bw.WriteString(l)
			bw.WriteString("\r\n")
		}
		if br.Buffered() > 0 {
			return true
		}
		return bw.Flush() == nil
	}
	if !reply("220 raw.example ESMTP") {
		return
	}
	var mailOK, rcptOK bool
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return
		}
		line = strings.TrimRight(line, "\r\n")
		if s.record {
			s.mu.Lock()
			s.cmds = append(s.cmds, line)
			s.mu.Unlock()
		}
		verb, arg, _ := strings.Cut(line, " ")
		verb = strings.ToUpper(verb)
		var ok bool
		switch verb {
		case "EHLO":
			lines := []string{"250-raw.example"}
			for _, e := range s.ext {
				lines = append(lines, "250-"+e)
			}
			lines = append(lines, "250 ENHANCEDSTATUSCODES")
			ok = reply(lines...)
		case "HELO", "NOOP":
			ok = reply("250 2.0.0 Ok")
		case "RSET":
			mailOK, rcptOK = false, false
			ok = reply("250 2.0.0 Ok")
		case "MAIL":
			r := "250 2.1.0 Ok"
			if s.mail != nil {
				if h := s.mail(arg); h != "" {
					r = h
				}
			}
			mailOK, rcptOK = strings.HasPrefix(r, "250"), false
			ok = reply(r)
		case "RCPT":
			r := "250 2.1.5 Ok"
			switch {
			case !mailOK:
				r = "503 5.5.1 Error: need MAIL command"
			case s.rcpt != nil:
				if h := s.rcpt(arg); h != "" {
					r = h
				}
			}
			rcptOK = strings.HasPrefix(r, "25")
			ok = reply(r)
		case "DATA":
			var r string
			switch {
			case s.data != nil:
				r = s.data(mailOK, rcptOK)
			case mailOK && rcptOK:
				r = "354 End data with <CR><LF>.<CR><LF>"
			default:
				r = "554 5.5.1 Error: no valid recipients"
			}
			if !reply(r) {
				return
			}
			if !strings.HasPrefix(r, "354") {
				continue
			}
			body, err := readBody(br)
			if err != nil {
				return
			}
			s.mu.Lock()
			if s.record {
				s.bodies = append(s.bodies, body)
			}
			n := len(s.bodies)
			s.mu.Unlock()
			r = fmt.Sprintf("250 2.0.0 Ok: queued as R%d", n)
			if s.end != nil {
				if h := s.end(body); h != "" {
					r = h
				}
			}
			mailOK, rcptOK = false, false
			ok = reply(r)
		case "BDAT":
			// One chunk, LAST, as the client sends (RFC 3030). Replies to
			// the commands before it wait in bw: they were pipelined with
			// the chunk and the chunk is read first, as go-smtp does.
			size, last, _ := strings.Cut(arg, " ")
			n, err := strconv.Atoi(size)
			if err != nil || !strings.EqualFold(last, "LAST") {
				ok = reply("501 5.5.4 one chunk, LAST, expected")
				break
			}
			body := make([]byte, n)
			if _, err := io.ReadFull(br, body); err != nil {
				return
			}
			if s.afterChunk != nil && !s.afterChunk() {
				return
			}
			r := "554 5.5.1 Error: no valid recipients"
			if mailOK && rcptOK || s.chunkAnyway {
				s.mu.Lock()
				s.bodies = append(s.bodies, body)
				r = fmt.Sprintf("250 2.0.0 Ok: queued as R%d", len(s.bodies))
				s.mu.Unlock()
				if s.end != nil {
					if h := s.end(body); h != "" {
						r = h
					}
				}
			}
			mailOK, rcptOK = false, false
			ok = reply(r)
		case "QUIT":
			reply("221 2.0.0 Bye")
			return
		default:
			ok = reply("502 5.5.2 Error: command not recognized")
		}
		if !ok {
			return
		}
	}
}

// readBody reads a DATA section up to the final dot and undoes the
// dot-stuffing.
func readBody(br *bufio.Reader) ([]byte, error) {
	var body []byte
	bol := true // at the beginning of a line
	for {
		line, err := br.ReadSlice('\n')
		if err != nil && err != bufio.ErrBufferFull {
			return nil, err
		}
		if bol && string(line) == ".\r\n" {
			return body, nil
		}
		if bol && line[0] == '.' {
			line = line[1:]
		}
		body = append(body, line...)
		bol = err == nil
	}
}

func (s *rawServer) connections() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conns
}

func (s *rawServer) received() (reads [][]byte, cmds []string, bodies [][]byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([][]byte(nil), s.reads...), append([]string(nil), s.cmds...), append([][]byte(nil), s.bodies...)
}
