package cli

import (
	"fmt"
	"net"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rangecast/rangecast/internal/api"
	"github.com/rangecast/rangecast/internal/store"
	"github.com/rangecast/rangecast/internal/testenv"
)

// TestUnavailableSaysWhoIsDown: gRPC's Unavailable (no connection) says the
// coordinator cannot be reached; the coordinator's own Unavailable (its
// NATS or database did not answer it) says the coordinator is running and
// what it is missing, not "is it running?" (a real deployment told an
// operator so while the coordinator was up and the pause had taken).
func TestUnavailableSaysWhoIsDown(t *testing.T) {
	t.Parallel()
	down := status.Error(codes.Unavailable, "connection error: desc = \"transport: Error while dialing: dial tcp 127.0.0.1:7070: connect: connection refused\"")
	if got := describe(down); !strings.HasPrefix(got, "cannot reach the coordinator") {
		t.Errorf("describe(no connection) = %q; want it to say the coordinator cannot be reached", got)
	}
	err := api.Error(fmt.Errorf("claim: %w: dial tcp 127.0.0.1:5432: connection refused", store.ErrUnavailable))
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("api.Error(store unavailable) = %v; want Unavailable", err)
	}
	if got := describe(err); !strings.HasPrefix(got, "the coordinator is running, but ") || strings.Contains(got, "cannot reach") {
		t.Errorf("describe(%v) = %q; want it to say the coordinator is running and what it misses", err, got)
	}
}

// TestDescribeNotFound: a store's "segment \"x\": not found" reads once
// "not found", not twice.
func TestDescribeNotFound(t *testing.T) {
	for msg, want := range map[string]string{
		`segment "vip": not found`:              `not found: segment "vip"`,
		"no broadcast 01ABC (deleted already?)": "not found: no broadcast 01ABC (deleted already?)",
	} {
		if got := describe(status.Error(codes.NotFound, msg)); got != want {
			t.Errorf("describe(%q) = %q; want %q", msg, got, want)
		}
	}
}

// TestConnectionHints: a connection that failed says what to change, and
// only what fits: a coordinator gone mid-call is no TLS problem (a tester
// was told to add --ca after a restart), an HTTP port is the wrong port.
// The messages are grpc-go's, as the tester saw them.
func TestConnectionHints(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ msg, want, not string }{
		{"error reading from server: EOF", "during the call", "TLS"},
		{`connection error: desc = "error reading server preface: http2: failed reading the frame payload: http2: frame too large, note that the frame header looked like an HTTP/1.1 header"`, "not its HTTP one", "TLS"},
		{`connection error: desc = "error reading server preface: http2: frame too large"`, "--tls", ""},
		{`connection error: desc = "error reading server preface: EOF"`, "gRPC address", ""},
		// A coordinator SIGSTOPped: the kernel took the connection, the
		// process sent nothing (tester: read as a TLS mistake).
		{`connection error: desc = "error reading server preface: read tcp 127.0.0.1:52330->127.0.0.1:17001: use of closed network connection"`, "hung, stopped or overloaded", "TLS"},
		{`connection error: desc = "transport: authentication handshake failed: tls: first record does not look like a TLS handshake"`, "plaintext gRPC, not TLS", ""},
	} {
		got := describe(status.Error(codes.Unavailable, tc.msg))
		if !strings.Contains(got, tc.want) || (tc.not != "" && strings.Contains(strings.TrimSuffix(got, tc.msg), tc.not)) {
			t.Errorf("%s:\n  said %q\n  want it to say %q and not %q", tc.msg, got, tc.want, tc.not)
		}
	}
}

// A coordinator that takes the connection and never answers (SIGSTOPped:
// the kernel accepts for it) is called hung, not a TLS mistake.
func TestSilentServerIsNotCalledTLS(t *testing.T) {
	t.Parallel()
	addr := testenv.ServeTCP(t, func(c net.Conn) {
		t.Cleanup(func() { c.Close() }) // held open, silent
	})
	_, err := rangecast(t, "", "--addr", addr, "broadcasts", "list")
	if got := describe(err); err == nil || !strings.Contains(got, "hung, stopped or overloaded") || strings.Contains(got, "TLS (--tls-cert)") {
		t.Errorf("against a silent server: %s\nwant it called hung, not TLS", got)
	}
}
