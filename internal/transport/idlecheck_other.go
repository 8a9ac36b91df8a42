//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package transport

import "net"

// idleProbe cannot peek at a socket here: an idle connection counts as
// open, and one the server has dropped fails on its first command (see
// Send).
type idleProbe struct{}

// canProbe: idle connections are not looked at on this platform.
const canProbe = false

func newIdleProbe(net.Conn) *idleProbe { return &idleProbe{} }

func (*idleProbe) quietOpen() bool { return true }
