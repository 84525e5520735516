package resilient_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
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

// BenchmarkCheckRedis measures a check through the resilient layer over
// the Redis store on a real server, by one caller and by 32: what the
// layer's call mechanics (the hand-off to the goroutine that calls the
// store, its timer) cost next to a round trip.
func BenchmarkCheckRedis(b *testing.B) {
	srv := redistest.Start(b)
	o := srv.Options()
	o.ContextTimeoutEnabled, o.PoolSize, o.DialerRetries, o.MaxRetries = true, 64, 1, -1
	client := redis.NewClient(o)
	defer client.Close()
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = fmt.Sprintf("user-%d", i)
	}
	wide := []sluice.Rule{{Rate: 1e9, Burst: 1e9}}
	quietLog := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, callers := range []int{1, 32} {
		b.Run(fmt.Sprintf("callers=%d", callers), func(b *testing.B) {
			s := resilient.New(redisstore.New(client, redisstore.Options{}), resilient.Options{Logger: quietLog})
			defer s.Close()
			b.ReportAllocs()
			var next atomic.Int64
			b.SetParallelism((callers + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					i := next.Add(1)
					if _, err := s.Check(ctx, sluice.Request{Key: keys[i&1023], Cost: 1, Rules: wide}); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
