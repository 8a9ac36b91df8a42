package sinkproc

import (
	"net"
	"sync"
	"time"
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
	mu  sync.Mutex // guards out
	out []byte
	// wmu keeps flushes in order. It is held across the write, never
	// with mu, so a write the client does not read cannot hold up Close.
	wmu sync.Mutex
}

func (c *flushOnRead) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.out = append(c.out, p...)
	return len(p), nil
}

// take returns what is held and holds nothing more.
func (c *flushOnRead) take() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	b := c.out
	c.out = nil
	return b
}

// flush sends what is held.
func (c *flushOnRead) flush() error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.write(c.take())
}

func (c *flushOnRead) write(b []byte) error {
	for len(b) > 0 {
		n, err := c.Conn.Write(b)
		if err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

func (c *flushOnRead) Read(p []byte) (int, error) {
	if err := c.flush(); err != nil {
		return 0, err
	}
	return c.Conn.Read(p)
}

// closeFlushWait bounds the last flush of Close: a client that reads
// nothing must not hold up the sink's shutdown (go-smtp closes its
// connections one after another).
const closeFlushWait = time.Second

// Close tries to send what is held first, so a reply written just before
// the connection ends (221 to QUIT) reaches a client that reads it. A flush
// already under way (a client that stopped reading) is not waited for:
// closing the connection ends it.
func (c *flushOnRead) Close() error {
	if c.wmu.TryLock() {
		c.Conn.SetWriteDeadline(time.Now().Add(closeFlushWait)) //nolint:errcheck // closing anyway
		c.write(c.take())                                       //nolint:errcheck // closing anyway; the client sees the connection end
		c.wmu.Unlock()
	}
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
