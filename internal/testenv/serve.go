package testenv

import (
	"net"
	"testing"
)

// ServeTCP listens on a free loopback port until the test ends, hands
// every connection to handle (in a goroutine of its own), and returns the
// address: a hand-made server for what a real one will not do (greet with
// 421, never answer).
func ServeTCP(t testing.TB, handle func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go handle(c)
		}
	}()
	return ln.Addr().String()
}
