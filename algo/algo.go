// Package algo offers the rate limiting algorithms beside the token bucket
// behind the same sluice.Store interface and the same
// sluice.Result, so a policy can choose one by name and the middleware, the
// gateway and the headers work unchanged:
//
//   - token_bucket: the default, package memstore or redisstore.
//   - fixed_window: a counter per window aligned to the Unix epoch.
//   - sliding_log: the time of every admitted unit within one window; exact.
//   - sliding_window: the fixed window's counter plus the previous window's,
//     weighted by how much of it still overlaps the sliding window; O(1).
//   - leaky_bucket: a shaper; requests queue and leave at the rate, and a
//     request that finds the queue full is dropped.
//
// Every algorithm reads a sluice.Rule{Rate, Burst} the same way, so all of
// them have the token bucket's long-run rate and its largest burst: the
// window is W = Burst/Rate seconds (the bucket's refill time, rounded up to
// the microsecond) with a limit of Burst per window; the leaky bucket's
// queue holds Burst units and drains at Rate. docs/algorithms.md states
// the bounds each one keeps and the figures `sluice simulate` measured.
//
// The math of each algorithm is written once in Go (decide and adjust
// functions per file) and called by the in-memory store; each Redis store
// runs one embedded Lua script that mirrors it line by line, held against
// it by a differential test. A request's rules are decided together, all or
// nothing, as for the token bucket. Time is Unix microseconds; a clock that
// is behind the latest time a key's state has seen is taken as at that
// time, so skew never frees capacity.
package algo

import (
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/redisstore"
)

// Names of the algorithms, as a policy's `algorithm:` field spells them.
const (
	TokenBucket   = "token_bucket"
	FixedWindow   = "fixed_window"
	SlidingLog    = "sliding_log"
	SlidingWindow = "sliding_window"
	LeakyBucket   = "leaky_bucket"
)

// Names returns every algorithm name, the default (token_bucket) first.
func Names() []string {
	return []string{TokenBucket, FixedWindow, SlidingLog, SlidingWindow, LeakyBucket}
}

// Store is a sluice.Store of one algorithm.
type Store interface {
	sluice.Store

	// Algorithm returns the store's algorithm name.
	Algorithm() string

	// Close stops background work; the store still answers afterwards.
	Close() error
}

// MemoryOptions configures an in-memory Store. The zero value is ready to use.
type MemoryOptions struct {
	// Shards is the number of independently locked parts, rounded up to a
	// power of two. Zero means 64 (256 for the token bucket).
	Shards int

	// MaxKeys caps the number of keys held; zero means no cap (expired
	// state is still dropped, which bounds memory to the active keys). A
	// key evicted at the cap leaves what it owed in a remembrance of a
	// size fixed by the cap, and comes back never fresher than it left
	// (docs/algorithms.md, "In memory at the cap").
	MaxKeys int

	// SweepInterval is how often expired state is dropped. Zero means one
	// minute; negative disables the background sweep.
	SweepInterval time.Duration

	// Now is the clock; nil means the system's. Simulations inject one.
	Now func() time.Time
}

// RedisOptions configures a Redis Store. The zero value is ready to use.
type RedisOptions struct {
	// Prefix starts every key; empty means "sluice:". The token bucket uses
	// it as is (the keys of package redisstore); every other algorithm adds
	// its name and a colon, so two algorithms never share a key.
	Prefix string

	// Now selects client-clock mode (the script is given this clock's
	// time); nil uses the Redis server's TIME, one clock for every instance.
	Now func() time.Time

	// ExpiryMargin is kept beyond the time a key's state stops mattering;
	// zero means one second.
	ExpiryMargin time.Duration

	// ExpiryJitter, when positive, adds up to this much (whole seconds,
	// drawn at random) to the expiry of a fixed window's counter of
	// sluice.Request.WindowKey, as envoyproxy/ratelimit's
	// EXPIRATION_JITTER_MAX_SECONDS does, so that a window's keys do not
	// all expire at once.
	ExpiryJitter time.Duration

	// Coalesce tunes the coalescing of concurrent checks of the token
	// bucket and the fixed window (see redisstore.Coalesce), which is on
	// unless DisableCoalescing is set; nil means its defaults. The other
	// algorithms send every check in a script call of its own.
	Coalesce *redisstore.Coalesce

	// DisableCoalescing sends every check in a script call of its own.
	DisableCoalescing bool

	// CountersRemade, when set, is told of the fixed window's counters of
	// sluice.Request.WindowKey that a check found made anew while this
	// process knew them to hold an expiry at least 10 seconds away (it
	// then sends their INCRBY without an EXPIRE): the counter was deleted,
	// expired early (an evicting Redis), or lost by a Redis that
	// restarted or failed over without it. They are given their expiry
	// again at once. It must be fast and safe for concurrent use.
	CountersRemade func(n int)
}

// Memory returns the in-memory Store of the named algorithm, or an error
// that lists the valid names.
func Memory(name string, opts MemoryOptions) (Store, error) {
	switch name {
	case TokenBucket, "":
		return tokenBucketMemory{memstore.New(memstore.Options{
			Shards: opts.Shards, MaxKeys: opts.MaxKeys, SweepInterval: opts.SweepInterval, Now: opts.Now,
		})}, nil
	case FixedWindow:
		return newMemStore(name, opts, decideFixedWindow, adjustFixedWindow, fixedWindowOwing), nil
	case SlidingLog:
		return newMemStore(name, opts, decideSlidingLog, adjustSlidingLog, slidingLogOwing), nil
	case SlidingWindow:
		return newMemStore(name, opts, decideSlidingWindow, adjustSlidingWindow, slidingWindowOwing), nil
	case LeakyBucket:
		return newMemStore(name, opts, decideLeakyBucket, adjustLeakyBucket, leakyBucketOwing), nil
	}
	return nil, unknown(name)
}

// Redis returns the Redis Store of the named algorithm, which keeps its
// state through client (any go-redis v9 client that runs scripts), or an
// error that lists the valid names.
func Redis(name string, client redis.Scripter, opts RedisOptions) (Store, error) {
	prefix := opts.Prefix
	if prefix == "" {
		prefix = "sluice:"
	}
	if name == TokenBucket || name == "" {
		return tokenBucketRedis{redisstore.New(client, redisstore.Options{
			Prefix: prefix, Now: opts.Now, ExpiryMargin: opts.ExpiryMargin,
			Coalesce: opts.Coalesce, DisableCoalescing: opts.DisableCoalescing,
		})}, nil
	}
	margin := opts.ExpiryMargin.Milliseconds()
	if opts.ExpiryMargin == 0 {
		margin = 1000
	}
	if name == FixedWindow {
		return newFixedWindowRedis(client, prefix+name+":", opts, margin), nil
	}
	script, ok := scripts[name]
	if !ok {
		return nil, unknown(name)
	}
	return &redisStore{
		name: name, script: script, client: client,
		prefix: prefix + name + ":", now: opts.Now, marginMs: margin,
	}, nil
}

// Paces reports whether the named algorithm honours Request.MaxDelay
// (holds a request until its turn instead of rejecting it): the token
// bucket and the leaky bucket do; the window algorithms only admit or
// reject, and return an error for a request with a MaxDelay, so a
// configuration can refuse the combination when it loads.
func Paces(name string) bool {
	return name == TokenBucket || name == LeakyBucket || name == ""
}

// Window is the window W every window algorithm gives rule r: the time the
// token bucket of r takes to refill from empty, Burst/Rate seconds rounded
// up to the microsecond (a quotient within float64 rounding of a whole
// number of µs is that number: n per minute is exactly a minute). In each
// window of W at most Burst is admitted.
func Window(r sluice.Rule) time.Duration {
	return time.Duration(window(r)) * time.Microsecond
}

func unknown(name string) error {
	return fmt.Errorf("%w: algorithm %q: want one of %s", sluice.ErrInvalid, name, strings.Join(Names(), ", "))
}

// validate is sluice.ValidateRequest plus the refusal of a MaxDelay by an
// algorithm that does not pace.
func validate(name string, req sluice.Request) error {
	if err := sluice.ValidateRequest(req); err != nil {
		return err
	}
	if err := validateLog(name, req.Rules, 0); err != nil {
		return err
	}
	if req.CountDenied && name != FixedWindow {
		return fmt.Errorf("%w: a request that counts a denied cost: %s counts none; use %s", sluice.ErrInvalid, name, FixedWindow)
	}
	if req.MaxDelay > 0 && !Paces(name) {
		return fmt.Errorf("%w: max delay %v: %s does not pace requests; use %s or %s, or no max delay",
			sluice.ErrInvalid, req.MaxDelay, name, TokenBucket, LeakyBucket)
	}
	return nil
}

// tokenBucketMemory and tokenBucketRedis give the token bucket stores the
// Store interface.
type tokenBucketMemory struct{ *memstore.Store }

func (tokenBucketMemory) Algorithm() string { return TokenBucket }

type tokenBucketRedis struct{ *redisstore.Store }

func (tokenBucketRedis) Algorithm() string { return TokenBucket }
