// Package memstore is the in-process sluice.Store: token buckets in
// memory, for one process or as the fallback of a shared store.
//
// Keys are spread over shards, each with its own lock, so checks on
// different keys rarely contend; a check on a key that exists allocates
// nothing. A key is held as its 64-bit hash (maphash, with a seed drawn
// per store, so no caller can aim for a collision; two of a million keys
// collide with a chance of about 3 in 100 million), and its state is a few
// float64/int64 pairs in a per-shard slab that the garbage collector never
// scans: about 50 bytes a key for one rule, whatever the key's length.
//
// Memory is bounded two ways. A background sweep (every SweepInterval)
// drops every key whose buckets are all full again: a missing key is a full
// bucket, so this changes no answer. And MaxKeys caps the number of keys:
// when a new key arrives at a full shard, the store first drops a key that
// is full again, and failing that evicts, from a small random sample of the
// shard's keys, the one that will be full soonest. The evicted key starts
// again from a full bucket: under a flood of distinct keys, a real caller
// may be given back at most its burst, once per eviction, and memory stays
// at the cap. Close stops the sweep; no goroutine outlives it.
package memstore

import (
	"context"
	"hash/maphash"
	"sync"
	"time"

	"github.com/sluicehq/sluice"
)

// Options configures a Store. The zero value is ready to use.
type Options struct {
	// Shards is the number of independently locked parts, rounded up to a
	// power of two. Zero means 256.
	Shards int

	// MaxKeys caps the number of keys held; zero means no cap (the sweep
	// alone bounds memory to the keys active within a refill time).
	MaxKeys int

	// SweepInterval is how often keys that are full again are dropped.
	// Zero means one minute; negative disables the background sweep.
	SweepInterval time.Duration

	// Now is the clock; nil means the wall time at New advanced by the
	// monotonic clock, which reads one clock instead of time.Now's two and
	// ignores wall-clock steps (an NTP jump neither mints nor loses tokens).
	// Tests inject a fake.
	Now func() time.Time
}

// Store is an in-memory sluice.Store, safe for concurrent use.
type Store struct {
	shards    []shard
	mask      uint64
	seed      maphash.Seed
	shardCap  int
	now       func() int64 // Unix µs
	stop      chan struct{}
	done      sync.WaitGroup
	closeOnce sync.Once
}

// shard holds some keys. index maps a key's hash to the offset in slab of its
// entry: a header Bucket (Tokens = number of rules, Last = the time in Unix
// µs at which every bucket is full again) followed by one Bucket per rule.
// free keeps the offsets of dropped entries by their number of rules.
type shard struct {
	mu    sync.Mutex
	index map[uint64]uint32
	slab  []sluice.Bucket
	free  [sluice.MaxRules + 1][]uint32
	_     [64]byte // keeps neighbouring shards' locks off one cache line
}

var _ sluice.Store = (*Store)(nil)

// New returns a Store, with its sweep running unless disabled.
func New(opts Options) *Store {
	n := 256
	if opts.Shards > 0 {
		n = 1
		for n < opts.Shards {
			n <<= 1
		}
	}
	s := &Store{
		shards: make([]shard, n),
		mask:   uint64(n - 1),
		seed:   maphash.MakeSeed(),
		now:    monotonicMicros(),
		stop:   make(chan struct{}),
	}
	if opts.Now != nil {
		s.now = func() int64 { return opts.Now().UnixMicro() }
	}
	if opts.MaxKeys > 0 {
		s.shardCap = (opts.MaxKeys + n - 1) / n
	}
	for i := range s.shards {
		s.shards[i].index = make(map[uint64]uint32)
	}
	interval := opts.SweepInterval
	if interval == 0 {
		interval = time.Minute
	}
	if interval > 0 {
		s.done.Add(1)
		go s.sweepEvery(interval)
	}
	return s
}

// Check decides req now. It never fails but for invalid input.
func (s *Store) Check(_ context.Context, req sluice.Request) (sluice.Result, error) {
	if err := sluice.ValidateRequest(req); err != nil {
		return sluice.Result{}, err
	}
	return s.CheckAt(req, s.now()), nil
}

// CheckAt decides a valid req at now, in Unix microseconds: the clock-free
// core of Check, for simulations and for callers that validated already.
func (s *Store) CheckAt(req sluice.Request, now int64) sluice.Result {
	h := maphash.String(s.seed, req.Key)
	sh := &s.shards[h&s.mask]
	sh.mu.Lock()
	off := sh.entry(s, h, req.Rules, now)
	b := sh.slab[off+1 : int(off)+1+len(req.Rules)]
	res := sluice.Decide(b, req.Rules, now, req.Cost, req.MaxDelay)
	sh.slab[off].Last = fullAt(b, req.Rules, now)
	sh.mu.Unlock()
	return res
}

// Adjust charges (delta > 0) or refunds (delta < 0) key's buckets now.
func (s *Store) Adjust(_ context.Context, key string, delta int64, rules []sluice.Rule) (sluice.Result, error) {
	if err := sluice.ValidateAdjust(key, rules); err != nil {
		return sluice.Result{}, err
	}
	return s.AdjustAt(key, delta, rules, s.now()), nil
}

// AdjustAt is Adjust at now, in Unix microseconds, for valid input.
func (s *Store) AdjustAt(key string, delta int64, rules []sluice.Rule, now int64) sluice.Result {
	h := maphash.String(s.seed, key)
	sh := &s.shards[h&s.mask]
	sh.mu.Lock()
	off := sh.entry(s, h, rules, now)
	b := sh.slab[off+1 : int(off)+1+len(rules)]
	res := sluice.AdjustBuckets(b, rules, now, delta)
	sh.slab[off].Last = fullAt(b, rules, now)
	sh.mu.Unlock()
	return res
}

// Len returns the number of keys held.
func (s *Store) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += len(sh.index)
		sh.mu.Unlock()
	}
	return n
}

// Sweep drops every key whose buckets are all full at now (Unix µs) and
// returns how many it dropped. The background sweep calls it.
func (s *Store) Sweep(now int64) int {
	dropped := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for key, off := range sh.index {
			if sh.slab[off].Last <= now {
				sh.drop(key, off)
				dropped++
			}
		}
		sh.mu.Unlock()
	}
	return dropped
}

// Close stops the background sweep and waits for it. The store still
// answers afterwards; it just no longer sweeps. Close is idempotent.
func (s *Store) Close() error {
	s.closeOnce.Do(func() { close(s.stop) })
	s.done.Wait()
	return nil
}

func (s *Store) sweepEvery(interval time.Duration) {
	defer s.done.Done()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.Sweep(s.now())
		}
	}
}

// entry returns the offset of key's entry for rules, creating one of full
// buckets when the key is new (or was stored with another number of rules:
// changing a policy's rules resets its keys). sh.mu is held.
func (sh *shard) entry(s *Store, key uint64, rules []sluice.Rule, now int64) uint32 {
	k := len(rules)
	if off, ok := sh.index[key]; ok {
		if int(sh.slab[off].Tokens) == k {
			return off
		}
		sh.drop(key, off)
	}
	if s.shardCap > 0 && len(sh.index) >= s.shardCap {
		sh.evict(now)
	}
	off := sh.alloc(k)
	sh.index[key] = off
	sh.slab[off] = sluice.Bucket{Tokens: float64(k)}
	for i, r := range rules {
		sh.slab[int(off)+1+i] = sluice.FullBucket(r, now)
	}
	return off
}

// fullAt is the time, in Unix µs, when every bucket of b is full again.
func fullAt(b []sluice.Bucket, rules []sluice.Rule, now int64) int64 {
	return now + sluice.ExpiryAfter(b, rules, 0).Microseconds()
}

// alloc returns the offset of a free entry for k rules.
func (sh *shard) alloc(k int) uint32 {
	if f := sh.free[k]; len(f) > 0 {
		off := f[len(f)-1]
		sh.free[k] = f[:len(f)-1]
		return off
	}
	off := uint32(len(sh.slab))
	for range k + 1 {
		sh.slab = append(sh.slab, sluice.Bucket{})
	}
	return off
}

func (sh *shard) drop(key uint64, off uint32) {
	delete(sh.index, key)
	k := int(sh.slab[off].Tokens)
	sh.free[k] = append(sh.free[k], off)
}

// evictSample is how many keys evict looks at when no key is full again.
const evictSample = 8

// evict makes room for one key in a shard at its cap: it drops a key that
// is full again if the sample holds one, else the sampled key that will be
// full soonest. Map iteration starts at a random place, so the sample is
// random.
func (sh *shard) evict(now int64) {
	var victim uint64
	var victimOff uint32
	soonest := int64(1<<63 - 1)
	seen := 0
	for key, off := range sh.index {
		if fullAt := sh.slab[off].Last; fullAt < soonest {
			victim, victimOff, soonest = key, off, fullAt
		}
		seen++
		if seen == evictSample || soonest <= now {
			break
		}
	}
	if seen > 0 {
		sh.drop(victim, victimOff)
	}
}

// monotonicMicros returns a clock of Unix microseconds that reads only the
// monotonic clock: time.Since on a time that carries a monotonic reading
// does not read the wall clock.
func monotonicMicros() func() int64 {
	start := time.Now()
	startUs := start.UnixMicro()
	return func() int64 { return startUs + time.Since(start).Microseconds() }
}
