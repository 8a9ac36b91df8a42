package api

import (
	"context"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestHandlersUnavailableIsTheCoordinatorsAnswer: an Unavailable any
// handler returns (the transactional service's own, built without the
// detail) reaches the client marked as the coordinator's answer, so the CLI
// does not say it cannot reach a coordinator that answered (tester);
// other codes pass as they are.
func TestHandlersUnavailableIsTheCoordinatorsAnswer(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		err      error
		answered bool
	}{
		{status.Error(codes.Unavailable, "message X is stored but could not be queued (nats: no responders)"), true},
		{dependencyUnavailable(context.DeadlineExceeded), true},
		{status.Error(codes.InvalidArgument, "no"), false},
		{nil, false},
	} {
		_, err := answeredUnary(context.Background(), nil, &grpc.UnaryServerInfo{}, func(context.Context, any) (any, error) { return nil, c.err })
		serr := answeredStream(nil, nil, &grpc.StreamServerInfo{}, func(any, grpc.ServerStream) error { return c.err })
		for _, got := range []error{err, serr} {
			st, _ := status.FromError(got)
			if AnsweredByCoordinator(st) != c.answered || status.Code(got) != status.Code(c.err) || st.Message() != status.Convert(c.err).Message() {
				t.Errorf("%v became %v (answered %v); want answered %v, code and message kept", c.err, got, AnsweredByCoordinator(st), c.answered)
			}
		}
	}
}
