package api

import (
	"context"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

	pb "github.com/rangecast/rangecast/proto/rangecast/v1"
)

// maxRecvMsgSize is the largest request the server reads.
const maxRecvMsgSize = 16 << 20

// NewGRPCServer registers the broadcast, audience and governor services,
// gRPC health and reflection (so grpcurl works without the .proto files).
// Pass (*Auth).ServerOptions() in opts to require a bearer token; health and
// reflection stay open either way.
func NewGRPCServer(cfg Config, opts ...grpc.ServerOption) *grpc.Server {
	// Requests up to 16 MiB are read, so one over a field's limit (a 5 MB
	// --html against the 512 KiB template limit) gets this API's answer
	// naming the field rather than gRPC's bare ResourceExhausted at its
	// default 4 MiB. Valid requests are far smaller (three templates of
	// 512 KiB; the CLI's import chunks of about 1 MiB). Given first, so
	// opts may override it.
	opts = append([]grpc.ServerOption{grpc.MaxRecvMsgSize(maxRecvMsgSize),
		grpc.ChainUnaryInterceptor(answeredUnary), grpc.ChainStreamInterceptor(answeredStream)}, opts...)
	// After opts, so a caller without a token is told that first.
	opts = append(opts, grpc.ChainUnaryInterceptor(refuseNUL))
	s := grpc.NewServer(opts...)
	pb.RegisterBroadcastServiceServer(s, NewBroadcastAPI(cfg))
	pb.RegisterAudienceServiceServer(s, NewAudienceAPI(cfg))
	pb.RegisterGovernorServiceServer(s, NewGovernorAPI(cfg))
	pb.RegisterBroadcastOpsServiceServer(s, NewBroadcastOpsAPI(cfg))
	pb.RegisterCatalogServiceServer(s, NewCatalogAPI(cfg))
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus(pb.BroadcastService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus(pb.AudienceService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus(pb.GovernorService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus(pb.BroadcastOpsService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus(pb.CatalogService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	// Registered by the caller (internal/server), which has its parts.
	hs.SetServingStatus(pb.TransactionalService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(s, hs)
	reflection.Register(s)
	return s
}

// answeredUnary and answeredStream mark every Unavailable a handler returns
// as the coordinator's own answer (dependencyUnavailable), whichever
// service built it: the transactional service's "stored but could not be
// queued" (NATS down) read "cannot reach the coordinator (is it
// running?…)" in the CLI, which was running and had answered (tester).
func answeredUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	resp, err := handler(ctx, req)
	return resp, markAnswered(err)
}

func answeredStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	return markAnswered(handler(srv, ss))
}

func markAnswered(err error) error {
	st, ok := status.FromError(err)
	if err == nil || !ok || st.Code() != codes.Unavailable || AnsweredByCoordinator(st) {
		return err
	}
	if d, derr := st.WithDetails(&errdetails.ErrorInfo{Reason: ReasonDependencyUnavailable, Domain: ErrorDomain}); derr == nil {
		return d.Err()
	}
	return err
}
