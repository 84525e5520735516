package envoyrls_test

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/internal/testkit/redistest"
)

// TestGoldenFrontDoors holds what each front door of one gateway answers
// for each kind of decision, against real Redis, up and then killed: the
// reverse proxy, forward auth (/v1/authz), the decision API (/v1/check)
// and Envoy's gRPC service. The answers are in
// testdata/frontdoors.golden (-update rewrites it): moving the decision
// core must not change a line. Times are left out (they count from the
// decision), except whether a Retry-After is there.

var update = flag.Bool("update", false, "rewrite testdata/frontdoors.golden")

const goldenPolicies = `trusted_proxies: [127.0.0.1/32]
forwarded_header: x-forwarded-for
policies:
  - name: plain
    match: "GET /plain/"
    anonymous: [{rate: 1/h, burst: 2}]
    authenticated: [{rate: 1/h, burst: 2}]
  - name: shadow
    match: "GET /shadow/"
    mode: shadow
    anonymous: [{rate: 1/h, burst: 1}]
    authenticated: [{rate: 1/h, burst: 1}]
  - name: open
    match: "GET /open/"
    on_error: open
    anonymous: [{rate: 1/h, burst: 2}]
    authenticated: [{rate: 1/h, burst: 2}]
  - name: closed
    match: "GET /closed/"
    on_error: closed
    anonymous: [{rate: 1/h, burst: 2}]
    authenticated: [{rate: 1/h, burst: 2}]
  - name: local
    match: "GET /local/"
    on_error: local
    anonymous: [{rate: 1/h, burst: 2}]
    authenticated: [{rate: 1/h, burst: 2}]
`

const goldenDomain = `domain: golden
descriptors:
  - key: plain
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: open
    rate_limit: {unit: hour, requests_per_unit: 2, on_error: open}
  - key: closed
    rate_limit: {unit: hour, requests_per_unit: 2, on_error: closed}
  - key: local
    rate_limit: {unit: hour, requests_per_unit: 2, on_error: local}
`

func TestGoldenFrontDoors(t *testing.T) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "upstream") }))
	defer upstream.Close()
	srv := redistest.Start(t)
	s := serve(t, "upstream: "+upstream.URL+"\nstore: {type: redis, on_error: local, redis: {url: \""+srv.URL()+"\", timeout: 100ms}}\n"+goldenPolicies,
		map[string]string{"golden.yaml": goldenDomain})
	traffic, _ := s.g.Addrs()
	proxyURL := "http://" + traffic.String()
	decisionURL := "http://" + s.g.DecisionAddr().String()
	awayFromEdge(3600, 2*time.Minute)

	var out strings.Builder
	client := 0 // each case its own client, so that cases share no bucket
	next := func() string { client++; return fmt.Sprintf("192.0.2.%d", client) }
	proxy := func(name, path string, n int, header ...string) {
		ip := next()
		for i := range n {
			h := append([]string{"X-Forwarded-For", ip}, header...)
			if len(header) > 0 && header[0] == "X-Forwarded-For" {
				h = header // the case's own
			}
			fmt.Fprintf(&out, "proxy  %-24s #%d %s\n", name, i+1, httpAnswer(t, "GET", proxyURL+path, "", h...))
		}
	}
	authz := func(name, path string, n int, header ...string) {
		ip := next()
		for i := range n {
			h := append([]string{"X-Forwarded-For", ip, "X-Forwarded-Method", "GET", "X-Forwarded-Uri", path}, header...)
			fmt.Fprintf(&out, "authz  %-24s #%d %s\n", name, i+1, httpAnswer(t, "GET", decisionURL+"/v1/authz", "", h...))
		}
	}
	check := func(name, body string, n int) {
		key := next()
		for i := range n {
			b := strings.ReplaceAll(body, "KEY", key)
			fmt.Fprintf(&out, "check  %-24s #%d %s\n", name, i+1, httpAnswer(t, "POST", decisionURL+"/v1/check", b, "Content-Type", "application/json"))
		}
	}
	envoy := func(name, key string, hits uint32, n int) {
		value := next()
		for i := range n {
			d := desc(key, value)
			req := &rlsv3.RateLimitRequest{Domain: "golden", Descriptors: []*ratelimitv3.RateLimitDescriptor{d}, HitsAddend: hits}
			fmt.Fprintf(&out, "envoy  %-24s #%d %s\n", name, i+1, envoyAnswer(s.call(t, req)))
		}
	}
	doors := func(phase string) {
		fmt.Fprintf(&out, "# %s\n", phase)
		for _, p := range []string{"plain", "shadow", "open", "closed", "local"} {
			proxy(p, "/"+p+"/x", 3)
			authz(p, "/"+p+"/x", 3)
			check(p, `{"policy":"`+p+`","key":"KEY"}`, 3)
			envoy(p, p, 0, 3)
		}
	}
	doors("redis up")
	proxy("invalid: bad client", "/plain/x", 1, "X-Forwarded-For", "not-an-address")
	proxy("invalid: path", "/plain/a;b", 1)
	proxy("unmatched", "/elsewhere", 1)
	authz("invalid: path", "/plain/a;b", 1)
	authz("unmatched", "/elsewhere", 1)
	check("cost exceeds burst", `{"policy":"plain","key":"KEY","cost":5}`, 1)
	check("invalid: negative cost", `{"policy":"plain","key":"KEY","cost":-1}`, 1)
	check("invalid: no key", `{"policy":"plain"}`, 1)
	check("unknown policy", `{"policy":"nope","key":"KEY"}`, 1)
	check("inspect", `{"policy":"plain","key":"KEY","cost":0}`, 1)
	envoy("cost exceeds limit", "plain", 5, 1)
	envoy("unknown descriptor", "nope", 0, 1)

	srv.Kill()
	doors("redis killed")
	check("cost exceeds burst", `{"policy":"plain","key":"KEY","cost":5}`, 1)
	envoy("cost exceeds limit", "plain", 5, 1)

	path := filepath.Join("testdata", "frontdoors.golden")
	if *update {
		if err := os.WriteFile(path, []byte(out.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if out.String() != string(want) {
		t.Errorf("the front doors answer otherwise than testdata/frontdoors.golden (-update accepts a change on purpose):\n--- got\n%s\n--- want\n%s", out.String(), want)
	}
}

// httpAnswer sends one request and describes the answer without times.
func httpAnswer(t *testing.T, method, url, body string, header ...string) string {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		if header[i+1] == "" {
			continue
		}
		req.Header.Add(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var fields map[string]any
	_ = json.Unmarshal(b, &fields)
	var parts []string
	parts = append(parts, fmt.Sprint(resp.StatusCode))
	for _, h := range []string{"Ratelimit-Limit", "Ratelimit-Remaining", "Ratelimit-Policy"} {
		if v := resp.Header.Get(h); v != "" {
			parts = append(parts, h+"="+v)
		}
	}
	if _, ok := resp.Header["Retry-After"]; ok {
		parts = append(parts, "Retry-After")
	}
	if resp.Header.Get("Ratelimit") != "" {
		parts = append(parts, "Ratelimit")
	}
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		v := fields[k]
		switch k {
		case "retry_after_ms", "reset_after_ms", "delay_ms", "message":
			if n, ok := v.(float64); ok {
				v = n > 0
			} else if k == "message" {
				v = "…"
			}
		}
		parts = append(parts, fmt.Sprintf("%s=%v", k, v))
	}
	if fields == nil && len(b) > 0 {
		parts = append(parts, fmt.Sprintf("body=%q", strings.TrimSpace(string(b))))
	}
	return strings.Join(parts, " ")
}

// envoyAnswer describes a response without times.
func envoyAnswer(resp *rlsv3.RateLimitResponse) string {
	var parts []string
	parts = append(parts, resp.OverallCode.String())
	for _, st := range resp.Statuses {
		parts = append(parts, fmt.Sprintf("[%v remaining=%d limit=%v reset=%v]", st.Code, st.LimitRemaining,
			st.CurrentLimit.GetRequestsPerUnit(), st.DurationUntilReset.GetSeconds() > 0))
	}
	var hs []string
	for _, h := range resp.ResponseHeadersToAdd {
		switch strings.ToLower(h.Key) {
		case "ratelimit-limit", "ratelimit-remaining", "ratelimit-policy":
			hs = append(hs, h.Key+"="+h.Value)
		default:
			hs = append(hs, h.Key)
		}
	}
	slices.Sort(hs)
	return strings.Join(append(parts, hs...), " ")
}
