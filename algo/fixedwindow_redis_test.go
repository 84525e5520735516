package algo

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testkit/fakeclock"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
)

// A coalesced batch of the fixed window (checks, counted checks and
// adjustments, keys repeated and spread over slots) answers exactly as
// the in-memory store does taking the same ops one after the other at the
// same instant: on one server (one script call) and on a Cluster (a call
// per slot, pipelined).
func TestFixedWindowBatchAgreesWithMemory(t *testing.T) {
	clients := map[string]redis.Scripter{"server": redistest.Start(t).Client(t)}
	if !testing.Short() {
		clients["cluster"] = redistest.StartCluster(t, 3, 0).Client(t)
	}
	ruleSets := [][]sluice.Rule{
		{{Rate: 1, Burst: 3}},
		{{Rate: 10, Burst: 20}, {Rate: 100.0 / 60, Burst: 30}},
		{{Rate: 7.0 / 60, Burst: 7}},
	}
	for name, client := range clients {
		t.Run(name, func(t *testing.T) {
			c := fakeclock.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
			ms, _ := Memory(FixedWindow, MemoryOptions{Now: c.Now, SweepInterval: -1})
			defer ms.Close()
			rs, _ := Redis(FixedWindow, client, RedisOptions{Now: c.Now, Prefix: "batch:"})
			defer rs.Close()
			s := rs.(*fixedWindowRedis)
			rng := rand.New(rand.NewPCG(3, 4))
			var denied, counted int
			for step := range 300 {
				c.AdvanceMicros(rng.Int64N(400_000))
				ops := make([]fwOp, 1+rng.IntN(40))
				for i := range ops {
					k := rng.IntN(12)
					rules := ruleSets[k%len(ruleSets)]
					o := fwOp{key: fmt.Sprint("user-", k), kind: "c", amount: rng.Int64N(3), rules: rules}
					switch rng.IntN(10) {
					case 0:
						o.kind, o.amount = "a", rng.Int64N(7)-3
					case 1, 2, 3:
						o.kind, o.amount = "d", rng.Int64N(2*rules[0].Burst)
					}
					ops[i] = o
				}
				res := make([]sluice.Result, len(ops))
				errs := make([]error, len(ops))
				s.send(ctx, ops, res, errs)
				for i, o := range ops {
					var want sluice.Result
					var err error
					if o.kind == "a" {
						want, err = ms.Adjust(ctx, sluice.Request{Key: o.key, Rules: o.rules}, o.amount)
					} else {
						want, err = ms.Check(ctx, sluice.Request{Key: o.key, Cost: o.amount, Rules: o.rules, CountDenied: o.kind == "d"})
					}
					if err != nil || errs[i] != nil {
						t.Fatalf("step %d op %d: errors: memory %v, redis %v", step, i, err, errs[i])
					}
					if res[i] != want {
						t.Fatalf("step %d op %d %+v:\nredis  %+v\nmemory %+v", step, i, o, res[i], want)
					}
					if !want.Allowed {
						denied++
						if o.kind == "d" {
							counted++
						}
					}
				}
			}
			if denied == 0 || counted == 0 {
				t.Fatalf("no denial (%d) or no counted denial (%d)", denied, counted)
			}
		})
	}
}

// Under concurrent callers the coalescing store admits exactly the burst
// of each key in a window (frozen clock), counted or not.
func TestFixedWindowCoalescedIsExact(t *testing.T) {
	client := redistest.Start(t).Client(t)
	frozen := fakeclock.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	for _, countDenied := range []bool{false, true} {
		rs, _ := Redis(FixedWindow, client, RedisOptions{Now: frozen.Now, Prefix: fmt.Sprint("exact-", countDenied, ":")})
		rules := []sluice.Rule{{Rate: 20.0 / 60, Burst: 20}}
		const keys, goroutines, each = 10, 32, 50
		var admitted [keys]atomic.Int64
		var wg sync.WaitGroup
		for g := range goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range each {
					k := (g*7 + i) % keys
					r, err := rs.Check(ctx, sluice.Request{Key: fmt.Sprint("k", k), Cost: 1, Rules: rules, CountDenied: countDenied})
					if err != nil {
						t.Error(err)
						return
					}
					if r.Allowed {
						admitted[k].Add(1)
					}
				}
			}()
		}
		wg.Wait()
		rs.Close()
		for k := range admitted {
			if n := admitted[k].Load(); n != 20 {
				t.Errorf("count denied %v, key k%d: admitted %d, want exactly the burst 20", countDenied, k, n)
			}
		}
	}
}

// Only the fixed window counts a denied cost; the others refuse the request.
func TestCountDeniedOnlyForTheFixedWindow(t *testing.T) {
	req := sluice.Request{Key: "k", Cost: 1, Rules: []sluice.Rule{{Rate: 1, Burst: 2}}, CountDenied: true}
	for _, name := range Names()[1:] {
		s, _ := Memory(name, MemoryOptions{SweepInterval: -1})
		_, err := s.Check(ctx, req)
		s.Close()
		if (name == FixedWindow) != (err == nil) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// A batch reads and writes each key once, however many of its ops name
// it: a hot key's coalesced checks cost Redis one GET and one SET, as the
// token bucket's do, and the key keeps its expiry.
func TestFixedWindowBatchReadsAndWritesAKeyOnce(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	c := fakeclock.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	rs, _ := Redis(FixedWindow, client, RedisOptions{Now: c.Now, Prefix: "once:"})
	defer rs.Close()
	s := rs.(*fixedWindowRedis)
	rules := []sluice.Rule{{Rate: 10, Burst: 25}}
	var ops []fwOp
	for i := range 30 {
		ops = append(ops, fwOp{key: "hot", kind: "c", amount: 1, rules: rules})
		if i%3 == 0 {
			ops = append(ops, fwOp{key: "warm", kind: "c", amount: 1, rules: rules})
		}
	}
	if err := client.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	res, errs := make([]sluice.Result, len(ops)), make([]error, len(ops))
	s.send(ctx, ops, res, errs)
	admitted := map[string]int{}
	for i, o := range ops {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if res[i].Allowed {
			admitted[o.key]++
		}
	}
	if admitted["hot"] != 25 || admitted["warm"] != 10 {
		t.Fatalf("admitted %v, want hot 25 (the burst) and warm 10", admitted)
	}
	stats, err := client.Info(ctx, "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []string{"get", "set"} {
		if !strings.Contains(stats, "cmdstat_"+cmd+":calls=2,") {
			t.Errorf("want 2 calls of %s (one per key) for a batch of %d ops on 2 keys:\n%s", cmd, len(ops), stats)
		}
	}
	for _, k := range []string{"hot", "warm"} {
		if ttl := client.PTTL(ctx, s.Key(k)).Val(); ttl <= 0 {
			t.Errorf("key %s: PTTL %v, want an expiry", k, ttl)
		}
	}
}
