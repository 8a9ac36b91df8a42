// Package api serves rangecast's gRPC services in front of the broadcast
// engine (internal/coordinator) and the store: request validation, bearer
// tokens, server construction with health and reflection, the conversions
// between protobuf and domain types, and the one mapping from engine and
// store errors to gRPC codes.
package api

import (
	"context"
	"crypto/rand"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rangecast/rangecast/internal/clock"
	"github.com/rangecast/rangecast/internal/coordinator"
	"github.com/rangecast/rangecast/internal/store"
)

// Config wires the services to what they serve.
type Config struct {
	// Engine runs the broadcasts: start, pause, resume, cancel, status and
	// the governors.
	Engine *coordinator.Coordinator
	// Store answers what needs no engine: drafts, lists, contacts, segments.
	Store store.Store
	Clock clock.Clock
	Log   *slog.Logger

	// Mail renders and sends as the page workers do, for previews and
	// test copies (broadcast_ops.go); its zero value refuses both.
	Mail Mail
}

func (c Config) withDefaults() Config {
	if c.Clock == nil {
		c.Clock = clock.Real{}
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
	return c
}

// Error maps an engine or store error to a gRPC status with a message a
// person can act on; a status passes through as it is. The decision reads
// the error's type (coordinator.KindOf, store sentinels), never its words.
func Error(err error) error {
	if _, ok := status.FromError(err); ok {
		return err
	}
	switch coordinator.KindOf(err) {
	case coordinator.Unavailable:
		return dependencyUnavailable(err)
	case coordinator.WrongState:
		return status.Error(codes.FailedPrecondition, err.Error())
	case coordinator.NotFound:
		return status.Error(codes.NotFound, err.Error())
	case coordinator.Contended:
		return status.Error(codes.Aborted, err.Error())
	case coordinator.Disabled:
		return status.Error(codes.FailedPrecondition, err.Error())
	case coordinator.InvalidContent:
		return status.Error(codes.InvalidArgument, err.Error())
	case coordinator.PreflightFailed:
		// At start: the content is fine, the list is not what it expects.
		return status.Error(codes.FailedPrecondition, err.Error())
	}
	switch {
	case errors.Is(err, store.ErrNotFound):
		return status.Error(codes.NotFound, err.Error())
	case errors.Is(err, store.ErrConflict):
		return status.Error(codes.FailedPrecondition, err.Error())
	case errors.Is(err, store.ErrInvalid):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, store.ErrUnavailable):
		return dependencyUnavailable(err)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return status.FromContextError(err).Err()
	default:
		return status.Error(codes.Internal, err.Error())
	}
}

// ReasonDependencyUnavailable is the ErrorInfo reason of an Unavailable
// status the coordinator itself answered with: NATS or the database did
// not answer it. gRPC's own Unavailable (no connection to the coordinator)
// carries no such detail, so a client can tell "the coordinator is down"
// from "the coordinator is up and says what it is missing".
const ReasonDependencyUnavailable = "DEPENDENCY_UNAVAILABLE"

// ErrorDomain is the ErrorInfo domain of rangecast's error details.
const ErrorDomain = "rangecast"

func dependencyUnavailable(err error) error {
	// One line: the driver's connect errors break theirs with "\n\t",
	// which the CLI showed escaped, as a literal \t (tester).
	return markAnswered(status.Error(codes.Unavailable, strings.Join(strings.Fields(err.Error()), " ")))
}

// AnsweredByCoordinator reports whether st is an Unavailable the
// coordinator answered itself (dependencyUnavailable), not gRPC's own for
// a coordinator it could not reach.
func AnsweredByCoordinator(st *status.Status) bool {
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetReason() == ReasonDependencyUnavailable && info.GetDomain() == ErrorDomain {
			return true
		}
	}
	return false
}

func invalid(format string, args ...any) error {
	return status.Errorf(codes.InvalidArgument, format, args...)
}

func parseID(id string) (ulid.ULID, error) {
	if id == "" {
		return ulid.ULID{}, invalid("id is required")
	}
	u, err := ulid.ParseStrict(id)
	if err != nil {
		return ulid.ULID{}, invalid("id %q is not a broadcast id: ids are 26-character ULIDs such as 01J9Z3K8M2T4V6X8Y0A2B4C6D8 (see rangecast broadcasts list)", id)
	}
	return u, nil
}

// idSource makes ULIDs from the injected clock; monotonic within a
// millisecond so ids made together keep their order.
type idSource struct {
	mu      sync.Mutex
	entropy *ulid.MonotonicEntropy
}

func newIDSource() *idSource { return &idSource{entropy: ulid.Monotonic(rand.Reader, 0)} }

func (s *idSource) make(now time.Time) ulid.ULID {
	s.mu.Lock()
	defer s.mu.Unlock()
	return ulid.MustNew(ulid.Timestamp(now), s.entropy)
}
