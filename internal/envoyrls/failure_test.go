package envoyrls_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/internal/redistest"
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
		codes = append(codes, s.one(t, "fail", desc("local", "y")).Code)
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
