package envoyrls_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

const benchDomain = `domain: bench
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 1000000000}
`

// BenchmarkGRPC is a call through the real gRPC listener on loopback,
// memory store, one descriptor, keys spread over 100,000 users, every call
// under its limit: the gRPC path end to end, client included.
func BenchmarkGRPC(b *testing.B) {
	s := serve(b, "", map[string]string{"bench.yaml": benchDomain})
	var n atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := n.Add(1)
			req := &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("user", "u"+strconv.FormatInt(i%100_000, 10))}}
			resp, err := s.rls.ShouldRateLimit(context.Background(), req)
			if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
				b.Fatalf("%v %v", resp, err)
			}
		}
	})
}
