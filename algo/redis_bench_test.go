package algo

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
)

// BenchmarkRedisFixedWindow measures the fixed window on Redis as
// envoyproxy/ratelimit's descriptors use it (one rule, 1000 a minute;
// counted: a denied hit is counted too) and with sluice's semantics, and
// reports Redis's side: the script's time per call from INFO commandstats
// (server-µs/call), and the server's whole CPU (INFO cpu, user + sys) per
// check, the figure to hold against envoyproxy/ratelimit's. "serial" is
// one caller; "32-callers" spreads 32 concurrent callers uniformly over
// 100,000 users.
func BenchmarkRedisFixedWindow(b *testing.B) {
	srv := redistest.Start(b)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: 64})
	defer client.Close()
	rules := []sluice.Rule{{Rate: 1000.0 / 60, Burst: 1000}}
	for _, counted := range []bool{true, false} {
		for _, callers := range []int{1, 32} {
			name := fmt.Sprintf("counted=%v/callers=%d", counted, callers)
			b.Run(name, func(b *testing.B) {
				s, err := Redis(FixedWindow, client, RedisOptions{})
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				benchRedis(b, srv, s, callers, 100_000, sluice.Request{Cost: 1, Rules: rules, CountDenied: counted})
			})
		}
	}
}

func benchRedis(b *testing.B, srv *redistest.Server, s Store, callers, nkeys int, req sluice.Request) {
	keys := make([]string, nkeys)
	for i := range keys {
		keys[i] = "user-" + strconv.Itoa(i)
	}
	srv.ResetStats(b)
	cpu0 := serverCPU(b, srv)
	var next atomic.Int64
	b.ResetTimer()
	var wg sync.WaitGroup
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := req
			for i := next.Add(1); i <= int64(b.N); i = next.Add(1) {
				r.Key = keys[(i*7919)%int64(nkeys)]
				if _, err := s.Check(ctx, r); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	cpu := serverCPU(b, srv) - cpu0
	var usec, calls float64
	for name, st := range srv.CommandStats(b) {
		if name == "evalsha" || name == "eval" {
			usec += float64(st.Usec)
			calls += float64(st.Calls)
		}
	}
	if calls > 0 {
		b.ReportMetric(usec/calls, "server-µs/call")
		b.ReportMetric(float64(b.N)/calls, "checks/call")
	}
	b.ReportMetric(cpu*1e6/float64(b.N), "redis-cpu-µs/check")
}

// serverCPU is the Redis server's CPU time so far, user and system, in
// seconds (INFO cpu).
func serverCPU(b *testing.B, srv *redistest.Server) float64 {
	info, err := srv.Client(b).Info(ctx, "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var total float64
	for line := range strings.Lines(info) {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		if k == "used_cpu_sys" || k == "used_cpu_user" {
			f, _ := strconv.ParseFloat(v, 64)
			total += f
		}
	}
	return total
}
