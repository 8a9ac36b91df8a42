package sinkproc

import (
	"net"
	"sync"
)

// flushOnRead holds what the server writes until it next reads, as Postfix
// and qmail answer pipelined commands (RFC 2920): a server may hold its
// replies while the client's next commands are already waiting, and must
// send them before it waits for more. A client that pipelines a
// transaction then gets its replies together, in one segment, as it would
// from those relays; a client that waits for each reply still gets each at
// once, because the server reads again before it has anything else to do.
// go-smtp's server writes and flushes every reply on its own, which cost a
// pipelining sender a read (and the sink a write) per reply that no real
// relay of that kind would.
type flushOnRead struct {
	net.Conn
	mu  sync.Mutex
	out []byte
}

func (c *flushOnRead) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.out = append(c.out, p...)
	return len(p), nil
}

// flush sends what is held.
func (c *flushOnRead) flush() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(c.out) > 0 {
		n, err := c.Conn.Write(c.out)
		c.out = c.out[n:]
		if err != nil {
			c.out = nil
			return err
		}
	}
	c.out = c.out[:0]
	return nil
}

func (c *flushOnRead) Read(p []byte) (int, error) {
	if err := c.flush(); err != nil {
		return 0, err
	}
	return c.Conn.Read(p)
}

// Close sends what is held first: a reply written just before the
// connection ends (221 to QUIT, 421 at shutdown) still reaches the client.
func (c *flushOnRead) Close() error {
	c.flush() //nolint:errcheck // closing anyway; the client sees the connection end
	return c.Conn.Close()
}

// flushOnReadListener accepts connections as flushOnRead.
type flushOnReadListener struct{ net.Listener }

func (l flushOnReadListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &flushOnRead{Conn: c}, nil
}
