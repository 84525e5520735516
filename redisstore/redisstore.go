// Package redisstore is the sluice.Store shared by many processes: token
// buckets in Redis, decided by one Lua script per check so that the
// read-refill-decide-write step is atomic.
//
// It works with any go-redis v9 client that runs scripts (a standalone
// *redis.Client, a Sentinel-backed failover client, a *redis.ClusterClient,
// a ring: any redis.UniversalClient); NewClient builds one from a URL and
// options, with TLS and ACL users as managed services need.
//
// The scripts (tokenbucket1.lua for a lone check of one rule,
// tokenbucket.lua for the rest, embedded) mirror the Go math of package
// sluice line by line. The batch script applies its checks to the buckets
// and returns the buckets as it read them; the client derives each
// answer from those with sluice.Decide, so the answers have one
// definition. A script is sent with EVALSHA and re-sent with EVAL when
// Redis answers NOSCRIPT, as it does after a restart or failover. By
// default the time is the Redis server's own (TIME), so every instance
// shares one clock; Options.Now selects the client's clock instead. Both
// clamp negative elapsed time, so a clock that is behind never mints tokens.
// Calendar quotas go to the batch script, with their period boundaries
// computed here in their time zone (see appendBoundaries).
//
// Concurrent checks are coalesced by default (see Coalesce): a check that
// finds nothing in flight goes at once, on its caller's goroutine; those
// that arrive while others are on their way go together, one script call
// a batch (a call per slot on a Cluster), and the checks of one key in a
// batch are decided together, against one read and one write of the key.
// The answers are those of separate calls, in arrival order; only the
// round trips and Redis's work shrink, so a flood of one key costs Redis
// one bucket step a batch. Options.DisableCoalescing turns it off.
//
// Each caller key is one Redis string holding every rule's bucket (16
// bytes a rule), named Prefix + "{" + key + "}": the hash tag keeps all of a
// caller's state in one Cluster slot. Keys longer than MaxKeyLen, and
// keys that begin with '#', are replaced by '#' and a hash (KeyName), so
// that no key names another's hash. Every write sets an expiry: the time until every
// bucket is full again, plus a margin, so no key lives forever and dropping
// one loses nothing.
package redisstore

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/coalesce"
)

//go:embed tokenbucket.lua
var tokenBucketLua string

//go:embed tokenbucket1.lua
var tokenBucketOneLua string

// tokenBucket decides batches of checks and adjustments of any number of
// rules; tokenBucketOne a single check of one rule, at a third less of
// Redis's CPU.
var (
	tokenBucket    = redis.NewScript(tokenBucketLua)
	tokenBucketOne = redis.NewScript(tokenBucketOneLua)
)

// MaxKeyLen bounds the caller-key part of a Redis key; longer keys are
// replaced by '#' and the base64url SHA-256 of the key (44 bytes), and so
// is a key that begins with '#' (KeyName).
const MaxKeyLen = 64

// Scripter is the part of a go-redis client the store uses; every go-redis
// v9 client (Client, ClusterClient, Ring, UniversalClient) has it.
type Scripter = redis.Scripter

// Options configures a Store. The zero value is ready to use.
type Options struct {
	// Prefix starts every key; empty means "sluice:".
	Prefix string

	// Now selects client-clock mode: the script is given this clock's time
	// instead of reading the Redis server's. Nil (the default) uses TIME.
	Now func() time.Time

	// ExpiryMargin is kept beyond the time a key's buckets are full again;
	// zero means one second.
	ExpiryMargin time.Duration

	// Coalesce tunes the coalescing of concurrent checks (see Coalesce),
	// which is on unless DisableCoalescing is set; nil means its defaults.
	Coalesce *Coalesce

	// DisableCoalescing sends every check in a script call of its own, on
	// its caller's goroutine, however many are in flight.
	DisableCoalescing bool
}

// Store is a sluice.Store on Redis, safe for concurrent use.
type Store struct {
	client   Scripter
	prefix   string
	now      func() time.Time
	marginMs int64
	batcher  coalesce.Queue[op] // nil: no coalescing
}

var (
	_ sluice.Store    = (*Store)(nil)
	_ coalesce.Sender = (*Store)(nil)
)

// New returns a Store that keeps its buckets through client.
func New(client Scripter, opts Options) *Store {
	s := &Store{client: client, prefix: opts.Prefix, now: opts.Now, marginMs: opts.ExpiryMargin.Milliseconds()}
	if s.prefix == "" {
		s.prefix = "sluice:"
	}
	if opts.ExpiryMargin == 0 {
		s.marginMs = 1000
	}
	if !opts.DisableCoalescing {
		var c Coalesce
		if opts.Coalesce != nil {
			c = *opts.Coalesce
		}
		s.batcher = newBatcher(s, c)
	}
	return s
}

// Close stops coalescing, after every check queued is answered; later
// calls return ErrClosed. It does not close the Redis client. With
// DisableCoalescing it does nothing.
func (s *Store) Close() error {
	if s.batcher != nil {
		s.batcher.Close()
	}
	return nil
}

// Check decides req in one round trip.
func (s *Store) Check(ctx context.Context, req sluice.Request) (sluice.Result, error) {
	o, err := checkOp(req)
	if err != nil {
		return sluice.Result{}, err
	}
	return s.run(ctx, o)
}

// SendCheck sends req's check to the coalescing queue without waiting for
// it (coalesce.Sender): the queue's flusher decides it with the batch it
// joins and answers it through a, exactly as Check's answer. An invalid
// req is answered at once with Check's error. False, having answered
// nothing, when the store does not coalesce (Options.DisableCoalescing):
// Check then sends it on its caller's goroutine.
func (s *Store) SendCheck(ctx context.Context, req sluice.Request, a coalesce.Answerer) (coalesce.Withdrawer, bool) {
	if s.batcher == nil {
		return nil, false
	}
	o, err := checkOp(req)
	if err != nil {
		a.Answer(sluice.Result{}, err)
		return nil, true
	}
	return s.batcher.Send(ctx, o, a), true
}

// Sends says whether SendCheck sends a check: whether the store
// coalesces.
func (s *Store) Sends(sluice.Request) bool { return s.batcher != nil }

// checkOp returns the op of req's check, or why req is not a valid one:
// what Check and SendCheck send.
func checkOp(req sluice.Request) (op, error) {
	if err := sluice.ValidateRequest(req); err != nil {
		return op{}, err
	}
	return op{key: req.Key, amount: req.Cost, maxDelayUs: req.MaxDelay.Microseconds(), rules: req.Rules}, nil
}

// Adjust charges (delta > 0) or refunds (delta < 0) req.Key's buckets
// under req.Rules.
func (s *Store) Adjust(ctx context.Context, req sluice.Request, delta int64) (sluice.Result, error) {
	if err := sluice.ValidateAdjust(req.Key, req.Rules); err != nil {
		return sluice.Result{}, err
	}
	return s.run(ctx, op{key: req.Key, adjust: true, amount: delta, rules: req.Rules})
}

// Key returns the Redis key that holds the buckets of a caller key.
func (s *Store) Key(key string) string { return KeyName(s.prefix, key) }

// KeyName is the Redis key of a caller key under prefix: prefix + "{" +
// key + "}", the hash tag keeping all of a caller's state in one Cluster
// slot. A key longer than MaxKeyLen is replaced by '#' and its base64url
// SHA-256, and so is a key that begins with '#': a key kept as it is never
// begins with '#', so no caller's key can name the hash of another's (a
// 43-byte key that was the hash of a long one shared its bucket, and one
// caller could spend another's limit by naming it).
func KeyName(prefix, key string) string {
	if len(key) > MaxKeyLen || strings.HasPrefix(key, "#") {
		sum := sha256.Sum256([]byte(key))
		var b [1 + 43]byte
		b[0] = '#'
		base64.RawURLEncoding.Encode(b[1:], sum[:])
		return prefix + "{" + string(b[:]) + "}"
	}
	return prefix + "{" + key + "}"
}

// op is one check or adjustment on its way to the script.
type op struct {
	key        string
	adjust     bool
	amount     int64 // cost, or delta when adjusting
	maxDelayUs int64
	rules      []sluice.Rule
}

func (s *Store) run(ctx context.Context, o op) (sluice.Result, error) {
	if s.batcher != nil {
		return s.batcher.Do(ctx, o)
	}
	var res [1]sluice.Result
	if err := s.runBatch(ctx, []op{o}, res[:]); err != nil {
		return sluice.Result{}, err
	}
	return res[0], nil
}

// runBatch sends ops to Redis in one script call and writes their results
// to res. The keys of ops must share a Cluster slot when on a Cluster.
func (s *Store) runBatch(ctx context.Context, ops []op, res []sluice.Result) error {
	c := s.prepare(ops)
	reply, err := c.script.Run(ctx, s.client, c.keys, c.nums).Text()
	return c.parse(reply, err, ops, res)
}

// A scriptCall is one script call, ready to send: which script, its keys
// and its numbers, and in which order the script answers the ops.
type scriptCall struct {
	script *redis.Script
	keys   []string
	nums   []byte
	order  []int // the batch script takes ops[order[0]], ops[order[1]], …
	groups []int // in groups of these sizes; nil: the one-check script
}

// prepare builds the script call of ops: tokenBucketOne for a lone check
// of one rule, the batch script for anything else. The batch script takes
// the ops of one key together (see groupOrder), in groups of consecutive
// ops of the same kind and rules: it reads the key once, decides the
// group's ops one after the other, and writes the key once.
func (s *Store) prepare(ops []op) scriptCall {
	now := -1.0 // the server's TIME
	if s.now != nil {
		now = float64(s.now().UnixMicro())
	}
	if o := ops[0]; len(ops) == 1 && !o.adjust && len(o.rules) == 1 && o.rules[0].Period == sluice.Rolling {
		r := o.rules[0]
		nums := make([]byte, 0, 6*8)
		for _, f := range [...]float64{now, float64(s.marginMs), float64(o.amount), float64(o.maxDelayUs), r.Rate, float64(r.Burst)} {
			nums = appendFloat(nums, f)
		}
		return scriptCall{script: tokenBucketOne, keys: []string{s.Key(o.key)}, nums: nums}
	}
	redisKeys := make([]string, len(ops))
	for i, o := range ops {
		redisKeys[i] = s.Key(o.key)
	}
	order := groupOrder(redisKeys)
	var groups []int
	keys := make([]string, 0, len(ops))
	n := 2
	for _, o := range ops {
		n += 5 + 5*len(o.rules)
	}
	var wall time.Time // the client's time, for the calendar boundaries of quotas
	if s.now != nil {
		wall = time.UnixMicro(int64(now))
	}
	// Every number goes as a little-endian float64 in one string: exact
	// for these values, and the script reads them with struct.unpack
	// instead of a strtod each. A rate goes bit for bit, so the script
	// computes with exactly Go's float64.
	nums := make([]byte, 0, 8*n)
	nums = appendFloat(nums, now)
	nums = appendFloat(nums, float64(s.marginMs))
	for i := 0; i < len(order); {
		first := ops[order[i]]
		key := redisKeys[order[i]]
		m := 1
		for i+m < len(order) && redisKeys[order[i+m]] == key && sameGroup(first, ops[order[i+m]]) {
			m++
		}
		keys = append(keys, key)
		groups = append(groups, m)
		kind := 0.0
		if first.adjust {
			kind = 1
		}
		quotas := slices.ContainsFunc(first.rules, func(r sluice.Rule) bool { return r.Period != sluice.Rolling })
		if quotas {
			kind += 2
		}
		nums = appendFloat(nums, kind)
		nums = appendFloat(nums, float64(len(first.rules)))
		nums = appendFloat(nums, float64(m))
		for _, r := range first.rules {
			nums = appendFloat(nums, r.Rate)
			nums = appendFloat(nums, float64(r.Burst))
		}
		if quotas {
			if wall.IsZero() {
				wall = time.Now()
			}
			nums = appendBoundaries(nums, first.rules, wall)
		}
		for _, j := range order[i : i+m] {
			nums = appendFloat(nums, float64(ops[j].amount))
			nums = appendFloat(nums, float64(ops[j].maxDelayUs))
		}
		i += m
	}
	return scriptCall{script: tokenBucket, keys: keys, nums: nums, order: order, groups: groups}
}

// groupOrder returns the indexes of keys with every key's together, in the
// order they came: the order in which the batch script decides them. Ops
// of different keys never touch the same state, so only the order within
// a key matters, and that is kept.
func groupOrder(keys []string) []int {
	order := make([]int, len(keys))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(i, j int) int { return strings.Compare(keys[i], keys[j]) })
	return order
}

// sameGroup reports whether b may join a's group in the batch script: the
// same kind, and the same rules.
func sameGroup(a, b op) bool {
	return a.adjust == b.adjust && slices.Equal(a.rules, b.rules)
}

// parse writes the answers of c, the script call of ops, to res, or
// returns the call's error. The one-check script answers with 7 float64s;
// the batch script with its instant and, for each group, the buckets it
// read, from which the group's ops are decided here with the same math,
// one after the other as the script applied them.
func (c *scriptCall) parse(reply string, err error, ops []op, res []sluice.Result) error {
	if err != nil {
		return fmt.Errorf("redisstore: %w", err)
	}
	if c.groups == nil {
		if len(reply) != 7*8 {
			return fmt.Errorf("redisstore: script returned %d bytes for a check, want %d", len(reply), 7*8)
		}
		res[0] = parseReply(reply)
		return nil
	}
	want, i := 8, 0
	for _, m := range c.groups {
		want += 16 * len(ops[c.order[i]].rules)
		i += m
	}
	if len(reply) != want {
		return fmt.Errorf("redisstore: script returned %d bytes for %d checks in %d groups, want %d", len(reply), len(ops), len(c.groups), want)
	}
	now := int64(floatAt(reply, 0))
	p, i := 8, 0
	var state [sluice.MaxRules]sluice.Bucket
	for _, m := range c.groups {
		n := len(ops[c.order[i]].rules)
		b := state[:n]
		for r := range b {
			b[r] = sluice.Bucket{Tokens: floatAt(reply, p), Last: int64(floatAt(reply, p+8))}
			p += 16
		}
		for _, j := range c.order[i : i+m] {
			o := ops[j]
			if o.adjust {
				res[j] = sluice.AdjustBuckets(b, o.rules, now, o.amount)
			} else {
				res[j] = sluice.Decide(b, o.rules, now, o.amount, time.Duration(o.maxDelayUs)*time.Microsecond)
			}
		}
		i += m
	}
	return nil
}

// appendBoundaries appends, for each rule, three Unix µs the script picks
// a quota's period end from by its own clock, which Lua cannot place in a
// time zone: the start and the end of the period that holds wall (the
// client's time) and the end of the next one; zeros for a token bucket.
// The server's TIME may differ from wall by anything short of a period.
func appendBoundaries(nums []byte, rules []sluice.Rule, wall time.Time) []byte {
	for _, r := range rules {
		if r.Period == sluice.Rolling {
			nums = append(nums, make([]byte, 3*8)...)
			continue
		}
		start, end := r.Window(wall)
		_, next := r.Window(end)
		nums = appendFloat(nums, float64(start.UnixMicro()))
		nums = appendFloat(nums, float64(end.UnixMicro()))
		nums = appendFloat(nums, float64(next.UnixMicro()))
	}
	return nums
}

func floatAt(p string, i int) float64 {
	return math.Float64frombits(binary.LittleEndian.Uint64([]byte(p[i : i+8])))
}

func appendFloat(b []byte, f float64) []byte {
	return binary.LittleEndian.AppendUint64(b, math.Float64bits(f))
}

// parseReply reads the 7 float64s of one check's result from p.
func parseReply(p string) sluice.Result {
	var v [7]int64
	for i := range v {
		v[i] = int64(floatAt(p, 8*i))
	}
	return sluice.Result{
		Allowed:    v[0] == 1,
		Rule:       int(v[1]),
		Limit:      v[2],
		Remaining:  v[3],
		RetryAfter: time.Duration(v[4]) * time.Microsecond,
		ResetAfter: time.Duration(v[5]) * time.Microsecond,
		Delay:      time.Duration(v[6]) * time.Microsecond,
	}
}
