package sluice

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestInspectBucketsIsDecide: the standing InspectBuckets reports on each
// rule is what Decide of that rule alone reports for a check of cost 0
// (remaining, reset) and of cost 1 (allowed, retry), and the buckets are
// left as they were.
func TestInspectBucketsIsDecide(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	rules := []Rule{{Rate: 3, Burst: 10}, {Rate: 0.01, Burst: 7}, {Rate: 1000, Burst: 1e6}}
	for range 2000 {
		now := int64(1_700_000_000_000_000 + rng.IntN(10_000_000))
		buckets := make([]Bucket, len(rules))
		for i, r := range rules {
			buckets[i] = Bucket{Tokens: rng.Float64()*float64(r.Burst+2) - 2, Last: now - int64(rng.IntN(5_000_000))}
		}
		before := slices.Clone(buckets)
		got := InspectBuckets(buckets, rules, now)
		if !slices.Equal(buckets, before) {
			t.Fatal("InspectBuckets changed the buckets")
		}
		for i, r := range rules {
			zero := []Bucket{before[i]}
			d0 := Decide(zero, []Rule{r}, now, 0, 0)
			one := []Bucket{before[i]}
			d1 := Decide(one, []Rule{r}, now, 1, 0)
			if got[i].Rule != i || got[i].Limit != r.Burst || got[i].Remaining != d0.Remaining || got[i].ResetAfter != d0.ResetAfter ||
				got[i].Allowed != d1.Allowed || got[i].RetryAfter != d1.RetryAfter {
				t.Fatalf("rule %d of %+v at %d: Inspect %+v, Decide cost 0 %+v, cost 1 %+v", i, before[i], now, got[i], d0, d1)
			}
		}
	}
}
