package gateway

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/dunglas/httpsfv"
)

// TestUpstreamRateLimitHeadersReplaced: behind the gateway, an upstream
// that sends its own RateLimit fields (legacy, draft and X-) never gets
// them joined with sluice's; every response's fields parse as structured
// fields, RateLimit-Policy is the same on every response, and every 429
// says one number in t, RateLimit-Reset and Retry-After.
func TestUpstreamRateLimitHeadersReplaced(t *testing.T) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		for k, v := range map[string]string{
			"RateLimit-Limit": "1000", "RateLimit-Remaining": "999", "RateLimit-Reset": "1",
			"RateLimit-Policy": `"upstream";q=1000;w=1`, "RateLimit": `"upstream";r=999;t=1`,
			"X-RateLimit-Limit": "1000", "X-RateLimit-Remaining": "999", "X-RateLimit-Reset": "1",
		} {
			h.Set(k, v)
		}
		w.(http.Flusher).Flush() // a streaming upstream: the header goes out first
		io.WriteString(w, "ok")
	}))
	defer upstream.Close()
	_, traffic, _ := newGateway(t, `upstream: `+upstream.URL+`
x_ratelimit_headers: true
policies:
  - name: products
    match: "GET /products/"
    anonymous: [{rate: 1/h, burst: 3}, {rate: 100/d, burst: 5}]
`)
	var policy string
	denied := 0
	for i := range 8 {
		resp, err := http.Get(traffic.URL + "/products/1")
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		h := resp.Header
		for _, k := range []string{"RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset", "RateLimit-Policy", "RateLimit", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"} {
			if v := h.Values(k); len(v) != 1 {
				t.Fatalf("response %d: %s = %q, want one value, sluice's", i, k, v)
			}
		}
		if h.Get("RateLimit-Limit") != "3" || h.Get("X-RateLimit-Limit") != "3" {
			t.Fatalf("response %d: the upstream's limit got through: %v", i, h)
		}
		if _, err := httpsfv.UnmarshalList(h.Values("RateLimit-Policy")); err != nil {
			t.Fatalf("RateLimit-Policy %q: %v", h.Get("RateLimit-Policy"), err)
		}
		rl, err := httpsfv.UnmarshalList(h.Values("RateLimit"))
		if err != nil || len(rl) != 1 {
			t.Fatalf("RateLimit %q: %v", h.Get("RateLimit"), err)
		}
		if policy == "" {
			policy = h.Get("RateLimit-Policy")
		}
		if got := h.Get("RateLimit-Policy"); got != policy || got != `"products";q=3;w=10800, "products-1";q=5;w=4320` {
			t.Fatalf("response %d: RateLimit-Policy %q (first %q)", i, got, policy)
		}
		if resp.StatusCode != http.StatusTooManyRequests {
			continue
		}
		denied++
		tv, _ := rl[0].(httpsfv.Item).Params.Get("t")
		ra := h.Get("Retry-After")
		if strconv.FormatInt(tv.(int64), 10) != ra || h.Get("RateLimit-Reset") != ra || ra == "" {
			t.Fatalf("429: t=%v, RateLimit-Reset %s, Retry-After %s: want one number", tv, h.Get("RateLimit-Reset"), ra)
		}
	}
	if denied != 5 {
		t.Fatalf("%d of 8 denied, want 5 (burst 3)", denied)
	}
}
