package redisstore

// Leases: for the hot keys of the largest users, an instance takes a lease
// of a key's tokens from the Redis bucket and decides locally until it is
// spent or expires. The design:
//
// The bucket. A lease is taken from the very bucket the plain checks use
// (the same Redis key, the same 16 bytes, the same refill), by one script
// call (lease.lua) that refills the bucket, gives back what the instance
// returns, and takes g = min(want, ⌊tokens⌋) whole tokens when at least the
// check's cost is there (want = max(Lease.Tokens, cost)), else none. The
// instance then spends the g tokens on its own checks, in process, until
// they are spent or Lease.TTL has passed since it asked; then the rest is
// given back (in the next lease call of the key, or by a sweep every TTL,
// or by Close) and a new lease is taken.
//
// The bound. Every token admitted was first taken from the bucket, so the
// tokens the bucket gives out bound the admissions. Let V = the bucket's
// tokens + the tokens held in leases by every instance. V grows only by
// the refill, at the rule's rate, and only while the bucket (not V) is
// below its burst; a lease or a return moves tokens between the two parts
// (a return that would overflow the burst is cut: tokens are lost, never
// made); an admission takes from V. Hence for any interval [t0, t1]:
//
//	admitted in [t0, t1] ≤ V(t0) + rate × (t1 − t0)
//	                     ≤ burst + rate × (t1 − t0) + L(t0)
//
// where L(t0) is what the leases held at t0, unspent or on their way back:
// an instance has one lease of a key out at a time (a check that finds its
// lease being taken or given back waits for that call), and the check that
// takes a lease spends its cost from it at once, so an instance holds at
// most Lease.Tokens − 1 of a key, and L(t0) ≤ K × (Lease.Tokens − 1) with
// K instances. From a moment when no lease is held (a new key, or one that
// no instance checked for a TTL) L is 0: admissions never exceed those of
// a plain bucket, burst + rate × elapsed. Over a window that starts while
// leases are held they may exceed it by the tokens held then, at most
// K × (Lease.Tokens − 1): tokens taken from the bucket earlier and spent
// in the window while the bucket refilled behind them. That is the whole
// over-admission bound. (It is not rate × TTL: a lease given back is
// taken again, so with two instances or more the leases held at once can
// outgrow a TTL's refill.)
//
// The cost is under-admission, never over-admission: tokens that one
// instance holds cannot be spent by another, so while instance A holds g
// unused tokens, B may be denied with them in A's lease; at any instant at
// most (K − 1) × Lease.Tokens tokens are kept from a caller that way, for at
// most TTL. Tokens are lost (never given back) when a lease call fails
// after Redis applied it (the instance cannot know, so it drops what it
// was returning), or when an instance dies holding a lease: at most
// Lease.Tokens a key for each.
//
// Denials. When the lease is spent and the bucket has less than the cost,
// the script says how long until the cost is there (w) and until a whole
// lease is (wl). The instance denies locally (DecidedBy ByDenialCache)
// until max(w, min(wl, TTL)) has passed, then one caller asks again: a
// denied hot key costs each instance at most one call per
// max(1/rate, min(Lease.Tokens/rate, TTL)). A denial's RetryAfter is the
// time this instance will deny, which may exceed the bucket's own wait.
//
// Calls. Concurrent checks of one key in one instance share one lease
// call: while one caller asks Redis, the others of the key wait for its
// answer (or their context). A hot key thus costs one call per
// Lease.Tokens admissions, plus the denials' re-asks above.
//
// What goes to the Store instead, unchanged: checks of several rules or of
// a calendar quota, reservations (MaxDelay), zero-cost inspections,
// adjustments, and every check of a new key while MaxKeys keys are held.

import (
	"context"
	_ "embed"
	"fmt"
	"hash/maphash"
	"math"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
)

//go:embed lease.lua
var leaseLua string

var leaseScript = redis.NewScript(leaseLua)

// Bounds of a Lease.
const (
	// MaxLeaseTokens is the largest lease: Lease.Tokens at most.
	MaxLeaseTokens = 1_000_000_000
	// MaxLeaseTTL is the longest a lease is held.
	MaxLeaseTTL = time.Minute
	// MinLeaseTTL is the shortest: a sweep runs every TTL.
	MinLeaseTTL = time.Millisecond
	// DefaultLeaseMaxKeys is Lease.MaxKeys when zero.
	DefaultLeaseMaxKeys = 100_000
)

// Lease configures a Leased store: see the design at the top of lease.go
// and docs/redis.md.
type Lease struct {
	// Tokens is how many tokens an instance takes at once, 1 to
	// MaxLeaseTokens: a hot key costs one Redis call per Tokens
	// admissions, and K instances may hold K × Tokens between them. A
	// lease is never more than what the bucket holds, so a Tokens above
	// a rule's burst is the burst.
	Tokens int64

	// TTL is how long an instance spends a lease before it gives the rest
	// back, MinLeaseTTL to MaxLeaseTTL. It bounds how long tokens are kept
	// from the other instances, and how far a window's admissions may run
	// ahead of the plain bucket's (rate × TTL).
	TTL time.Duration

	// MaxKeys caps the keys an instance holds leases for; zero means
	// DefaultLeaseMaxKeys. Checks of further keys go to the store, plain.
	MaxKeys int
}

// Validate reports a Lease that cannot be used, wrapping sluice.ErrInvalid.
func (l Lease) Validate() error {
	switch {
	case l.Tokens < 1 || l.Tokens > MaxLeaseTokens:
		return fmt.Errorf("%w: lease tokens %d: must be 1 to %d", sluice.ErrInvalid, l.Tokens, MaxLeaseTokens)
	case l.TTL < MinLeaseTTL || l.TTL > MaxLeaseTTL:
		return fmt.Errorf("%w: lease ttl %v: must be %v to %v", sluice.ErrInvalid, l.TTL, MinLeaseTTL, MaxLeaseTTL)
	case l.MaxKeys < 0:
		return fmt.Errorf("%w: lease max keys %d: must not be negative", sluice.ErrInvalid, l.MaxKeys)
	}
	return nil
}

// leaseGrant is the answer of one lease call (lease.lua).
type leaseGrant struct {
	tokens    int64   // granted: 0, or cost to want
	left      float64 // the tokens left in the bucket
	wait      int64   // µs until cost tokens are there; 0 when granted
	waitLease int64   // µs until min(want, burst) are
	reset     int64   // µs until the bucket is full
}

// taker makes one lease call: give back returned tokens of key's bucket
// under rule, then take up to want when cost is there.
type taker func(ctx context.Context, key string, rule sluice.Rule, returned, want, cost int64) (leaseGrant, error)

// Leased is a sluice.Store that decides the checks of a key from leases
// of its tokens taken from a Store's Redis bucket. Safe for concurrent
// use; Close gives back what it holds.
type Leased struct {
	store   *Store
	take    taker
	tokens  int64
	ttl     int64 // ns
	maxKeys int
	now     func() int64 // monotonic ns
	seed    maphash.Seed
	shards  [leaseShards]leaseShard
	stop    chan struct{}
	done    chan struct{}
	swept   bool // a sweep runs (not in the property test, which sweeps itself)
	once    sync.Once
}

var _ sluice.Store = (*Leased)(nil)

const leaseShards = 64

type leaseShard struct {
	mu sync.Mutex
	m  map[leaseKey]*leaseEntry
	_  [48]byte
}

// leaseKey names one bucket: a caller key under one rule.
type leaseKey struct {
	key   string
	rate  float64
	burst int64
}

// leaseEntry is what an instance holds of one bucket.
type leaseEntry struct {
	mu       sync.Mutex
	tokens   int64         // left in the lease
	expires  int64         // ns: from then on the tokens are given back, not spent
	denied   int64         // ns: until then, deny without asking
	retry    int64         // ns: a denial's RetryAfter points here
	reset    int64         // ns: the bucket is full then, as of the last call
	lastUse  int64         // ns
	fetching chan struct{} // non-nil while a caller asks Redis; closed when it has
	dead     bool          // swept out of the map: look it up again
}

// NewLeased returns a Leased store that takes its leases from s's buckets
// (the same Redis keys, so leased and plain checks of a key share one
// limit). It starts a sweep that gives back expired leases every TTL.
func NewLeased(s *Store, l Lease) (*Leased, error) {
	if s == nil {
		return nil, fmt.Errorf("%w: lease: no store", sluice.ErrInvalid)
	}
	base := time.Now()
	ls, err := newLeased(s, s.takeLease, l, func() int64 { return int64(time.Since(base)) })
	if err != nil {
		return nil, err
	}
	ls.swept = true
	go ls.sweepEvery(l.TTL)
	return ls, nil
}

func newLeased(s *Store, take taker, l Lease, now func() int64) (*Leased, error) {
	if err := l.Validate(); err != nil {
		return nil, err
	}
	ls := &Leased{store: s, take: take, tokens: l.Tokens, ttl: int64(l.TTL), maxKeys: l.MaxKeys, now: now,
		seed: maphash.MakeSeed(), stop: make(chan struct{}), done: make(chan struct{})}
	if ls.maxKeys == 0 {
		ls.maxKeys = DefaultLeaseMaxKeys
	}
	for i := range ls.shards {
		ls.shards[i].m = map[leaseKey]*leaseEntry{}
	}
	return ls, nil
}

// Close stops the sweep and gives back every lease held, whether expired
// or not (a lease call each, within the context's deadline of 1s). It
// does not close the Store.
func (l *Leased) Close() error {
	l.once.Do(func() {
		close(l.stop)
		if l.swept {
			<-l.done
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		l.sweep(ctx, math.MaxInt64)
	})
	return nil
}

// Adjust is the Store's: it changes the bucket in Redis, not the leases.
func (l *Leased) Adjust(ctx context.Context, req sluice.Request, delta int64) (sluice.Result, error) {
	return l.store.Adjust(ctx, req, delta)
}

// Check decides req from the key's lease when it is a plain check of one
// rolling rule; anything else goes to the Store.
func (l *Leased) Check(ctx context.Context, req sluice.Request) (sluice.Result, error) {
	if err := sluice.ValidateRequest(req); err != nil {
		return sluice.Result{}, err
	}
	if len(req.Rules) != 1 || req.Rules[0].Period != sluice.Rolling || req.MaxDelay > 0 || req.Cost == 0 {
		return l.store.Check(ctx, req)
	}
	r := req.Rules[0]
	k := leaseKey{key: req.Key, rate: r.Rate, burst: r.Burst}
	for {
		e := l.entry(k)
		if e == nil {
			return l.store.Check(ctx, req)
		}
		res, again, err := l.decide(ctx, e, k, r, req.Cost)
		if !again {
			return res, err
		}
	}
}

// entry returns k's entry, made when missing; nil when MaxKeys are held.
func (l *Leased) entry(k leaseKey) *leaseEntry {
	sh := &l.shards[maphash.String(l.seed, k.key)%leaseShards]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.m[k]
	if e == nil {
		if len(sh.m) >= (l.maxKeys+leaseShards-1)/leaseShards {
			return nil
		}
		e = &leaseEntry{}
		sh.m[k] = e
	}
	return e
}

// decide answers a check of cost from e, asking Redis when it must.
// again: e was swept out, or another caller's lease call ended; look again.
func (l *Leased) decide(ctx context.Context, e *leaseEntry, k leaseKey, r sluice.Rule, cost int64) (res sluice.Result, again bool, err error) {
	e.mu.Lock()
	if e.dead {
		e.mu.Unlock()
		return res, true, nil
	}
	now := l.now()
	e.lastUse = now
	if now < e.expires && e.tokens >= cost {
		e.tokens -= cost
		res = sluice.Result{Allowed: true, Limit: r.Burst, Remaining: e.tokens, ResetAfter: untilNs(e.reset, now)}
		e.mu.Unlock()
		return res, false, nil
	}
	if now < e.denied {
		res = l.denial(e, r, now)
		e.mu.Unlock()
		return res, false, nil
	}
	if ch := e.fetching; ch != nil {
		e.mu.Unlock()
		select {
		case <-ch:
			return res, true, nil
		case <-ctx.Done():
			return res, false, ctx.Err()
		}
	}
	// This caller asks: it gives back what is left (expired, or too
	// little for cost) and takes a new lease.
	returned := e.tokens
	e.tokens, e.expires = 0, 0
	ch := make(chan struct{})
	e.fetching = ch
	e.mu.Unlock()

	g, err := l.take(ctx, k.key, r, returned, max(l.tokens, cost), cost)

	e.mu.Lock()
	defer e.mu.Unlock()
	e.fetching = nil
	close(ch)
	if err != nil {
		// Whether Redis took the returned tokens back is unknown: they
		// are dropped, never spent twice (under-admission, at most a lease).
		return res, false, err
	}
	done := l.now()
	e.reset = afterUs(done, g.reset)
	if g.tokens > 0 {
		// Spent within TTL of the call's start, so never more than TTL
		// after Redis took them.
		e.tokens, e.expires, e.denied = g.tokens-cost, now+l.ttl, 0
		return sluice.Result{Allowed: true, Limit: r.Burst, Remaining: e.tokens, ResetAfter: untilNs(e.reset, done)}, false, nil
	}
	// Denied: not before cost is there, and until a whole lease is (at
	// most a TTL), ask no more. The waits count from the call's start.
	e.retry = afterUs(now, g.wait)
	e.denied = max(e.retry, now+min(afterUs(0, g.waitLease), l.ttl))
	e.retry = e.denied
	res = l.denial(e, r, done)
	if left := int64(math.Floor(g.left + 1e-9)); left > 0 {
		res.Remaining = left
	}
	return res, false, nil
}

// denial is the answer of a check that e denies at now.
func (l *Leased) denial(e *leaseEntry, r sluice.Rule, now int64) sluice.Result {
	return sluice.Result{Limit: r.Burst, RetryAfter: untilNs(e.retry, now), ResetAfter: untilNs(e.reset, now), DecidedBy: sluice.ByDenialCache}
}

// afterUs is t plus us µs in ns, saturating: a wait of a rule near
// MaxRefillTime, or of debt, is no reason to wrap around.
func afterUs(t, us int64) int64 {
	if us >= (math.MaxInt64-t)/1000 {
		return math.MaxInt64
	}
	return t + us*1000
}

// untilNs is the time from now to t, rounded up to the microsecond, and
// at least a microsecond when t is still ahead (a RetryAfter is never 0).
func untilNs(t, now int64) time.Duration {
	if t <= now {
		return 0
	}
	return (time.Duration(t-now) + time.Microsecond - 1).Truncate(time.Microsecond)
}

func (l *Leased) sweepEvery(ttl time.Duration) {
	defer close(l.done)
	t := time.NewTicker(ttl)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			l.sweep(ctx, l.now())
			cancel()
		}
	}
}

// sweep gives back the leases that expired by now (every lease, with
// now = MaxInt64) and forgets the keys idle for a TTL that hold nothing.
func (l *Leased) sweep(ctx context.Context, now int64) {
	type back struct {
		k  leaseKey
		e  *leaseEntry
		n  int64
		ch chan struct{}
	}
	var returns []back
	for i := range l.shards {
		sh := &l.shards[i]
		sh.mu.Lock()
		for k, e := range sh.m {
			e.mu.Lock()
			if e.fetching == nil && now >= e.expires {
				if e.tokens > 0 {
					// The entry is busy until the tokens are back: a check
					// waits rather than take a lease beside them, so an
					// instance never has more than one lease of a key out.
					b := back{k, e, e.tokens, make(chan struct{})}
					e.tokens, e.fetching = 0, b.ch
					returns = append(returns, b)
				} else if now >= e.denied && (now == math.MaxInt64 || now-e.lastUse >= l.ttl) {
					e.dead = true
					delete(sh.m, k)
				}
			}
			e.mu.Unlock()
		}
		sh.mu.Unlock()
	}
	for _, b := range returns {
		// An error loses the tokens: under-admission, at most a lease.
		_, _ = l.take(ctx, b.k.key, sluice.Rule{Rate: b.k.rate, Burst: b.k.burst}, b.n, 0, 0)
		b.e.mu.Lock()
		b.e.fetching = nil
		b.e.mu.Unlock()
		close(b.ch)
	}
}

// Inspect is the Store's: the bucket in Redis, without what the leases
// of any instance hold.
func (l *Leased) Inspect(ctx context.Context, req sluice.Request) ([]sluice.Result, error) {
	return l.store.Inspect(ctx, req)
}

// takeLease is the taker of a Store: one call of lease.lua.
func (s *Store) takeLease(ctx context.Context, key string, rule sluice.Rule, returned, want, cost int64) (leaseGrant, error) {
	now := -1.0
	if s.now != nil {
		now = float64(s.now().UnixMicro())
	}
	nums := make([]byte, 0, 7*8)
	for _, f := range [...]float64{now, float64(s.marginMs), float64(returned), float64(want), float64(cost), rule.Rate, float64(rule.Burst)} {
		nums = appendFloat(nums, f)
	}
	reply, err := leaseScript.Run(ctx, s.client, []string{s.Key(key)}, nums).Text()
	if err != nil {
		return leaseGrant{}, fmt.Errorf("redisstore: lease: %w", err)
	}
	if len(reply) != 6*8 {
		return leaseGrant{}, fmt.Errorf("redisstore: lease script returned %d bytes, want 48", len(reply))
	}
	return leaseGrant{
		tokens:    int64(floatAt(reply, 0)),
		left:      floatAt(reply, 8),
		wait:      int64(floatAt(reply, 16)),
		waitLease: int64(floatAt(reply, 24)),
		reset:     int64(floatAt(reply, 32)),
	}, nil
}
