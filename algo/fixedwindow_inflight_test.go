package algo

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testkit/fakeclock"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
	"github.com/sluicehq/sluice/redisstore"
)

// pipelineGauge is a go-redis hook that records the most pipelines of
// counters (INCRBY first) on their way at once, and how many were sent.
type pipelineGauge struct {
	pipelinesOnly
	now, most, sent atomic.Int64
}

// pipelinesOnly is the part of a go-redis hook that passes dials and
// single commands on: the tests' hooks watch pipelines alone.
type pipelinesOnly struct{}

func (pipelinesOnly) DialHook(next redis.DialHook) redis.DialHook { return next }

func (pipelinesOnly) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (g *pipelineGauge) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) == 0 || cmds[0].Name() != "incrby" { // not a counters' batch (a new connection's set-up runs inside one)
			return next(ctx, cmds)
		}
		n := g.now.Add(1)
		for m := g.most.Load(); n > m && !g.most.CompareAndSwap(m, n); m = g.most.Load() {
		}
		g.sent.Add(1)
		defer g.now.Add(-1)
		return next(ctx, cmds)
	}
}

// With the default coalescing, the counters of concurrent WindowKey
// checks travel one batch at a time (counterInFlight): what queues while
// a batch is on its way is the next one, so that a round trip carries
// more decisions and Redis reads and writes less per decision. Checks
// of the generic fixed window's script keep their own queue.
func TestFixedWindowCountersOneBatchInFlight(t *testing.T) {
	client := redistest.Start(t).Client(t)
	g := &pipelineGauge{}
	client.AddHook(g)
	c := fakeclock.New(time.Date(2026, 3, 1, 12, 0, 30, 0, time.UTC))
	rs, err := Redis(FixedWindow, client, RedisOptions{Now: c.Now, Prefix: "inflight:"})
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	rules := []sluice.Rule{{Rate: 1e6 / 3600.0, Burst: 1e6}}
	const callers, checks = 32, 150
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for w := range callers {
		wg.Go(func() {
			for i := range checks {
				key := strconv.Itoa(w*checks + i) // every check its own counter, as at uniform keys
				if _, err := rs.Check(ctx, sluice.Request{Key: key, Cost: 1, Rules: rules, CountDenied: true, WindowKey: "inflight_" + key + "_"}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if m := g.most.Load(); m != 1 {
		t.Errorf("%d pipelines of counters on their way at once, want 1 (counterInFlight)", m)
	}
	t.Logf("%d checks in %d round trips", callers*checks, g.sent.Load())
}

// Checks of the same counters from two stores on clients of their own (as
// two sluice processes would be; one with a batch in flight at a time, the
// default, one with several) and envoyproxy/ratelimit's own pipelined
// INCRBY and EXPIRE, all at once, count every hit exactly, and leave no
// counter without an expiry of at most the window and the jitter.
func TestFixedWindowCountersExactAndExpiringAcrossClients(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	c := fakeclock.New(time.Date(2026, 3, 1, 12, 0, 30, 0, time.UTC)) // frozen: one window for the whole test
	const jitter = 7
	rules := []sluice.Rule{{Rate: 1e6 / 3600.0, Burst: 1e6}}
	// No read deadline and no retry: a pipeline that timed out on a
	// loaded machine would be sent again by go-redis, counting its hits
	// twice, which is the client's doing, not what this test holds.
	client := func() *redis.Client {
		o := srv.Options()
		o.ReadTimeout, o.WriteTimeout, o.MaxRetries = -1, -1, -1
		cl := redis.NewClient(o)
		t.Cleanup(func() { cl.Close() })
		return cl
	}
	var stores []sluice.Store
	for i := range 2 {
		opts := RedisOptions{Now: c.Now, ExpiryJitter: jitter * time.Second}
		if i == 1 { // batches on their way at once, each with its own commands (counterBatch)
			opts.Coalesce = &redisstore.Coalesce{MaxInFlight: 4}
		}
		rs, err := Redis(FixedWindow, client(), opts)
		if err != nil {
			t.Fatal(err)
		}
		defer rs.Close()
		stores = append(stores, rs)
	}
	upstream := client()
	const keys, callers, checks = 300, 12, 200
	window := CounterKey("", rules[0], c.Now()) // the window's start, in Unix seconds
	var want [keys]atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 3*callers)
	for w := range 3 * callers {
		wg.Go(func() {
			for i := range checks {
				k := (w*7919 + i*31) % keys
				cost := int64(1 + (w+i)%3)
				wk := fmt.Sprintf("dom_user_%d_", k)
				var err error
				if w%3 == 2 { // envoyproxy/ratelimit: INCRBY and EXPIRE, pipelined, on half the counters
					k %= keys / 2 // the other half expire by sluice's EXPIRE alone
					wk = fmt.Sprintf("dom_user_%d_", k)
					p := upstream.Pipeline()
					p.IncrBy(ctx, wk+window, cost)
					p.Expire(ctx, wk+window, time.Hour)
					_, err = p.Exec(ctx)
				} else {
					_, err = stores[w%3].Check(ctx, sluice.Request{Key: strconv.Itoa(k), Cost: cost, Rules: rules, CountDenied: true, WindowKey: wk})
				}
				if err != nil {
					errs <- err
					return
				}
				want[k].Add(cost)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	found := 0
	for it := admin.Scan(ctx, 0, "*", 1000).Iterator(); it.Next(ctx); {
		found++
		key := it.Val()
		var k int
		if _, err := fmt.Sscanf(key, "dom_user_%d_"+window, &k); err != nil || k < 0 || k >= keys {
			t.Errorf("key %q: not a counter of this test", key)
			continue
		}
		if got := admin.Get(ctx, key).Val(); got != strconv.FormatInt(want[k].Load(), 10) {
			t.Errorf("counter %q = %s, want %d (every hit of both stores and of upstream)", key, got, want[k].Load())
		}
		if ttl := admin.TTL(ctx, key).Val(); ttl <= 0 || ttl > (3600+jitter)*time.Second {
			t.Errorf("counter %q: TTL %v, want an expiry of at most the window and the jitter", key, ttl)
		}
	}
	if found != keys {
		t.Errorf("%d counters, want %d", found, keys)
	}
}
