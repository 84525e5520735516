package resilient

import (
	"hash/maphash"
	"math"
	"sync"
	"time"

	"github.com/sluicehq/sluice"
)

// denialCache remembers keys that the store denied, until their retry
// time: a fixed number of independently locked shards, each a map capped
// at its share of the size, in entries or in bytes (DenialCacheBytes:
// each entry costs denialEntryBytes and its key's length). Times are the
// Store's monotonic nanoseconds.
//
// When a remembered retry time runs out, one caller is let through to the
// store (it holds a lease for one deadline) while the others of the same
// cost are still denied: the refill has made room for one such request,
// not for all of them, and a flood of callers does not become a stampede on
// the store each time a token comes back.
type denialCache struct {
	shards   []denialShard
	mask     uint64
	seed     maphash.Seed
	shardCap int
	// shardBytes caps what one shard's entries cost (entryBytes);
	// MaxInt64 when the cache is capped in entries only.
	shardBytes int64
	leaseFor   int64
}

type denialShard struct {
	mu    sync.Mutex
	m     map[uint64]denial
	bytes int64    // what m's entries cost (entryBytes)
	_     [40]byte // keeps neighbouring shards' locks off one cache line
}

// denial is what a denied check tells about a key: for cost tokens, the
// reported rule (of rate and burst limit) would pass at until, and be full
// at fullAt. Any larger cost waits longer, so it is denied too.
type denial struct {
	key    string // the caller key, compared on lookup: no collision denies a stranger
	cost   int64
	until  int64
	fullAt int64
	rate   float64
	rule   int
	limit  int64
	lease  int64 // after until: while now < lease, one caller is asking the store
}

const denialShards = 64

// denialEntryBytes is what one remembered denial costs beside its key's
// bytes: the map slot of its hash and its denial (80 bytes), at the lowest
// load a Go map has right after it grew (7/16: 183 bytes), and the key's
// string header rounded up. A cache capped at B bytes holds at most
// B / (denialEntryBytes + the key's length) denials.
const denialEntryBytes = 200

// entryBytes is what d costs in a cache capped in bytes.
func entryBytes(d *denial) int64 { return denialEntryBytes + int64(len(d.key)) }

func newDenialCache(size int, leaseFor time.Duration) *denialCache {
	return newDenialCacheBytes(size, math.MaxInt64, leaseFor)
}

// newDenialCacheBytes is a cache of at most size entries whose entries
// cost at most maxBytes in all (math.MaxInt64: no bound in bytes).
func newDenialCacheBytes(size int, maxBytes int64, leaseFor time.Duration) *denialCache {
	c := &denialCache{
		leaseFor:   int64(leaseFor),
		shards:     make([]denialShard, denialShards),
		mask:       denialShards - 1,
		seed:       maphash.MakeSeed(),
		shardCap:   max((size+denialShards-1)/denialShards, 1),
		shardBytes: math.MaxInt64,
	}
	if maxBytes < math.MaxInt64 {
		c.shardBytes = maxBytes / denialShards
	}
	for i := range c.shards {
		c.shards[i].m = make(map[uint64]denial)
	}
	return c
}

// hash names a key under one rule set: the same caller key under another
// policy's rules is another bucket.
func (c *denialCache) hash(key string, rules []sluice.Rule) uint64 {
	h := maphash.String(c.seed, key)
	for _, r := range rules {
		h = mix(h ^ math.Float64bits(r.Rate))
		h = mix(h ^ uint64(r.Burst))
	}
	return h
}

// mix is a 64-bit finalizer (xor-shift-multiply): every input bit moves
// every output bit.
func mix(h uint64) uint64 {
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
}

// lookup answers req at now when a remembered denial covers it (hit).
// present reports that the key is remembered, covered or not, so that an
// allowed answer from the store can forget it.
func (c *denialCache) lookup(req *sluice.Request, now int64) (res sluice.Result, hit, present bool) {
	h := c.hash(req.Key, req.Rules)
	sh := &c.shards[h&c.mask]
	sh.mu.Lock()
	d, ok := sh.m[h]
	if !ok || d.key != req.Key {
		sh.mu.Unlock()
		return sluice.Result{}, false, false
	}
	if now >= d.until {
		if req.Cost < d.cost || req.MaxDelay > 0 {
			sh.mu.Unlock()
			return sluice.Result{}, false, true
		}
		if now < d.lease {
			sh.mu.Unlock()
			return sluice.Result{Rule: d.rule, Limit: d.limit, RetryAfter: roundUpMicro(d.lease - now), ResetAfter: roundUpMicro(d.fullAt - now)}, true, true
		}
		d.lease = now + c.leaseFor
		sh.m[h] = d
		sh.mu.Unlock()
		return sluice.Result{}, false, true // this caller asks the store
	}
	sh.mu.Unlock()
	if req.Cost < d.cost {
		return sluice.Result{}, false, true
	}
	// The reported rule holds tokens = cost - rate × (until - now) at
	// most now: the refill since the denial, less whatever was taken
	// elsewhere. A cost c waits (c - tokens) / rate at least.
	wait := d.until - now + int64(float64(req.Cost-d.cost)/d.rate*1e9)
	if req.MaxDelay > 0 && wait <= int64(req.MaxDelay) {
		return sluice.Result{}, false, true // the store may reserve it
	}
	tokens := float64(d.cost) - float64(d.until-now)/1e9*d.rate
	remaining := int64(0)
	if tokens > 0 {
		remaining = int64(tokens)
	}
	return sluice.Result{
		Rule:       d.rule,
		Limit:      d.limit,
		Remaining:  remaining,
		RetryAfter: roundUpMicro(wait),
		ResetAfter: roundUpMicro(d.fullAt - now),
	}, true, true
}

// remember records the store's denial res of req, decided after sent.
func (c *denialCache) remember(req sluice.Request, res sluice.Result, sent int64) {
	if res.RetryAfter <= 0 || res.Rule < 0 || res.Rule >= len(req.Rules) {
		return
	}
	h := c.hash(req.Key, req.Rules)
	d := denial{
		key:    req.Key,
		cost:   req.Cost,
		until:  sent + int64(res.RetryAfter),
		fullAt: sent + int64(res.ResetAfter),
		rate:   req.Rules[res.Rule].Rate,
		rule:   res.Rule,
		limit:  res.Limit,
	}
	if req.Rules[res.Rule].Period != sluice.Rolling {
		d.rate = math.Inf(1) // a calendar quota comes back whole at until, not a token at a time
	}
	cost := entryBytes(&d)
	if cost > c.shardBytes {
		return // a key longer than a shard's share of the bytes
	}
	sh := &c.shards[h&c.mask]
	sh.mu.Lock()
	if old, ok := sh.m[h]; ok {
		sh.bytes -= entryBytes(&old)
	} else {
		for len(sh.m) > 0 && (len(sh.m) >= c.shardCap || sh.bytes+cost > c.shardBytes) {
			if !sh.evict(sent) {
				break
			}
		}
	}
	sh.m[h] = d
	sh.bytes += cost
	sh.mu.Unlock()
}

// allowed records that the store allowed req, whose key is remembered:
// when the bucket has room for another request of the remembered cost the
// key is forgotten; when it has not, the next such request asks the store
// alone again.
func (c *denialCache) allowed(req sluice.Request, res sluice.Result, now int64) {
	h := c.hash(req.Key, req.Rules)
	sh := &c.shards[h&c.mask]
	sh.mu.Lock()
	if d, ok := sh.m[h]; ok && d.key == req.Key {
		if res.Remaining >= d.cost {
			sh.drop(h, &d)
		} else {
			d.until, d.lease = min(d.until, now), 0
			sh.m[h] = d
		}
	}
	sh.mu.Unlock()
}

// forget drops the remembered denial of key under rules.
func (c *denialCache) forget(key string, rules []sluice.Rule) {
	h := c.hash(key, rules)
	sh := &c.shards[h&c.mask]
	sh.mu.Lock()
	if d, ok := sh.m[h]; ok {
		sh.drop(h, &d)
	}
	sh.mu.Unlock()
}

// drop deletes the entry h, which is d. sh.mu is held.
func (sh *denialShard) drop(h uint64, d *denial) {
	delete(sh.m, h)
	sh.bytes -= entryBytes(d)
}

// evictSample is how many entries evict looks at.
const evictSample = 8

// evict makes room in a full shard: it drops the expired entries of a
// small random sample (map iteration starts at a random place) or, when
// none has expired, the sampled entry that expires soonest, which is the
// one whose loss costs the store the fewest calls. It reports whether it
// dropped any. sh.mu is held.
func (sh *denialShard) evict(now int64) bool {
	var victim uint64
	soonest := int64(math.MaxInt64)
	seen, dropped := 0, 0
	for h, d := range sh.m {
		if d.until <= now && d.lease <= now {
			sh.drop(h, &d)
			dropped++
		} else if d.until < soonest {
			victim, soonest = h, d.until
		}
		if seen++; seen == evictSample {
			break
		}
	}
	if dropped == 0 && soonest != math.MaxInt64 {
		d := sh.m[victim]
		sh.drop(victim, &d)
		dropped++
	}
	return dropped > 0
}

// roundUpMicro converts nanoseconds to a Duration rounded up to the
// microsecond, the resolution of every store's results.
func roundUpMicro(ns int64) time.Duration {
	if ns <= 0 {
		return 0
	}
	return time.Duration((ns+999)/1000) * time.Microsecond
}
