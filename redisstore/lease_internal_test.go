package redisstore

import (
	"context"
	"encoding/binary"
	"errors"
	"hash/maphash"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
)

// leaseStep is lease.lua in Go, step for step: refill b to now (µs), give
// back returned tokens (never above the burst), then take up to want whole
// tokens when cost is there.
func leaseStep(b *sluice.Bucket, r sluice.Rule, now, returned, want, cost int64) leaseGrant {
	elapsed := now - b.Last
	if elapsed < 0 {
		elapsed = 0
	}
	burst := float64(r.Burst)
	tokens := math.Min(burst, float64(b.Tokens+float64(float64(elapsed)/1e6*r.Rate)))
	if b.Last < now {
		b.Last = now
	}
	tokens = math.Min(burst, tokens+float64(returned))
	micros := func(t float64) int64 {
		if t <= 0 {
			return 0
		}
		return int64(math.Min(math.Ceil(t/r.Rate*1e6), 1<<53))
	}
	var g leaseGrant
	if tokens+1e-9 >= float64(cost) {
		g.tokens = int64(math.Min(float64(want), math.Floor(tokens+1e-9)))
		tokens -= float64(g.tokens)
	} else {
		g.wait = micros(float64(cost) - tokens)
	}
	g.waitLease = micros(math.Min(float64(want), burst) - tokens)
	g.reset = micros(burst - tokens)
	g.left = tokens
	b.Tokens = tokens
	return g
}

// TestLeaseScriptIsLeaseStep holds lease.lua to leaseStep on random
// buckets, times and requests: the same grant, waits and stored bucket,
// bit for bit.
func TestLeaseScriptIsLeaseStep(t *testing.T) {
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer client.Close()
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))
	var now time.Time
	s := New(client, Options{DisableCoalescing: true, Now: func() time.Time { return now }})
	for i := range 500 {
		r := sluice.Rule{Rate: math.Round(rng.Float64()*1e4)/100 + 0.01, Burst: 1 + rng.Int64N(1000)}
		last := int64(1_700_000_000_000_000) + rng.Int64N(1e9)
		b := sluice.Bucket{Tokens: rng.Float64()*float64(r.Burst)*1.2 - float64(r.Burst)*0.1, Last: last}
		nowUs := last + rng.Int64N(2e7) - 1e6 // sometimes behind the bucket
		now = time.UnixMicro(nowUs)
		cost := rng.Int64N(r.Burst + 1)
		want := max(cost, 1+rng.Int64N(2*r.Burst))
		returned := rng.Int64N(r.Burst)
		if i%5 == 0 {
			want, cost = 0, 0 // a return alone
		}
		key := "diff"
		packed := binary.LittleEndian.AppendUint64(nil, math.Float64bits(b.Tokens))
		packed = binary.LittleEndian.AppendUint64(packed, math.Float64bits(float64(b.Last)))
		if err := client.Set(ctx, s.Key(key), packed, 0).Err(); err != nil {
			t.Fatal(err)
		}
		got, err := s.takeLease(ctx, key, r, returned, want, cost)
		if err != nil {
			t.Fatal(err)
		}
		wantG := leaseStep(&b, r, nowUs, returned, want, cost)
		if got != wantG {
			t.Fatalf("case %d (rule %+v, bucket %+v, now %d, returned %d, want %d, cost %d): script %+v, Go %+v",
				i, r, b, nowUs, returned, want, cost, got, wantG)
		}
		stored, err := client.Get(ctx, s.Key(key)).Bytes()
		if err != nil || len(stored) != 16 {
			t.Fatalf("case %d: stored %q, %v", i, stored, err)
		}
		sb := sluice.Bucket{Tokens: math.Float64frombits(binary.LittleEndian.Uint64(stored)), Last: int64(math.Float64frombits(binary.LittleEndian.Uint64(stored[8:])))}
		if sb != b {
			t.Fatalf("case %d: script stored %+v, Go %+v", i, sb, b)
		}
	}
}

// TestLeaseBound is the property test of the local lease math: K Leased
// instances on one bucket (leaseStep, at a fake clock), random checks,
// clock steps, sweeps and failed lease calls (before or after the bucket
// took them). Whatever happens:
//   - from the start, admitted ≤ burst + rate × elapsed (no over-admission);
//   - in every window [t_i, t_j] between two admissions, admitted ≤ burst +
//     rate × (t_j − t_i) + K × (Lease.Tokens − 1);
//   - the leases hold at most K × (Lease.Tokens − 1), and the
//     bucket never more than its burst.
func TestLeaseBound(t *testing.T) {
	errFail := errors.New("injected failure")
	for seed := range uint64(2000) {
		rng := rand.New(rand.NewPCG(seed, 7))
		rule := sluice.Rule{Rate: 0.5 + rng.Float64()*200, Burst: 1 + rng.Int64N(60)}
		lease := Lease{Tokens: 1 + rng.Int64N(30), TTL: time.Duration(1+rng.Int64N(400)) * time.Millisecond}
		k := 1 + rng.IntN(4)
		maxCost := 1 + rng.Int64N(min(rule.Burst, 4))
		failRate := []float64{0, 0, 0.05, 0.3}[rng.IntN(4)]
		var clock int64 // ns
		bucket := sluice.FullBucket(rule, 0)
		take := func(_ context.Context, _ string, r sluice.Rule, returned, want, cost int64) (leaseGrant, error) {
			if rng.Float64() < failRate {
				if rng.IntN(2) == 0 {
					leaseStep(&bucket, r, clock/1000, returned, want, cost) // applied, then the answer was lost
				}
				return leaseGrant{}, errFail
			}
			return leaseStep(&bucket, r, clock/1000, returned, want, cost), nil
		}
		insts := make([]*Leased, k)
		for i := range insts {
			l, err := newLeased(nil, take, lease, func() int64 { return clock })
			if err != nil {
				t.Fatal(err)
			}
			insts[i] = l
		}
		var times []int64  // ns of each admission
		sums := []int64{0} // admitted cost before each admission, and after the last
		slack := float64(int64(k) * (lease.Tokens - 1))
		ctx := context.Background()
		for range 400 {
			switch x := rng.IntN(20); {
			case x < 6:
				clock += rng.Int64N(int64(2 * lease.TTL))
			case x < 7:
				insts[rng.IntN(k)].sweep(ctx, clock)
			default:
				cost := 1 + rng.Int64N(maxCost)
				res, err := insts[rng.IntN(k)].Check(ctx, sluice.Request{Key: "hot", Cost: cost, Rules: []sluice.Rule{rule}})
				if err != nil {
					if !errors.Is(err, errFail) {
						t.Fatal(err)
					}
					continue
				}
				if res.Allowed {
					times = append(times, clock)
					sums = append(sums, sums[len(sums)-1]+cost)
				} else if res.RetryAfter <= 0 {
					t.Fatalf("seed %d: a denial with RetryAfter %v", seed, res.RetryAfter)
				}
			}
			var held int64
			for _, l := range insts {
				for _, e := range l.shards[maphash.String(l.seed, "hot")%leaseShards].m {
					held += e.tokens
				}
			}
			if float64(held) > slack {
				t.Fatalf("seed %d: leases hold %d tokens, more than K × lease = %v", seed, held, slack)
			}
			if bucket.Tokens > float64(rule.Burst)+1e-9 {
				t.Fatalf("seed %d: bucket at %v above its burst %d", seed, bucket.Tokens, rule.Burst)
			}
		}
		// The worst window ending at each admission j starts at the i ≤ j
		// with the largest rate × t_i − (admitted before i), kept as j goes.
		best := math.Inf(-1)
		for j, tj := range times {
			admitted := float64(sums[j+1])
			if bound := float64(rule.Burst) + rule.Rate*float64(tj)/1e9 + 1e-6; admitted > bound {
				t.Fatalf("seed %d (rule %+v, lease %+v, K %d): %v admitted by %v, over burst + rate × elapsed = %v",
					seed, rule, lease, k, admitted, time.Duration(tj), bound)
			}
			best = max(best, rule.Rate*float64(tj)/1e9-float64(sums[j]))
			if excess := admitted - rule.Rate*float64(tj)/1e9 + best; excess > float64(rule.Burst)+slack+1e-6 {
				t.Fatalf("seed %d (rule %+v, lease %+v, K %d): a window ending at %v admitted %v more than rate × its length, over burst + K × lease = %v",
					seed, rule, lease, k, time.Duration(tj), excess, float64(rule.Burst)+slack)
			}
		}
	}
}
