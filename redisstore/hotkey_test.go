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
	"github.com/sluicehq/sluice/internal/testkit/fakeclock"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
	"github.com/sluicehq/sluice/redisstore"
)

// model is the sequential definition a batch is held against: one call of
// sluice.Decide or sluice.AdjustBuckets per op, in the order of the batch,
// at the batch's instant, on buckets kept per key as the script keeps
// them (a state of another number of rules is a set of full buckets).
type model map[string][]sluice.Bucket

func (m model) do(b redisstore.BatchOp, now int64) sluice.Result {
	rules := b.Req.Rules
	buckets := m[b.Req.Key]
	if len(buckets) != len(rules) {
		buckets = make([]sluice.Bucket, len(rules))
		for i, r := range rules {
			buckets[i] = sluice.FullBucket(r, now)
		}
		m[b.Req.Key] = buckets
	}
	if b.Adjust {
		return sluice.AdjustBuckets(buckets, rules, now, b.Req.Cost)
	}
	return sluice.Decide(buckets, rules, now, b.Req.Cost, b.Req.MaxDelay)
}

// The checks of one key that meet in a batch are decided together, one
// read and one write of the key, and every one of them gets the answer it
// would get alone, one after the other at the batch's instant: random
// batches of up to 64 ops over a few keys (so each key comes many times
// in a batch), costs from 0 to the burst, reservations, charges and
// refunds, one rule and several, and keys that change rules between ops
// (the same count of rules at other rates, or another count), against the
// sequential definition. On a Cluster the batch goes as a coalescing
// store sends it, a script call per slot in one pipeline, with keys that
// share a slot through their hash tag.
func TestGroupedBatchesAgreeWithSequential(t *testing.T) {
	ruleSets := [][]sluice.Rule{
		{{Rate: 2, Burst: 5}},
		{{Rate: 7, Burst: 4}}, // one rule too, other numbers: same state layout
		{{Rate: 0.5, Burst: 6}},
		{{Rate: 10, Burst: 10}, {Rate: 1, Burst: 30}},
		{{Rate: 20, Burst: 8}, {Rate: 100.0 / 60, Burst: 12}, {Rate: 0.1, Burst: 50}},
	}
	for _, tc := range []struct {
		name    string
		cluster bool
	}{{"standalone", false}, {"cluster", true}} {
		t.Run(tc.name, func(t *testing.T) {
			var client redis.UniversalClient
			if tc.cluster {
				client = redistest.StartCluster(t, 3, 0).Client(t)
			} else {
				client = redistest.Start(t).Client(t)
			}
			c := fakeclock.New(time.Now())
			rs := redisstore.New(client, redisstore.Options{Now: c.Now, Coalesce: &redisstore.Coalesce{}})
			defer rs.Close()
			// Keys a}1, a}2, a}3 share the slot of the tag "a" on a
			// Cluster (the store names them sluice:{a}1} …).
			keys := []string{"hot", "a}1", "a}2", "a}3", "cold"}
			want := model{}
			rng := rand.New(rand.NewPCG(7, 8))
			var ops, grouped, calls int
			for round := 0; round < 600; round++ {
				if rng.IntN(5) > 0 { // else the same instant as the batch before
					c.AdvanceMicros(rng.Int64N(300_000))
				}
				batch := make([]redisstore.BatchOp, 1+rng.IntN(64))
				stick := ruleSets[rng.IntN(len(ruleSets))] // most ops of a round share rules
				for i := range batch {
					k := keys[min(rng.IntN(8), len(keys)-1)] // "cold" most often: 4 in 8
					if rng.IntN(3) == 0 {
						k = keys[0]
					}
					rules := stick
					if rng.IntN(6) == 0 {
						rules = ruleSets[rng.IntN(len(ruleSets))]
					}
					least := rules[0].Burst
					for _, r := range rules {
						least = min(least, r.Burst)
					}
					req := sluice.Request{Key: k, Cost: rng.Int64N(least + 1), Rules: rules}
					switch rng.IntN(10) {
					case 0:
						batch[i] = redisstore.BatchOp{Req: req, Adjust: true}
						batch[i].Req.Cost -= 3 // refunds too
					case 1, 2:
						req.MaxDelay = time.Duration(rng.Int64N(3_000_000)) * time.Microsecond
						batch[i] = redisstore.BatchOp{Req: req}
					default:
						batch[i] = redisstore.BatchOp{Req: req}
					}
				}
				var got []sluice.Result
				var err error
				if tc.cluster {
					got, err = redisstore.SendBatch(rs, batch)
				} else {
					got, err = redisstore.RunBatch(ctx, rs, batch)
				}
				if err != nil {
					t.Fatalf("round %d: %v", round, err)
				}
				now := c.Now().UnixMicro()
				seen := map[string]bool{}
				for i, b := range batch {
					w := want.do(b, now)
					if got[i] != w {
						t.Fatalf("round %d, op %d of %d (%s, %+v): batch %+v, one by one %+v", round, i, len(batch), b.Req.Key, b, got[i], w)
					}
					if seen[b.Req.Key] {
						grouped++
					}
					seen[b.Req.Key] = true
				}
				ops += len(batch)
				calls++
			}
			t.Logf("%d ops in %d batches agree; %d of them met an earlier op of their key in the batch", ops, calls, grouped)
		})
	}
}

// The state a batch leaves is the state the ops one by one leave, and so
// is its expiry: every key written once, with the expiry of its last op.
func TestGroupedBatchLeavesTheSequentialState(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	c := fakeclock.New(time.Now())
	rs := redisstore.New(client, redisstore.Options{Now: c.Now})
	rules := [][]sluice.Rule{{{Rate: 0.25, Burst: 9}}, {{Rate: 4, Burst: 9}, {Rate: 0.01, Burst: 40}}}
	want := model{}
	rng := rand.New(rand.NewPCG(9, 10))
	for round := 0; round < 100; round++ {
		c.AdvanceMicros(rng.Int64N(400_000))
		batch := make([]redisstore.BatchOp, 2+rng.IntN(40))
		for i := range batch {
			k := rng.IntN(3)
			batch[i] = redisstore.BatchOp{Req: sluice.Request{Key: fmt.Sprint("s", k), Cost: rng.Int64N(4), Rules: rules[k%2]}}
		}
		start := time.Now()
		if _, err := redisstore.RunBatch(ctx, rs, batch); err != nil {
			t.Fatal(err)
		}
		now := c.Now().UnixMicro()
		last := map[string][]sluice.Rule{}
		for _, b := range batch {
			want.do(b, now)
			last[b.Req.Key] = b.Req.Rules
		}
		for k, r := range last {
			pttl, err := client.PTTL(ctx, rs.Key(k)).Result()
			if err != nil {
				t.Fatal(err)
			}
			elapsed := time.Since(start)
			// The script's expiry: ceil(longest refill in ms) + the margin.
			longest := sluice.ExpiryAfter(want[k], r, now, 0)
			expiry := (longest + time.Millisecond - 1).Truncate(time.Millisecond) + time.Second
			if pttl > expiry || pttl < expiry-elapsed-time.Millisecond {
				t.Fatalf("round %d, key %s: PTTL %v, want %v less the %v since the batch was sent", round, k, pttl, expiry, elapsed)
			}
		}
	}
}

// A hot key's checks in one batch cost Redis one GET and one SET, not one
// of each a check: a flood from one caller is O(1) work a batch.
func TestHotKeyIsOneReadAndOneWriteABatch(t *testing.T) {
	srv := redistest.Start(t)
	rs := redisstore.New(srv.Client(t), redisstore.Options{})
	rules := []sluice.Rule{{Rate: 1, Burst: 10}}
	batch := make([]redisstore.BatchOp, 64)
	for i := range batch {
		k := "hot"
		if i%16 == 5 || i >= 60 {
			k = fmt.Sprint("other", i) // eight other keys: four in between, four at the end
		}
		batch[i] = redisstore.BatchOp{Req: sluice.Request{Key: k, Cost: 1, Rules: rules}}
	}
	if _, err := redisstore.RunBatch(ctx, rs, batch[60:]); err != nil { // loads the script
		t.Fatal(err)
	}
	srv.ResetStats(t)
	got, err := redisstore.RunBatch(ctx, rs, batch)
	if err != nil {
		t.Fatal(err)
	}
	allowed := 0
	for i, r := range got {
		if batch[i].Req.Key == "hot" && r.Allowed {
			allowed++
		}
	}
	if allowed != 10 {
		t.Errorf("hot key: %d of 56 checks admitted, want the burst, 10", allowed)
	}
	st := srv.CommandStats(t)
	if st["get"].Calls != 9 || st["set"].Calls != 9 || st["evalsha"].Calls+st["eval"].Calls != 1 {
		t.Errorf("64 checks of 9 keys in one batch: %d GET, %d SET, %d script calls; want 9, 9 and 1", st["get"].Calls, st["set"].Calls, st["evalsha"].Calls+st["eval"].Calls)
	}
}

// Many goroutines on one key, through the default coalescing store and
// the server's clock: what is admitted never exceeds the burst plus the
// refill over the measured time (plus rate × max_delay when the checks
// may reserve), however the checks were batched, and the key was read far
// fewer times than it was checked.
func TestHotKeyUnderConcurrency(t *testing.T) {
	for _, tc := range []struct {
		name     string
		cluster  bool
		maxDelay time.Duration
	}{{"standalone", false, 0}, {"cluster", true, 0}, {"standalone, paced", false, 300 * time.Millisecond}} {
		t.Run(tc.name, func(t *testing.T) {
			var client redis.UniversalClient
			var servers []*redistest.Server
			if tc.cluster {
				cl := redistest.StartCluster(t, 3, 0)
				client, servers = cl.Client(t), cl.Masters()
			} else {
				srv := redistest.Start(t)
				client, servers = srv.Client(t), []*redistest.Server{srv}
			}
			rs := redisstore.New(client, redisstore.Options{})
			defer rs.Close()
			rule := sluice.Rule{Rate: 200, Burst: 50}
			rules := []sluice.Rule{rule}
			for _, s := range servers {
				s.ResetStats(t)
			}
			const goroutines = 32
			var admitted, checks atomic.Int64
			var wg sync.WaitGroup
			start := time.Now()
			stop := start.Add(time.Second)
			for g := 0; g < goroutines; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					// A few checks each whatever the clock says: a loaded
					// machine may start a goroutine after stop, and the
					// checks must outnumber the burst (128 > 50).
					for i := 0; i < 4 || time.Now().Before(stop); i++ {
						r, err := rs.Check(ctx, sluice.Request{Key: "flood", Cost: 1, Rules: rules, MaxDelay: tc.maxDelay})
						if err != nil {
							t.Error(err)
							return
						}
						if r.Delay > tc.maxDelay {
							t.Errorf("a check was told to wait %v, more than its max delay %v", r.Delay, tc.maxDelay)
							return
						}
						checks.Add(1)
						if r.Allowed {
							admitted.Add(1)
						}
					}
				}()
			}
			wg.Wait()
			elapsed := time.Since(start)
			var gets, scripts int64
			for _, s := range servers {
				st := s.CommandStats(t)
				gets += st["get"].Calls
				scripts += st["evalsha"].Calls + st["eval"].Calls
			}
			// The key's first check finds it full; from then on it refills
			// at most over the wall time the checks took (Redis's clock
			// and ours run at the same rate), and reservations take at
			// most rate × max_delay ahead.
			bound := float64(rule.Burst) + rule.Rate*(elapsed+tc.maxDelay).Seconds() + 1
			n := admitted.Load()
			t.Logf("%d checks in %v: %d admitted (bound %.0f), %d script calls, %d reads of the key (%.1f checks a read)",
				checks.Load(), elapsed.Round(time.Millisecond), n, bound, scripts, gets, float64(checks.Load())/float64(max(gets, 1)))
			if float64(n) > bound {
				t.Errorf("admitted %d, more than burst + rate × elapsed = %.0f", n, bound)
			}
			if n < rule.Burst {
				t.Errorf("admitted %d, less than the burst %d of a full bucket", n, rule.Burst)
			}
			if scripts+gets >= 2*checks.Load() {
				t.Errorf("%d checks took %d script calls and %d reads of the key: nothing was decided together", checks.Load(), scripts, gets)
			}
		})
	}
}

// wrapped hides the client's type, as instrumentation around a client
// would: it is a Scripter and nothing else, and cannot pipeline.
type wrapped struct{ redis.Scripter }

// A client the store does not know as one server, here a Cluster client
// behind a wrapper, is batched a script call per slot: coalesced checks
// over keys of every slot never cross slots, and the limit stays exact.
func TestWrappedClusterClientIsBatchedBySlot(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	frozen := fakeclock.New(time.Now())
	rs := redisstore.New(wrapped{cl.Client(t)}, redisstore.Options{Now: frozen.Now})
	defer rs.Close()
	rules := []sluice.Rule{{Rate: 1, Burst: 20}}
	const keys, goroutines, each = 40, 32, 100
	var admitted [keys]atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				k := (g*7 + i) % keys
				r, err := rs.Check(ctx, sluice.Request{Key: fmt.Sprint("w", k), Cost: 1, Rules: rules})
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
	for k := range admitted {
		if n := admitted[k].Load(); n != 20 {
			t.Errorf("key w%d: admitted %d of %d, want exactly the burst 20", k, n, goroutines*each/keys)
		}
	}
}
