package bench

import (
	"context"
	"runtime"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sluicehq/sluice/internal/envoyrls"
)

// floorRLS answers every ShouldRateLimit with OK and does nothing else: no
// descriptor is read, no counter kept. Served over gRPC in a process of its
// own, it is the floor of the Envoy benchmark: what gRPC, HTTP/2 and
// protobuf cost on this machine, under which no rate limit service can go.
type floorRLS struct {
	rlsv3.UnimplementedRateLimitServiceServer
}

// okResponse is shared by every answer: gRPC only reads it.
var okResponse = &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}

func (floorRLS) ShouldRateLimit(context.Context, *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	return okResponse, nil
}

// FloorRLSServer is a gRPC server with the empty rate limit service and a
// health service that reports SERVING. It runs calls on as many
// long-lived stream workers, with the same fixed flow-control windows
// (no bandwidth-estimating PINGs), as sluice's own server does, so the
// floor has every advantage sluice has.
func FloorRLSServer() *grpc.Server {
	s := grpc.NewServer(
		grpc.NumStreamWorkers(uint32(envoyrls.StreamWorkersPerCPU*runtime.GOMAXPROCS(0))),
		grpc.StaticStreamWindowSize(envoyrls.StreamWindow),
		grpc.StaticConnWindowSize(envoyrls.ConnWindow),
	)
	rlsv3.RegisterRateLimitServiceServer(s, floorRLS{})
	healthpb.RegisterHealthServer(s, health.NewServer())
	return s
}
