package gateway

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

const benchAuthzPolicies = "trusted_proxies: [127.0.0.1/32]\nforwarded_header: x-forwarded-for\npolicies:\n  - {name: products, match: \"GET /products/\", anonymous: [{rate: 1000000000/s, burst: 1000000000}]}\n"

// BenchmarkForwardAuthVsProxy interleaves a forward-auth check of a
// request with the same request through the gateway's reverse proxy (to
// an upstream on loopback), so that both see the same load, and reports
// the time of each per request and the check's share of the proxied
// request's time.
func BenchmarkForwardAuthVsProxy(b *testing.B) {
	up := benchUpstream()
	defer up.Close()
	g, gw, _ := newGatewayB(b, "upstream: "+up.URL+"\n"+benchAuthzPolicies)
	decision := httptest.NewServer(g.DecisionAPI())
	defer decision.Close()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	one := func(url string, header ...string) time.Duration {
		req, _ := http.NewRequest("GET", url, nil)
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		start := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			b.Error(err)
			return 0
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Errorf("%s: %d", url, resp.StatusCode)
		}
		return time.Since(start)
	}
	var authzNs, proxyNs, n atomic.Int64
	b.SetParallelism(4)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			authzNs.Add(int64(one(decision.URL+"/v1/authz", "X-Forwarded-For", "203.0.113.7", "X-Forwarded-Method", "GET", "X-Forwarded-Uri", "/products/42")))
			proxyNs.Add(int64(one(gw.URL+"/products/42", "X-Forwarded-For", "203.0.113.7")))
			n.Add(1)
		}
	})
	if c := n.Load(); c > 0 {
		b.ReportMetric(float64(authzNs.Load())/float64(c), "authz_ns/req")
		b.ReportMetric(float64(proxyNs.Load())/float64(c), "proxy_ns/req")
		b.ReportMetric(float64(authzNs.Load())/float64(proxyNs.Load()), "authz_share")
	}
}

// BenchmarkForwardAuthHandler is the forward-auth handler alone, without
// the network: what the translation and the decision cost, and allocate.
func BenchmarkForwardAuthHandler(b *testing.B) {
	g, _, _ := newGatewayB(b, benchAuthzPolicies)
	h := g.DecisionAPI()
	req := httptest.NewRequest("GET", "/v1/authz", nil)
	req.RemoteAddr = "127.0.0.1:40000"
	req.Header.Set("X-Forwarded-For", "203.0.113.7")
	method, uri := []string{"GET"}, []string{"/products/42"}
	b.ReportAllocs()
	for b.Loop() {
		// The handler removes these from the request it has spent.
		req.Header["X-Forwarded-Method"], req.Header["X-Forwarded-Uri"] = method, uri
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != 200 {
			b.Fatalf("%d %s", w.Code, w.Body)
		}
	}
}
