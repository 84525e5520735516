package algo

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testkit/fakeclock"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
)

var ctx = context.Background()

// The differential test: for every algorithm, one random sequence of
// checks and adjustments on a handful of keys (one to three rules,
// fractional rates, costs from 0 to the burst, a max delay for the
// leaky bucket, denied costs counted, some above the burst, for the fixed
// window, and now and then a clock that steps back) gives exactly
// the same results from the in-memory store and from the Lua script in
// client-clock mode.
func TestRedisAgreesWithMemory(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.ExactClient(t)
	ruleSets := [][]sluice.Rule{
		{{Rate: 1, Burst: 3}},
		{{Rate: 10, Burst: 20}},
		{{Rate: 0.5, Burst: 2}},
		{{Rate: 1.0 / 3, Burst: 7}},
		{{Rate: 20, Burst: 100}, {Rate: 10000.0 / 86400, Burst: 150}},
		{{Rate: 5, Burst: 5}, {Rate: 100.0 / 60, Burst: 30}, {Rate: 0.1, Burst: 50}},
		{{Rate: 200, Burst: 1200}},                                   // costs above the script's ZADD chunk of 500
		{{Rate: 7.0 / 60, Burst: 7}, {Rate: 11.0 / 3600, Burst: 11}}, // W snapped to the unit
	}
	for _, name := range Names()[1:] {
		t.Run(name, func(t *testing.T) {
			c := fakeclock.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
			ms, err := Memory(name, MemoryOptions{Now: c.Now, SweepInterval: -1})
			if err != nil {
				t.Fatal(err)
			}
			defer ms.Close()
			// Redis expires a key by its own wall clock, the script's
			// expiry being the state's idle time in injected time plus the
			// margin: with the default margin of a second, a stall of the
			// machine longer than the injected time that passed between
			// two checks of a key drops state that still matters, and the
			// stores disagree. The margin of an hour keeps every key for
			// the length of the test, as the in-memory store (no sweep)
			// keeps it; the expiry itself is TestExpiryOnEveryPath's.
			rs, err := Redis(name, client, RedisOptions{Now: c.Now, ExpiryMargin: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(7, uint64(len(name))))
			const steps = 5000
			counts := map[string]int{}
			for i := range steps {
				switch rng.IntN(25) {
				case 0:
					c.AdvanceMicros(-rng.Int64N(300_000)) // a clock that is behind
				case 1:
					c.AdvanceMicros(rng.Int64N(30_000_000)) // a long pause
				default:
					c.AdvanceMicros(rng.Int64N(120_000))
				}
				k := rng.IntN(21)
				rules := ruleSets[k%len(ruleSets)]
				key := fmt.Sprintf("user-%d", k)
				minBurst := rules[0].Burst
				for _, r := range rules {
					minBurst = min(minBurst, r.Burst)
				}
				var want, got sluice.Result
				var werr, gerr error
				if rng.IntN(12) == 0 {
					delta := rng.Int64N(2*minBurst+1) - minBurst
					want, werr = ms.Adjust(ctx, sluice.Request{Key: key, Rules: rules}, delta)
					got, gerr = rs.Adjust(ctx, sluice.Request{Key: key, Rules: rules}, delta)
					counts["adjust"]++
				} else {
					req := sluice.Request{Key: key, Cost: rng.Int64N(minBurst + 1), Rules: rules}
					if rng.IntN(3) > 0 {
						req.Cost = min(req.Cost, 1)
					}
					if name == LeakyBucket && rng.IntN(3) == 0 {
						req.MaxDelay = time.Duration(rng.Int64N(3000)) * time.Millisecond
					}
					if name == FixedWindow && rng.IntN(2) == 0 {
						req.CountDenied = true // envoyproxy/ratelimit's window
						if rng.IntN(8) == 0 {
							req.Cost = rng.Int64N(3 * minBurst) // above the burst too
						}
					}
					want, werr = ms.Check(ctx, req)
					got, gerr = rs.Check(ctx, req)
					switch {
					case want.Delay > 0:
						counts["delayed"]++
					case want.Allowed:
						counts["allowed"]++
					case req.CountDenied:
						counts["denied and counted"]++
					default:
						counts["denied"]++
					}
				}
				if werr != nil || gerr != nil {
					t.Fatalf("step %d: errors: memory %v, redis %v", i, werr, gerr)
				}
				if got != want {
					t.Fatalf("step %d, key %s, rules %v:\nredis  %+v\nmemory %+v", i, key, rules, got, want)
				}
			}
			t.Logf("%d steps agree: %v", steps, counts)
			if counts["allowed"] == 0 || counts["denied"] == 0 || (name == LeakyBucket && counts["delayed"] == 0) ||
				(name == FixedWindow && counts["denied and counted"] == 0) {
				t.Fatalf("the sequence did not cover every outcome: %v", counts)
			}
		})
	}
}
