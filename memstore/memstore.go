// Package memstore is the in-process sluice.Store: token buckets in
// memory, for one process or as the fallback of a shared store.
//
// Keys are spread over shards. A check of a one-rule key that exists
// takes no shard lock: it locks the key's slot alone, with one
// compare-and-swap on the cache line that holds the key's state, so checks
// of different keys never contend and checks of one hot key wait only for
// each other's few nanoseconds of arithmetic. A check that still finds the
// slot locked after a few tries queues on its shard's parking mutex, so
// many callers of one hot key do not burn the cores spinning while a
// holder waits for one (see table). New keys, keys of several
// rules, the sweep and eviction take the shard's mutex. A check on a key
// that exists allocates nothing. A key is held as its 64-bit hash (maphash, with a seed drawn
// per store, so no caller can aim for a collision; 58 of its bits tell keys
// apart, so two of a million keys share state with a chance of about one
// in 600,000), and the state of a key with one rule sits in its slot of
// an open-addressing table that the garbage collector never scans: 32
// bytes a slot, whatever the key's length. The table doubles when it is
// three quarters full, so a key costs 43 to 85 bytes of heap, 67 at a
// million keys (BenchmarkBytesPerKey); the process's resident size is
// larger by the garbage collector's headroom (up to twice the live heap at
// the default GOGC).
//
// Memory is bounded two ways. A background sweep (every SweepInterval)
// drops every key whose buckets are all full again: a missing key is a full
// bucket, so this changes no answer. And MaxKeys caps the number of keys:
// when a new key arrives at a full shard, the store first drops a key that
// is full again, and failing that evicts, from a small random sample of the
// shard's keys, the one that will be full soonest. What an evicted key
// still owed (the time its buckets would be full again) goes into a fixed
// array of 17 to 34 bytes per key of the cap, and a key that comes back
// starts from there, never from a fresh bucket: eviction never gives a
// caller back tokens it spent. When more evicted keys owe something than
// the array holds, the entries that owe least are merged into one record
// per group with a Bloom filter of their ids, so that a key may come back
// emptier than it was, never fuller (but for debt below zero, forgotten
// when merged), and a new key that the filter matches by chance may start
// emptier than full, at worst empty: see owed for the odds and bounds. A
// key evicted while one of its calendar quotas is used is kept whole beside
// the table until it is full again, at the period's end (keptQuota): the
// cap bounds the table, not those. Close stops the sweep; no goroutine
// outlives it.
package memstore

import (
	"context"
	"hash/maphash"
	"math"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/monotonic"

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
	clock     monotonic.Clock
	fake      func() int64 // Options.Now in Unix µs, or nil for clock
	stop      chan struct{}
	done      sync.WaitGroup
	closeOnce sync.Once
}

// shard holds some keys under its own lock.
type shard struct {
	mu   sync.Mutex // for writers of the table, and for owed: see table
	t    table
	owed owed                 // what keys evicted at the cap still owed
	kept map[uint64]keptQuota // keys evicted within a period of a calendar quota, by id
	_    [64]byte             // keeps neighbouring shards' locks off one cache line
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
		clock:  monotonic.New(),
		stop:   make(chan struct{}),
	}
	if opts.Now != nil {
		s.fake = func() int64 { return opts.Now().UnixMicro() }
	}
	if opts.MaxKeys > 0 {
		s.shardCap = (opts.MaxKeys + n - 1) / n
	}
	for i := range s.shards {
		s.shards[i].t.extra = make(map[uint64][]sluice.Bucket)
		if s.shardCap > 0 {
			s.shards[i].owed = newOwed(s.shardCap)
		}
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
func (s *Store) Check(_ context.Context, req sluice.Request) (res sluice.Result, err error) {
	if err = sluice.ValidateRequest(req); err != nil {
		return res, err
	}
	s.checkAt(&res, &req, s.now())
	return res, nil
}

// now is the store's time in Unix µs. The Clock's read is inlined here,
// not called through a func value: on the check of a hot key by one
// caller, reading the clock is the largest single cost.
func (s *Store) now() int64 {
	if s.fake != nil {
		return s.fake()
	}
	return s.clock.Micros()
}

// CheckAt decides a valid req at now, in Unix microseconds: the clock-free
// core of Check, for simulations and for callers that validated already.
//
// A one-rule key that exists is decided under its slot's lock alone (see
// table); a new key, or one with several rules, under the shard's mutex.
func (s *Store) CheckAt(req sluice.Request, now int64) (res sluice.Result) {
	s.checkAt(&res, &req, now)
	return res
}

// checkAt is CheckAt through pointers: the request is not copied again,
// and the result is written where the caller returns it from (see
// sluice.DecideInto for why).
func (s *Store) checkAt(res *sluice.Result, req *sluice.Request, now int64) {
	h := maphash.String(s.seed, req.Key)
	sh := &s.shards[h>>56&s.mask]
	if len(req.Rules) == 1 {
		if sl := sh.t.lockExisting(makeID(h, 1)); sl != nil {
			sluice.DecideInto(res, sl.b[:], req.Rules, now, req.Cost, req.MaxDelay)
			sl.fullAt = after(asOf(sl.b[:], req.Rules, now), res.ResetAfter)
			sl.unlock()
			return
		}
	}
	sh.checkLocked(res, s, h, req, now)
}

// checkLocked is checkAt's locked path, a function of its own so that the
// lock-free path keeps a small frame.
func (sh *shard) checkLocked(res *sluice.Result, s *Store, h uint64, req *sluice.Request, now int64) {
	sh.mu.Lock()
	sl := sh.entry(s, h, req.Rules, now)
	b := sh.t.buckets(sl)
	sluice.DecideInto(res, b, req.Rules, now, req.Cost, req.MaxDelay)
	sl.fullAt = fullAt(b, req.Rules, now, *res)
	sl.unlock()
	sh.mu.Unlock()
}

// Adjust charges (delta > 0) or refunds (delta < 0) req.Key's buckets
// under req.Rules now.
func (s *Store) Adjust(_ context.Context, req sluice.Request, delta int64) (sluice.Result, error) {
	if err := sluice.ValidateAdjust(req.Key, req.Rules); err != nil {
		return sluice.Result{}, err
	}
	return s.AdjustAt(req.Key, delta, req.Rules, s.now()), nil
}

// AdjustAt is Adjust at now, in Unix microseconds, for valid input.
func (s *Store) AdjustAt(key string, delta int64, rules []sluice.Rule, now int64) sluice.Result {
	h := maphash.String(s.seed, key)
	sh := &s.shards[h>>56&s.mask]
	if len(rules) == 1 {
		if sl := sh.t.lockExisting(makeID(h, 1)); sl != nil {
			res := sluice.AdjustBuckets(sl.b[:], rules, now, delta)
			sl.fullAt = after(asOf(sl.b[:], rules, now), res.ResetAfter)
			sl.unlock()
			return res
		}
	}
	sh.mu.Lock()
	sl := sh.entry(s, h, rules, now)
	b := sh.t.buckets(sl)
	res := sluice.AdjustBuckets(b, rules, now, delta)
	sl.fullAt = fullAt(b, rules, now, res)
	sl.unlock()
	sh.mu.Unlock()
	return res
}

// Len returns the number of keys held in the table (not counting the
// evicted keys with a used quota kept beside it).
func (s *Store) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += sh.t.used
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
		dropped += sh.t.sweep(now) + sh.sweepKept(now)
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

// entry returns the slot of key's state for rules, locked, creating full
// buckets when the key is new. A key checked with another number of rules
// is another state (so changing a policy's rules resets its keys; the old
// state is swept once full). sh.mu is held.
func (sh *shard) entry(s *Store, hash uint64, rules []sluice.Rule, now int64) *slot {
	id := makeID(hash, len(rules))
	if sl := sh.t.find(id); sl != nil {
		sl.lock()
		return sl
	}
	if s.shardCap > 0 && sh.t.used >= s.shardCap {
		switch victim, fullAt, quota := sh.t.evict(now, hash*0x9e3779b97f4a7c15); {
		case quota != nil:
			sh.keep(victim, quota, fullAt)
		case fullAt > now:
			sh.owed.remember(victim, fullAt, now)
		}
	}
	own, merged := sh.owed.recall(id, now)
	sl := sh.t.insert(id)
	var b []sluice.Bucket
	if len(rules) == 1 {
		b = sl.b[:]
	} else {
		b = make([]sluice.Bucket, len(rules))
		sh.t.extra[id] = b
	}
	if k, ok := sh.kept[id]; ok {
		delete(sh.kept, id)
		if k.fullAt > now {
			copy(b, k.b)
			return sl
		}
	}
	for i, r := range rules {
		b[i] = sluice.FullBucket(r, now)
		if own > now || merged > now {
			b[i] = owedBucket(r, now, own, merged)
		}
	}
	return sl
}

// fullAt is the time, in Unix µs, when every bucket of b is full again
// after a decision at now: for one rule, the result's ResetAfter says it
// already, counted from the time the state is as of.
func fullAt(b []sluice.Bucket, rules []sluice.Rule, now int64, res sluice.Result) int64 {
	at := asOf(b, rules, now)
	if len(rules) == 1 {
		return after(at, res.ResetAfter)
	}
	return after(at, sluice.ExpiryAfter(b, rules, at, 0))
}

// asOf is the time the rolling buckets of b are as of after a decision at
// now. That is a later time than now when a check read its clock before
// another check of the key that took the lock first: the buckets then
// keep the later time, their tokens are as of then, and so is the wait
// until they are full (counting it from now would let the sweep drop the
// key, and hand back a full bucket, that much too early).
func asOf(b []sluice.Bucket, rules []sluice.Rule, now int64) int64 {
	for i, r := range rules {
		if r.Period == sluice.Rolling && b[i].Last > now {
			now = b[i].Last
		}
	}
	return now
}

// after is now + d in Unix µs, saturating rather than wrapping (d ≥ 0).
func after(now int64, d time.Duration) int64 {
	t := now + d.Microseconds()
	if t < now {
		return math.MaxInt64
	}
	return t
}

// evictSample is how many keys evict looks at when none is full again.
const evictSample = 8

// keptQuota is the state of a key evicted while one of its calendar quotas
// was drawn on: owed, which remembers only a time, cannot say how much of
// a quota is left, and forgetting would hand the caller a fresh quota. So
// such a key is kept whole, outside the table, until it is full again (its
// quota's period ends): the cap bounds the table, not these.
type keptQuota struct {
	b      []sluice.Bucket
	fullAt int64
}

// keep remembers the buckets of the evicted key of id, full again at
// fullAt. sh.mu is held.
func (sh *shard) keep(id uint64, b []sluice.Bucket, fullAt int64) {
	if sh.kept == nil {
		sh.kept = make(map[uint64]keptQuota)
	}
	sh.kept[id] = keptQuota{b: b, fullAt: fullAt}
}

// sweepKept drops the kept keys that are full again at now and returns how
// many. sh.mu is held.
func (sh *shard) sweepKept(now int64) int {
	n := 0
	for id, k := range sh.kept {
		if k.fullAt <= now {
			delete(sh.kept, id)
			n++
		}
	}
	return n
}
