package envoyrls_test

import (
	"context"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
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

// BenchmarkGRPCOneCaller is one call at a time on one connection whose
// client, like Envoy's, sends no PING of its own: what each call costs
// the process (client and server) in system calls, from /proc/self/io,
// is reported as syscalls/op.
func BenchmarkGRPCOneCaller(b *testing.B) {
	s := serve(b, "", map[string]string{"bench.yaml": benchDomain})
	cc, err := grpc.NewClient(s.g.RLSAddr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithStaticStreamWindowSize(envoyWindow), grpc.WithStaticConnWindowSize(envoyWindow))
	if err != nil {
		b.Fatal(err)
	}
	defer cc.Close()
	rls := rlsv3.NewRateLimitServiceClient(cc)
	call := func(i int) {
		req := &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("user", "u"+strconv.Itoa(i%100_000))}}
		resp, err := rls.ShouldRateLimit(context.Background(), req)
		if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
			b.Fatalf("%v %v", resp, err)
		}
	}
	call(0)
	before, cpu := syscallsOfProcess(b), cpuOfProcess(b)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		call(i)
	}
	b.StopTimer()
	b.ReportMetric(float64(syscallsOfProcess(b)-before)/float64(b.N), "syscalls/op")
	b.ReportMetric(float64(cpuOfProcess(b)-cpu)/float64(b.N), "cpu-ns/op")
}

// cpuOfProcess is the CPU time this process spent so far, user and
// system, in nanoseconds.
func cpuOfProcess(b *testing.B) int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// envoyWindow is Envoy's default HTTP/2 window, a stream's and a
// connection's (256 MiB; Http2ProtocolOptions).
const envoyWindow = 256 << 20

// syscallsOfProcess is the read and write system calls this process made
// so far (syscr + syscw of /proc/self/io).
func syscallsOfProcess(b *testing.B) int64 {
	data, err := os.ReadFile("/proc/self/io")
	if err != nil {
		b.Skipf("no /proc/self/io: %v", err)
	}
	var n int64
	for _, line := range strings.Split(string(data), "\n") {
		name, v, ok := strings.Cut(line, ": ")
		if ok && (name == "syscr" || name == "syscw") {
			x, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			n += x
		}
	}
	return n
}
