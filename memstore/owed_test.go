package memstore

import (
	"context"
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	owedtab "github.com/sluicehq/sluice/internal/owed"
	"github.com/sluicehq/sluice/internal/testkit/fakeclock"
)

func heapInuse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// Issue 18, finding 3: a client that spent its bucket floods the store
// with new keys until its own is evicted, and comes back. Its next
// request is still denied, because owed remembers when its bucket would
// be full; and the heap stays bounded by the cap.
func TestEvictionNeverGivesAFreshBucket(t *testing.T) {
	clock := fakeclock.New(time.UnixMicro(1_700_000_000_000_000))
	const maxKeys = 10_000
	s := New(Options{Now: clock.Now, MaxKeys: maxKeys, SweepInterval: -1})
	ctx := context.Background()
	policy := rules(3.0/3600, 3) // 3/h, burst 3
	client := sluice.Request{Key: "203.0.113.7", Cost: 1, Rules: policy}
	for i := 0; i < 3; i++ {
		if r, _ := s.Check(ctx, client); !r.Allowed {
			t.Fatalf("request %d of the burst denied: %+v", i+1, r)
		}
	}
	if r, _ := s.Check(ctx, client); r.Allowed {
		t.Fatal("the 4th request passed")
	}
	base := heapInuse()
	key := make([]byte, 0, 40)
	for i := 0; i < 200_000; i++ {
		clock.Advance(time.Microsecond) // each flood key is due later than the client: the client is evicted first
		key = fmt.Appendf(key[:0], "198.51.%d.%d:%d", i>>8&255, i&255, i)
		s.Check(ctx, sluice.Request{Key: string(key), Cost: 3, Rules: policy})
	}
	flooded := heapInuse()
	id := makeID(maphash.String(s.seed, client.Key), 1)
	sh := &s.shards[maphash.String(s.seed, client.Key)>>56&s.mask]
	sh.mu.Lock()
	held := sh.t.find(id) != nil
	sh.mu.Unlock()
	if held {
		t.Fatal("the client's key survived the flood: the test did not exercise eviction")
	}
	r, _ := s.Check(ctx, client)
	if r.Allowed {
		t.Fatalf("after a flood of 200,000 keys evicted it, the client's next request passed: %+v", r)
	}
	if r.RetryAfter < 19*time.Minute { // it owed a token due 20 min after its last one, less the 0.2 s of flood
		t.Fatalf("the client came back with a wait of %v; want about 20 minutes", r.RetryAfter)
	}
	cells := 0
	for i := range s.shards {
		cells += s.shards[i].owed.t.Cells()
	}
	t.Logf("MaxKeys %d, %d keys held, owed %d cells (%d B); HeapInuse %d B before the flood, %d B after 200,000 keys (%+d B)",
		maxKeys, s.Len(), cells, cells*16, base, flooded, int64(flooded)-int64(base))
	if s.Len() > maxKeys+len(s.shards) {
		t.Fatalf("%d keys held, cap %d", s.Len(), maxKeys)
	}
	// Bounded: the table at its cap (slots of 32 B at a load of at least 3/8)
	// and the fixed owed array, with room for the runtime's own slack.
	if grew := int64(flooded) - int64(base); grew > 4<<20 {
		t.Fatalf("the heap grew by %d B for a cap of %d keys", grew, maxKeys)
	}
	runtime.KeepAlive(s)
}

// For random sequences on a store with a tiny cap, no answer is more
// permissive than an uncapped store's, fed the same admitted requests:
// whatever owed forgot or merged, a capped key holds at most the tokens it
// would hold had it never been dropped. (No charges or reservations here:
// those take a bucket below zero, and a key in debt whose entry was merged
// comes back empty, not in debt, as owed's doc says.)
func TestCappedNeverMorePermissiveThanUncapped(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 18))
			clock := fakeclock.New(time.UnixMicro(1_700_000_000_000_000))
			capped := New(Options{Now: clock.Now, Shards: 1, MaxKeys: 1 + rng.IntN(8), SweepInterval: -1})
			oracle := New(Options{Now: clock.Now, SweepInterval: -1})
			policies := [][]sluice.Rule{
				rules(1, 3),
				rules(0.01, 5),
				{{Rate: 2, Burst: 4}, {Rate: 0.05, Burst: 6}},
				rules(100, 1),
			}
			ctx := context.Background()
			cappedAllowed, evictions := 0, 0
			for step := 0; step < 5000; step++ {
				clock.Advance(time.Duration(rng.ExpFloat64() * float64(200*time.Millisecond)))
				k := rng.IntN(40)
				ru := policies[k%len(policies)]
				key := fmt.Sprint("k", k)
				if rng.IntN(20) == 0 { // a refund: never takes a bucket below zero
					delta := -rng.Int64N(3)
					got, _ := capped.Adjust(ctx, sluice.Request{Key: key, Rules: ru}, delta)
					want, _ := oracle.Adjust(ctx, sluice.Request{Key: key, Rules: ru}, delta)
					if got.Remaining > want.Remaining {
						t.Fatalf("step %d: refund to %s: capped %+v, uncapped %+v", step, key, got, want)
					}
					continue
				}
				cost := rng.Int64N(ru[0].Burst + 1)
				for _, r := range ru {
					cost = min(cost, r.Burst)
				}
				req := sluice.Request{Key: key, Cost: cost, Rules: ru}
				before := capped.Len()
				got, _ := capped.Check(ctx, req)
				if capped.Len() <= before {
					evictions++
				}
				if !got.Allowed {
					req.Cost = 0 // a denial consumes nothing: the uncapped store only refills
					oracle.Check(ctx, req)
					continue
				}
				cappedAllowed++
				want, _ := oracle.Check(ctx, req)
				if !want.Allowed {
					t.Fatalf("step %d: %s cost %d: the capped store allowed %+v where the uncapped one denied %+v", step, key, cost, got, want)
				}
				if got.Remaining > want.Remaining {
					t.Fatalf("step %d: %s cost %d: capped remaining %d above uncapped %d", step, key, cost, got.Remaining, want.Remaining)
				}
			}
			if cappedAllowed == 0 || evictions == 0 {
				t.Fatalf("the sequence allowed %d and evicted %d: it exercised nothing", cappedAllowed, evictions)
			}
		})
	}
}

// owed on its own: an entry is exact for its key, an overflow sends the
// entry due soonest into the merged record, which keeps the latest time
// and matches the keys merged into it, and expired records are free.
func TestOwedRemembersAndMerges(t *testing.T) {
	o := newOwed(8) // one group of 4 cells
	if o.t.Cells() != owedtab.Ways || o.t.Merged() != 1 {
		t.Fatalf("%d cells, %d merged records for a shard of 8 keys; want one group", o.t.Cells(), o.t.Merged())
	}
	const now = 1_000
	ids := []uint64{1 << 40, 2 << 40, 3 << 40, 4 << 40, 5 << 40, 6 << 40}
	for i, id := range ids[:4] {
		o.remember(id|1, now+100*int64(i+2), now) // due at +200, +300, +400, +500
	}
	o.remember(ids[4]|1, now+600, now) // the one due at +200 is merged
	o.remember(ids[5]|1, now+100, now) // due soonest of all: merged itself
	for _, c := range []struct {
		id          uint64
		own, merged int64
	}{
		{ids[0] | 1, 0, 200}, {ids[5] | 1, 0, 200}, {ids[1] | 1, 300, 200}, {ids[4] | 1, 600, 200},
	} {
		own, merged := o.recall(c.id, now)
		if own-now != c.own || (merged > now && merged-now != c.merged) || (merged == now && o.t.MergedHolds(c.id)) {
			t.Fatalf("id %x: own %+d, merged %+d; want own %+d, merged %+d", c.id, own-now, merged-now, c.own, c.merged)
		}
		if c.own != 0 && merged == now {
			continue
		}
	}
	if own, _ := o.recall(ids[1]|1, now); own != now {
		t.Fatal("recall did not free the key's own cell")
	}
	if own, merged := o.recall(ids[3]|1, now+600); own != now+600 || merged != now+600 {
		t.Fatal("a record due in the past still applied")
	}
	if !o.t.MergedHolds(ids[0]|1) || !o.t.MergedHolds(ids[5]|1) {
		t.Fatal("the merged filter lost a key merged into it")
	}
	// Once its fullAt has passed, the merged record starts empty again.
	for i := uint64(10); i < 15; i++ {
		o.remember(i<<40|1, now+2000, now+1000)
	}
	if o.t.MergedHolds(ids[0]|1) && o.t.MergedHolds(ids[5]|1) {
		t.Fatal("an expired merged record was not emptied before reuse")
	}
}

// BenchmarkBytesPerKey measures the heap a key costs at 1M keys of about
// 31 bytes (the gateway's "policy|identity" keys are hashed to 64 bits, so
// the key's length does not matter): HeapInuse growth divided by keys.
func BenchmarkBytesPerKey(b *testing.B) {
	for _, capped := range []bool{false, true} {
		b.Run(fmt.Sprintf("maxkeys=%v", capped), func(b *testing.B) {
			for n := 0; n < b.N; n++ {
				const keys = 1_000_000
				opts := Options{SweepInterval: -1}
				if capped {
					opts.MaxKeys = keys
				}
				base := heapInuse()
				s := New(opts)
				key := make([]byte, 0, 40)
				r := rules(10, 100)
				for i := 0; i < keys; i++ {
					key = fmt.Appendf(key[:0], "prods|anon:203.0.%03d.%03d:%06d", i>>8&255, i&255, i%1_000_000)
					s.CheckAt(sluice.Request{Key: string(key), Cost: 1, Rules: r}, 1_700_000_000_000_000)
				}
				used := heapInuse() - base
				b.ReportMetric(float64(used)/keys, "B/key")
				b.ReportMetric(float64(len(key)), "keylen")
				runtime.KeepAlive(s)
			}
		})
	}
}

// BenchmarkNewKeysAtCap is a flood of distinct keys at the cap: every
// check evicts a key that still owes something (owed.remember) and looks
// the new one up (owed.recall).
func BenchmarkNewKeysAtCap(b *testing.B) {
	const maxKeys = 100_000
	s := New(Options{MaxKeys: maxKeys, SweepInterval: -1})
	names := make([]string, 4*maxKeys)
	for i := range names {
		names[i] = fmt.Sprintf("203.0.113.%d:%d", i%256, i)
	}
	r := rules(1, 10) // a check leaves the bucket 1 s from full: every victim owes
	now := int64(1_700_000_000_000_000)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		s.CheckAt(sluice.Request{Key: names[i%len(names)], Cost: 1, Rules: r}, now+int64(i))
	}
}

// What owed costs callers who did nothing: after a flood of 200,000 keys
// (each spending its whole burst) into a cap of 10,000, a new key may
// match a merged record by chance and start emptier than full (owed's doc
// gives the odds: about 7% here). Keys of the flooded policy and of
// another, much faster one are counted; both stay far from all.
func TestFloodLeavesMostNewKeysFull(t *testing.T) {
	clock := fakeclock.New(time.UnixMicro(1_700_000_000_000_000))
	s := New(Options{Now: clock.Now, MaxKeys: 10_000, SweepInterval: -1})
	ctx := context.Background()
	slow, fast := rules(3.0/3600, 3), rules(100, 200)
	for i := 0; i < 200_000; i++ {
		clock.Advance(50 * time.Microsecond) // 20,000 keys a second
		s.Check(ctx, sluice.Request{Key: fmt.Sprint("flood", i), Cost: 3, Rules: slow})
	}
	const n = 2000
	slowHit, fastHit := 0, 0
	for i := 0; i < n; i++ {
		if r, _ := s.Check(ctx, sluice.Request{Key: fmt.Sprint("new", i), Cost: 1, Rules: slow}); r.Remaining < 2 {
			slowHit++
		}
		if r, _ := s.Check(ctx, sluice.Request{Key: fmt.Sprint("other", i), Cost: 1, Rules: fast}); r.Remaining < 199 {
			fastHit++
		}
	}
	t.Logf("after the flood, %d of %d new keys of the flooded policy and %d of %d of another started emptier than full", slowHit, n, fastHit, n)
	if slowHit > n/5 || fastHit > n/5 {
		t.Fatalf("more than a fifth of new keys started emptier than full: %d and %d of %d", slowHit, fastHit, n)
	}
}

// FuzzCappedStore is TestCappedNeverMorePermissiveThanUncapped with the
// fuzzer choosing the cap, the keys, the costs and the pauses: a capped
// store never admits what an uncapped one, fed the same admitted
// requests, would refuse, and never reports more remaining.
func FuzzCappedStore(f *testing.F) {
	f.Add(uint8(1), []byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 0, 0, 1, 1, 1})
	f.Add(uint8(3), []byte("an attacker floods the store with new keys and comes back"))
	f.Add(uint8(0), []byte{255, 254, 253, 0, 0, 0, 0, 0, 7, 7, 7, 7})
	policies := [][]sluice.Rule{rules(1, 3), rules(0.01, 5), {{Rate: 2, Burst: 4}, {Rate: 0.05, Burst: 6}}}
	f.Fuzz(func(t *testing.T, capacity uint8, program []byte) {
		clock := fakeclock.New(time.UnixMicro(1_700_000_000_000_000))
		capped := New(Options{Now: clock.Now, Shards: 1, MaxKeys: 1 + int(capacity%16), SweepInterval: -1})
		oracle := New(Options{Now: clock.Now, SweepInterval: -1})
		ctx := context.Background()
		for len(program) >= 2 {
			op, arg := program[0], program[1]
			program = program[2:]
			clock.Advance(time.Duration(arg&0x0f) * 50 * time.Millisecond)
			k := int(op % 24)
			ru := policies[k%len(policies)]
			cost := min(int64(arg>>4)%4, ru[0].Burst)
			req := sluice.Request{Key: fmt.Sprint("k", k), Cost: cost, Rules: ru}
			got, err := capped.Check(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			if !got.Allowed {
				req.Cost = 0
				oracle.Check(ctx, req)
				continue
			}
			want, _ := oracle.Check(ctx, req)
			if !want.Allowed || got.Remaining > want.Remaining {
				t.Fatalf("%s cost %d: capped %+v, uncapped %+v", req.Key, cost, got, want)
			}
		}
	})
}

// BenchmarkNewKeysUnderCap is new keys under the default cap of the
// gateway (1,000,000): nothing was ever evicted, so no key owes anything,
// and a new key's recall has nothing to find (the resilient layer's local
// and guard stores at uniform keys: issue 26).
func BenchmarkNewKeysUnderCap(b *testing.B) {
	const maxKeys = 1_000_000
	names := make([]string, maxKeys/2)
	for i := range names {
		names[i] = fmt.Sprintf("203.0.113.%d:%d", i%256, i)
	}
	r := rules(1, 10)
	now := int64(1_700_000_000_000_000)
	s := New(Options{MaxKeys: maxKeys, SweepInterval: -1})
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i%len(names) == 0 && i > 0 {
			b.StopTimer()
			s = New(Options{MaxKeys: maxKeys, SweepInterval: -1})
			b.StartTimer()
		}
		s.CheckAt(sluice.Request{Key: names[i%len(names)], Cost: 1, Rules: r}, now+int64(i))
	}
}
