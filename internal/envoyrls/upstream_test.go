package envoyrls_test

import (
	"encoding/json"
	"strconv"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/internal/testkit/redistest"
)

// upstreamDomain uses what envoyproxy/ratelimit's main added in 2026:
// a '*' inside values, metadata: on descriptors, quota mode (its
// example's service_1 and service_2).
const upstreamDomain = `domain: up
descriptors:
  - key: mid
    value: a*z
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: multi
    value: x*y*z*
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: shared
    value: s*s
    share_threshold: true
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: service
    value: service_1
    quota_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
    metadata:
      service_with_quota: {name: service_1}
      first: one
  - key: service
    value: service_2
    quota_mode: true
    rate_limit: {unit: hour, requests_per_unit: 2}
    metadata:
      service_with_quota: {name: service_2, zone: b}
      first: two
      list: [1, true, null, "x"]
  - key: plain
    rate_limit: {unit: hour, requests_per_unit: 5}
`

// A '*' anywhere in a value stands for any run of characters, none
// included, and a value holding several matches them in order: as
// envoyproxy/ratelimit's main matches them since March 2026.
func TestMiddleWildcards(t *testing.T) {
	s := serve(t, "", map[string]string{"up.yaml": upstreamDomain})
	awayFromEdge(3600, time.Minute)
	for _, v := range []string{"az", "abz", "a*z", "a-long-z"} {
		expect(t, "mid "+v, s.one(t, "up", desc("mid", v)), ok, 0) // each value its own bucket
	}
	for _, v := range []string{"a", "z", "za", "azb", "baz"} {
		if st := s.one(t, "up", desc("mid", v)); st.CurrentLimit != nil {
			t.Fatalf("mid %q matched: %v", v, st)
		}
	}
	for _, v := range []string{"xyz", "x1y2z3", "xyzxyz"} {
		expect(t, "multi "+v, s.one(t, "up", desc("multi", v)), ok, 0)
	}
	for _, v := range []string{"xzy", "yxz", "xy"} {
		if st := s.one(t, "up", desc("multi", v)); st.CurrentLimit != nil {
			t.Fatalf("multi %q matched: %v", v, st)
		}
	}
	// share_threshold with a middle '*': one bucket for every value.
	expect(t, "shared 1", s.one(t, "up", desc("shared", "s1s")), ok, 1)
	expect(t, "shared 2", s.one(t, "up", desc("shared", "s22s")), ok, 0)
	expect(t, "shared 3", s.one(t, "up", desc("shared", "ss")), over, 0)
}

// Quota mode as envoyproxy/ratelimit's main answers it (its
// integration-test/scripts/quota.sh): a call of two quota limits is OK
// while one of them passes, and the third call, with both over, is
// refused.
func TestQuotaModeRefusesWhenEveryQuotaIsOver(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		testQuotaMode(t, serve(t, "", map[string]string{"up.yaml": upstreamDomain}))
	})
	t.Run("redis", func(t *testing.T) {
		srv := redistest.Start(t)
		testQuotaMode(t, serve(t, "store: {type: redis, redis: {url: \""+srv.URL()+"\", timeout: 2s}}\n", map[string]string{"up.yaml": upstreamDomain}))
	})
}

func testQuotaMode(t *testing.T, s *served) {
	awayFromEdge(3600, time.Minute)
	req := &rlsv3.RateLimitRequest{Domain: "up", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("service", "service_1"), desc("service", "service_2")}}
	for i, want := range []rlsv3.RateLimitResponse_Code{ok, ok, over} {
		if resp := s.call(t, req); resp.OverallCode != want {
			t.Fatalf("call %d: %v, want %v", i+1, resp, want)
		}
	}
	// Over, a quota limit resets when its window ends, as any fixed
	// window does, however far over a call takes it.
	req.HitsAddend = 5
	resp := s.call(t, req)
	for i, st := range resp.Statuses {
		if left := 3600 - time.Now().Unix()%3600; st.Code != over || st.DurationUntilReset.GetSeconds() > left+1 || st.DurationUntilReset.GetSeconds() < left-1 {
			t.Fatalf("status %d: %v, want OVER_LIMIT resetting in the %d s left in the hour", i, st, left)
		}
	}
	// A limit outside quota mode that passes does not rescue them.
	mixed := &rlsv3.RateLimitRequest{Domain: "up", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("service", "service_1"), desc("plain", "p")}}
	if resp := s.call(t, mixed); resp.OverallCode != over || resp.Statuses[1].Code != ok {
		t.Fatalf("quota over, plain ok: %v", resp)
	}
}

// With response_dynamic_metadata, every answer carries the domain, the
// descriptors and, merged, the metadata: of the limits that passed (the
// first value of a name wins, mappings merge); a limit over drops out.
// The configuration's metadata is not changed by merging.
func TestDynamicMetadata(t *testing.T) {
	s := serve(t, "", map[string]string{"up.yaml": upstreamDomain})
	t.Run("off by default", func(t *testing.T) {
		if m := s.call(t, &rlsv3.RateLimitRequest{Domain: "up", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("plain", "x")}}).DynamicMetadata; m != nil {
			t.Fatalf("dynamic metadata without response_dynamic_metadata: %v", m)
		}
	})
	s = serveWith(t, "response_dynamic_metadata: true", upstreamDomain)
	awayFromEdge(3600, time.Minute)
	two := func(hits uint32) map[string]any {
		o := desc("service", "service_1")
		o.HitsAddend = wrapperspb.UInt64(1)
		resp := s.call(t, &rlsv3.RateLimitRequest{Domain: "up", HitsAddend: hits, Descriptors: []*ratelimitv3.RateLimitDescriptor{o, desc("service", "service_2"), desc("none", "x")}})
		return resp.DynamicMetadata.AsMap()
	}
	got := jsonOf(t, two(0))
	want := `{"descriptors":[{"entries":["service=service_1"],"hitsAddend":1},{"entries":["service=service_2"]},{"entries":["none=x"]}],"domain":"up","metadata":{"first":"one","list":[1,true,null,"x"],"service_with_quota":{"name":"service_1","zone":"b"}}}`
	if got != want {
		t.Fatalf("both passed:\n got %s\nwant %s", got, want)
	}
	// service_1 is now over: only service_2's metadata.
	got = jsonOf(t, two(0))
	want = `{"descriptors":[{"entries":["service=service_1"],"hitsAddend":1},{"entries":["service=service_2"]},{"entries":["none=x"]}],"domain":"up","metadata":{"first":"two","list":[1,true,null,"x"],"service_with_quota":{"name":"service_2","zone":"b"}}}`
	if got != want {
		t.Fatalf("service_1 over:\n got %s\nwant %s", got, want)
	}
	// Both over: no metadata; the call's hits_addend is there.
	got = jsonOf(t, two(5))
	want = `{"descriptors":[{"entries":["service=service_1"],"hitsAddend":1},{"entries":["service=service_2"]},{"entries":["none=x"]}],"domain":"up","hitsAddend":5}`
	if got != want {
		t.Fatalf("both over:\n got %s\nwant %s", got, want)
	}
}

func jsonOf(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// serveWith serves files with the envoy_rls settings given (a flow
// mapping's entries).
func serveWith(t *testing.T, settings, domain string) *served {
	t.Helper()
	return serveSection(t, "envoy_rls: {listen: 127.0.0.1:0, config_dir: ratelimit, "+settings+"}\n", map[string]string{"d.yaml": domain})
}

// A descriptor that carries its own limit (Envoy's descriptor limit
// override) is held to it in a domain that has a file, even when nothing
// in the file matches it, as envoyproxy/ratelimit does; in a domain
// without a file it gets no limit.
func TestLimitOverride(t *testing.T) {
	s := serve(t, "", map[string]string{"up.yaml": upstreamDomain})
	awayFromEdge(3600, time.Minute)
	lim := func(d *ratelimitv3.RateLimitDescriptor, n uint32) *ratelimitv3.RateLimitDescriptor {
		d.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: n, Unit: typev3.RateLimitUnit_HOUR}
		return d
	}
	for i, want := range []struct {
		code      rlsv3.RateLimitResponse_Code
		remaining uint32
	}{{ok, 1}, {ok, 0}, {over, 0}, {over, 0}} {
		st := s.one(t, "up", lim(desc("unmatched", "a"), 2))
		expect(t, "unmatched call "+strconv.Itoa(i+1), st, want.code, want.remaining)
		if st.CurrentLimit.GetRequestsPerUnit() != 2 || st.CurrentLimit.GetUnit() != rlsv3.RateLimitResponse_RateLimit_HOUR || st.DurationUntilReset == nil {
			t.Fatalf("unmatched: %v", st)
		}
	}
	// A matched descriptor takes the override over the file's limit.
	expect(t, "plain, overridden", s.one(t, "up", lim(desc("plain", "p"), 1)), ok, 0)
	expect(t, "plain, overridden, 2nd", s.one(t, "up", lim(desc("plain", "p"), 1)), over, 0)
	if st := s.one(t, "nodomain", lim(desc("unmatched", "a"), 0)); st.CurrentLimit != nil || st.Code != ok {
		t.Fatalf("unknown domain: %v", st)
	}
}

// response_headers: envoyproxy adds envoyproxy/ratelimit's three headers,
// under the names configured, and their reset counts the seconds until
// the window ends; sluice's own X-RateLimit-Reset counts seconds too on
// this front door.
func TestResponseHeaders(t *testing.T) {
	s := serveWith(t, "response_headers: envoyproxy, reset_header: X-Reset", upstreamDomain)
	awayFromEdge(3600, time.Minute)
	resp := s.call(t, &rlsv3.RateLimitRequest{Domain: "up", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("plain", "h"), desc("mid", "aqz")}})
	h := resp.ResponseHeadersToAdd
	if len(h) != 3 || header(h, "RateLimit-Limit") != "1" || header(h, "RateLimit-Remaining") != "0" {
		t.Fatalf("headers %v", h)
	}
	reset, err := strconv.ParseInt(header(h, "X-Reset"), 10, 64)
	if left := 3600 - time.Now().Unix()%3600; err != nil || reset < left-1 || reset > left+1 {
		t.Fatalf("X-Reset %q, want the %d seconds left in the hour", header(h, "X-Reset"), left)
	}
	s = serveSection(t, "x_ratelimit_headers: true\nenvoy_rls: {listen: 127.0.0.1:0, config_dir: ratelimit}\n", map[string]string{"d.yaml": upstreamDomain})
	resp = s.call(t, &rlsv3.RateLimitRequest{Domain: "up", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("plain", "h")}})
	xr, err := strconv.ParseInt(header(resp.ResponseHeadersToAdd, "x-ratelimit-reset"), 10, 64)
	if left := 3600 - time.Now().Unix()%3600; err != nil || xr < left-1 || xr > left+1 {
		t.Fatalf("x-ratelimit-reset %q, want the %d seconds left in the hour (%v)", header(resp.ResponseHeadersToAdd, "x-ratelimit-reset"), left, resp.ResponseHeadersToAdd)
	}
	s = serveWith(t, "response_headers: none", upstreamDomain)
	if h := s.call(t, &rlsv3.RateLimitRequest{Domain: "up", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("plain", "h")}}).ResponseHeadersToAdd; len(h) != 0 {
		t.Fatalf("response_headers: none: %v", h)
	}
}

// Lists of entries that join to the same text are two buckets in sluice,
// where envoyproxy/ratelimit names one counter for both by joining keys
// and values with '_' (x=y_z and x_y=z are both "x_y_z"; here
// a=x_b_y, b=z and a=x, b=y_b_z are both "a_x_b_y_b_z"; docs/envoy.md,
// What differs): a client choosing its values cannot spend another's
// limit.
func TestUnderscoreKeysKeepTheirBuckets(t *testing.T) {
	s := serve(t, "", map[string]string{"u.yaml": `domain: u
descriptors:
  - key: a
    descriptors:
      - key: b
        rate_limit: {unit: hour, requests_per_unit: 1}
`})
	awayFromEdge(3600, time.Minute)
	expect(t, "a=x_b_y, b=z", s.one(t, "u", desc("a", "x_b_y", "b", "z")), ok, 0)
	expect(t, "a=x, b=y_b_z", s.one(t, "u", desc("a", "x", "b", "y_b_z")), ok, 0)
	expect(t, "a=x_b_y, b=z again", s.one(t, "u", desc("a", "x_b_y", "b", "z")), over, 0)
}
