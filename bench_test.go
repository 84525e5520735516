package sluice

import (
	"testing"
	"time"
)

// BenchmarkDecide is the bucket math alone, for one token bucket and for
// two, the hot path of every store.
func BenchmarkDecide(b *testing.B) {
	for _, bc := range []struct {
		name  string
		rules []Rule
	}{
		{"one", []Rule{{Rate: 1e6, Burst: 1e6}}},
		{"two", []Rule{{Rate: 1e6, Burst: 1e6}, {Rate: 1e3, Burst: 1e9}}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			buckets := make([]Bucket, len(bc.rules))
			for i, r := range bc.rules {
				buckets[i] = FullBucket(r, 0)
			}
			now := int64(1_800_000_000_000_000)
			b.ReportAllocs()
			for b.Loop() {
				now++
				req := Request{Key: "k", Cost: 1, Rules: bc.rules}
				if ValidateRequest(req) != nil {
					b.Fatal("invalid")
				}
				Decide(buckets, bc.rules, now, req.Cost, time.Duration(0))
			}
		})
	}
}
