package cli

import (
	"errors"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// describe turns a gRPC error into a sentence for a terminal.
func describe(err error) string {
	st, ok := status.FromError(err)
	if !ok {
		return err.Error()
	}
	switch st.Code() {
	case codes.Unavailable:
		return "cannot reach the coordinator (is it running? check --addr / RANGECAST_ADDR): " + st.Message()
	case codes.InvalidArgument:
		return "invalid request: " + st.Message()
	case codes.NotFound:
		return "not found: " + st.Message()
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

var errUsage = errors.New("usage")
