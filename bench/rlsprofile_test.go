package bench

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/gateway"
)

// BenchmarkEnvoyRLSGateway is the path the Envoy comparison loads, in this
// process so that -cpuprofile sees it: sluice's gateway (the same
// configuration as `sluice serve` gets there, counters in a redis-server of
// its own) answering ShouldRateLimit over gRPC on loopback, keys uniform over
// 100,000 users, every call under its limit. The profile holds the client's
// side too; BENCHMARKS.md says how to read the server's alone.
//
//	go test -run '^$' -bench EnvoyRLSGateway -benchtime 5s -cpuprofile /tmp/rls.prof
//	go tool pprof -top -cum /tmp/rls.prof
func BenchmarkEnvoyRLSGateway(b *testing.B) {
	benchRLSServer(b, func(b *testing.B, redisAddr string) string {
		dir := b.TempDir()
		confDir := filepath.Join(dir, "ratelimit")
		if err := os.MkdirAll(confDir, 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(confDir, "bench.yaml"), []byte(RLSDomain), 0o644); err != nil {
			b.Fatal(err)
		}
		path := filepath.Join(dir, "sluice.yaml")
		yaml := RLSConfig("127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0", confDir, redisAddr)
		if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
			b.Fatal(err)
		}
		cfg, err := config.Load(path)
		if err != nil {
			b.Fatal(err)
		}
		g, err := gateway.New(cfg, path, slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err != nil {
			b.Fatal(err)
		}
		if err := g.Listen(); err != nil {
			g.Close()
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- g.Serve(ctx, 5*time.Second) }()
		b.Cleanup(func() {
			cancel()
			if err := <-done; err != nil {
				b.Errorf("serve: %v", err)
			}
		})
		return g.RLSAddr().String()
	})
}

// BenchmarkEnvoyRLSFloor is the same load on the empty handler: what gRPC
// costs on both sides, under which no rate limit service can go.
func BenchmarkEnvoyRLSFloor(b *testing.B) {
	benchRLSServer(b, func(b *testing.B, _ string) string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		srv := FloorRLSServer()
		go srv.Serve(ln)
		b.Cleanup(srv.Stop)
		return ln.Addr().String()
	})
}

// benchRLSServer starts a redis-server, the service start returns the
// address of, and calls it from 16 goroutines a CPU (32 callers on this
// 2-core machine), 16 to a connection as LoadRLS does.
func benchRLSServer(b *testing.B, start func(b *testing.B, redisAddr string) string) {
	if testing.Short() {
		b.Skip("needs redis-server")
	}
	srv, err := StartRedis()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(srv.Stop)
	addr := start(b, srv.Addr)
	w := GetWorkload("uniform100k")
	var n atomic.Int64
	var conns []*grpc.ClientConn
	b.Cleanup(func() {
		for _, cc := range conns {
			cc.Close()
		}
	})
	clients := make([]rlsv3.RateLimitServiceClient, 0, 64)
	for range cap(clients) {
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			b.Fatal(err)
		}
		conns = append(conns, cc)
		clients = append(clients, rlsv3.NewRateLimitServiceClient(cc))
	}
	var goroutine atomic.Int64
	ctx := context.Background()
	b.SetParallelism(16)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		client := clients[int(goroutine.Add(1)/callersPerConn)%len(clients)]
		for pb.Next() {
			i := int(n.Add(1))
			req := &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*commonv3.RateLimitDescriptor{{
				Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "user", Value: w.Key(i)}},
			}}}
			resp, err := client.ShouldRateLimit(ctx, req)
			if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
				b.Fatalf("ShouldRateLimit: %v, %v", resp.GetOverallCode(), err)
			}
		}
	})
}
