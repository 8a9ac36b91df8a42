//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package transport

import (
	"crypto/tls"
	"errors"
	"net"
	"syscall"
)

// idleProbe tells whether nothing has arrived on an idle connection: no
// close from the server (EOF or a reset) and no unsolicited bytes (a 421
// before an idle timeout, a TLS alert), by peeking at the socket without
// blocking. A connection the server has dropped while it sat in the pool
// then fails here, before a command is written, instead of after a
// pipelined transaction went out into it: with CHUNKING that transaction
// carried its body, and losing its replies would leave the message in
// doubt.
//
// It is made once per connection: the raw socket and the peek closure
// would otherwise be allocated on every reuse.
type idleProbe struct {
	rc    syscall.RawConn // nil: not a socket (a test's pipe), nothing to peek at
	quiet bool
	buf   [1]byte
	peek  func(fd uintptr)
}

// canProbe: idle connections are looked at on this platform.
const canProbe = true

func newIdleProbe(nc net.Conn) *idleProbe {
	if tc, ok := nc.(*tls.Conn); ok {
		nc = tc.NetConn()
	}
	p := &idleProbe{}
	if sc, ok := nc.(syscall.Conn); ok {
		p.rc, _ = sc.SyscallConn()
	}
	p.peek = func(fd uintptr) {
		_, _, err := syscall.Recvfrom(int(fd), p.buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		// EAGAIN: nothing to read, the connection is as it was left. No
		// error is a byte or the server's FIN (a byte nobody asked for puts
		// the conversation out of step); any other error is a reset.
		p.quiet = errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EWOULDBLOCK)
	}
	return p
}

// quiet reports whether the connection is still open with nothing unread.
func (p *idleProbe) quietOpen() bool {
	if p.rc == nil {
		return true
	}
	p.quiet = false
	// Control, not Read: Read refuses at once once the last Send's
	// deadline has passed, and MSG_DONTWAIT never blocks anyway.
	if err := p.rc.Control(p.peek); err != nil {
		return false
	}
	return p.quiet
}
