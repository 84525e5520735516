package envoyrls

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/tap"
)

// BenchmarkStreamGuard is the stream guard alone, as one call meets it:
// tap on the stream's headers (under a fresh cancellable context, as
// gRPC's transport gives it), the message received, the handler's end.
// Its allocs/op are the guard's own, which BenchmarkGRPC drowns in gRPC's.
func BenchmarkStreamGuard(b *testing.B) {
	s := New(nil, Options{})
	s.opts.FirstMessageTimeout = time.Minute
	base := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(10, 0, 0, 1), Port: 5}})
	info := &tap.Info{FullMethodName: "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"}
	b.ReportAllocs()
	for b.Loop() {
		parent, cancel := context.WithCancel(base)
		ctx, err := s.tap(parent, info)
		if err != nil {
			b.Fatal(err)
		}
		_ = received(ctx, nil)
		ctx.Value(streamKey{}).(*stream).ended()
		cancel()
	}
}
