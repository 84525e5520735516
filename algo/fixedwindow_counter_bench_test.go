package algo

import (
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
)

// BenchmarkSendCounters sends batches of n WindowKey checks on n counters
// (envoyproxy/ratelimit's INCRBY and EXPIRE per counter, pipelined), on
// one server's client and on a Cluster's, each batch on other keys than
// the batch before: what a batch costs the client (allocs/op, and
// cpu-µs/op, this process's CPU time, per batch).
func BenchmarkSendCounters(b *testing.B) {
	srv := redistest.Start(b)
	clients := []struct {
		name   string
		client redis.Scripter
	}{{"server", srv.Client(b)}}
	if !testing.Short() {
		clients = append(clients, struct {
			name   string
			client redis.Scripter
		}{"cluster", redistest.StartCluster(b, 3, 0).Client(b)})
	}
	rules := []sluice.Rule{{Rate: 1e6 / 3600.0, Burst: 1e6}} // an hour: a TTL past the small integers
	for _, c := range clients {
		for _, n := range []int{1, 16, 64} {
			b.Run(fmt.Sprintf("client=%s/counters=%d", c.name, n), func(b *testing.B) {
				rs, err := Redis(FixedWindow, c.client, RedisOptions{DisableCoalescing: true})
				if err != nil {
					b.Fatal(err)
				}
				defer rs.Close()
				s := rs.(*fixedWindowRedis)
				const rounds = 50
				ops := make([][]fwOp, rounds)
				for r := range ops {
					ops[r] = make([]fwOp, n)
					for i := range ops[r] {
						ops[r][i] = fwOp{key: "k", kind: "d", amount: 1, rules: rules}
						s.counterOp(&ops[r][i], fmt.Sprintf("bench_user_%d_", r*n+i))
					}
				}
				res, errs := make([]sluice.Result, n), make([]error, n)
				s.sendCounters(ctx, ops[0], res, errs) // the first batch makes what the next reuse
				b.ReportAllocs()
				cpu0 := processCPU()
				for i := 1; b.Loop(); i++ {
					s.sendCounters(ctx, ops[i%rounds], res, errs)
					if errs[0] != nil {
						b.Fatal(errs[0])
					}
				}
				b.ReportMetric((processCPU()-cpu0)*1e6/float64(b.N), "cpu-µs/op")
			})
		}
	}
}
