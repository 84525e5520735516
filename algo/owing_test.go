package algo

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testkit/fakeclock"
)

// Issue 22, item 1: a caller that spent its window floods a capped store
// with new keys until its own is evicted, and comes back. On every
// algorithm it is still denied, and let through again once its window or
// its drain says so.
func TestFloodPastTheCapKeepsADeniedCallerDenied(t *testing.T) {
	r := sluice.Rule{Rate: 5.0 / 60, Burst: 5} // 5/min: W = 1 min
	for _, name := range Names() {
		for _, flood := range []int{8_000, 30_000} {
			t.Run(fmt.Sprint(name, "/", flood), func(t *testing.T) {
				c := fakeclock.New(time.UnixMicro(edge + 1_000_000))
				s, _ := Memory(name, MemoryOptions{Now: c.Now, MaxKeys: 2000, SweepInterval: -1})
				defer s.Close()
				victim := sluice.Request{Key: "tenant-a", Cost: 1, Rules: []sluice.Rule{r}}
				for i := range 5 {
					if res, _ := s.Check(ctx, victim); !res.Allowed {
						t.Fatalf("request %d of the burst denied: %+v", i+1, res)
					}
				}
				if res, _ := s.Check(ctx, victim); res.Allowed {
					t.Fatal("the 6th request passed")
				}
				// Each flood key spends its burst later than the victim, so the
				// victim is evicted first where eviction prefers the key due
				// soonest; the window algorithms' keys are all due at the
				// window's end, so the flood goes on, if need be, until the
				// victim's key is gone.
				m, _ := s.(interface{ holds(string) bool })
				sent := 0
				for ; sent < flood || (m != nil && m.holds(victim.Key) && sent < 1_000_000); sent++ {
					c.AdvanceMicros(1)
					s.Check(ctx, sluice.Request{Key: fmt.Sprint("flood-", sent), Cost: 5, Rules: []sluice.Rule{r}})
				}
				if m != nil && m.holds(victim.Key) {
					t.Fatalf("the caller's key survived a flood of %d keys: nothing was evicted", sent)
				}
				let := 0
				for range 5 {
					if res, _ := s.Check(ctx, victim); res.Allowed {
						let++
					}
				}
				if let > 0 {
					t.Fatalf("after a flood of %d new keys, %d of 5 requests of the denied caller passed", sent, let)
				}
				c.AdvanceMicros(3 * 60_000_000) // past every window and drain
				if res, _ := s.Check(ctx, victim); !res.Allowed {
					t.Fatalf("three minutes later the caller is still denied: %+v", res)
				}
			})
		}
	}
}

// The differential test: for random sequences over a store with a tiny cap,
// interleaved with floods of new keys, no answer is more permissive than
// an uncapped store's fed the same admitted requests, on every algorithm
// and policy. When the capped store denies, the uncapped one is only
// asked with a cost of 0 (which changes nothing), so both see the same
// admitted traffic.
func TestCappedAnswersHeldToUncapped(t *testing.T) {
	policies := [][]sluice.Rule{
		{{Rate: 1, Burst: 3}},
		{{Rate: 0.01, Burst: 5}},
		{{Rate: 2, Burst: 4}, {Rate: 0.05, Burst: 6}},
		{{Rate: 100, Burst: 1}},
		{{Rate: 5.0 / 60, Burst: 5}},
	}
	for _, name := range Names() {
		for seed := uint64(1); seed <= 8; seed++ {
			t.Run(fmt.Sprint(name, "/", seed), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(seed, 22))
				c := fakeclock.New(time.UnixMicro(edge + rng.Int64N(10_000_000)))
				capped, _ := Memory(name, MemoryOptions{Now: c.Now, Shards: 1, MaxKeys: 8 + rng.IntN(32), SweepInterval: -1})
				oracle, _ := Memory(name, MemoryOptions{Now: c.Now, SweepInterval: -1})
				defer capped.Close()
				defer oracle.Close()
				flooded, cappedAllowed, cappedDenied, stricter := 0, 0, 0, 0
				for step := range 3000 {
					c.AdvanceMicros(int64(rng.ExpFloat64() * 200_000))
					if rng.IntN(100) == 0 { // a flood of new keys, each spending a unit
						n := 1 + rng.IntN(100)
						for i := range n {
							capped.Check(ctx, sluice.Request{Key: fmt.Sprint("flood-", step, "-", i), Cost: 1, Rules: policies[i%len(policies)]})
						}
						flooded += n
					}
					k := rng.IntN(40)
					ru := policies[k%len(policies)]
					cost := int64(1 + rng.IntN(int(ru[0].Burst)))
					for _, r := range ru {
						cost = min(cost, r.Burst)
					}
					req := sluice.Request{Key: fmt.Sprint("k", k), Cost: cost, Rules: ru}
					got, err := capped.Check(ctx, req)
					if err != nil {
						t.Fatal(err)
					}
					if !got.Allowed {
						cappedDenied++
						req.Cost = 0
						if want, _ := oracle.Check(ctx, req); want.Allowed && want.Remaining >= cost {
							stricter++
						}
						continue
					}
					cappedAllowed++
					want, _ := oracle.Check(ctx, req)
					if !want.Allowed {
						t.Fatalf("step %d: %s cost %d: the capped store allowed %+v where the uncapped one denied %+v", step, req.Key, cost, got, want)
					}
					if got.Remaining > want.Remaining || got.Delay < want.Delay {
						t.Fatalf("step %d: %s cost %d: capped %+v more permissive than uncapped %+v", step, req.Key, cost, got, want)
					}
				}
				t.Logf("%d flood keys; capped allowed %d, denied %d (%d where the uncapped store had room)", flooded, cappedAllowed, cappedDenied, stricter)
				if cappedAllowed == 0 || cappedDenied == 0 || flooded == 0 {
					t.Fatalf("allowed %d, denied %d, flooded %d: the sequence exercised nothing", cappedAllowed, cappedDenied, flooded)
				}
			})
		}
	}
}

// The remembrance has a size fixed by the cap: under a flood of millions
// of new keys the store holds at most its cap, and what it remembers of
// evicted keys is the same number of cells after two million keys as after
// a hundred thousand, while a denied caller evicted early in the flood
// stays denied.
func TestRemembranceBoundedUnderMillionsOfKeys(t *testing.T) {
	r := []sluice.Rule{{Rate: 5.0 / 60, Burst: 5}}
	const maxKeys, flood = 1000, 2_000_000
	now := edge + 1_000_000
	st, _ := Memory(FixedWindow, MemoryOptions{Now: func() time.Time { return time.UnixMicro(now) }, MaxKeys: maxKeys, SweepInterval: -1})
	defer st.Close()
	victim := sluice.Request{Key: "tenant-a", Cost: 5, Rules: r}
	if res, _ := st.Check(ctx, victim); !res.Allowed {
		t.Fatal("the victim's burst was denied")
	}
	victim.Cost = 1
	key := make([]byte, 0, 32)
	var early int
	for i := range flood {
		if i == 100_000 {
			early, _ = owedSize(st)
		}
		key = strconv.AppendInt(append(key[:0], 'f'), int64(i), 10)
		checkAt(st, sluice.Request{Key: string(key), Cost: 1, Rules: r}, now)
	}
	cells, merged := owedSize(st)
	live := owedLive(st, now)
	held := st.(interface{ Len() int }).Len()
	t.Logf("%d keys flooded; %d held (cap %d); remembrance %d cells (%d live, %d after 100,000 keys) and %d merged records",
		flood, held, maxKeys, cells, live, early, merged)
	if held > maxKeys+64 || cells != early || live > cells {
		t.Fatalf("held %d of cap %d, %d cells (%d after 100,000 keys), %d live", held, maxKeys, cells, early, live)
	}
	if cells > maxKeys+64*owedWaysInTest || merged > cells {
		t.Fatalf("%d cells and %d merged records for a cap of %d keys", cells, merged, maxKeys)
	}
	if res, _ := st.Check(ctx, victim); res.Allowed {
		t.Fatal("the victim passed after the flood")
	}
}

// A key's own record is exact: three keys over a store capped at two, so
// that every check evicts a key whose records always find a free cell,
// give the same answers as an uncapped store on the fixed window, the
// sliding window and the leaky bucket, and never a more permissive one on
// the sliding log (whose record keeps only its oldest entry, its newest
// and its count).
func TestOwnRecordsAreExact(t *testing.T) {
	policies := [][]sluice.Rule{
		{{Rate: 1, Burst: 3}},
		{{Rate: 2, Burst: 4}, {Rate: 0.05, Burst: 6}},
		{{Rate: 5.0 / 60, Burst: 5}},
	}
	for _, name := range Names()[1:] {
		for seed := uint64(1); seed <= 4; seed++ {
			t.Run(fmt.Sprint(name, "/", seed), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(seed, 23))
				c := fakeclock.New(time.UnixMicro(edge + rng.Int64N(10_000_000)))
				capped, _ := Memory(name, MemoryOptions{Now: c.Now, Shards: 1, MaxKeys: 2, SweepInterval: -1})
				oracle, _ := Memory(name, MemoryOptions{Now: c.Now, SweepInterval: -1})
				defer capped.Close()
				defer oracle.Close()
				differ, evicted := 0, 0
				for step := range 2000 {
					c.AdvanceMicros(int64(rng.ExpFloat64() * 300_000))
					k := rng.IntN(3)
					ru := policies[k]
					req := sluice.Request{Key: fmt.Sprint("k", k), Cost: int64(1 + rng.IntN(3)), Rules: ru,
						CountDenied: name == FixedWindow && rng.IntN(4) == 0}
					if m := capped.(interface{ holds(string) bool }); !m.holds(req.Key) {
						evicted++
					}
					got, err := capped.Check(ctx, req)
					if err != nil {
						t.Fatal(err)
					}
					if name == SlidingLog && !got.Allowed {
						req.Cost = 0 // the uncapped log is fed only what the capped one admitted
					}
					want, _ := oracle.Check(ctx, req)
					if got == want {
						continue
					}
					if name != SlidingLog {
						t.Fatalf("step %d: %s cost %d: capped %+v, uncapped %+v", step, req.Key, req.Cost, got, want)
					}
					differ++
					if got.Allowed && (!want.Allowed || got.Remaining > want.Remaining) {
						t.Fatalf("step %d: %s cost %d: capped %+v more permissive than uncapped %+v", step, req.Key, req.Cost, got, want)
					}
				}
				t.Logf("%d checks of an evicted key, %d answers differ", evicted, differ)
				if evicted < 500 {
					t.Fatalf("only %d checks found their key evicted", evicted)
				}
			})
		}
	}
}
