package api_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rangecast/rangecast/internal/api"
	"github.com/rangecast/rangecast/internal/store"
)

// The store's sentinels decide the code, however the error was wrapped.
func TestErrorCodesFromStoreSentinels(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		err  error
		want codes.Code
	}{
		{fmt.Errorf("claim: %w: dial tcp 127.0.0.1:5432: connection refused", store.ErrUnavailable), codes.Unavailable},
		{fmt.Errorf("get broadcast: %w", store.ErrNotFound), codes.NotFound},
		{fmt.Errorf("create: %w", store.ErrConflict), codes.FailedPrecondition},
		{fmt.Errorf("import: %w", store.ErrInvalid), codes.InvalidArgument},
		{fmt.Errorf("read: %w", context.DeadlineExceeded), codes.DeadlineExceeded},
		{errors.New("something nobody expected"), codes.Internal},
	} {
		if got := status.Code(api.Error(c.err)); got != c.want {
			t.Errorf("api.Error(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
