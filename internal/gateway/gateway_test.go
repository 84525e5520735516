package gateway

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit/gatewaytest"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
)

func newGateway(t *testing.T, yaml string) (*Gateway, *httptest.Server, *httptest.Server) {
	return newGatewayB(t, yaml)
}

func newGatewayB(t testing.TB, yaml string) (*Gateway, *httptest.Server, *httptest.Server) {
	t.Helper()
	gw := gatewaytest.Start(t, New, gatewaytest.Write(t, yaml, nil), io.Discard).Handle(t)
	return gw.G, gw.Traffic, gw.Admin
}

// status sends GET url with the headers given as name, value pairs (a name
// given twice is sent twice) and returns the status and body.
func status(t *testing.T, url string, header ...string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestForwardedForToUpstream: the upstream sees the client the gateway
// keyed, never a header a client forged.
func TestForwardedForToUpstream(t *testing.T) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, r.Header.Get("X-Forwarded-For"))
	}))
	defer upstream.Close()
	_, untrusted, _ := newGateway(t, "upstream: "+upstream.URL+"\n")
	if _, got := status(t, untrusted.URL+"/", "X-Forwarded-For", "6.6.6.6"); got != "127.0.0.1" {
		t.Errorf("untrusted peer: upstream saw X-Forwarded-For %q, want 127.0.0.1", got)
	}
	_, trusted, _ := newGateway(t, "upstream: "+upstream.URL+"\ntrusted_proxies: [127.0.0.1]\nforwarded_header: x-forwarded-for\n")
	if _, got := status(t, trusted.URL+"/", "X-Forwarded-For", "203.0.113.9"); got != "203.0.113.9, 127.0.0.1" {
		t.Errorf("trusted peer: upstream saw X-Forwarded-For %q", got)
	}
}

// TestRedisSharedAcrossGateways runs two gateways on one real Redis: a
// client that spreads its requests over both still gets one limit. When
// Redis dies, on_error decides (through the resilient store): open serves,
// closed answers 503, and /readyz follows.
func TestRedisSharedAcrossGateways(t *testing.T) {
	srv := redistest.Start(t)
	conf := func(onError string) string {
		return fmt.Sprintf(`store:
  type: redis
  redis: {url: "redis://%s/0", timeout: 200ms}
  on_error: %s
policies:
  - {name: api, match: /, anonymous: [{rate: 1/h, burst: 4}]}
  - {name: other, match: /y, anonymous: [{rate: 1/h, burst: 4}]}
  - {name: strict, match: /z, on_error: closed, anonymous: [{rate: 1/h, burst: 4}]}
`, srv.Addr(), onError)
	}
	_, a, adminA := newGateway(t, conf("open"))
	_, b, adminB := newGateway(t, conf("closed"))
	var codes []int
	for i := range 6 {
		url := a.URL
		if i%2 == 1 {
			url = b.URL
		}
		code, _ := status(t, url+"/x")
		codes = append(codes, code)
	}
	// The first call to /x had no upstream: 404 is the pass.
	if fmt.Sprint(codes) != "[404 404 404 404 429 429]" {
		t.Fatalf("statuses over two gateways %v, want four passes then 429", codes)
	}
	if code, _ := status(t, adminA.URL+"/readyz"); code != 200 {
		t.Fatalf("readyz with Redis up: %d", code)
	}
	srv.Kill()
	// /x stays denied: a denial remembered until its retry time is a fact
	// that an outage does not change. /y was never denied.
	if code, _ := status(t, a.URL+"/x"); code != 429 {
		t.Errorf("on_error open, Redis down, a denied caller: %d, want 429", code)
	}
	if code, _ := status(t, a.URL+"/y"); code != 404 {
		t.Errorf("on_error open, Redis down: %d, want the request served", code)
	}
	if code, _ := status(t, a.URL+"/z"); code != 503 {
		t.Errorf("a policy's own on_error: closed, Redis down: %d, want 503", code)
	}
	if code, body := status(t, b.URL+"/y"); code != 503 || !strings.Contains(body, "rate_limiter_unavailable") {
		t.Errorf("on_error closed, Redis down: %d %s, want 503", code, body)
	}
	if code, _ := status(t, adminA.URL+"/readyz"); code != 200 {
		t.Errorf("readyz, Redis down, open: %d, want 200", code)
	}
	if code, _ := status(t, adminB.URL+"/readyz"); code != 503 {
		t.Errorf("readyz, Redis down, closed: %d, want 503", code)
	}
}

// TestLocalFallback: with on_error local a dead Redis is replaced by a
// local bucket of the rate divided by the number of gateways.
func TestLocalFallback(t *testing.T) {
	srv := redistest.Start(t)
	_, gw, _ := newGateway(t, fmt.Sprintf(`store:
  type: redis
  redis: {url: "redis://%s/0", timeout: 200ms}
  on_error: local
  instances: 2
policies:
  - {name: api, match: /, anonymous: [{rate: 1/h, burst: 6}]}
`, srv.Addr()))
	srv.Kill()
	var codes []int
	for range 4 {
		code, _ := status(t, gw.URL+"/x")
		codes = append(codes, code)
	}
	if fmt.Sprint(codes) != "[404 404 404 429]" {
		t.Fatalf("local fallback %v, want three passes (6 / 2 gateways) then 429", codes)
	}
}

func scrape(t *testing.T, admin string) string {
	t.Helper()
	_, body := status(t, admin+"/metrics")
	return body
}

// TestShadowInMetrics: a shadow policy serves everything and /metrics
// counts what it would have rejected.
func TestShadowInMetrics(t *testing.T) {
	_, gw, admin := newGateway(t, "policies:\n  - {name: trial, match: /, mode: shadow, anonymous: [{rate: 1/h, burst: 2}]}\n")
	for i := range 5 {
		if code, _ := status(t, gw.URL+"/x"); code != 404 { // no upstream: 404 is the pass
			t.Fatalf("shadow request %d: %d", i, code)
		}
	}
	m := scrape(t, admin.URL)
	for _, want := range []string{`sluice_decisions_total{outcome="shadow_denied",policy="trial"} 3`, `sluice_decisions_total{outcome="allowed",policy="trial"} 2`, `sluice_decisions_total{outcome="denied",policy="trial"} 0`} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// TestPacedThroughTheGateway: with max_delay the requests beyond the burst
// really wait and are served, not rejected.
//
// The four requests go at once, so each is decided before the previous
// one's hold ends: the k-th is delayed unless the machine kept it from
// being decided for k intervals (200 ms each), where requests one after
// the other at 50/s were counted as allowed whenever a round trip took
// longer than 20 ms.
func TestPacedThroughTheGateway(t *testing.T) {
	const n, interval = 4, 200 * time.Millisecond // rate 5/s
	_, gw, admin := newGateway(t, "policies:\n  - {name: paced, match: /, max_delay: 2s, anonymous: [{rate: 5/s, burst: 1}]}\n")
	codes := make([]int, n)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range n {
		wg.Go(func() {
			resp, err := http.Get(gw.URL + "/x")
			if err != nil {
				t.Errorf("paced request %d: %v", i, err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			codes[i] = resp.StatusCode
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	for i, code := range codes {
		if code != 404 { // no upstream: 404 is the pass
			t.Fatalf("paced request %d: %d, want it served", i, code)
		}
	}
	// The last one was held until its turn: n-1 intervals after the first.
	if elapsed < (n-1)*interval-10*time.Millisecond {
		t.Errorf("%d paced requests served in %v, want at least %v: they were not held", n, elapsed, (n-1)*interval)
	}
	if m := scrape(t, admin.URL); !strings.Contains(m, fmt.Sprintf(`sluice_decisions_total{outcome="delayed",policy="paced"} %d`, n-1)) {
		t.Errorf("/metrics does not count %d delayed requests:\n%s", n-1, grepLines(m, "sluice_decisions_total"))
	}
}

// TestCostTrailerThroughProxy: a streaming upstream reports its cost in a
// trailer; the gateway charges it and the client never sees it.
func TestCostTrailerThroughProxy(t *testing.T) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "X-Sluice-Cost")
		io.WriteString(w, "token token token")
		w.(http.Flusher).Flush()
		w.Header().Set("X-Sluice-Cost", "40")
	}))
	defer upstream.Close()
	_, gw, _ := newGateway(t, "upstream: "+upstream.URL+"\npolicies:\n  - {name: ai, match: /, cost_header: X-Sluice-Cost, anonymous: [{rate: 1/h, burst: 100}]}\n")
	resp, err := http.Get(gw.URL + "/complete")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if v := resp.Trailer.Get("X-Sluice-Cost"); v != "" {
		t.Errorf("cost trailer reached the client: %q", v)
	}
	resp, err = http.Get(gw.URL + "/complete")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := resp.Header.Get("RateLimit-Remaining"); got != "59" {
		t.Fatalf("after a streamed response that cost 40: remaining %s, want 59", got)
	}
}

// TestReloadKeepsBuckets: a reload that keeps a policy's name and number of
// rules keeps its callers' state; the store is not rebuilt.
func TestReloadKeepsBuckets(t *testing.T) {
	policy := func(burst int) string {
		return fmt.Sprintf("policies:\n  - {name: api, match: /, anonymous: [{rate: 1/h, burst: %d}]}\n", burst)
	}
	gw := gatewaytest.Start(t, New, gatewaytest.Write(t, policy(3), nil), io.Discard).Handle(t)
	g, srv, path := gw.G, gw.Traffic, gw.Path
	write := func(burst int) {
		if err := os.WriteFile(path, []byte(policy(burst)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		status(t, srv.URL+"/x")
	}
	write(5)
	if err := g.Reload(); err != nil {
		t.Fatal(err)
	}
	// The bucket is still empty: it refills towards the new burst of 5 at
	// the rate, it does not start full.
	if code, _ := status(t, srv.URL+"/x"); code != 429 {
		t.Fatalf("after reload: %d, want 429 from the kept, empty bucket", code)
	}
	if err := os.WriteFile(path, []byte("policies: [\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := g.Reload(); err == nil {
		t.Fatal("a broken file reloaded")
	}
	if g.Config().Policies[0].Anonymous[0].Burst != 5 {
		t.Fatal("the running configuration was replaced by a broken one")
	}
}

// TestReloadRefusesDuplicateKey: a reload whose api_keys_file lists a key
// twice is refused, naming both lines, and the running keys stay: the key's
// caller keeps its identity and its authenticated limit.
func TestReloadRefusesDuplicateKey(t *testing.T) {
	dir := t.TempDir()
	keys := dir + "/keys.txt"
	const digest = "2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae" // sha256("foo")
	if err := os.WriteFile(keys, []byte(digest+" alice\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := serve(t, dir, "identity: {api_keys_file: keys.txt}\npolicies:\n  - {name: api, match: /, anonymous: [{rate: 1/h, burst: 1}], authenticated: [{rate: 1/h, burst: 3}]}\n")
	if err := os.WriteFile(keys, []byte(digest+" alice\n# the same key again, for someone else\n"+digest+" mallory\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := s.g.Reload()
	if err == nil || !strings.Contains(err.Error(), keys+":3: the same key (SHA-256 digest) as line 1") {
		t.Fatalf("reload: %v; want the duplicate named by both lines", err)
	}
	// The running keys are alice's: the key still buys the burst of 3.
	for i := range 4 {
		want := map[bool]int{true: 404, false: 429}[i < 3]
		if code, _ := status(t, s.traffic+"/x", "X-Api-Key", "foo"); code != want {
			t.Fatalf("request %d with the key after the refused reload: %d, want %d", i+1, code, want)
		}
	}
}

// The proxy copies bodies through pooled buffers: concurrent large
// responses, each different, must still arrive whole and unmixed.
func TestProxyBuffersAreNotShared(t *testing.T) {
	body := func(n int) []byte {
		b := make([]byte, 100_000+n*1013) // several 32 KiB buffers each, never a multiple
		for i := range b {
			b[i] = byte(n*31 + i*7)
		}
		return b
	}
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var n int
		fmt.Sscan(strings.TrimPrefix(r.URL.Path, "/"), &n)
		w.Write(body(n))
	}))
	defer upstream.Close()
	_, traffic, _ := newGateway(t, "upstream: "+upstream.URL+"\n")
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				n := g*20 + i
				resp, err := http.Get(fmt.Sprintf("%s/%d", traffic.URL, n))
				if err != nil {
					t.Error(err)
					return
				}
				got, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil || !bytes.Equal(got, body(n)) {
					t.Errorf("response %d: %d bytes, err %v: not the upstream's body", n, len(got), err)
					return
				}
			}
		}()
	}
	wg.Wait()
}
