package resilient_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/resilient"
)

// BenchmarkCheck measures what the resilient layer adds on each path: over
// an in-memory store (so the layer's own cost is not hidden behind a
// network round trip), on a denial-cache hit, and with the breaker open
// under the Open and Local policies.
func BenchmarkCheck(b *testing.B) {
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = fmt.Sprintf("user-%d", i)
	}
	wide := []sluice.Rule{{Rate: 1e9, Burst: 1e9}}
	quietLog := slog.New(slog.NewTextHandler(io.Discard, nil))
	run := func(b *testing.B, s sluice.Store, rules []sluice.Rule) {
		runCtx(b, ctx, s, rules, keys)
	}
	b.Run("memstore-alone", func(b *testing.B) {
		ms := memstore.New(memstore.Options{})
		defer ms.Close()
		run(b, ms, wide)
	})
	b.Run("resilient-over-memstore", func(b *testing.B) {
		ms := memstore.New(memstore.Options{})
		defer ms.Close()
		s := resilient.New(ms, resilient.Options{Logger: quietLog})
		defer s.Close()
		run(b, s, wide)
	})
	// A caller whose own deadline comes before the store deadline (an HTTP
	// request with a budget) spares the timer.
	b.Run("resilient-over-memstore-caller-deadline", func(b *testing.B) {
		ms := memstore.New(memstore.Options{})
		defer ms.Close()
		s := resilient.New(ms, resilient.Options{Logger: quietLog, Timeout: 2 * time.Hour})
		defer s.Close()
		short, cancel := context.WithTimeout(ctx, time.Hour)
		defer cancel()
		runCtx(b, short, s, wide, keys)
	})
	b.Run("denial-cache-hit", func(b *testing.B) {
		ms := memstore.New(memstore.Options{})
		defer ms.Close()
		s := resilient.New(ms, resilient.Options{Logger: quietLog})
		defer s.Close()
		tight := []sluice.Rule{{Rate: 1e-6, Burst: 1}}
		for _, k := range keys {
			s.Check(ctx, sluice.Request{Key: k, Cost: 1, Rules: tight})
			s.Check(ctx, sluice.Request{Key: k, Cost: 1, Rules: tight}) // denied: remembered
		}
		run(b, s, tight)
	})
	for _, mode := range []resilient.Mode{resilient.Open, resilient.Local} {
		b.Run("breaker-open-"+mode.String(), func(b *testing.B) {
			s := resilient.New(failing{}, resilient.Options{OnError: mode, Instances: 3, FailureThreshold: 1, ProbeInterval: 1 << 62, Logger: quietLog})
			defer s.Close()
			s.Check(ctx, sluice.Request{Key: "open-it", Cost: 1, Rules: wide})
			if s.State() != resilient.StateOpen {
				b.Fatal("breaker not open")
			}
			run(b, s, wide)
		})
	}
}

func runCtx(b *testing.B, ctx context.Context, s sluice.Store, rules []sluice.Rule, keys []string) {
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if _, err := s.Check(ctx, sluice.Request{Key: keys[i&1023], Cost: 1, Rules: rules}); err != nil {
			b.Fatal(err)
		}
	}
}

// failing is a fake store that always fails: it stands for a dead Redis
// in a benchmark, where a real one would measure dialing, not this layer.
type failing struct{}

var errDown = errors.New("fake store down")

func (failing) Check(ctx context.Context, req sluice.Request) (sluice.Result, error) {
	return sluice.Result{}, errDown
}

func (failing) Adjust(ctx context.Context, req sluice.Request, delta int64) (sluice.Result, error) {
	return sluice.Result{}, errDown
}

// BenchmarkCheckRedis measures a check of the token bucket through the
// resilient layer over the Redis store on a real server, at 1024 keys:
// sent (the check queued from the caller's goroutine, answered by the
// store's coalescing flusher) against on a worker (the hand-off the layer
// makes for a store that cannot send, hideSender). cpu-µs/op is this
// process's CPU time a check, client side.
func BenchmarkCheckRedis(b *testing.B) {
	client := benchClient(b)
	st := redisstore.New(client, redisstore.Options{})
	defer st.Close()
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = fmt.Sprintf("user-%d", i)
	}
	wide := []sluice.Rule{{Rate: 1e9, Burst: 1e9}}
	benchPaths(b, st, func(i int64) sluice.Request {
		return sluice.Request{Key: keys[i&1023], Cost: 1, Rules: wide}
	})
}

// benchClient is a client of a redis-server of the benchmark's own, set
// up as the gateway sets its client up.
func benchClient(b *testing.B) *redis.Client {
	srv := redistest.Start(b)
	o := srv.Options()
	o.ContextTimeoutEnabled, o.PoolSize, o.DialerRetries, o.MaxRetries = true, 64, 1, -1
	client := redis.NewClient(o)
	b.Cleanup(func() { client.Close() })
	return client
}

// benchPaths runs benchCallers over st sent and on a worker, by 1, 32 and
// 128 callers.
func benchPaths(b *testing.B, st sluice.Store, req func(i int64) sluice.Request) {
	for _, path := range []string{"sent", "worker"} {
		primary := st
		if path == "worker" {
			primary = hideSender{st}
		}
		for _, callers := range []int{1, 32, 128} {
			b.Run(fmt.Sprintf("path=%s/callers=%d", path, callers), func(b *testing.B) {
				benchCallers(b, primary, callers, req)
			})
		}
	}
}

// benchCallers checks b.N requests (req(i) the i-th) through a resilient
// layer over primary from callers goroutines, and reports this process's
// CPU time a check as cpu-µs/op.
func benchCallers(b *testing.B, primary sluice.Store, callers int, req func(i int64) sluice.Request) {
	quietLog := slog.New(slog.NewTextHandler(io.Discard, nil))
	s := resilient.New(primary, resilient.Options{Logger: quietLog, Timeout: time.Second, DenialCacheSize: -1})
	defer s.Close()
	b.ReportAllocs()
	var next atomic.Int64
	cpu0 := processCPU()
	b.ResetTimer()
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			for i := next.Add(1); i <= int64(b.N); i = next.Add(1) {
				if _, err := s.Check(ctx, req(i)); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric((processCPU()-cpu0)*1e6/float64(b.N), "cpu-µs/op")
}

// hideSender hides a store's SendCheck, so that the resilient layer calls
// it on a worker, as it calls a store that cannot send.
type hideSender struct{ sluice.Store }

// BenchmarkCheckCounters measures a check of the fixed window's counters
// (the Envoy service's, envoyproxy/ratelimit's INCRBY + EXPIRE) through
// the resilient layer on a real server, at uniform keys: sent (the check
// queued from the caller's goroutine, answered by the counters' flusher)
// against on a worker (the hand-off the layer makes for a store that
// cannot send). cpu-µs/op is this process's CPU time a check, client
// side: what the hand-off costs.
func BenchmarkCheckCounters(b *testing.B) {
	client := benchClient(b)
	counters, err := algo.Redis(algo.FixedWindow, client, algo.RedisOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer counters.Close()
	keys := make([]string, 100_000)
	for i := range keys {
		keys[i] = fmt.Sprintf("ctr_user_%d_", i)
	}
	rule := []sluice.Rule{{Rate: 1e6 / 60, Burst: 1e6}} // 1,000,000 a minute: never over
	benchPaths(b, counters, func(i int64) sluice.Request {
		return sluice.Request{Key: "k", WindowKey: keys[(i*7919)%int64(len(keys))], CountDenied: true, Cost: 1, Rules: rule}
	})
}

// processCPU is this process's CPU time so far, user and system, in
// seconds.
func processCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}
