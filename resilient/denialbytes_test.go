package resilient_test

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/resilient"
)

// denier is a store that denies every check for an hour, counting them.
type denier struct{ checks atomic.Int64 }

func (d *denier) Check(_ context.Context, req sluice.Request) (sluice.Result, error) {
	d.checks.Add(1)
	return sluice.Result{Limit: req.Rules[0].Burst, RetryAfter: time.Hour, ResetAfter: time.Hour}, nil
}

func (d *denier) Adjust(_ context.Context, req sluice.Request, _ int64) (sluice.Result, error) {
	return sluice.Result{Limit: req.Rules[0].Burst}, nil
}

// liveHeap is the heap in use after a collection.
func liveHeap() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// TestDenialCacheBytesBound: a cache capped in bytes (DenialCacheBytes,
// `sluice ratelimit`'s LOCAL_CACHE_SIZE_IN_BYTES) holds at most that much
// memory under a flood of distinct denied keys, measured as the live heap
// it keeps, and still answers about bytes / (200 + key length) of them;
// capped in entries only, the same flood keeps many times the bound.
func TestDenialCacheBytesBound(t *testing.T) {
	const (
		bound  = 1 << 20
		keys   = 60_000
		keyLen = 48
	)
	rules := []sluice.Rule{{Rate: 1.0 / 3600, Burst: 1}}
	key := func(i int) string { return fmt.Sprintf("%0*d", keyLen, i) }
	// flood denies n distinct keys, then asks for them again, the last
	// denied first: it returns the live heap the store keeps and how many
	// the cache answered.
	flood := func(n int, opts resilient.Options) (held int64, cached int64) {
		primary := &denier{}
		before := liveHeap()
		s := resilient.New(primary, opts)
		for i := range n {
			if _, err := s.Check(ctx, sluice.Request{Key: key(i), Cost: 1, Rules: rules}); err != nil {
				t.Fatal(err)
			}
		}
		held = int64(liveHeap()) - int64(before)
		calls := primary.checks.Load()
		for i := n - 1; i >= 0; i-- {
			s.Check(ctx, sluice.Request{Key: key(i), Cost: 1, Rules: rules})
		}
		cached = int64(n) - (primary.checks.Load() - calls)
		runtime.KeepAlive(s)
		s.Close()
		return held, cached
	}
	// The store's own structures (the local buckets, the metrics) are
	// in the heap too: an empty flood says how much.
	opts := resilient.Options{DenialCacheBytes: bound}
	own, _ := flood(0, opts)
	held, cached := flood(keys, opts)
	held -= own
	perEntry := int64(200 + keyLen)
	t.Logf("capped at %d bytes: %d distinct denied keys kept %d bytes of heap beside the store's own %d, %d answered from the cache (at most %d)", bound, keys, held, own, cached, bound/perEntry)
	if held > bound+bound/8 {
		t.Errorf("a flood of %d distinct denied keys kept %d bytes of heap; want at most the bound %d (and an eighth for noise)", keys, held, bound)
	}
	if cached > bound/perEntry || cached < bound/perEntry/2 {
		t.Errorf("%d keys answered from the cache; want at most %d (bytes / (200 + key length)) and most of them", cached, bound/perEntry)
	}
	unbounded, cachedAll := flood(keys, resilient.Options{DenialCacheSize: keys})
	unbounded -= own
	t.Logf("capped at %d entries: %d bytes, %d answered from the cache", keys, unbounded, cachedAll)
	if unbounded < 4*bound || cachedAll < keys*9/10 {
		t.Errorf("capped in entries only, the flood kept %d bytes and %d keys; the measure cannot tell a bound", unbounded, cachedAll)
	}
}
