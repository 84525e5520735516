package gateway

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync/atomic"
	"testing"
	"time"
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

// BenchmarkGatewayTracing is BenchmarkGateway with tracing on, every
// request sampled and its four spans exported over OTLP/HTTP to a receiver
// in the same process: the cost of tracing when it is on (off, the
// gateway's tracer is nil and BenchmarkGateway is the figure).
func BenchmarkGatewayTracing(b *testing.B) {
	startReceiver(b, "http/protobuf")
	up := benchUpstream()
	defer up.Close()
	_, gw, _ := newGatewayB(b, "upstream: "+up.URL+"\npolicies:\n  - {name: products, match: \"GET /products/\", anonymous: [{rate: 1000000000/s, burst: 1000000000}]}\n")
	benchProxy(b, gw.Config.Handler)
}

// BenchmarkGatewayVsBare interleaves requests to the gateway and to a bare
// ReverseProxy in front of the same upstream, so that both see the same
// machine load, and reports the gateway's throughput as a share of the bare
// proxy's (bare_ns / gateway_ns; the target is ≥ 0.8).
func BenchmarkGatewayVsBare(b *testing.B) {
	up := benchUpstream()
	defer up.Close()
	u, _ := url.Parse(up.URL)
	bare := httptest.NewServer(&httputil.ReverseProxy{
		Rewrite:   func(pr *httputil.ProxyRequest) { pr.SetURL(u); pr.SetXForwarded() },
		Transport: upstreamTransport,
	})
	defer bare.Close()
	_, gw, _ := newGatewayB(b, "upstream: "+up.URL+"\npolicies:\n  - {name: products, match: \"GET /products/\", anonymous: [{rate: 1000000000/s, burst: 1000000000}]}\n")
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	var bareNs, gwNs atomic.Int64
	one := func(base string) time.Duration {
		start := time.Now()
		resp, err := client.Get(base + "/products/42")
		if err != nil {
			b.Error(err)
			return 0
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return time.Since(start)
	}
	b.SetParallelism(4)
	b.RunParallel(func(pb *testing.PB) {
		for i := 0; pb.Next(); i++ {
			if i%2 == 0 {
				bareNs.Add(int64(one(bare.URL)))
				gwNs.Add(int64(one(gw.URL)))
			} else {
				gwNs.Add(int64(one(gw.URL)))
				bareNs.Add(int64(one(bare.URL)))
			}
		}
	})
	if g := gwNs.Load(); g > 0 {
		b.ReportMetric(float64(bareNs.Load())/float64(g), "throughput_share")
	}
}
