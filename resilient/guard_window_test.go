package resilient_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/resilient"
)

// allowAll is a store that allows every check: a window algorithm's
// store at a window's edge, where it rightly allows a second burst.
type allowAll struct{}

func (allowAll) Check(_ context.Context, req sluice.Request) (sluice.Result, error) {
	return sluice.Result{Allowed: true, Limit: req.Rules[0].Burst, Remaining: req.Rules[0].Burst}, nil
}

func (allowAll) Adjust(_ context.Context, req sluice.Request, _ int64) (sluice.Result, error) {
	return sluice.Result{Allowed: true, Limit: req.Rules[0].Burst}, nil
}

// The guard allows the algorithms of aligned windows (the fixed window,
// the sliding window counter) twice the burst at once, what a fixed
// window admits across one edge of its windows (B at the end of one, B at
// the start of the next), and still catches a store that allows more;
// the buckets' and the sliding log's guard keeps the burst (the log
// admits at most B in any window). Before, the guard held every
// algorithm to B and denied the second half of each boundary burst as a
// forgotten bucket.
func TestGuardAllowsAWindowsBoundaryBurst(t *testing.T) {
	const burst = 10
	rules := []sluice.Rule{{Rate: 1, Burst: burst}}
	// Slack: ceil(rate × 50ms) + 1 = 2 tokens beyond the guard's bucket.
	const slack = 2
	// A year's window (envoyproxy/ratelimit's unit YEAR), and a bucket
	// that refills in a year: the guard's burst (twice it, or the slack
	// alone) at the rule's rate would take longer to refill than a rule
	// may, and the guard's store refused it: the guard was off.
	year := []sluice.Rule{{Rate: burst / (365 * 86400.0), Burst: burst}}
	for _, c := range []struct {
		alg   string
		rules []sluice.Rule
	}{
		{"", rules}, {algo.TokenBucket, rules}, {algo.LeakyBucket, rules},
		{algo.FixedWindow, rules}, {algo.SlidingWindow, rules}, {algo.SlidingLog, rules},
		{algo.FixedWindow, year}, {"", year},
	} {
		alg, rules := c.alg, c.rules
		t.Run(fmt.Sprintf("algorithm=%q/window=%v", alg, algo.Window(rules[0])), func(t *testing.T) {
			s := newStore(t, allowAll{}, resilient.Options{DenialCacheSize: -1})
			req := sluice.Request{Key: "k", Cost: 1, Rules: rules, Algorithm: alg}
			start := time.Now()
			admitted, firstForgotten := 0, 0
			for i := 1; i <= 3*burst; i++ {
				res, d, err := s.CheckDecision(ctx, req)
				if err != nil {
					t.Fatal(err)
				}
				if res.Allowed {
					admitted++
				}
				if d.Reason == resilient.ReasonForgotten && firstForgotten == 0 {
					firstForgotten = i
				}
			}
			guardBurst := burst
			if alg == algo.FixedWindow || alg == algo.SlidingWindow {
				guardBurst = 2 * burst
			}
			refill := int(rules[0].Rate*time.Since(start).Seconds()) + 1
			t.Logf("admitted %d of %d; first guard denial at check %d", admitted, 3*burst, firstForgotten)
			if firstForgotten == 0 || firstForgotten <= guardBurst || admitted > guardBurst+slack+refill {
				t.Fatalf("admitted %d, first guard denial at check %d: want the first denial after %d checks and at most %d admitted",
					admitted, firstForgotten, guardBurst, guardBurst+slack+refill)
			}
		})
	}
}

// The same with a real fixed window, in real time: B checks late in one
// window of 1s and B just after the next begins are all allowed, by the
// store, and none is denied by the guard. An attempt that a stall of the
// machine carries across another edge is made again with a new key.
func TestGuardLetsAFixedWindowsEdgeThrough(t *testing.T) {
	const burst = 10
	fw, err := algo.Memory(algo.FixedWindow, algo.MemoryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	router, err := algo.NewRouter(memstore.New(memstore.Options{}), fw)
	if err != nil {
		t.Fatal(err)
	}
	s := newStore(t, router, resilient.Options{DenialCacheSize: -1})
	rules := []sluice.Rule{{Rate: burst, Burst: burst}} // W = 1s
	window := func() int64 { return time.Now().UnixMicro() / 1_000_000 }
	into := func() time.Duration { return time.Duration(time.Now().UnixMicro()%1_000_000) * time.Microsecond }
	// burstOf makes burst checks of req and returns how many were
	// allowed and the decisions of those that were not.
	burstOf := func(req sluice.Request) (allowed int, denied []resilient.Decision) {
		for range burst {
			res, d, err := s.CheckDecision(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			if res.Allowed {
				allowed++
			} else {
				denied = append(denied, d)
			}
		}
		return allowed, denied
	}
	for attempt := range 10 {
		req := sluice.Request{Key: fmt.Sprintf("edge-%d", attempt), Cost: 1, Rules: rules, Algorithm: algo.FixedWindow}
		if at := into(); at < 700*time.Millisecond {
			time.Sleep(700*time.Millisecond - at)
		}
		w := window()
		first, _ := burstOf(req)
		if window() != w {
			continue // a stall carried the first burst into the next window
		}
		time.Sleep(time.Second - into() + 10*time.Millisecond)
		if window() != w+1 {
			continue
		}
		second, denied := burstOf(req)
		if window() != w+1 {
			continue
		}
		if first != burst || second != burst {
			t.Fatalf("a fixed window of %d a second, %d checks before an edge and %d after: %d and %d allowed (denials after the edge: %+v)", burst, burst, burst, first, second, denied)
		}
		return
	}
	t.Fatal("no attempt of 10 kept each burst within its window: the machine stalled through every one")
}
