package rlsstats

import (
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/statsd_exporter/pkg/event"

	"github.com/sluicehq/sluice/config"
)

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s, %v", url, resp.Status, err)
	}
	return string(b)
}

// TestPrometheusServesAndCloses: with Prometheus the stats are served,
// under the default mapping's names, at Path (only there), the response
// time scaled to seconds (or not, ResponseTimeMillis); Close serves the
// last counts' flush, then closes the listener.
func TestPrometheusServesAndCloses(t *testing.T) {
	for _, millis := range []bool{false, true} {
		st, err := New(config.Statsd{FlushInterval: time.Hour, NearLimitRatio: 0.8,
			Prometheus: &config.Prometheus{Addr: "127.0.0.1:0", Path: "/m", ResponseTimeMillis: millis}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		addr := st.PrometheusAddr().String()
		l := st.ForKey("d.k_v")
		st.Record(l, 3, 2, 3, true, false)
		st.ForMethod("/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit").Called(1500 * time.Millisecond)
		st.Flush()
		body := get(t, "http://"+addr+"/m")
		for _, want := range []string{
			`ratelimit_service_rate_limit_over_limit{domain="d",key1="k_v"} 3`,
			`ratelimit_service_total_requests{grpc_method="ShouldRateLimit"} 1`,
		} {
			if !strings.Contains(body, want+"\n") {
				t.Errorf("no %s in:\n%s", want, body)
			}
		}
		// 1500 ms: in the 2.5 s bucket (and not the 1 s one) as seconds;
		// past every bucket as milliseconds.
		want := `ratelimit_service_response_time_seconds_bucket{grpc_method="ShouldRateLimit",le="2.5"} 1`
		if millis {
			want = `ratelimit_service_response_time_seconds_bucket{grpc_method="ShouldRateLimit",le="10"} 0`
		}
		if !strings.Contains(body, want+"\n") {
			t.Errorf("millis %v: no %s in:\n%s", millis, want, body)
		}
		if resp, err := http.Get("http://" + addr + "/metrics"); err != nil || resp.StatusCode != http.StatusNotFound {
			t.Errorf("/metrics beside Path /m: %v, %v; want 404", resp, err)
		}
		st.Close()
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			t.Errorf("%s still accepts after Close", addr)
		}
		st.ForKey("d.k_v").totalHits.Inc() // after Close: dropped, no panic
		st.Flush()
	}
}

// TestPrometheusRefuses: a mapping file that does not load and an address
// taken are errors that name their variables.
func TestPrometheusRefuses(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("mappings:\n- match: a.b_*\n  name: x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for _, tc := range []struct {
		p    config.Prometheus
		want string
	}{
		{config.Prometheus{Addr: "127.0.0.1:0", Path: "/metrics", MapperYAML: bad}, "PROMETHEUS_MAPPER_YAML=" + `"` + bad + `"`},
		{config.Prometheus{Addr: "127.0.0.1:0", Path: "/metrics", MapperYAML: filepath.Join(dir, "none.yaml")}, "PROMETHEUS_MAPPER_YAML="},
		{config.Prometheus{Addr: ln.Addr().String(), Path: "/metrics"}, "PROMETHEUS_ADDR="},
	} {
		st, err := New(config.Statsd{FlushInterval: time.Hour, Prometheus: &tc.p}, nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			st.Close()
			t.Errorf("%+v: err %v; want one naming %s", tc.p, err, tc.want)
		}
	}
}

// BenchmarkCalled is what a gRPC call adds for its ratelimit_server
// stats: to a statsd (a line in the flush's buffer) or to the Prometheus
// exporter (an event it maps and observes).
func BenchmarkCalled(b *testing.B) {
	for _, tc := range []struct {
		name string
		sd   config.Statsd
	}{
		{"statsd", config.Statsd{Addr: "127.0.0.1:9", Protocol: "udp", FlushInterval: time.Hour}},
		{"prometheus", config.Statsd{FlushInterval: time.Hour, Prometheus: &config.Prometheus{Addr: "127.0.0.1:0", Path: "/metrics"}}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			st, err := New(tc.sd, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					st.ForMethod("/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit").Called(time.Millisecond)
				}
			})
		})
	}
}

// Flush returns only once the exporter has handled every event sent
// before it, not when it has taken the last: here an exporter that takes
// 20 ms to handle each. (TestPrometheusServesAndCloses, which scrapes
// right after a flush, failed on a busy CI machine without it.)
func TestPromSinkFlushWaitsForTheExporter(t *testing.T) {
	s := &promSink{events: make(chan event.Events)}
	var handled atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for evs := range s.events {
			time.Sleep(20 * time.Millisecond)
			handled.Add(int64(len(evs)))
		}
	}()
	s.FlushCounter("a", 1)
	s.FlushGauge("b", 2)
	s.FlushTimer("c", 3)
	s.Flush()
	if n := handled.Load(); n != 3 {
		t.Fatalf("Flush returned with %d of 3 events handled", n)
	}
	s.mu.Lock()
	s.closed = true
	close(s.events)
	s.mu.Unlock()
	<-done
	s.Flush() // after close: dropped, no panic
}
