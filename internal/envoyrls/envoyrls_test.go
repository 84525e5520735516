package envoyrls_test

import (
	"context"
	"io"
	"math"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/internal/envoyrls"
	"github.com/sluicehq/sluice/internal/gateway"
	"github.com/sluicehq/sluice/internal/testkit/gatewaytest"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
)

// served is `sluice serve` in process, its gRPC listener on loopback, and
// a client built from go-control-plane's stubs.
type served struct {
	g      *gateway.Gateway
	rls    rlsv3.RateLimitServiceClient
	health healthpb.HealthClient
	dir    string
	conn   *grpc.ClientConn
}

// serve runs a gateway with the sluice.yaml extra (listeners on free
// ports) and the descriptor files given by name, until the test ends.
func serve(t testing.TB, extra string, files map[string]string) *served {
	t.Helper()
	return serveRLS(t, "", extra, files)
}

// serveRLS is serve with rls added to the envoy_rls section, such as
// "max_in_flight_per_domain: 8".
func serveRLS(t testing.TB, rls, extra string, files map[string]string) *served {
	t.Helper()
	return serveSection(t, "envoy_rls: {listen: 127.0.0.1:0, config_dir: ratelimit"+strings.TrimSuffix(", "+rls, ", ")+"}\n"+extra, files)
}

// serveSection is serve with the sluice.yaml extra, which has an envoy_rls
// section of its own reading the directory ratelimit.
func serveSection(t testing.TB, extra string, files map[string]string) *served {
	t.Helper()
	rfiles := map[string]string{"ratelimit/": ""}
	for name, body := range files {
		rfiles["ratelimit/"+name] = body
	}
	yaml := "listen: 127.0.0.1:0\nadmin_listen: 127.0.0.1:0\ndecision_api: {listen: 127.0.0.1:0}\n" + extra
	running := gatewaytest.Start(t, gateway.New, gatewaytest.Write(t, yaml, rfiles), io.Discard).Serve(t, 5*time.Second)
	g, dir := running.G, running.Dir
	conn, err := grpc.NewClient(g.RLSAddr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &served{g: g, rls: rlsv3.NewRateLimitServiceClient(conn), health: healthpb.NewHealthClient(conn), dir: dir, conn: conn}
}

// desc is a descriptor of key, value pairs.
func desc(kv ...string) *ratelimitv3.RateLimitDescriptor {
	d := &ratelimitv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func (s *served) call(t testing.TB, req *rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := s.rls.ShouldRateLimit(ctx, req)
	if err != nil {
		t.Fatalf("ShouldRateLimit(%v): %v", req, err)
	}
	return resp
}

// one asks about one descriptor and returns its status.
func (s *served) one(t testing.TB, domain string, d *ratelimitv3.RateLimitDescriptor) *rlsv3.RateLimitResponse_DescriptorStatus {
	t.Helper()
	resp := s.call(t, &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*ratelimitv3.RateLimitDescriptor{d}})
	if len(resp.Statuses) != 1 {
		t.Fatalf("%d statuses, want 1", len(resp.Statuses))
	}
	if resp.OverallCode != resp.Statuses[0].Code {
		t.Fatalf("overall %v, status %v", resp.OverallCode, resp.Statuses[0].Code)
	}
	return resp.Statuses[0]
}

const (
	ok   = rlsv3.RateLimitResponse_OK
	over = rlsv3.RateLimitResponse_OVER_LIMIT
)

// expect holds a status to a code and a limit_remaining.
func expect(t testing.TB, what string, st *rlsv3.RateLimitResponse_DescriptorStatus, code rlsv3.RateLimitResponse_Code, remaining uint32) {
	t.Helper()
	if st.Code != code || st.LimitRemaining != remaining {
		t.Fatalf("%s: %v remaining %d, want %v remaining %d (%v)", what, st.Code, st.LimitRemaining, code, remaining, st)
	}
}

// awayFromEdge waits, if need be, until the current window of unit
// (seconds) has at least margin left, so that a sequence of calls stays
// within one window. With hour and day units it almost never waits.
func awayFromEdge(unit int64, margin time.Duration) {
	u := time.Duration(unit) * time.Second
	now := time.Now()
	left := u - time.Duration(now.UnixNano())%u
	if left < margin {
		time.Sleep(left + 10*time.Millisecond)
	}
}

const testDomain = `domain: test
descriptors:
  - key: user                     # the key alone: each user a bucket
    rate_limit: {unit: hour, requests_per_unit: 3}
  - key: path
    value: /admin
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: path
    value: /api/*                 # wildcard: each path a bucket
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: path
    value: /shared/*
    share_threshold: true         # wildcard: one bucket for all
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: source
    value: proxy
    descriptors:
      - key: dest
        value: a
        rate_limit: {unit: day, requests_per_unit: 2, name: a_limit}
      - key: dest
        detailed_metric: true
        rate_limit: {unit: day, requests_per_unit: 5}
  - key: free
    rate_limit: {unlimited: true}
  - key: quiet
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: banned
    rate_limit: {unit: hour, requests_per_unit: 0}
  - key: counted
    quota_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: category
    value: account
    rate_limit:
      replaces: [{name: a_limit}]
      unit: hour
      requests_per_unit: 4
  - key: tb
    rate_limit: {unit: hour, requests_per_unit: 3600, algorithm: token_bucket, burst: 2}
`

// TestDescriptors drives every feature of envoyproxy/ratelimit's files
// through the real gRPC listener, on the memory store and on Redis.
func TestDescriptors(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		testDescriptors(t, serve(t, "", map[string]string{"test.yaml": testDomain}))
	})
	t.Run("redis", func(t *testing.T) {
		srv := redistest.Start(t)
		testDescriptors(t, serve(t, "store: {type: redis, redis: {url: \""+srv.URL()+"\", timeout: 2s}}\n", map[string]string{"test.yaml": testDomain}))
	})
}

func testDescriptors(t *testing.T, s *served) {
	awayFromEdge(86400, time.Minute) // the day unit of dest; the hour ones need less
	t.Run("key alone", func(t *testing.T) {
		for i, want := range []uint32{2, 1, 0} {
			st := s.one(t, "test", desc("user", "alice"))
			expect(t, "alice", st, ok, want)
			if st.CurrentLimit.GetRequestsPerUnit() != 3 || st.CurrentLimit.GetUnit() != rlsv3.RateLimitResponse_RateLimit_HOUR {
				t.Fatalf("call %d: current_limit %v", i, st.CurrentLimit)
			}
			if d := st.DurationUntilReset.AsDuration(); d <= 0 || d > time.Hour {
				t.Fatalf("duration_until_reset %v, want within the hour", d)
			}
		}
		expect(t, "alice, 4th", s.one(t, "test", desc("user", "alice")), over, 0)
		expect(t, "bob", s.one(t, "test", desc("user", "bob")), ok, 2)
	})
	t.Run("value and wildcards", func(t *testing.T) {
		expect(t, "/admin", s.one(t, "test", desc("path", "/admin")), ok, 0)
		expect(t, "/admin", s.one(t, "test", desc("path", "/admin")), over, 0)
		expect(t, "/api/x", s.one(t, "test", desc("path", "/api/x")), ok, 1)
		expect(t, "/api/y", s.one(t, "test", desc("path", "/api/y")), ok, 1)
		expect(t, "/shared/x", s.one(t, "test", desc("path", "/shared/x")), ok, 1)
		expect(t, "/shared/y", s.one(t, "test", desc("path", "/shared/y")), ok, 0)
		expect(t, "/shared/z", s.one(t, "test", desc("path", "/shared/z")), over, 0)
		st := s.one(t, "test", desc("path", "/other"))
		expect(t, "/other", st, ok, 0)
		if st.CurrentLimit != nil || st.DurationUntilReset != nil {
			t.Fatalf("a descriptor no limit matches: %v", st)
		}
	})
	t.Run("nested", func(t *testing.T) {
		expect(t, "dest a", s.one(t, "test", desc("source", "proxy", "dest", "a")), ok, 1)
		expect(t, "dest b", s.one(t, "test", desc("source", "proxy", "dest", "b")), ok, 4)
		expect(t, "dest c", s.one(t, "test", desc("source", "proxy", "dest", "c")), ok, 4)
		expect(t, "dest b", s.one(t, "test", desc("source", "proxy", "dest", "b")), ok, 3)
		expect(t, "source alone", s.one(t, "test", desc("source", "proxy")), ok, 0)
		expect(t, "deeper than the tree", s.one(t, "test", desc("source", "proxy", "dest", "b", "x", "y")), ok, 0)
		expect(t, "other source", s.one(t, "test", desc("source", "mesh", "dest", "a")), ok, 0)
	})
	t.Run("unlimited", func(t *testing.T) {
		st := s.one(t, "test", desc("free", "x"))
		expect(t, "free", st, ok, math.MaxUint32)
		if st.CurrentLimit != nil {
			t.Fatalf("unlimited has a current_limit: %v", st)
		}
	})
	t.Run("shadow mode", func(t *testing.T) {
		expect(t, "quiet", s.one(t, "test", desc("quiet", "x")), ok, 0)
		resp := s.call(t, &rlsv3.RateLimitRequest{Domain: "test", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("quiet", "x")}})
		st := resp.Statuses[0]
		if resp.OverallCode != ok || st.Code != ok || st.CurrentLimit.GetRequestsPerUnit() != 1 || st.DurationUntilReset == nil || len(resp.ResponseHeadersToAdd) != 0 {
			t.Fatalf("shadow over the limit: %v", resp)
		}
	})
	t.Run("quota mode", func(t *testing.T) {
		// As envoyproxy/ratelimit's main: a quota limit over reports
		// OVER_LIMIT; the answer refuses only when every quota limit of
		// the call is over (or another limit is).
		expect(t, "counted", s.one(t, "test", desc("counted", "x")), ok, 0)
		resp := s.call(t, &rlsv3.RateLimitRequest{Domain: "test", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("counted", "x"), desc("counted", "y")}})
		if resp.OverallCode != ok || resp.Statuses[0].Code != over || resp.Statuses[0].DurationUntilReset == nil || resp.Statuses[1].Code != ok {
			t.Fatalf("one quota of two over the limit: %v", resp)
		}
		resp = s.call(t, &rlsv3.RateLimitRequest{Domain: "test", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("counted", "x"), desc("counted", "y")}})
		if resp.OverallCode != over || resp.Statuses[0].Code != over || resp.Statuses[1].Code != over {
			t.Fatalf("both quotas over the limit: %v", resp)
		}
	})
	t.Run("requests_per_unit 0", func(t *testing.T) {
		resp := s.call(t, &rlsv3.RateLimitRequest{Domain: "test", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("banned", "x")}})
		expect(t, "banned", resp.Statuses[0], over, 0)
		if header(resp.ResponseHeadersToAdd, "retry-after") == "" {
			t.Fatalf("no retry-after: %v", resp.ResponseHeadersToAdd)
		}
	})
	t.Run("replaces", func(t *testing.T) {
		resp := s.call(t, &rlsv3.RateLimitRequest{Domain: "test", Descriptors: []*ratelimitv3.RateLimitDescriptor{
			desc("category", "account"), desc("source", "proxy", "dest", "a"),
		}})
		expect(t, "category", resp.Statuses[0], ok, 3)
		expect(t, "replaced", resp.Statuses[1], ok, 0)
		if resp.Statuses[1].CurrentLimit != nil {
			t.Fatalf("a replaced limit still applies: %v", resp.Statuses[1])
		}
		// Alone, dest a still has its own limit, untouched by the call above.
		expect(t, "dest a", s.one(t, "test", desc("source", "proxy", "dest", "a")), ok, 0)
	})
	t.Run("hits_addend", func(t *testing.T) {
		resp := s.call(t, &rlsv3.RateLimitRequest{Domain: "test", HitsAddend: 2, Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("user", "carol")}})
		expect(t, "carol +2", resp.Statuses[0], ok, 1)
		ask := desc("user", "carol")
		ask.HitsAddend = wrapperspb.UInt64(0)
		expect(t, "carol +0", s.one(t, "test", ask), ok, 1)
		expect(t, "carol +0 again", s.one(t, "test", ask), ok, 1)
		// A refused hit counts, as envoyproxy/ratelimit's INCRBY counts it:
		// after +2 refused (4 > 3), even +1 (which alone would fit) is over.
		resp = s.call(t, &rlsv3.RateLimitRequest{Domain: "test", HitsAddend: 2, Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("user", "carol")}})
		expect(t, "carol +2 refused", resp.Statuses[0], over, 0)
		expect(t, "carol +1 after", s.one(t, "test", desc("user", "carol")), over, 0)
		expect(t, "carol +0 after", s.one(t, "test", ask), over, 0)
		// More than the whole limit at once: over, and counted.
		big := desc("user", "dave")
		big.HitsAddend = wrapperspb.UInt64(10)
		expect(t, "dave +10", s.one(t, "test", big), over, 0)
		expect(t, "dave +1 after", s.one(t, "test", desc("user", "dave")), over, 0)
	})
	t.Run("headers", func(t *testing.T) {
		resp := s.call(t, &rlsv3.RateLimitRequest{Domain: "test", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("user", "erin")}})
		h := resp.ResponseHeadersToAdd
		if header(h, "ratelimit-remaining") != "2" || header(h, "ratelimit-limit") != "3" || header(h, "retry-after") != "" ||
			!strings.HasPrefix(header(h, "ratelimit"), `"rls:test/user";r=2;t=`) || header(h, "ratelimit-policy") == "" {
			t.Fatalf("allowed: headers %v", h)
		}
		s.call(t, &rlsv3.RateLimitRequest{Domain: "test", HitsAddend: 2, Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("user", "erin")}})
		resp = s.call(t, &rlsv3.RateLimitRequest{Domain: "test", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("user", "frank"), desc("user", "erin")}})
		if resp.OverallCode != over || resp.Statuses[0].Code != ok || resp.Statuses[1].Code != over {
			t.Fatalf("two descriptors: %v", resp)
		}
		h = resp.ResponseHeadersToAdd
		ra := header(h, "retry-after")
		if ra == "" || ra == "0" || header(h, "ratelimit-remaining") != "0" {
			t.Fatalf("refused: headers %v", h)
		}
	})
	t.Run("token bucket", func(t *testing.T) {
		expect(t, "tb 1", s.one(t, "test", desc("tb", "x")), ok, 1)
		expect(t, "tb 2", s.one(t, "test", desc("tb", "x")), ok, 0)
		st := s.one(t, "test", desc("tb", "x"))
		if st.Code != over || st.DurationUntilReset.AsDuration() < time.Second {
			t.Fatalf("tb 3: %v", st)
		}
	})
	t.Run("unknown domain", func(t *testing.T) {
		expect(t, "unknown domain", s.one(t, "nope", desc("user", "alice")), ok, 0)
	})
	t.Run("bad requests", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, err := s.rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("user", "a")}})
		if status.Code(err) != codes.InvalidArgument {
			t.Fatalf("no domain: %v", err)
		}
		_, err = s.rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "test"})
		if status.Code(err) != codes.InvalidArgument {
			t.Fatalf("no descriptors: %v", err)
		}
		many := &rlsv3.RateLimitRequest{Domain: "test"}
		for range 65 {
			many.Descriptors = append(many.Descriptors, desc("user", "m"))
		}
		if _, err = s.rls.ShouldRateLimit(ctx, many); status.Code(err) != codes.InvalidArgument {
			t.Fatalf("65 descriptors: %v", err)
		}
		huge := &rlsv3.RateLimitRequest{Domain: "test", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("user", strings.Repeat("h", 70<<10))}}
		if _, err = s.rls.ShouldRateLimit(ctx, huge); status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("a message beyond max_header_bytes: %v", err)
		}
		// The connection still serves.
		expect(t, "after", s.one(t, "test", desc("user", "gina")), ok, 2)
	})
	t.Run("health", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, svc := range []string{"", envoyrls.ServiceName} {
			r, err := s.health.Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
			if err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
				t.Fatalf("health %q: %v, %v", svc, r, err)
			}
		}
	})
}

func header(h []*corev3.HeaderValue, name string) string {
	for _, v := range h {
		if v.Key == name {
			return v.Value
		}
	}
	return ""
}

// A refused hit of envoyproxy/ratelimit's window is counted by the call
// that refuses it: one INCRBY on Redis, as there, and no script; its
// EXPIRE went with the counter's first INCRBY, and an hour's counter needs
// no other for now (algo/fixedwindow_expiry.go).
func TestRefusedHitIsOneStoreCall(t *testing.T) {
	srv := redistest.Start(t)
	s := serve(t, "store: {type: redis, redis: {url: \""+srv.URL()+"\", timeout: 2s, coalesce: false}}\n", map[string]string{"test.yaml": testDomain})
	awayFromEdge(3600, time.Minute)
	for i := range 3 {
		expect(t, "frank", s.one(t, "test", desc("user", "frank")), ok, uint32(2-i))
	}
	srv.ResetStats(t)
	expect(t, "frank, 4th", s.one(t, "test", desc("user", "frank")), over, 0)
	stats := srv.CommandStats(t)
	if stats["incrby"].Calls != 1 || stats["expire"].Calls != 0 || stats["evalsha"].Calls+stats["eval"].Calls+stats["get"].Calls != 0 {
		t.Fatalf("a refused hit took %v, want one INCRBY alone", stats)
	}
	expect(t, "frank, 5th", s.one(t, "test", desc("user", "frank")), over, 0)
}
