package memstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testkit/fakeclock"
)

func mustQuota(t *testing.T, n int64, p sluice.Period, zone string) sluice.Rule {
	t.Helper()
	z, err := time.LoadLocation(zone)
	if err != nil {
		t.Fatal(err)
	}
	r, err := sluice.NewQuota(n, p, z)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// A key that spent its daily quota and is evicted by a flood of other keys
// at the cap comes back spent, until midnight: eviction never hands out a
// fresh quota.
func TestEvictionKeepsASpentQuota(t *testing.T) {
	clock := fakeclock.New(time.UnixMicro(1_700_000_000_000_000))
	clock.SetMicros(time.Date(2027, 2, 28, 12, 0, 0, 0, time.UTC).UnixMicro())
	s := New(Options{Now: clock.Now, Shards: 1, MaxKeys: 4, SweepInterval: -1})
	defer s.Close()
	ctx := context.Background()
	day := []sluice.Rule{mustQuota(t, 3, sluice.Day, "UTC")}
	if res, _ := s.Check(ctx, sluice.Request{Key: "customer", Cost: 3, Rules: day}); !res.Allowed {
		t.Fatal(res)
	}
	for i := range 1000 {
		s.Check(ctx, sluice.Request{Key: fmt.Sprint("flood", i), Cost: 1, Rules: rules(1, 1)})
		s.Check(ctx, sluice.Request{Key: fmt.Sprint("quota", i), Cost: 1, Rules: day})
	}
	if s.Len() > 4 {
		t.Fatalf("%d keys in the table; want at most the cap of 4", s.Len())
	}
	res, _ := s.Check(ctx, sluice.Request{Key: "customer", Cost: 1, Rules: day})
	if res.Allowed || res.RetryAfter != 12*time.Hour {
		t.Fatalf("after the flood: %+v; want denied until midnight", res)
	}
	if kept := len(s.shards[0].kept); kept < 990 {
		t.Fatalf("%d spent quotas kept outside the table; want nearly all 1000", kept)
	}
	clock.Advance(12 * time.Hour)
	s.Sweep(clock.Micros())
	if kept := len(s.shards[0].kept); kept != 0 {
		t.Fatalf("%d quotas still kept at midnight; want none: every period ended", kept)
	}
	if res, _ := s.Check(ctx, sluice.Request{Key: "customer", Cost: 3, Rules: day}); !res.Allowed {
		t.Fatalf("at midnight: %+v; want the whole new quota", res)
	}
}

// Under a tiny cap, keys with calendar quotas (alone, and beside a token
// bucket) answer exactly as in an uncapped store, across days and months:
// what eviction takes, it gives back whole.
func TestCappedQuotasAnswerAsUncapped(t *testing.T) {
	policies := [][]sluice.Rule{
		{mustQuota(t, 5, sluice.Day, "Europe/Berlin")},
		{{Rate: 2, Burst: 3}, mustQuota(t, 20, sluice.Month, "America/New_York")},
		{mustQuota(t, 8, sluice.Week, "UTC"), {Rate: 0.01, Burst: 4}, mustQuota(t, 6, sluice.Day, "UTC")},
	}
	for seed := uint64(1); seed <= 10; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 16))
			clock := fakeclock.New(time.UnixMicro(1_700_000_000_000_000))
			clock.SetMicros(time.Date(2027, 2, 20, 0, 0, 0, 0, time.UTC).UnixMicro())
			capped := New(Options{Now: clock.Now, Shards: 1, MaxKeys: 1 + rng.IntN(4), SweepInterval: -1})
			oracle := New(Options{Now: clock.Now, SweepInterval: -1})
			ctx := context.Background()
			for step := range 4000 {
				clock.Advance(time.Duration(rng.ExpFloat64() * float64(20*time.Minute)))
				k := rng.IntN(30)
				ru := policies[k%len(policies)]
				key := fmt.Sprint("k", k)
				if rng.IntN(10) == 0 {
					delta := rng.Int64N(7) - 3
					got, _ := capped.Adjust(ctx, sluice.Request{Key: key, Rules: ru}, delta)
					want, _ := oracle.Adjust(ctx, sluice.Request{Key: key, Rules: ru}, delta)
					if got != want {
						t.Fatalf("step %d: adjust %s by %d: capped %+v, uncapped %+v", step, key, delta, got, want)
					}
					continue
				}
				req := sluice.Request{Key: key, Cost: rng.Int64N(4), Rules: ru}
				got, _ := capped.Check(ctx, req)
				want, _ := oracle.Check(ctx, req)
				if got != want {
					t.Fatalf("step %d at %v: %s: capped %+v, uncapped %+v", step, clock.Now().UTC(), key, got, want)
				}
				if step%500 == 0 {
					capped.Sweep(clock.Micros())
				}
			}
		})
	}
}
