package redisstore_test

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/redisstore"
)

// A batch is decided in order, as separate calls would be, even when it
// holds the same key several times, with checks (some of them reserving a
// delay) and adjustments of one rule and of two mixed in it.
func TestBatchAgreesWithMemory(t *testing.T) {
	srv := redistest.Start(t)
	c := newClock()
	rs := redisstore.New(srv.Client(t), redisstore.Options{Now: c.Now})
	ms := memstore.New(memstore.Options{Now: c.Now, SweepInterval: -1})
	defer ms.Close()
	ruleSets := [][]sluice.Rule{{{Rate: 2, Burst: 5}}, {{Rate: 10, Burst: 10}, {Rate: 1, Burst: 30}}}
	rng := rand.New(rand.NewPCG(3, 4))
	checks, adjusts := 0, 0
	for round := 0; round < 1000; round++ {
		c.us.Add(rng.Int64N(200_000))
		batch := make([]redisstore.BatchOp, 1+rng.IntN(16))
		for i := range batch {
			k := rng.IntN(6)
			req := sluice.Request{Key: fmt.Sprint("k", k), Cost: rng.Int64N(6), Rules: ruleSets[k%2]}
			switch rng.IntN(8) {
			case 0:
				batch[i] = redisstore.BatchOp{Req: req, Adjust: true}
				batch[i].Req.Cost -= 3 // refunds too
			case 1:
				req.MaxDelay = time.Duration(rng.Int64N(2_000_000)) * time.Microsecond
				batch[i] = redisstore.BatchOp{Req: req}
			default:
				batch[i] = redisstore.BatchOp{Req: req}
			}
		}
		got, err := redisstore.RunBatch(ctx, rs, batch)
		if err != nil {
			t.Fatal(err)
		}
		for i, b := range batch {
			var want sluice.Result
			if b.Adjust {
				want, _ = ms.Adjust(ctx, b.Req.Key, b.Req.Cost, b.Req.Rules)
				adjusts++
			} else {
				want, _ = ms.Check(ctx, b.Req)
				checks++
			}
			if got[i] != want {
				t.Fatalf("round %d, op %d of %d (%s, %+v): redis %+v, memory %+v", round, i, len(batch), b.Req.Key, b, got[i], want)
			}
		}
	}
	t.Logf("%d checks and %d adjustments in 1000 batches agree", checks, adjusts)
}

// Coalesced concurrent checks admit exactly what separate ones would, in
// fewer script calls than checks.
func TestCoalescingKeepsTheLimitExact(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cluster bool
	}{{"standalone", false}, {"cluster", true}} {
		t.Run(tc.name, func(t *testing.T) {
			var client redis.UniversalClient
			var calls func() int64
			if tc.cluster {
				cl := redistest.StartCluster(t, 3, 0)
				client = cl.Client(t)
				calls = func() int64 {
					var n int64
					for _, m := range cl.Masters() {
						st := m.CommandStats(t)
						n += st["evalsha"].Calls + st["eval"].Calls
					}
					return n
				}
			} else {
				srv := redistest.Start(t)
				client = srv.Client(t)
				calls = func() int64 {
					st := srv.CommandStats(t)
					return st["evalsha"].Calls + st["eval"].Calls
				}
			}
			frozen := newClock() // stopped: nothing refills during the test
			rs := redisstore.New(client, redisstore.Options{Now: frozen.Now, Coalesce: &redisstore.Coalesce{MaxWait: 50 * time.Microsecond}})
			defer rs.Close()
			rules := []sluice.Rule{{Rate: 1, Burst: 300}}
			keys := []string{"a", "b", "c", "d", "e", "f"}
			var admitted [6]atomic.Int64
			var wg sync.WaitGroup
			const goroutines, each = 32, 120
			before := calls()
			for g := 0; g < goroutines; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < each; i++ {
						k := (g + i) % len(keys)
						r, err := rs.Check(ctx, sluice.Request{Key: keys[k], Cost: 1, Rules: rules})
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
			made := calls() - before
			for k := range keys {
				if n := admitted[k].Load(); n != 300 {
					t.Errorf("key %s: admitted %d of %d, want exactly the burst 300", keys[k], n, goroutines*each/len(keys))
				}
			}
			t.Logf("%d checks in %d script calls (%.1f a call)", goroutines*each, made, float64(goroutines*each)/float64(made))
			if made >= goroutines*each {
				t.Errorf("%d script calls for %d checks: nothing was coalesced", made, goroutines*each)
			}
		})
	}
}

func TestSlotMatchesRedis(t *testing.T) {
	srv := redistest.Start(t, redistest.WithArgs("--cluster-enabled", "yes"))
	client := srv.Client(t)
	for _, key := range []string{"a", "sluice:{user-1}", "{}x", "x{}y{z}", "foo{bar}{zap}", "123456789", "{user1000}.following"} {
		want, err := client.ClusterKeySlot(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		if got := redisstore.Slot(key); int64(got) != want {
			t.Errorf("Slot(%q) = %d, Redis says %d", key, got, want)
		}
	}
}

func TestClosedCoalescingStore(t *testing.T) {
	srv := redistest.Start(t)
	rs := redisstore.New(srv.Client(t), redisstore.Options{Coalesce: &redisstore.Coalesce{}})
	rules := []sluice.Rule{{Rate: 1, Burst: 1}}
	if _, err := rs.Check(ctx, sluice.Request{Key: "k", Cost: 1, Rules: rules}); err != nil {
		t.Fatal(err)
	}
	rs.Close()
	rs.Close()
	if _, err := rs.Check(ctx, sluice.Request{Key: "k", Cost: 1, Rules: rules}); err != redisstore.ErrClosed {
		t.Fatalf("after Close: %v", err)
	}
}
