package gateway

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
	"github.com/sluicehq/sluice/internal/testkit/stall"
	"github.com/sluicehq/sluice/resilient"
)

// On a Cluster every master has its own breaker: one master killed opens
// its breaker only, and the keys of the others are still decided by Redis.
func TestBreakerPerClusterMaster(t *testing.T) {
	cluster := redistest.StartCluster(t, 3, 0, redistest.WithArgs("--cluster-require-full-coverage", "no"))
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	// A store call gets a second, not the default 50 ms: on a loaded
	// machine a call to the live master that misses its deadline would be
	// decided locally and count towards opening that master's breaker,
	// which says nothing about scope. A dead master refuses the dial at
	// once, whatever the deadline.
	r := config.Redis{ClusterAddrs: cluster.Addrs(), Timeout: time.Second}
	client, raw, _, err := newRedisStore(r, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	reg := prometheus.NewRegistry()
	s := resilient.New(raw, resilient.Options{
		Timeout: r.Timeout, MaxWait: redisMaxWait(r), MaxInFlight: redisInFlight, Classify: classifyRedis,
		Scope: clusterScope(client.(*redis.ClusterClient), raw), Registerer: reg, Logger: log,
	})
	t.Cleanup(func() { s.Close() })

	// Two keys on two masters.
	var keys [2]string
	var masters [2]*redistest.Server
	for i := 0; masters[1] == nil; i++ {
		k := fmt.Sprintf("user-%d", i)
		m := cluster.MasterForKey(raw.Key(k))
		if masters[0] == nil {
			keys[0], masters[0] = k, m
		} else if m != masters[0] {
			keys[1], masters[1] = k, m
		}
	}
	rules := []sluice.Rule{{Rate: 1e6, Burst: 1e6}}
	ctx := context.Background()
	for _, k := range keys {
		if _, d, err := s.CheckDecision(ctx, sluice.Request{Key: k, Cost: 1, Rules: rules}); err != nil || d.Source != resilient.FromStore {
			t.Fatalf("before: %+v %v", d, err)
		}
	}
	masters[0].Kill()
	watch := stall.Start()
	var bySource [2][5]int
	for range 200 {
		for i, k := range keys {
			_, d, err := s.CheckDecision(ctx, sluice.Request{Key: k, Cost: 1, Rules: rules})
			if err != nil {
				t.Fatal(err)
			}
			bySource[i][d.Source]++
		}
		time.Sleep(2 * time.Millisecond)
	}
	open := 0.0
	if mfs, err := reg.Gather(); err == nil {
		for _, mf := range mfs {
			if mf.GetName() == "sluice_store_breakers_open" {
				open = mf.GetMetric()[0].GetGauge().GetValue()
			}
		}
	}
	t.Logf("key on the killed master %s: by source %v; key on %s: %v; breakers open: %v",
		masters[0].Addr(), bySource[0], masters[1].Addr(), bySource[1], open)
	stalled := watch.Stop()
	if n := bySource[1][resilient.FromStore]; n != 200 {
		// A machine that kept this process from running for a whole
		// deadline can make a call to the live master miss it.
		if stalled >= r.Timeout && n >= 190 {
			t.Logf("the key on the live master: %d of 200 by Redis; the machine stalled this process %v, past the deadline", n, stalled)
		} else {
			t.Errorf("the key on the live master was not always decided by Redis: %v (longest stall %v)", bySource[1], stalled)
		}
	}
	if bySource[0][resilient.FromLocal] < 190 || open != 1 || s.State() != resilient.StateOpen {
		t.Errorf("the killed master's key: %v, %v breakers open, state %v; want its breaker open and the local bucket deciding", bySource[0], open, s.State())
	}
}

// A fixed window counter of sluice.Request.WindowKey (the Envoy
// service's) is its own Redis key: its check gets the breaker of the
// master that holds that counter, not of the master of its bucket's key.
// One master killed, a counter on another master is still decided by
// Redis, even when its bucket's key is on the killed one.
func TestCounterBreakerIsItsMaster(t *testing.T) {
	cluster := redistest.StartCluster(t, 3, 0, redistest.WithArgs("--cluster-require-full-coverage", "no"))
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	r := config.Redis{ClusterAddrs: cluster.Addrs(), Timeout: time.Second} // as TestBreakerPerClusterMaster
	client, raw, _, err := newRedisStore(r, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	cc := client.(*redis.ClusterClient)
	fw, err := algo.Redis(algo.FixedWindow, client, algo.RedisOptions{DisableCoalescing: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fw.Close() })
	s := resilient.New(fw, resilient.Options{
		Timeout: r.Timeout, MaxWait: redisMaxWait(r), MaxInFlight: redisInFlight, Classify: classifyRedis,
		Scope: clusterScope(cc, raw), ScopeOf: counterScope(cc), Logger: log,
	})
	t.Cleanup(func() { s.Close() })
	// A window of a year: the counters keep their names (and masters)
	// while the test runs.
	rules := []sluice.Rule{{Rate: 1e6 / (365 * 86400), Burst: 1e6}}
	counterOn := func(wk string) *redistest.Server {
		return cluster.MasterForKey(algo.CounterKey(wk, rules[0], time.Now()))
	}
	// dead: a counter on the master to kill; live: a counter on another
	// master. Both bucket keys are on the master to kill.
	dead := sluice.Request{Key: "dead", Cost: 1, Rules: rules, CountDenied: true, WindowKey: "d_"}
	victim := counterOn(dead.WindowKey)
	live := sluice.Request{Cost: 1, Rules: rules, CountDenied: true}
	for i := 0; live.WindowKey == ""; i++ {
		if wk := fmt.Sprintf("w%d_", i); counterOn(wk) != victim {
			live.WindowKey = wk
		}
	}
	for i := 0; live.Key == "" || dead.Key == "dead"; i++ {
		if k := fmt.Sprintf("user-%d", i); cluster.MasterForKey(raw.Key(k)) == victim {
			if live.Key == "" {
				live.Key = k
			} else {
				dead.Key = k
			}
		}
	}
	ctx := context.Background()
	for _, req := range []sluice.Request{dead, live} {
		if _, d, err := s.CheckDecision(ctx, req); err != nil || d.Source != resilient.FromStore {
			t.Fatalf("before: %+v %v", d, err)
		}
	}
	victim.Kill()
	watch := stall.Start()
	var bySource [2][5]int
	for range 200 {
		for i, req := range []sluice.Request{dead, live} {
			_, d, err := s.CheckDecision(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			bySource[i][d.Source]++
		}
		time.Sleep(2 * time.Millisecond)
	}
	stalled := watch.Stop()
	t.Logf("counter on the killed master: by source %v; the other: %v", bySource[0], bySource[1])
	if n := bySource[1][resilient.FromStore]; n != 200 && (stalled < r.Timeout || n < 190) {
		t.Errorf("the counter on a live master was not always decided by Redis: %v (longest stall %v)", bySource[1], stalled)
	}
	// The killed master's breaker stays open: the other counter's
	// successes are not its probes.
	if bySource[0][resilient.FromLocal] < 190 || s.State() != resilient.StateOpen {
		t.Errorf("the counter on the killed master: %v, state %v; want its breaker open and the local bucket deciding", bySource[0], s.State())
	}
}
