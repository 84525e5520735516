package redisstore_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testkit/fakeclock"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/redisstore"
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

// quotaRuleSets mix per-second token buckets and calendar quotas of every
// period in zones with and without daylight saving.
func quotaRuleSets(t *testing.T) [][]sluice.Rule {
	return [][]sluice.Rule{
		{mustQuota(t, 5, sluice.Day, "Europe/Berlin")},
		{{Rate: 10, Burst: 3}, mustQuota(t, 20, sluice.Month, "America/New_York")},
		{mustQuota(t, 7, sluice.Week, "UTC"), {Rate: 1, Burst: 2}, mustQuota(t, 4, sluice.Day, "America/New_York")},
		{{Rate: 2, Burst: 5}},
		{mustQuota(t, 9, sluice.Month, "Europe/Berlin"), {Rate: 0.5, Burst: 4}},
	}
}

// quotaClock moves a clock from late February 2027 into the summer: by
// small steps, to a quota's period boundary (exactly, or a microsecond
// before it) when one is a day or so away, and by hours, so that the sequence crosses
// the end of a 28-day February and the daylight-saving changes of New York
// (14 March) and Berlin (28 March).
func quotaClock(rng *rand.Rand, us *int64, sets [][]sluice.Rule) {
	now := time.UnixMicro(*us)
	switch n := rng.IntN(10); {
	case n < 4:
		*us += rng.Int64N(300_000)
	case n < 7:
		rules := sets[rng.IntN(len(sets))]
		r := rules[rng.IntN(len(rules))]
		if r.Period == sluice.Rolling {
			*us += rng.Int64N(2_000_000)
			return
		}
		_, end := r.Window(now)
		if end.Sub(now) > 36*time.Hour {
			*us += rng.Int64N(12 * 3600 * 1e6)
			return
		}
		*us = end.UnixMicro()
		if n == 6 {
			*us-- // a microsecond before
		}
	default:
		*us += rng.Int64N(12 * 3600 * 1e6)
	}
}

// The differential test of quotas: random sequences of (time, cost, rules)
// mixing token buckets and calendar quotas, checks, reservations, charges
// and refunds, give the same results from the in-memory store and from
// Redis in client-clock mode, one call at a time and in batches as the
// coalescing store sends them (on a Cluster, a script call per slot).
func TestQuotasAgreeWithMemory(t *testing.T) {
	sets := quotaRuleSets(t)
	for _, tc := range []struct {
		name    string
		batch   bool
		cluster bool
	}{{"one by one", false, false}, {"batches", true, false}, {"cluster batches", true, true}} {
		t.Run(tc.name, func(t *testing.T) {
			var client redis.UniversalClient
			if tc.cluster {
				client = redistest.StartCluster(t, 3, 0).Client(t)
			} else {
				client = redistest.Start(t).Client(t)
			}
			c := fakeclock.New(time.Now())
			c.SetMicros(time.Date(2027, 2, 27, 22, 0, 0, 0, time.UTC).UnixMicro())
			opts := redisstore.Options{Now: c.Now, DisableCoalescing: !tc.cluster}
			if tc.cluster {
				opts.Coalesce = &redisstore.Coalesce{}
			}
			rs := redisstore.New(client, opts)
			defer rs.Close()
			ms := memstore.New(memstore.Options{Now: c.Now, SweepInterval: -1})
			defer ms.Close()
			keys := []string{"a}1", "a}2", "b", "c"}
			rng := rand.New(rand.NewPCG(11, 12))
			var ops, denied, quotaDenied int
			for round := 0; round < 1000; round++ {
				us := c.Micros()
				quotaClock(rng, &us, sets)
				c.SetMicros(us)
				size := 1
				if tc.batch {
					size += rng.IntN(12)
				}
				batch := make([]redisstore.BatchOp, size)
				for i := range batch {
					k := rng.IntN(len(keys))
					rules := sets[k%len(sets)]
					// A key whose rules change, to others of the same count:
					// memstore keeps a state per count, Redis one per key.
					if other := sets[rng.IntN(len(sets))]; rng.IntN(8) == 0 && len(other) == len(rules) {
						rules = other
					}
					least := rules[0].Burst
					for _, r := range rules {
						least = min(least, r.Burst)
					}
					req := sluice.Request{Key: keys[k], Cost: rng.Int64N(least + 1), Rules: rules}
					switch rng.IntN(10) {
					case 0:
						batch[i] = redisstore.BatchOp{Req: req, Adjust: true}
						batch[i].Req.Cost -= 2 // refunds too
					case 1, 2:
						req.MaxDelay = time.Duration(rng.Int64N(3_000_000)) * time.Microsecond
						batch[i] = redisstore.BatchOp{Req: req}
					default:
						batch[i] = redisstore.BatchOp{Req: req}
					}
				}
				got := make([]sluice.Result, len(batch))
				var err error
				switch {
				case tc.cluster:
					got, err = redisstore.SendBatch(rs, batch)
				case tc.batch:
					got, err = redisstore.RunBatch(ctx, rs, batch)
				default:
					b := batch[0]
					if b.Adjust {
						got[0], err = rs.Adjust(ctx, sluice.Request{Key: b.Req.Key, Rules: b.Req.Rules}, b.Req.Cost)
					} else {
						got[0], err = rs.Check(ctx, b.Req)
					}
				}
				if err != nil {
					t.Fatalf("round %d: %v", round, err)
				}
				for i, b := range batch {
					var want sluice.Result
					if b.Adjust {
						want, _ = ms.Adjust(ctx, sluice.Request{Key: b.Req.Key, Rules: b.Req.Rules}, b.Req.Cost)
					} else {
						want, _ = ms.Check(ctx, b.Req)
						if !want.Allowed {
							denied++
							if b.Req.Rules[want.Rule].Period != sluice.Rolling {
								quotaDenied++
							}
						}
					}
					if got[i] != want {
						t.Fatalf("round %d at %v, op %d of %d (%s, %+v): redis %+v, memory %+v", round, c.Now().UTC(), i, len(batch), b.Req.Key, b, got[i], want)
					}
				}
				ops += len(batch)
			}
			if end := c.Now(); end.Before(time.Date(2027, 4, 1, 0, 0, 0, 0, time.UTC)) || quotaDenied < 50 {
				t.Fatalf("the sequence ended at %v with %d denials by a quota; want it past March and many", end, quotaDenied)
			}
			t.Logf("%d ops agree up to %v; %d denied, %d of them by a quota", ops, c.Now().UTC(), denied, quotaDenied)
		})
	}
}

// A key whose quota is drawn on lives in Redis until its period ends (plus
// the margin), on the one-key path and the batch path.
func TestQuotaExpiry(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	c := fakeclock.New(time.Now())
	c.SetMicros(time.Date(2027, 2, 28, 18, 0, 0, 0, time.UTC).UnixMicro())
	rs := redisstore.New(client, redisstore.Options{Now: c.Now, DisableCoalescing: true})
	day := []sluice.Rule{mustQuota(t, 10, sluice.Day, "UTC")}
	start := time.Now()
	if res, err := rs.Check(ctx, sluice.Request{Key: "k", Cost: 1, Rules: day}); err != nil || !res.Allowed || res.ResetAfter != 6*time.Hour {
		t.Fatalf("%+v %v; want allowed, reset at midnight", res, err)
	}
	pttl, err := client.PTTL(ctx, rs.Key("k")).Result()
	if err != nil {
		t.Fatal(err)
	}
	if expiry := 6*time.Hour + time.Second; pttl > expiry || pttl < expiry-time.Since(start)-time.Millisecond {
		t.Fatalf("PTTL %v; want 6h to midnight plus the 1s margin, less the %v since", pttl, time.Since(start))
	}
}

// In server-clock mode the script picks the period by Redis's TIME, from
// the boundaries the client computed by its own clock.
func TestQuotaServerTime(t *testing.T) {
	srv := redistest.Start(t)
	rs := redisstore.New(srv.Client(t), redisstore.Options{DisableCoalescing: true})
	day := []sluice.Rule{mustQuota(t, 2, sluice.Day, "UTC")}
	for attempt := 0; ; attempt++ {
		key := fmt.Sprint("k", attempt)
		before := time.Now()
		var res sluice.Result
		for range 3 {
			var err error
			if res, err = rs.Check(ctx, sluice.Request{Key: key, Cost: 1, Rules: day}); err != nil {
				t.Fatal(err)
			}
		}
		after := time.Now()
		_, midnight := day[0].Window(before)
		if !after.Before(midnight) && attempt == 0 {
			continue // the day ended meanwhile: once more
		}
		if res.Allowed || res.RetryAfter > midnight.Sub(before) || res.RetryAfter < midnight.Sub(after)-time.Millisecond {
			t.Fatalf("third check: %+v; want denied until UTC midnight, %v to %v away", res, midnight.Sub(after), midnight.Sub(before))
		}
		return
	}
}

// When Redis's clock and the gateway's stand on either side of a period
// boundary (server-clock mode), the script still picks the period that
// holds its own time, from the boundaries the gateway computed: the
// previous day when Redis is behind, the next when it is ahead. The
// answers equal Decide's at Redis's time.
func TestQuotaClocksAcrossABoundary(t *testing.T) {
	ny := mustQuota(t, 3, sluice.Day, "America/New_York")
	rules := []sluice.Rule{{Rate: 5, Burst: 5}, ny}
	midnight := time.Date(2027, 11, 8, 0, 0, 0, 0, ny.Zone) // after a 25-hour day
	client := redistest.Start(t).Client(t)
	for _, tc := range []struct {
		name           string
		gateway, redis time.Duration // from midnight
	}{
		{"redis behind", 2 * time.Second, -3 * time.Second},
		{"redis ahead", -2 * time.Second, 3 * time.Second},
		{"both before", -5 * time.Second, -1 * time.Second},
		{"both after", 1 * time.Second, 4 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gw := midnight.Add(tc.gateway)
			rs := redisstore.New(client, redisstore.Options{Prefix: tc.name + ":", Now: func() time.Time { return gw }, DisableCoalescing: true})
			want := model{}
			server := midnight.Add(tc.redis)
			for step := range 12 {
				if step == 6 {
					server = server.Add(-10 * time.Second) // and back: never a new period twice
				}
				b := redisstore.BatchOp{Req: sluice.Request{Key: "k", Cost: 1, Rules: rules}}
				got, err := redisstore.RunBatchSkewed(ctx, rs, []redisstore.BatchOp{b}, server)
				if err != nil {
					t.Fatal(err)
				}
				if w := want.do(b, server.UnixMicro()); got[0] != w {
					t.Fatalf("step %d: redis %+v, Decide %+v", step, got[0], w)
				}
				server = server.Add(time.Second)
			}
		})
	}
}
