package cli

import (
	"errors"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rangecast/rangecast/internal/api"
)

// describe turns a gRPC error into a sentence for a terminal.
func describe(err error) string {
	st, ok := status.FromError(err)
	if !ok {
		return err.Error()
	}
	switch st.Code() {
	case codes.Unavailable:
		if api.AnsweredByCoordinator(st) {
			return "the coordinator is running, but " + st.Message()
		}
		if hint := tlsHint(st.Message()); hint != "" {
			return hint + ": " + st.Message()
		}
		return "cannot reach the coordinator (is it running? check --addr / RANGECAST_ADDR): " + st.Message()
	case codes.InvalidArgument:
		return "invalid request: " + st.Message()
	case codes.NotFound:
		// A store's wrapped sentinel ends "…: not found" already.
		return "not found: " + strings.TrimSuffix(st.Message(), ": not found")
	case codes.FailedPrecondition:
		return "not possible now: " + st.Message()
	case codes.AlreadyExists:
		return "already exists: " + st.Message()
	case codes.Unauthenticated:
		msg := "not authorized: " + st.Message()
		if !strings.Contains(msg, "RANGECAST_TOKEN") {
			msg += " (pass --token or set RANGECAST_TOKEN)"
		}
		return msg
	}
	return st.Code().String() + ": " + st.Message()
}

// tlsHint says what to change when a connection failed on TLS: the
// words are gRPC's and crypto/tls's, the only place they are known.
func tlsHint(msg string) string {
	switch {
	case strings.Contains(msg, "x509:") || strings.Contains(msg, "certificate"):
		return "the coordinator's TLS certificate is not trusted or not for this name (give the CA that signed it with --ca FILE / RANGECAST_CA, or --tls-server-name NAME when --addr is not a name on the certificate)"
	case strings.Contains(msg, "first record does not look like a TLS handshake"):
		return "the coordinator speaks plaintext gRPC, not TLS (drop --ca and --tls, or configure --tls-cert/--tls-key on the coordinator)"
	case strings.Contains(msg, "looked like an HTTP/1.1 header"):
		return "the address answers HTTP/1.1, not gRPC: --addr (RANGECAST_ADDR) must be the coordinator's gRPC address, not its HTTP one"
	case strings.Contains(msg, "server preface") && (strings.Contains(msg, "use of closed network connection") ||
		strings.Contains(msg, "timeout") || strings.Contains(msg, "deadline")):
		// The connection was taken and nothing came back before the
		// client gave up: a stopped (SIGSTOP) or wedged process, not TLS
		// (tester: a frozen coordinator read as a TLS mistake).
		return "the coordinator at --addr took the connection but sent nothing back before the client gave up: it is hung, stopped or overloaded (check the process), or --addr names something that is not a gRPC server"
	case strings.Contains(msg, "server preface") || strings.Contains(msg, "frame too large"):
		// Refused before the first gRPC frame: a TLS server answering a
		// plaintext client (its alert reads as an oversized frame), or
		// not a gRPC server at all.
		return "the server at --addr did not answer as plaintext gRPC; if the coordinator serves TLS (--tls-cert), connect with --ca FILE (RANGECAST_CA) or --tls, otherwise check that --addr is its gRPC address"
	case strings.Contains(msg, "connection reset") || strings.Contains(msg, "EOF"):
		// After the connection was up: the coordinator went away in the
		// middle of the call.
		return "the coordinator closed the connection during the call (did it stop or restart?); run the command again"
	}
	return ""
}

var errUsage = errors.New("usage")
