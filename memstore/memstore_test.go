package memstore

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testkit/fakeclock"
)

func rules(rate float64, burst int64) []sluice.Rule { return []sluice.Rule{{Rate: rate, Burst: burst}} }

func TestConcurrentChecksAdmitExactlyTheBurst(t *testing.T) {
	clock := fakeclock.New(time.UnixMicro(1_700_000_000_000_000))
	s := New(Options{Now: clock.Now})
	defer s.Close()
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < 32; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 100; i++ {
				r, err := s.Check(context.Background(), sluice.Request{Key: "hot", Cost: 1, Rules: rules(1, 500)})
				if err != nil {
					t.Error(err)
					return
				}
				if r.Allowed {
					admitted.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if got := admitted.Load(); got != 500 {
		t.Fatalf("admitted %d of 3200 with the clock stopped, want exactly the burst 500", got)
	}
}

func TestInvalidInputIsAnError(t *testing.T) {
	s := New(Options{SweepInterval: -1})
	if _, err := s.Check(context.Background(), sluice.Request{Key: "k", Cost: 6, Rules: rules(1, 5)}); err == nil || !strings.Contains(err.Error(), "can never pass") {
		t.Fatalf("cost above burst: %v", err)
	}
	if _, err := s.Adjust(context.Background(), sluice.Request{Key: "", Rules: rules(1, 5)}, 1); err == nil {
		t.Fatal("empty key: no error")
	}
	if s.Len() != 0 {
		t.Fatalf("invalid input stored %d keys", s.Len())
	}
}

func TestSweepDropsOnlyFullBucketsAndChangesNoAnswer(t *testing.T) {
	clock := fakeclock.New(time.UnixMicro(1_700_000_000_000_000))
	s := New(Options{Now: clock.Now, SweepInterval: -1})
	ctx := context.Background()
	for i := 0; i < 100; i++ {
		s.Check(ctx, sluice.Request{Key: fmt.Sprint("k", i), Cost: 1 + int64(i%10), Rules: rules(1, 10)})
	}
	clock.Advance(5 * time.Second) // keys that spent ≤ 5 tokens are full again
	if got := s.Sweep(clock.Micros()); got != 50 {
		t.Fatalf("swept %d keys, want the 50 that are full again", got)
	}
	for i := 0; i < 100; i++ {
		r, _ := s.Check(ctx, sluice.Request{Key: fmt.Sprint("k", i), Cost: 0, Rules: rules(1, 10)})
		want := int64(10)
		if spent := 1 + int64(i%10); spent > 5 {
			want = 10 - spent + 5
		}
		if r.Remaining != want {
			t.Fatalf("key k%d: remaining %d after the sweep, want %d", i, r.Remaining, want)
		}
	}
}

func TestSweepRunsInTheBackgroundAndStopsAtClose(t *testing.T) {
	before, sweepersBefore := runtime.NumGoroutine(), sweepers()
	clock := fakeclock.New(time.UnixMicro(1_700_000_000_000_000))
	s := New(Options{Now: clock.Now, SweepInterval: time.Millisecond})
	s.Check(context.Background(), sluice.Request{Key: "k", Cost: 1, Rules: rules(1000, 1)})
	clock.Advance(time.Second)
	deadline := time.Now().Add(5 * time.Second)
	for s.Len() != 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if s.Len() != 0 {
		t.Fatal("the background sweep never dropped a full bucket")
	}
	s.Close()
	s.Close() // idempotent
	// The sweeper has signalled it is done when Close returns, but it may
	// not have exited yet: the goroutines are polled until the count is
	// back and there are no more sweepers than before (other tests leave
	// stores open), with a generous deadline for a loaded machine. A
	// sweeper that never stops fails it.
	stopped := func() bool {
		return runtime.NumGoroutine() <= before && sweepers() <= sweepersBefore
	}
	deadline = time.Now().Add(10 * time.Second)
	for !stopped() && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if !stopped() {
		t.Fatalf("%d goroutines (%d sweepers) 10 s after Close, %d (%d) before:\n%s",
			runtime.NumGoroutine(), sweepers(), before, sweepersBefore, stacks())
	}
}

func stacks() string {
	buf := make([]byte, 1<<20)
	return string(buf[:runtime.Stack(buf, true)])
}

// sweepers counts the goroutines running a store's background sweep.
func sweepers() int { return strings.Count(stacks(), ").sweepEvery(") }

func TestRulesChangedStartAFreshState(t *testing.T) {
	s := New(Options{SweepInterval: -1})
	ctx := context.Background()
	s.Check(ctx, sluice.Request{Key: "k", Cost: 5, Rules: rules(1, 5)})
	two := []sluice.Rule{{Rate: 1, Burst: 5}, {Rate: 1, Burst: 7}}
	r, _ := s.Check(ctx, sluice.Request{Key: "k", Cost: 1, Rules: two})
	if !r.Allowed || r.Remaining != 4 {
		t.Fatalf("after a change of rules: %+v", r)
	}
	// The state under the old rules is swept once it is full again.
	if n := s.Sweep(time.Now().Add(time.Minute).UnixMicro()); n != 2 || s.Len() != 0 {
		t.Fatalf("swept %d, %d left", n, s.Len())
	}
}

// At the cap, a new key evicts from a sample the key that is full soonest:
// keys that are deep in debt (the ones being limited) survive a flood of
// new keys, or are remembered in owed when they do not, and the number of
// keys never passes the cap. A flood this far beyond the owed array makes
// some new keys start emptier than full (see owed); they are counted.
func TestCapKeepsLimitedKeysUnderAFloodOfNewOnes(t *testing.T) {
	clock := fakeclock.New(time.UnixMicro(1_700_000_000_000_000))
	const limit = 1000
	s := New(Options{Now: clock.Now, Shards: 1, MaxKeys: limit, SweepInterval: -1})
	ctx := context.Background()
	slow := rules(1.0/3600, 10) // 10 per hour
	for i := 0; i < 10; i++ {
		s.Check(ctx, sluice.Request{Key: fmt.Sprint("abuser", i), Cost: 10, Rules: slow})
	}
	denied := 0
	for i := 0; i < 100_000; i++ {
		r, _ := s.Check(ctx, sluice.Request{Key: fmt.Sprint("spoofed", i), Cost: 1, Rules: slow})
		if !r.Allowed {
			denied++
		}
		if n := s.Len(); n > limit {
			t.Fatalf("%d keys held, cap %d", n, limit)
		}
	}
	for i := 0; i < 10; i++ {
		if r, _ := s.Check(ctx, sluice.Request{Key: fmt.Sprint("abuser", i), Cost: 1, Rules: slow}); r.Allowed {
			t.Fatalf("abuser%d was evicted by the flood and got a full bucket back", i)
		}
	}
	t.Logf("%d of 100000 new keys were denied their first request, through owed's merged records", denied)
}

func TestMillionKeysAgainstACappedStoreStayBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates a million keys")
	}
	const limit = 100_000
	s := New(Options{MaxKeys: limit, SweepInterval: -1})
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	base := heap()
	key := make([]byte, 0, 32)
	r := rules(10, 100)
	var atCap uint64
	for i := 0; i < 1_000_000; i++ {
		key = fmt.Appendf(key[:0], "203.0.113.%d:%d", i%256, i)
		s.CheckAt(sluice.Request{Key: string(key), Cost: 1, Rules: r}, 1_700_000_000_000_000)
		if i == 2*limit {
			atCap = heap() - base
		}
	}
	n := s.Len()
	end := heap() - base
	t.Logf("cap %d: %d keys held after 1,000,000 distinct keys; heap %d B at 200k keys, %d B at 1M (%.0f B per held key)", limit, n, atCap, end, float64(end)/float64(n))
	if n > limit+256 { // the cap is split over shards, rounded up
		t.Fatalf("%d keys held, cap %d", n, limit)
	}
	if end > atCap+atCap/4 {
		t.Fatalf("heap grew from %d B to %d B after the cap was reached", atCap, end)
	}
	runtime.KeepAlive(s)
}

func BenchmarkCheck(b *testing.B) {
	for _, keys := range []int{1, 100_000} {
		b.Run(fmt.Sprintf("keys=%d", keys), func(b *testing.B) {
			s := New(Options{SweepInterval: -1})
			names := make([]string, keys)
			for i := range names {
				names[i] = fmt.Sprintf("user-%d", i)
			}
			r := rules(1e9, 1e12) // never denies: measures the check itself
			for _, k := range names {
				s.CheckAt(sluice.Request{Key: k, Cost: 1, Rules: r}, 0)
			}
			var seq atomic.Uint64
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				i := int(seq.Add(1) * 7919)
				ctx := context.Background()
				for pb.Next() {
					i++
					s.Check(ctx, sluice.Request{Key: names[i%keys], Cost: 1, Rules: r})
				}
			})
		})
	}
}

// TestLockFreeChecksLoseNoUpdate races checks of one-rule keys (which take
// only their slot's lock) against everything that moves slots under the
// shard's mutex: inserts that grow the table, a sweep that deletes and
// shifts back, and keys of two rules on the locked path. The clock is
// stopped and the refill negligible, so each counted key must admit
// exactly its burst: a lost update would admit more, a state held twice
// would admit twice.
func TestLockFreeChecksLoseNoUpdate(t *testing.T) {
	clock := fakeclock.New(time.UnixMicro(1_700_000_000_000_000))
	s := New(Options{Shards: 2, SweepInterval: -1, Now: clock.Now})
	defer s.Close()
	const (
		keys    = 500
		burst   = 20
		callers = 8
		checks  = 40_000
	)
	one := rules(1e-6, burst)
	// The second rule refills within MaxRefillTime, as a valid rule must.
	two := []sluice.Rule{{Rate: 1e-6, Burst: burst}, {Rate: 2e-6, Burst: 2 * burst}}
	churn := rules(1e6, 1) // full again 1 µs after a check: the sweep drops these
	var admitted [keys]atomic.Int64
	name := func(k int) string { return fmt.Sprintf("counted-%d", k) }
	ruleOf := func(k int) []sluice.Rule {
		if k%10 == 0 {
			return two
		}
		return one
	}

	stop := make(chan struct{})
	var sweeps sync.WaitGroup
	sweeps.Add(1)
	go func() { // sweeps until the callers are done
		defer sweeps.Done()
		for {
			select {
			case <-stop:
				return
			default:
				s.Sweep(clock.Micros() + 10)
				runtime.Gosched()
			}
		}
	}()
	var wg sync.WaitGroup
	for g := 0; g < callers; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.Background()
			x := uint64(g)*0x9e3779b97f4a7c15 + 1
			for i := 0; i < checks; i++ {
				x ^= x << 13
				x ^= x >> 7
				x ^= x << 17
				if i%3 == 0 { // a new key: an insert, now and then a grow
					s.Check(ctx, sluice.Request{Key: fmt.Sprintf("churn-%d-%d", g, i), Cost: 1, Rules: churn})
					continue
				}
				k := int(x % keys)
				res, err := s.Check(ctx, sluice.Request{Key: name(k), Cost: 1, Rules: ruleOf(k)})
				if err != nil {
					t.Error(err)
					return
				}
				if res.Allowed {
					admitted[k].Add(1)
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	sweeps.Wait()

	for k := range admitted {
		// Every key was checked far more than burst times (about 430 on average),
		// so each must have admitted its burst, no more, no less.
		if got := admitted[k].Load(); got != burst {
			t.Errorf("key %d (%d rules) admitted %d, want exactly %d", k, len(ruleOf(k)), got, burst)
		}
	}
	// And every counted key is still held, once.
	if n := s.Len(); n < keys {
		t.Errorf("store holds %d keys, fewer than the %d counted ones", n, keys)
	}
}
