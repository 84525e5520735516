package envoyrls_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/internal/testkit/redistest"
)

const failDomain = `domain: fail
descriptors:
  - key: open
    rate_limit: {unit: hour, requests_per_unit: 2, on_error: open}
  - key: closed
    rate_limit: {unit: hour, requests_per_unit: 2, on_error: closed}
  - key: local
    rate_limit: {unit: hour, requests_per_unit: 2}
`

// With Redis killed, each descriptor's on_error decides (store.on_error
// by default: local), every call is answered, and none waits much beyond
// the store's deadline.
func TestOnErrorWithRedisKilled(t *testing.T) {
	srv := redistest.Start(t)
	s := serve(t, "store: {type: redis, on_error: local, redis: {url: \""+srv.URL()+"\", timeout: 100ms}}\n", map[string]string{"fail.yaml": failDomain})
	awayFromEdge(3600, time.Minute)
	for _, k := range []string{"open", "closed", "local"} {
		expect(t, k+" with Redis up", s.one(t, "fail", desc(k, "x")), ok, 1)
	}
	srv.Kill()
	start := time.Now()
	for range 3 { // more than the limit: open lets every call through
		if st := s.one(t, "fail", desc("open", "x")); st.Code != ok {
			t.Fatalf("open with Redis killed: %v", st)
		}
	}
	resp := s.call(t, &rlsv3.RateLimitRequest{Domain: "fail", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("closed", "x")}})
	if resp.OverallCode != over || header(resp.ResponseHeadersToAdd, "retry-after") != "1" {
		t.Fatalf("closed with Redis killed: %v", resp)
	}
	// local: a bucket of this process's own decides, and still refuses.
	var codes []rlsv3.RateLimitResponse_Code
	for range 4 {
		// Still the hour's window that ends when it ends, not the
		// local bucket's time to refill: what was left of it before the
		// call at most, after it at least, however long the call took.
		before := 3600 - time.Now().Unix()%3600
		st := s.one(t, "fail", desc("local", "y"))
		after := 3600 - time.Now().Unix()%3600
		codes = append(codes, st.Code)
		if got := st.DurationUntilReset.GetSeconds(); got < after || got > before+1 {
			t.Fatalf("local with Redis killed: duration_until_reset %ds, want the window's %d to %ds", got, after, before)
		}
	}
	if codes[0] != ok || codes[3] != over {
		t.Fatalf("local with Redis killed: %v, want OK first and OVER_LIMIT last", codes)
	}
	elapsed := time.Since(start)
	// Nine calls, each bounded by the 100ms deadline (or answered at
	// once by the open breaker): far below a second each even on a busy
	// machine.
	if elapsed > 9*5*time.Second {
		t.Fatalf("nine calls took %v with Redis killed", elapsed)
	}
}

// SIGHUP's Reload reads the descriptor files again: a changed limit
// applies to the next call, and an invalid file keeps the running one.
// A key's window state survives the reload: in the first hour of a UTC
// day the hour's window and the day's start at the same instant, so the
// hit counted before the reload is still in the day's window (as
// envoyproxy/ratelimit's keys, which name the window's start and not its
// length, would count it too).
func TestReloadReadsDescriptorsAgain(t *testing.T) {
	s := serve(t, "", map[string]string{"r.yaml": "domain: r\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 1}\n"})
	awayFromEdge(3600, time.Minute)
	expect(t, "before", s.one(t, "r", desc("k", "a")), ok, 0)
	var carried uint32 // awayFromEdge leaves a minute before the hour, and so the day, ends
	if time.Now().Unix()%86400 < 3600 {
		carried = 1
	}
	write := func(data string) {
		if err := os.WriteFile(filepath.Join(s.dir, "ratelimit", "r.yaml"), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("domain: r\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, requests_per_unit: 5}\n")
	if err := s.g.Reload(); err != nil {
		t.Fatal(err)
	}
	st := s.one(t, "r", desc("k", "a"))
	expect(t, "after", st, ok, 4-carried)
	if st.CurrentLimit.GetUnit() != rlsv3.RateLimitResponse_RateLimit_DAY {
		t.Fatalf("after reload: %v", st)
	}
	write("domain: r\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 5}\n")
	if err := s.g.Reload(); err == nil {
		t.Fatal("an invalid descriptor file reloaded")
	}
	expect(t, "kept", s.one(t, "r", desc("k", "a")), ok, 3-carried)
}

// TestOneAddressCannotTakeTheGRPCListener: an address that opens as many
// idle connections to the gRPC listener as it can holds
// max_connections_per_ip of them, the rest closed at once and counted;
// another address's calls are still answered, where they would fail once
// the first held all of max_connections.
func TestOneAddressCannotTakeTheGRPCListener(t *testing.T) {
	const perIP, tries = 4, 12
	s := serve(t, "server: {max_connections: 8, max_connections_per_ip: 4, read_header_timeout: 1m, read_timeout: 2m}\n", map[string]string{"fail.yaml": failDomain})
	from := func(src string) *net.Dialer {
		return &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 10 * time.Second}
	}
	addr := s.g.RLSAddr().String()
	var idle []net.Conn
	for range tries {
		c, err := from("127.0.0.1").Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		idle = append(idle, c)
	}
	for i, c := range idle[perIP:] { // accepted in the order opened
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
		if n, err := c.Read(make([]byte, 1)); n != 0 || err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("connection %d of 127.0.0.1, past its %d: read %d bytes, %v; want it closed at once", perIP+i+1, perIP, n, err)
		}
	}
	check := func(src string) error {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) { return from(src).DialContext(ctx, "tcp", a) }))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, err = rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "fail", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("open", "x")}})
		return err
	}
	if err := check("127.0.0.2"); err != nil {
		t.Fatalf("127.0.0.2 while 127.0.0.1 holds its connections: %v; want an answer", err)
	}
	if err := check("127.0.0.1"); status.Code(err) != codes.Unavailable {
		t.Fatalf("127.0.0.1 past its bound: %v; want UNAVAILABLE", err)
	}
	_, admin := s.g.Addrs()
	resp, err := http.Get("http://" + admin.String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	metrics, _ := io.ReadAll(resp.Body)
	// At least those closed above; the refused client may have tried
	// again since.
	const series = `sluice_server_rejections_total{listener="envoy_rls",reason="connections_per_ip"} `
	_, v, _ := strings.Cut(string(metrics), series)
	v, _, _ = strings.Cut(v, "\n")
	if n, err := strconv.Atoi(v); err != nil || n < tries-perIP {
		t.Fatalf("%s%q, want at least %d", series, v, tries-perIP)
	}
}
