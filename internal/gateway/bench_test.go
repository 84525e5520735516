package gateway

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"testing"
)

// The gateway against a bare httputil.ReverseProxy to the same upstream,
// over loopback with keep-alive clients in parallel: the throughput that
// the policies, headers and metrics cost. Compare ns/op of the two.

func benchProxy(b *testing.B, front http.Handler) {
	srv := httptest.NewServer(front)
	defer srv.Close()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	b.ReportAllocs()
	b.SetParallelism(8)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			resp, err := client.Get(srv.URL + "/products/42")
			if err != nil {
				b.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				b.Errorf("status %d", resp.StatusCode)
				return
			}
		}
	})
}

func benchUpstream() *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, `{"id":"42","name":"Widget"}`)
	}))
}

func BenchmarkBareReverseProxy(b *testing.B) {
	up := benchUpstream()
	defer up.Close()
	u, _ := url.Parse(up.URL)
	benchProxy(b, &httputil.ReverseProxy{
		Rewrite:   func(pr *httputil.ProxyRequest) { pr.SetURL(u); pr.SetXForwarded() },
		Transport: upstreamTransport,
	})
}

func BenchmarkGateway(b *testing.B) {
	up := benchUpstream()
	defer up.Close()
	_, gw, _ := newGatewayB(b, "upstream: "+up.URL+"\npolicies:\n  - {name: products, match: \"GET /products/\", anonymous: [{rate: 1000000000/s, burst: 1000000000}]}\n")
	benchProxy(b, gw.Config.Handler)
}
