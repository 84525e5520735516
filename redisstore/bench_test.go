package redisstore_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
	"github.com/sluicehq/sluice/redisstore"
)

// BenchmarkCheck measures checks through 32 concurrent callers on 10,000
// keys and reports the Redis server's CPU per check from INFO commandstats:
// plain (DisableCoalescing) and with the default coalescing.
func BenchmarkCheck(b *testing.B) {
	srv := redistest.Start(b)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: 64})
	defer client.Close()
	b.Run("plain", func(b *testing.B) {
		benchCheck(b, []*redistest.Server{srv}, redisstore.New(client, redisstore.Options{DisableCoalescing: true}), 10_000)
	})
	b.Run("coalesced", func(b *testing.B) {
		rs := redisstore.New(client, redisstore.Options{})
		defer rs.Close()
		benchCheck(b, []*redistest.Server{srv}, rs, 10_000)
	})
}

// BenchmarkHotKey is BenchmarkCheck with every caller on one key: the
// coalesced checks of a batch are decided together, one read and one
// write of the key a batch.
func BenchmarkHotKey(b *testing.B) {
	srv := redistest.Start(b)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: 64})
	defer client.Close()
	b.Run("plain", func(b *testing.B) {
		benchCheck(b, []*redistest.Server{srv}, redisstore.New(client, redisstore.Options{DisableCoalescing: true}), 1)
	})
	b.Run("coalesced", func(b *testing.B) {
		rs := redisstore.New(client, redisstore.Options{})
		defer rs.Close()
		benchCheck(b, []*redistest.Server{srv}, rs, 1)
	})
}

// BenchmarkClusterCheck is BenchmarkCheck on a Cluster of three masters,
// the keys spread over every slot: a batch splits into a script call per
// slot.
func BenchmarkClusterCheck(b *testing.B) {
	cl := redistest.StartCluster(b, 3, 0)
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), PoolSize: 64})
	defer client.Close()
	b.Run("plain", func(b *testing.B) {
		benchCheck(b, cl.Masters(), redisstore.New(client, redisstore.Options{DisableCoalescing: true}), 10_000)
	})
	b.Run("coalesced", func(b *testing.B) {
		rs := redisstore.New(client, redisstore.Options{})
		defer rs.Close()
		benchCheck(b, cl.Masters(), rs, 10_000)
	})
}

func benchCheck(b *testing.B, servers []*redistest.Server, rs *redisstore.Store, nkeys int) {
	rules := []sluice.Rule{{Rate: 1e6, Burst: 1e9}}
	keys := make([]string, nkeys)
	for i := range keys {
		keys[i] = fmt.Sprintf("user-%d", i)
	}
	const callers = 32
	for _, srv := range servers {
		srv.ResetStats(b)
	}
	hammer(b, rs, keys, rules, callers)
	var usec, calls float64
	for _, srv := range servers {
		for name, st := range srv.CommandStats(b) {
			if name == "evalsha" || name == "eval" {
				usec += float64(st.Usec)
				calls += float64(st.Calls)
			}
		}
	}
	if calls > 0 {
		b.ReportMetric(usec/float64(b.N), "server-µs/check")
		b.ReportMetric(float64(b.N)/calls, "checks/call")
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "checks/s")
}

// BenchmarkHotKeyLease compares, on one hot key at 1 to 128 callers, the
// plain store (a script a check), the coalesced one (a script a batch)
// and leases of 100 tokens (a script a lease): checks a second, and Redis
// scripts a check from INFO commandstats. The rule admits everything, so
// every lease is spent.
func BenchmarkHotKeyLease(b *testing.B) {
	srv := redistest.Start(b)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: 160})
	defer client.Close()
	rules := []sluice.Rule{{Rate: sluice.MaxRate, Burst: sluice.MaxBurst}}
	for _, callers := range []int{1, 8, 32, 128} {
		b.Run(fmt.Sprintf("callers=%d/plain", callers), func(b *testing.B) {
			benchHot(b, srv, redisstore.New(client, redisstore.Options{DisableCoalescing: true}), rules, callers)
		})
		b.Run(fmt.Sprintf("callers=%d/coalesced", callers), func(b *testing.B) {
			rs := redisstore.New(client, redisstore.Options{})
			defer rs.Close()
			benchHot(b, srv, rs, rules, callers)
		})
		b.Run(fmt.Sprintf("callers=%d/lease", callers), func(b *testing.B) {
			rs := redisstore.New(client, redisstore.Options{})
			defer rs.Close()
			ls, err := redisstore.NewLeased(rs, redisstore.Lease{Tokens: 100, TTL: 100 * time.Millisecond})
			if err != nil {
				b.Fatal(err)
			}
			defer ls.Close()
			benchHot(b, srv, ls, rules, callers)
		})
	}
}

func benchHot(b *testing.B, srv *redistest.Server, st sluice.Store, rules []sluice.Rule, callers int) {
	srv.ResetStats(b)
	hammer(b, st, []string{"hot"}, rules, callers)
	var calls float64
	for name, st := range srv.CommandStats(b) {
		if name == "evalsha" || name == "eval" {
			calls += float64(st.Calls)
		}
	}
	b.ReportMetric(calls/float64(b.N), "scripts/check")
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "checks/s")
}

// hammer makes b.N checks of cost 1 through callers goroutines, the i-th
// of keys[i % len(keys)], timed.
func hammer(b *testing.B, st sluice.Store, keys []string, rules []sluice.Rule, callers int) {
	var next atomic.Int64
	b.ResetTimer()
	var wg sync.WaitGroup
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1); i <= int64(b.N); i = next.Add(1) {
				if _, err := st.Check(ctx, sluice.Request{Key: keys[i%int64(len(keys))], Cost: 1, Rules: rules}); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
}
