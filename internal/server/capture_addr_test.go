package server_test

import (
	"context"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/rangecast/rangecast/internal/server"
)

// TestCaptureAddr: the dev stack's capture SMTP server listens where it is
// told (--capture-addr), so every listener of rangecast dev can be kept
// in a range of ports (tester).
func TestCaptureAddr(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := server.StartStack(ctx, server.StackOptions{Dir: t.TempDir(), GRPCAddr: "127.0.0.1:0", Workers: 1, CaptureAddr: addr, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Stop() //nolint:errcheck
	if got := st.Capture.Addr(); got != addr {
		t.Fatalf("capture listens on %s; want %s", got, addr)
	}
}
