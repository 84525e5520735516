package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"sync"
	"time"
)

// UpstreamHandler is the small upstream every gateway run proxies to: a
// fixed 2-byte body, so that what is measured is the proxy, not the
// backend.
func UpstreamHandler() http.Handler {
	body := []byte("ok")
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Write(body)
	})
}

// BareProxy is the baseline: net/http/httputil's ReverseProxy and nothing
// else in front of upstream. It is given a pool of idle connections to the
// upstream as large as sluice serve's (http.DefaultTransport keeps 2 a
// host, and 32 clients would then open a connection per request), so that
// the difference measured is sluice's own work. With pooled, it also
// reuses its 32 KiB copy buffers through a BufferPool, as sluice serve
// does, instead of allocating one per request: the baseline for what
// sluice's limiting alone costs.
func BareProxy(upstream *url.URL, pooled bool) http.Handler {
	p := httputil.NewSingleHostReverseProxy(upstream)
	p.Transport = &http.Transport{
		MaxIdleConns:        1024,
		MaxIdleConnsPerHost: 512,
		IdleConnTimeout:     90 * time.Second,
	}
	if pooled {
		p.BufferPool = &bufferPool{}
	}
	return p
}

type bufferPool struct{ p sync.Pool }

func (b *bufferPool) Get() []byte {
	if buf, ok := b.p.Get().(*[]byte); ok {
		return *buf
	}
	return make([]byte, 32<<10)
}

func (b *bufferPool) Put(buf []byte) { b.p.Put(&buf) }

// LoadResult is what one load run measured.
type LoadResult struct {
	Requests int64         // answered with 2xx
	Failed   int64         // transport errors and non-2xx answers
	Elapsed  time.Duration // of the timed part
	P50, P99 time.Duration
}

// RPS is the rate of successful requests.
func (r LoadResult) RPS() float64 { return float64(r.Requests) / r.Elapsed.Seconds() }

// Load sends GET target from concurrency keep-alive clients for warmup,
// then for duration, and stops by itself: after duration, or after
// maxRequests, whichever comes first. Only loopback targets are accepted.
func Load(ctx context.Context, target string, concurrency int, warmup, duration time.Duration, maxRequests int64) (LoadResult, error) {
	u, err := url.Parse(target)
	if err != nil {
		return LoadResult{}, err
	}
	if h := u.Hostname(); h != "127.0.0.1" && h != "localhost" && h != "::1" {
		return LoadResult{}, fmt.Errorf("bench: load target %s is not on loopback", target)
	}
	tr := &http.Transport{
		MaxIdleConns:        concurrency,
		MaxIdleConnsPerHost: concurrency,
		MaxConnsPerHost:     concurrency,
		DisableCompression:  true,
		IdleConnTimeout:     time.Minute,
	}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}

	var (
		mu        sync.Mutex
		latencies []int64
		res       LoadResult
		wg        sync.WaitGroup
	)
	start := time.Now()
	measureFrom := start.Add(warmup)
	end := measureFrom.Add(duration)
	perWorker := maxRequests / int64(concurrency)
	for range concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lat := make([]int64, 0, 1<<16)
			var ok, failed int64
			for n := int64(0); n < perWorker && ctx.Err() == nil; n++ {
				t := time.Now()
				if t.After(end) {
					break
				}
				good := get(ctx, client, target)
				d := time.Since(t)
				if t.Before(measureFrom) {
					continue
				}
				if !good {
					failed++
					continue
				}
				ok++
				lat = append(lat, int64(d))
			}
			mu.Lock()
			res.Requests += ok
			res.Failed += failed
			latencies = append(latencies, lat...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	res.Elapsed = time.Since(measureFrom)
	if res.Elapsed > duration {
		res.Elapsed = duration // workers stop at end; the last answers arrive a little later
	}
	slices.Sort(latencies)
	if n := len(latencies); n > 0 {
		res.P50 = time.Duration(latencies[n/2])
		res.P99 = time.Duration(latencies[(n-1)*99/100])
	}
	return res, nil
}

func get(ctx context.Context, client *http.Client, target string) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return false
	}
	resp, err := client.Do(req)
	if err != nil {
		return false
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode/100 == 2
}

// GatewayConfig is a sluice serve configuration for the gateway benchmark:
// the in-memory store, one policy over every path with a limit no run
// reaches, so every request is checked and passed, as most are.
func GatewayConfig(listen, admin, upstream string) string {
	return fmt.Sprintf(`listen: %s
admin_listen: %s
decision_api: {listen: 127.0.0.1:0}
upstream: %s
policies:
  - name: bench
    match: "GET /"
    anonymous: [{rate: 100000/s, burst: 1000000000}]
`, listen, admin, upstream)
}
