package algo

import (
	"context"
	"hash/maphash"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/monotonic"
	"github.com/sluicehq/sluice/internal/owed"

	"github.com/sluicehq/sluice"
)

// decideFunc and adjustFunc are the math of one algorithm over its state
// S for one key: they update it and return the Result and the time (Unix
// µs) from which the state is idle, as good as none.
type (
	decideFunc[S any] func(st *S, rules []sluice.Rule, now, cost, maxDelayUs int64, countDenied bool) (sluice.Result, int64)
	adjustFunc[S any] func(st *S, rules []sluice.Rule, now, delta int64) (sluice.Result, int64)
)

// memStore is the in-memory Store of one algorithm: a key's state behind
// the lock of its shard. A key is held as its 64-bit maphash (seeded per
// store, so no caller can aim for a collision). Idle state is dropped:
// on access (it is replaced by a fresh one), by the background sweep, and
// first when MaxKeys is reached; idle state gives the same answers as none,
// so dropping it changes nothing. At MaxKeys with no idle key, the key
// idle soonest of a small random sample is evicted, and what it still owed
// goes into its shard's remembrance (package owed, of a size fixed by the
// cap, made at the shard's first such eviction): a key that comes back
// starts from that, never fresher than it left (see owing).
type memStore[S any] struct {
	name      string
	shards    []memShard[S]
	mask      uint64
	seed      maphash.Seed
	shardCap  int
	now       func() int64
	decide    decideFunc[S]
	adjust    adjustFunc[S]
	owing     owing[S]
	stop      chan struct{}
	done      sync.WaitGroup
	closeOnce sync.Once
}

type memShard[S any] struct {
	mu   sync.Mutex
	m    map[uint64]*memEntry[S]
	owed owed.Table[owedState] // what keys evicted at the cap still owe; empty without a cap
	// Scratch space of remember and recall, here so that it is not
	// allocated for each new key.
	saved    [sluice.MaxRules]owedState
	recalled [sluice.MaxRules]recalled
	_        [64]byte // keeps neighbouring shards' locks off one cache line
}

type memEntry[S any] struct {
	state S
	idle  int64 // Unix µs from which state is as good as none
}

func newMemStore[S any](name string, opts MemoryOptions, decide decideFunc[S], adjust adjustFunc[S], ow owing[S]) *memStore[S] {
	n := 64
	if opts.Shards > 0 {
		n = 1
		for n < opts.Shards {
			n <<= 1
		}
	}
	s := &memStore[S]{
		name: name, shards: make([]memShard[S], n), mask: uint64(n - 1), seed: maphash.MakeSeed(),
		now: monotonic.Micros(), decide: decide, adjust: adjust, owing: ow, stop: make(chan struct{}),
	}
	if opts.Now != nil {
		s.now = func() int64 { return opts.Now().UnixMicro() }
	}
	if opts.MaxKeys > 0 {
		s.shardCap = (opts.MaxKeys + n - 1) / n
	}
	for i := range s.shards {
		s.shards[i].m = make(map[uint64]*memEntry[S])
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

func (s *memStore[S]) Algorithm() string { return s.name }

// Check decides req now. It fails only for invalid input.
func (s *memStore[S]) Check(_ context.Context, req sluice.Request) (sluice.Result, error) {
	if err := validate(s.name, req); err != nil {
		return sluice.Result{}, err
	}
	return s.checkAt(req, s.now()), nil
}

func (s *memStore[S]) checkAt(req sluice.Request, now int64) sluice.Result {
	sh, e := s.entry(req.Key, req.Rules, now)
	res, idle := s.decide(&e.state, req.Rules, now, req.Cost, req.MaxDelay.Microseconds(), req.CountDenied)
	e.idle = idle
	sh.mu.Unlock()
	return res
}

// Adjust charges (delta > 0) or refunds (delta < 0) key's state now.
func (s *memStore[S]) Adjust(_ context.Context, req sluice.Request, delta int64) (sluice.Result, error) {
	key, rules := req.Key, req.Rules
	if err := sluice.ValidateAdjust(key, rules); err != nil {
		return sluice.Result{}, err
	}
	if err := validateLog(s.name, rules, delta); err != nil {
		return sluice.Result{}, err
	}
	now := s.now()
	sh, e := s.entry(key, rules, now)
	res, idle := s.adjust(&e.state, rules, now, delta)
	e.idle = idle
	sh.mu.Unlock()
	return res, nil
}

// entry returns key's entry, fresh when it was idle, as the remembrance
// says when it was missing, with its shard locked.
func (s *memStore[S]) entry(key string, rules []sluice.Rule, now int64) (*memShard[S], *memEntry[S]) {
	h := maphash.String(s.seed, key)
	sh := &s.shards[h&s.mask]
	sh.mu.Lock()
	e, ok := sh.m[h]
	if !ok {
		e = &memEntry[S]{}
		if s.shardCap > 0 {
			if len(sh.m) >= s.shardCap {
				if victim, v := sh.evict(now); v != nil && v.idle > now {
					s.remember(sh, victim, v, now)
				}
			}
			s.recall(sh, h, e, rules, now)
		}
		sh.m[h] = e
	} else if e.idle <= now {
		var fresh S
		e.state = fresh
	}
	return sh, e
}

// remember puts what the evicted entry e of hash h owes at now into its
// shard's remembrance: one record a rule (a key for the sliding log) that
// owes anything, each until the entry is idle. sh.mu is held.
func (s *memStore[S]) remember(sh *memShard[S], h uint64, e *memEntry[S], now int64) {
	if sh.owed.Cells() == 0 { // made at the shard's first eviction of a key that owes
		sh.owed = owed.New[owedState](s.shardCap)
	}
	buf := sh.saved[:]
	n := s.owing.save(&e.state, now, buf)
	idN := n
	if s.owing.perKey {
		idN = 0
	}
	for i, v := range buf[:n] {
		if v != (owedState{}) {
			sh.owed.Remember(owedID(h, idN, i), e.idle, now, v)
		}
	}
}

// recall fills the new entry e of hash h, checked with rules at now, from
// what the remembrance holds of it, if anything. sh.mu is held.
func (s *memStore[S]) recall(sh *memShard[S], h uint64, e *memEntry[S], rules []sluice.Rule, now int64) {
	if sh.owed.Cells() == 0 {
		return
	}
	n, idN := len(rules), len(rules)
	if s.owing.perKey {
		n, idN = 1, 0
	}
	recs := sh.recalled[:n]
	owes := false
	for i := range n {
		r := &recs[i]
		var own int64
		r.v, own, r.merged = sh.owed.Recall(owedID(h, idN, i), now)
		r.own = own > now
		owes = owes || r.own || r.merged > now
	}
	if owes {
		s.owing.load(&e.state, rules, now, recs)
	}
}

// evictSample is how many keys evict looks at when no key is idle.
const evictSample = 8

// evict drops one key of a full shard and returns its hash and entry: an
// idle one if the sample holds one, else the sampled key idle soonest. Map
// iteration starts at a random place, so the sample is random. sh.mu is
// held.
func (sh *memShard[S]) evict(now int64) (uint64, *memEntry[S]) {
	var victim uint64
	var ve *memEntry[S]
	soonest, seen := int64(1<<63-1), 0
	for h, e := range sh.m {
		if e.idle < soonest {
			victim, ve, soonest = h, e, e.idle
		}
		if seen++; seen == evictSample || soonest <= now {
			break
		}
	}
	if seen > 0 {
		delete(sh.m, victim)
	}
	return victim, ve
}

// Len returns the number of keys held.
func (s *memStore[S]) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += len(sh.m)
		sh.mu.Unlock()
	}
	return n
}

// Sweep drops every key idle at now (Unix µs) and returns how many.
func (s *memStore[S]) Sweep(now int64) int {
	dropped := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for h, e := range sh.m {
			if e.idle <= now {
				delete(sh.m, h)
				dropped++
			}
		}
		sh.mu.Unlock()
	}
	return dropped
}

// Close stops the background sweep and waits for it; idempotent.
func (s *memStore[S]) Close() error {
	s.closeOnce.Do(func() { close(s.stop) })
	s.done.Wait()
	return nil
}

func (s *memStore[S]) sweepEvery(interval time.Duration) {
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
