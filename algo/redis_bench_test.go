package algo

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
)

// BenchmarkRedisFixedWindow measures the fixed window on Redis as
// envoyproxy/ratelimit's descriptors use it (one rule, 1000 a minute;
// counted: a denied hit is counted too) and with sluice's semantics: one
// caller, and 32 concurrent callers uniformly over 100,000 users, each
// check in a call of its own or coalesced (the default). It reports the
// script's time per call (INFO commandstats, server-µs/call), the Redis
// server's whole CPU per check (INFO cpu, user + sys), the figure to hold
// against envoyproxy/ratelimit's, and this process's CPU per check.
func BenchmarkRedisFixedWindow(b *testing.B) {
	srv := redistest.Start(b)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: 64})
	defer client.Close()
	rules := []sluice.Rule{{Rate: 1000.0 / 60, Burst: 1000}}
	for _, counted := range []bool{true, false} {
		for _, c := range []struct {
			callers  int
			coalesce bool
		}{{1, false}, {32, false}, {32, true}} {
			name := fmt.Sprintf("counted=%v/callers=%d/coalesce=%v", counted, c.callers, c.coalesce)
			b.Run(name, func(b *testing.B) {
				s, err := Redis(FixedWindow, client, RedisOptions{DisableCoalescing: !c.coalesce})
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				benchRedis(b, srv, s, c.callers, 100_000, sluice.Request{Cost: 1, Rules: rules, CountDenied: counted})
			})
		}
	}
}

// BenchmarkRedisEnvoyEquivalent is the reference for
// BenchmarkRedisFixedWindow: what envoyproxy/ratelimit sends Redis for one
// descriptor, INCRBY and EXPIRE of a key named per window, pipelined, from
// 32 callers over 100,000 users, with the same figures.
func BenchmarkRedisEnvoyEquivalent(b *testing.B) {
	srv := redistest.Start(b)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: 64})
	defer client.Close()
	benchRedis(b, srv, envoyEquivalent{client}, 32, 100_000, sluice.Request{Cost: 1})
}

// envoyEquivalent checks as envoyproxy/ratelimit does (a fixed minute,
// 1000 a minute, every hit counted); only Check is used.
type envoyEquivalent struct{ client *redis.Client }

func (e envoyEquivalent) Check(ctx context.Context, req sluice.Request) (sluice.Result, error) {
	now := time.Now().Unix()
	key := "rl_" + req.Key + "_" + strconv.FormatInt(now-now%60, 10)
	pipe := e.client.Pipeline()
	incr := pipe.IncrBy(ctx, key, req.Cost)
	pipe.Expire(ctx, key, time.Minute)
	if _, err := pipe.Exec(ctx); err != nil {
		return sluice.Result{}, err
	}
	return sluice.Result{Allowed: incr.Val() <= 1000}, nil
}

func (envoyEquivalent) Adjust(context.Context, sluice.Request, int64) (sluice.Result, error) {
	return sluice.Result{}, nil
}
func (envoyEquivalent) Algorithm() string { return "envoy-equivalent" }
func (envoyEquivalent) Close() error      { return nil }

func benchRedis(b *testing.B, srv *redistest.Server, s Store, callers, nkeys int, req sluice.Request) {
	keys := make([]string, nkeys)
	for i := range keys {
		keys[i] = "user-" + strconv.Itoa(i)
	}
	srv.ResetStats(b)
	cpu0, self0 := serverCPU(b, srv), processCPU()
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
	cpu, self := serverCPU(b, srv)-cpu0, processCPU()-self0
	var usec, calls float64
	for name, st := range srv.CommandStats(b) {
		if name == "evalsha" || name == "eval" || name == "incrby" {
			usec += float64(st.Usec)
			calls += float64(st.Calls)
		}
	}
	if calls > 0 {
		b.ReportMetric(usec/calls, "server-µs/call")
		b.ReportMetric(float64(b.N)/calls, "checks/call")
	}
	b.ReportMetric(cpu*1e6/float64(b.N), "redis-cpu-µs/check")
	b.ReportMetric(self*1e6/float64(b.N), "client-cpu-µs/check")
}

// processCPU is this process's CPU time so far, user and system, in
// seconds: the client's side (Redis runs in a process of its own).
func processCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
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
