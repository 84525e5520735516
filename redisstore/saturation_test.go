package redisstore_test

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testkit/fakeclock"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/redisstore"
)

// Debt charged by Adjust has no bound, so the waits it causes saturate at
// sluice.MaxWait; the Lua scripts clamp at the same 2^53 µs and keep
// agreeing with the Go bit for bit, on the one-rule script, the batch
// script's unrolled path and its general path, at the edges of the bounds.
func TestRedisAgreesWithMemoryAtTheBounds(t *testing.T) {
	srv := redistest.Start(t)
	c := fakeclock.New(time.Now())
	rs := redisstore.New(srv.Client(t), redisstore.Options{Now: c.Now})
	ms := memstore.New(memstore.Options{Now: c.Now, SweepInterval: -1})
	defer ms.Close()

	slowest := 1 / sluice.MaxRefillTime.Seconds()
	ruleSets := [][]sluice.Rule{
		{{Rate: slowest, Burst: 1}},
		{{Rate: sluice.MaxRate, Burst: sluice.MaxBurst}},
		{{Rate: slowest * 1000, Burst: 1000}, {Rate: sluice.MaxRate, Burst: sluice.MaxBurst}},
	}
	saturated := 0
	for i, rules := range ruleSets {
		key := fmt.Sprintf("edge-%d", i)
		steps := []func() (sluice.Result, sluice.Result, error, error){}
		check := func(cost int64, maxDelay time.Duration) {
			steps = append(steps, func() (sluice.Result, sluice.Result, error, error) {
				req := sluice.Request{Key: key, Cost: cost, Rules: rules, MaxDelay: maxDelay}
				w, werr := ms.Check(ctx, req)
				g, gerr := rs.Check(ctx, req)
				return w, g, werr, gerr
			})
		}
		adjust := func(delta int64) {
			steps = append(steps, func() (sluice.Result, sluice.Result, error, error) {
				w, werr := ms.Adjust(ctx, sluice.Request{Key: key, Rules: rules}, delta)
				g, gerr := rs.Adjust(ctx, sluice.Request{Key: key, Rules: rules}, delta)
				return w, g, werr, gerr
			})
		}
		check(1, 0)
		check(rules[0].Burst, sluice.MaxDelayLimit) // all of the first rule's burst
		check(1, sluice.MaxDelayLimit)
		adjust(math.MaxInt64)
		check(1, sluice.MaxDelayLimit)
		check(0, 0)
		adjust(math.MaxInt64)
		adjust(math.MinInt64)
		check(1, 0)
		for j, step := range steps {
			c.AdvanceMicros(1000)
			want, got, werr, gerr := step()
			if werr != nil || gerr != nil {
				t.Fatalf("rules %v step %d: errors: memory %v, redis %v", rules, j, werr, gerr)
			}
			if got != want {
				t.Fatalf("rules %v step %d:\nredis  %+v\nmemory %+v", rules, j, got, want)
			}
			if want.RetryAfter < 0 || want.ResetAfter < 0 || want.Remaining < 0 || want.RetryAfter > sluice.MaxWait || want.ResetAfter > sluice.MaxWait {
				t.Fatalf("rules %v step %d: a wrapped value: %+v", rules, j, want)
			}
			if want.ResetAfter == sluice.MaxWait {
				saturated++
			}
		}
	}
	if saturated == 0 {
		t.Fatal("no step reached MaxWait: the clamp was not exercised")
	}
	t.Logf("%d results saturated at MaxWait, identical on both stores", saturated)
}
