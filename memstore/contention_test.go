package memstore

import (
	"fmt"
	"hash/maphash"
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// TestHotKeyUnderContentionDecidesExactly runs many goroutines on one key
// with GOMAXPROCS well above the cores, so that slot holders are
// descheduled while others wait: the slot's lock spins, queues and parks.
// Every check reads a clock that moves one microsecond per reading, so the
// checks reach the lock out of their clock order. The bucket starts empty
// and, with burst far above what the run refills, never fills up, so
// every token refilled is either admitted or still in the bucket at the
// end: admitted plus what a final drain takes must be the refill of the
// run, to the token. A lost update would admit more, a stalled lock would
// hang the test.
func TestHotKeyUnderContentionDecidesExactly(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(max(16, 4*runtime.NumCPU())))
	const (
		callers = 64
		checks  = 1_000 // each
		rate    = 125_000.0
		burst   = 1_000_000
		start   = 1_700_000_000_000_000
	)
	var clock atomic.Int64
	clock.Store(start)
	s := New(Options{SweepInterval: -1, Now: func() time.Time { return time.UnixMicro(clock.Add(1)) }})
	defer s.Close()
	r := rules(rate, burst)
	// Empty the bucket at start.
	if res := s.AdjustAt("hot", burst, r, start); !res.Allowed || res.Remaining != 0 {
		t.Fatalf("draining the new key: %+v", res)
	}

	// Now and then a caller decides its check as a descheduled holder
	// would: it reads the key's state, gives its core away while it holds
	// the lock, then writes its decision. The other checks meet a locked
	// slot far more often than a 2-core machine would otherwise show (they
	// spin, queue and park), and any of them that went ahead without the
	// lock would have its decision overwritten.
	h := maphash.String(s.seed, "hot")
	tb := &s.shards[h>>56&s.mask].t
	var stalls atomic.Int64
	slowCheck := func() bool {
		now := s.now()
		sl := tb.lockExisting(makeID(h, 1))
		if sl == nil {
			t.Error("the hot key is not in the table")
			return false
		}
		b := sl.b
		runtime.Gosched()
		res := sluice.Decide(b[:], r, now, 1, 0)
		sl.b, sl.fullAt = b, after(asOf(b[:], r, now), res.ResetAfter)
		sl.unlock()
		stalls.Add(1)
		return res.Allowed
	}
	var (
		admitted atomic.Int64
		wg       sync.WaitGroup
	)
	wg.Add(callers)
	for range callers {
		go func() {
			defer wg.Done()
			n := int64(0)
			for i := range checks {
				if i%16 == 0 {
					if slowCheck() {
						n++
					}
					continue
				}
				if res := s.CheckAt(sluice.Request{Key: "hot", Cost: 1, Rules: r}, s.now()); res.Allowed {
					n++
				}
			}
			admitted.Add(n)
		}()
	}
	wg.Wait()
	end := clock.Load()
	t.Logf("%d of the checks held the lock across a reschedule", stalls.Load())
	drained := int64(0)
	for s.CheckAt(sluice.Request{Key: "hot", Cost: 1, Rules: r}, end).Allowed {
		drained++
	}
	refilled := rate * float64(end-start) / 1e6
	want := int64(math.Floor(refilled + 1e-6))
	if got := admitted.Load() + drained; got != want {
		t.Fatalf("%d callers × %d checks over %d µs: admitted %d and %d left, %d in all; the refill was %.3f tokens, want exactly %d",
			callers, checks, end-start, admitted.Load(), drained, got, refilled, want)
	}
	if admitted.Load() == 0 || drained > callers+1 {
		// The callers must have drawn the tokens as they came (else the
		// test proves little): at most one token per caller can be left.
		t.Fatalf("admitted %d, %d left at the end", admitted.Load(), drained)
	}
}

// refStore is the single-threaded bucket math of the store: each key's
// buckets in a map, full when first seen, decided by sluice.Decide and
// sluice.AdjustBuckets.
type refStore map[string][]sluice.Bucket

func (m refStore) buckets(key string, rules []sluice.Rule, now int64) []sluice.Bucket {
	id := fmt.Sprintf("%s/%d", key, len(rules)) // another number of rules is another state
	b, ok := m[id]
	if !ok {
		b = make([]sluice.Bucket, len(rules))
		for i, r := range rules {
			b[i] = sluice.FullBucket(r, now)
		}
		m[id] = b
	}
	return b
}

// differential drives a store and a refStore with the same random checks,
// adjustments and sweeps of its own keys, from rng, and fails at the
// first result that differs (it may run on any goroutine). With sweep, it
// sweeps now and then at its own clock, which only a store of its own may
// do: another caller's clock may be behind. Time moves forward by random
// steps, now and then backwards (a caller that read its clock earlier and
// locked later), but never to before a sweep. A key keeps its rules (a key
// checked with other rules of the same count keeps its state, and the
// sweep judges it full by its last rules).
func differential(t *testing.T, s *Store, rng *rand.Rand, prefix string, ops int, sweep bool) {
	ref := refStore{}
	one := []sluice.Rule{{Rate: 1000, Burst: 20}}
	slow := []sluice.Rule{{Rate: 3, Burst: 7}}
	two := []sluice.Rule{{Rate: 5, Burst: 10}, {Rate: 50, Burst: 200}}
	ruleSets := [][]sluice.Rule{one, slow, two}
	now, swept := int64(1_700_000_000_000_000), int64(0)
	for i := range ops {
		switch rng.IntN(10) {
		case 0:
			now += rng.Int64N(2_000_000) // up to 2 s: some keys fill up
		case 1:
			now -= rng.Int64N(1_000)
		default:
			now += rng.Int64N(500)
		}
		if now < swept {
			now = swept // a sweep drops keys full at its time: a later check is not earlier
		}
		k := rng.IntN(12)
		key, rs := fmt.Sprintf("%s-%d", prefix, k), ruleSets[k%len(ruleSets)]
		switch op := rng.IntN(20); {
		case op == 0 && sweep:
			s.Sweep(now) // a key full again is dropped: no answer changes
			swept = now
		case op < 3 && op > 0:
			delta := rng.Int64N(30) - 15
			got := s.AdjustAt(key, delta, rs, now)
			want := sluice.AdjustBuckets(ref.buckets(key, rs, now), rs, now, delta)
			if got != want {
				t.Errorf("op %d: adjust %s by %d at %d: store %+v, bucket math %+v", i, key, delta, now, got, want)
				return
			}
		default:
			req := sluice.Request{Key: key, Cost: rng.Int64N(8), Rules: rs}
			if rng.IntN(4) == 0 {
				req.MaxDelay = time.Duration(rng.Int64N(3_000)) * time.Millisecond
			}
			got := s.CheckAt(req, now)
			want := sluice.Decide(ref.buckets(key, rs, now), rs, now, req.Cost, req.MaxDelay)
			if got != want {
				t.Errorf("op %d: check %+v at %d: store %+v, bucket math %+v", i, req, now, got, want)
				return
			}
		}
	}
}

// TestStoreIsTheBucketMath holds the store's answers to the
// single-threaded bucket math, first alone, then with goroutines that
// each drive their own keys at once through a store of few shards (so
// that they share shards, slots' neighbourhoods, grows and sweeps), with
// GOMAXPROCS above the cores.
func TestStoreIsTheBucketMath(t *testing.T) {
	t.Run("alone", func(t *testing.T) {
		for seed := range uint64(20) {
			s := New(Options{Shards: 1, SweepInterval: -1})
			differential(t, s, rand.New(rand.NewPCG(seed, 7)), "k", 5_000, true)
			s.Close()
		}
	})
	t.Run("concurrent", func(t *testing.T) {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(max(16, 4*runtime.NumCPU())))
		s := New(Options{Shards: 2, SweepInterval: -1})
		defer s.Close()
		var wg sync.WaitGroup
		for g := range uint64(16) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				differential(t, s, rand.New(rand.NewPCG(g, 8)), fmt.Sprint("g", g), 5_000, false)
			}()
		}
		wg.Wait()
	})
}
