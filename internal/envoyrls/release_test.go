package envoyrls_test

import (
	"context"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// Every way a stream can end gives back its client address's count
// (envoy_rls.max_streams_per_ip): with a cap of 4, each kind of end
// below happens 12 times from one address, so a kind that kept its count
// would leave the address refused; afterwards 4 streams at once are still
// admitted (and cut at first_message_timeout, not refused), and no stream
// ended before the next began was ever refused for the address.
func TestEveryStreamEndGivesBackItsAddressCount(t *testing.T) {
	const capIP, each = 4, 12
	const timeout = 300 * time.Millisecond
	s := serveRLS(t, "max_streams_per_ip: 4, first_message_timeout: 300ms", "", map[string]string{"flood.yaml": floodDomain})
	addr := s.g.RLSAddr().String()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	req := &rlsv3.RateLimitRequest{Domain: "flood", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("tenant", "t")}}

	// Answered calls.
	for i := range each {
		if _, err := s.rls.ShouldRateLimit(ctx, req); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	// Health checks, which the in-flight bound lets through.
	for i := range each {
		if _, err := s.health.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
			t.Fatalf("health check %d: %v", i, err)
		}
	}
	// Calls of a method no handler serves.
	for range each {
		_ = s.conn.Invoke(ctx, "/envoy.service.ratelimit.v3.RateLimitService/NoSuchMethod", req, new(rlsv3.RateLimitResponse))
	}
	// Calls the client gives up on at once (some never reach the server).
	for range each {
		c, cancelCall := context.WithTimeout(ctx, time.Microsecond)
		_, _ = s.rls.ShouldRateLimit(c, req)
		cancelCall()
	}
	// Silent streams, cut at first_message_timeout, capIP-1 at a time.
	for round := 0; round < each/(capIP-1); round++ {
		rc := dialRaw(t, addr)
		rc.open(t, capIP-1)
		for wait := time.Now().Add(timeout + time.Minute); rc.ended() < capIP-1 && time.Now().Before(wait); {
			time.Sleep(5 * time.Millisecond)
		}
		rc.conn.Close()
	}
	// Up to here each stream ended before the next began (or within the
	// cap): none may have been refused for its address.
	if n := s.rejections(t, "streams_per_ip"); n != 0 {
		t.Fatalf("%d streams refused for their address, with at most %d open at a time; want none", n, capIP-1)
	}
	// Silent streams whose connection the client closes.
	for round := 0; round < each/(capIP-1); round++ {
		rc := dialRaw(t, addr)
		rc.open(t, capIP-1)
		rc.conn.Close()
	}

	// The closed connections' streams end when the server reads the close:
	// try until capIP streams at once are all admitted, or a minute.
	var last []string
	for deadline := time.Now().Add(time.Minute); ; {
		rc := dialRaw(t, addr)
		rc.open(t, capIP)
		for wait := time.Now().Add(timeout + time.Minute); rc.ended() < capIP && time.Now().Before(wait); {
			time.Sleep(5 * time.Millisecond)
		}
		rc.conn.Close()
		rc.mu.Lock()
		last = last[:0]
		cutAll := len(rc.ends) == capIP
		for _, e := range rc.ends {
			last = append(last, e.grpc+" "+e.message)
			cutAll = cutAll && e.grpc == "4" && strings.Contains(e.message, "first_message_timeout")
		}
		rc.mu.Unlock()
		if cutAll {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d streams at once after every kind of end: %q; want each admitted and cut at first_message_timeout (an address count never given back refuses them)", capIP, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
