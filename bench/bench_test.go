package bench

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

var ctx = context.Background()

// The numbers of concurrent callers of every workload.
var callerCounts = []int{1, 8, 32, 128}

var costs = []int64{1, 10}

// memSampleEvery times one in-memory check in 64: time.Now costs about as
// much as a check, so timing every one would change what is measured.
const memSampleEvery = 64

var (
	redisOnce sync.Once
	redisSrv  *RedisServer
	redisErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if redisSrv != nil {
		redisSrv.Stop()
	}
	os.Exit(code)
}

func redisServer(b *testing.B) *RedisServer {
	redisOnce.Do(func() { redisSrv, redisErr = StartRedis() })
	if redisErr != nil {
		b.Fatal(redisErr)
	}
	return redisSrv
}

// BenchmarkMemory runs every in-memory limiter on every workload, callers
// count and cost. A limiter is built once per workload and warmed with
// every key of it, so the figures are of the steady state, not of the
// first insertion of each key. One limiter lives at a time: the testing
// package collects garbage before every run, and the peers' millions of
// heap objects would otherwise slow every other library's runs.
func BenchmarkMemory(b *testing.B) {
	for _, wn := range Workloads {
		for _, lib := range MemoryLibraries {
			var lim Limiter // built and warmed by the first run that needs it
			for _, c := range callerCounts {
				for _, cost := range costs {
					if cost > 1 && !SupportsCost(lib) {
						continue
					}
					name := fmt.Sprintf("w=%s/c=%d/cost=%d/lib=%s", wn, c, cost, LibID(lib))
					b.Run(name, func(b *testing.B) {
						w := GetWorkload(wn) // built once, by the first run that needs it
						if lim == nil {
							lim = NewMemory(lib)
							for _, k := range w.Keys {
								if _, err := lim.Allow(ctx, k, 1); err != nil {
									b.Fatal(err)
								}
							}
						}
						cs := NewCallers(w, c, memSampleEvery)
						b.ResetTimer()
						start, cpu := time.Now(), CPUTime()
						if _, err := cs.Run(ctx, lim, b.N, cost); err != nil {
							b.Fatal(err)
						}
						elapsed, cpu := time.Since(start), CPUTime()-cpu
						b.StopTimer()
						report(b, cs, elapsed, cpu)
					})
				}
			}
			if lim != nil {
				lim.Close()
				lim = nil
				runtime.GC()
			}
		}
	}
}

// BenchmarkRedis runs every Redis limiter against one redis-server of its
// own, the libraries taking turns at each setting. Each run gets a fresh client whose pool has a connection per
// caller, warms it (connections, script load), resets the server's
// command statistics, and reports the server's time in scripts per check
// and the memory of one key the library wrote.
func BenchmarkRedis(b *testing.B) {
	srv := redisServer(b)
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer admin.Close()
	for _, wn := range Workloads {
		if err := admin.FlushAll(ctx).Err(); err != nil {
			b.Fatal(err)
		}
		for _, c := range callerCounts {
			for _, cost := range costs {
				for _, lib := range RedisLibraries {
					name := fmt.Sprintf("w=%s/c=%d/cost=%d/lib=%s", wn, c, cost, LibID(lib))
					b.Run(name, func(b *testing.B) {
						w := GetWorkload(wn)
						client := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: c, MinIdleConns: c})
						defer client.Close()
						lim := NewRedis(lib, client)
						defer lim.Close()
						cs := NewCallers(w, c, 1)
						if _, err := cs.Run(ctx, lim, 4*c, cost); err != nil {
							b.Fatal(err)
						}
						cs.Reset()
						if err := admin.ConfigResetStat(ctx).Err(); err != nil {
							b.Fatal(err)
						}
						b.ResetTimer()
						start, cpu := time.Now(), CPUTime()
						if _, err := cs.Run(ctx, lim, b.N, cost); err != nil {
							b.Fatal(err)
						}
						elapsed, cpu := time.Since(start), CPUTime()-cpu
						b.StopTimer()
						report(b, cs, elapsed, cpu)
						stats, err := CommandStats(ctx, admin)
						if err != nil {
							b.Fatal(err)
						}
						usec, calls := ScriptUsec(stats)
						b.ReportMetric(float64(usec)/float64(b.N), "srv-µs/check")
						if calls > 0 {
							b.ReportMetric(float64(usec)/float64(calls), "srv-µs/call")
							b.ReportMetric(float64(b.N)/float64(calls), "checks/call")
						}
						if mem, err := MemoryUsage(ctx, admin, lim.RedisKey(cs.LastKey())); err == nil {
							b.ReportMetric(float64(mem), "redis-B/key")
						}
					})
				}
			}
		}
	}
}

// BenchmarkHeapPerKey fills each in-memory limiter with a million keys
// (one check each) and reports the live heap it holds per key, after GC.
// The keys are built beforehand, so a library that keeps the caller's
// string does not count its bytes; one that builds its own key does. Run
// it with -benchtime=1x: it does the same work whatever b.N.
func BenchmarkHeapPerKey(b *testing.B) {
	ks := keys(1_000_000)
	for _, lib := range MemoryLibraries {
		b.Run("lib="+LibID(lib), func(b *testing.B) {
			before := liveHeap()
			lim := NewMemory(lib)
			for _, k := range ks {
				if _, err := lim.Allow(ctx, k, 1); err != nil {
					b.Fatal(err)
				}
			}
			after := liveHeap()
			runtime.KeepAlive(lim)
			lim.Close()
			b.ReportMetric(float64(int64(after)-int64(before))/float64(len(ks)), "heap-B/key")
		})
	}
}

func liveHeap() uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// report adds the figures every run reports: the rate of checks, the
// sampled latency, and the process's CPU time per check (the client's
// side only, for Redis).
func report(b *testing.B, cs *Callers, elapsed, cpu time.Duration) {
	p50, p99 := cs.Latency()
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "checks/s")
	b.ReportMetric(float64(p50.Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(p99.Nanoseconds()), "p99-ns")
}
