package algo

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
)

// The fixed window of sluice.Request.WindowKey keeps envoyproxy/ratelimit's
// counters: one per window, named by the WindowKey and the window's
// start in Unix seconds, raised by INCRBY with an EXPIRE of the window's
// length (and the jitter), pipelined; an INCRBY goes without its EXPIRE
// while the store knows the expiry it gave is far enough away
// (fixedwindow_expiry.go). A batch of coalesced checks is one
// INCRBY of their costs' sum per counter (and its EXPIRE, if sent); each check is
// decided from the total it returns, in arrival order, as separate calls
// would have been: every hit is counted (CountDenied), so the count
// before a check is the total less the costs of the checks after it. A
// batch of checks that take nothing reads the counter with GET.

// counterInFlight is the batches of counter ops on their way at once
// when RedisOptions.Coalesce does not say (redisstore.Coalesce's
// MaxInFlight; the script's ops keep its default of 2). At uniform keys a
// counter op is an INCRBY and an EXPIRE, about 1 µs of Redis's time
// pipelined, while each round trip costs Redis a read, a write and a
// wake-up of several µs: with one batch in flight, measured on 2 cores
// with the Envoy service at 32 and 128 callers, a round trip carries 7–10
// decisions instead of 4–5 (BENCHMARKS.md, 5 December 2026: Redis CPU per
// decision). A lone check still goes at once.
const counterInFlight = 1

// CounterKey is the Redis key of the fixed window counter of a check of
// sluice.Request.WindowKey windowKey under rule r at now: windowKey
// followed by the start of r's window in Unix seconds.
func CounterKey(windowKey string, r sluice.Rule, now time.Time) string {
	_, key := counterKey(windowKey, window(r), now.UnixMicro())
	return key
}

func counterKey(windowKey string, w, now int64) (start int64, key string) {
	start = now - now%w
	var buf [128]byte // on the stack: the key is the one allocation
	b := strconv.AppendInt(append(buf[:0], windowKey...), start/1e6, 10)
	return start, string(b)
}

// counterOp makes o a check of the counter of key in the window of now,
// by the store's clock.
func (s *fixedWindowRedis) counterOp(o *fwOp, key string) {
	o.now = s.clock().UnixMicro()
	o.start, o.counter = counterKey(key, window(o.rules[0]), o.now)
}

// splitCounters decides the counter ops of a batch, and the others
// through send; false when there are none.
func (s *fixedWindowRedis) splitCounters(ctx context.Context, ops []fwOp, res []sluice.Result, errs []error) bool {
	n := 0
	for i := range ops {
		if ops[i].counter != "" {
			n++
		}
	}
	switch n {
	case 0:
		return false
	case len(ops):
		s.sendCounters(ctx, ops, res, errs)
		return true
	}
	var idx [2][]int
	var part [2][]fwOp
	for i, o := range ops {
		k := 0
		if o.counter != "" {
			k = 1
		}
		idx[k], part[k] = append(idx[k], i), append(part[k], o)
	}
	for k := range part {
		pres, perrs := make([]sluice.Result, len(part[k])), make([]error, len(part[k]))
		if k == 1 {
			s.sendCounters(ctx, part[k], pres, perrs)
		} else {
			s.send(ctx, part[k], pres, perrs)
		}
		for j, i := range idx[k] {
			res[i], errs[i] = pres[j], perrs[j]
		}
	}
	return true
}

// counter is one Redis key of a batch of counter ops, and its commands.
// A counter and its argument arrays outlive the batch: the next batch
// that takes it from its counterBatch rewrites them (counterBatch.take).
type counter struct {
	key    string
	sum    int64
	ttl    int64 // seconds
	err    error
	next   int64  // the count before the next op, in arrival order
	end    int64  // the end of the counter's window, Unix µs
	hash   uint64 // key's in the store's expiryMemo; 0: the batch did not look it up (ttl ≤ expiryGrace)
	expire bool   // the batch sends the counter's EXPIRE

	incr *redis.IntCmd
	exp  *redis.BoolCmd
	get  *redis.StringCmd
	// The commands' arguments, handed to go-redis without a copy: no
	// slice of them is made per batch, and a value boxed for the batch
	// before is kept when it is the same (rebox).
	incrArgs, expArgs [3]any
	getArgs           [2]any
	keyArg            any
}

// rebox returns v in an interface: old when it holds v already, since
// boxing a string, or an integer past 255, allocates.
func rebox[T comparable](old any, v T) any {
	if o, ok := old.(T); ok && o == v {
		return old
	}
	return v
}

// A counterBatch is what sendCounters sends a batch with, taken from
// s.batches for one batch and given back after it: batches in flight at
// once (MaxInFlight, a queue per Cluster master) each have their own, and
// a batch allocates only what a larger batch before it did not.
//
// go-redis keeps nothing of a pipeline once its Exec has returned (its
// Cluster and Ring wait for their per-node sends; a retry sends the same
// commands again inside Exec), so the next batch may rewrite the
// commands' arguments, and, on a *redis.Client, the commands themselves
// (reuse): their value and error are reset before each batch, so that a
// command the batch does not answer (a hook that skips the send) reads as
// a new one would, never as the batch before. A Cluster client caches a
// command's slot in it for good, so there each batch makes its commands
// anew. A hook that keeps a batch's commands past its return sees them
// rewritten by the next batch.
type counterBatch struct {
	cs    []*counter     // the batch's counters first; the rest kept for later batches
	n     int            // the batch's counters
	which []int          // the counter of each op
	byKey map[string]int // a large batch's counters, by key
	large bool           // byKey is in use
	cmds  []redis.Cmder
	pipe  redis.Pipeliner // kept from batch to batch when it is a *redis.Pipeline
}

// counterBatches is how many counterBatches a store keeps for its next
// batches: one per batch in flight at once, in the usual configurations.
const counterBatches = 8

// takeBatch returns a counterBatch for a batch; giveBatch gives it back.
func (s *fixedWindowRedis) takeBatch() *counterBatch {
	select {
	case b := <-s.batches:
		return b
	default:
		return &counterBatch{}
	}
}

func (s *fixedWindowRedis) giveBatch(b *counterBatch) {
	for _, c := range b.cs[:b.n] {
		c.err = nil
		if !s.reuseCmds {
			c.incr, c.exp, c.get = nil, nil, nil
		}
	}
	clear(b.cmds) // hold on to no command of the batch
	b.cmds, b.which, b.n = b.cmds[:0], b.which[:0], 0
	select {
	case s.batches <- b:
	default: // more batches in flight than kept: this one goes
	}
}

// take returns the batch's counter of key, and whether it is new to the
// batch.
func (b *counterBatch) take(key string) (int, bool) {
	if b.large {
		if k, ok := b.byKey[key]; ok {
			return k, false
		}
		b.byKey[key] = b.n
	} else {
		for k, c := range b.cs[:b.n] {
			if c.key == key {
				return k, false
			}
		}
	}
	if b.n == len(b.cs) {
		c := &counter{}
		c.incrArgs[0], c.expArgs[0], c.getArgs[0] = "incrby", "expire", "get"
		b.cs = append(b.cs, c)
	}
	c := b.cs[b.n]
	b.n++
	c.key, c.sum, c.err, c.next = key, 0, nil, 0
	return b.n - 1, true
}

// sendCounters decides a batch of counter ops in one round trip.
func (s *fixedWindowRedis) sendCounters(ctx context.Context, ops []fwOp, res []sluice.Result, errs []error) {
	if s.pipe == nil {
		err := fmt.Errorf("algo: %s on redis: window keys need a client that pipelines (%T)", FixedWindow, s.client)
		for i := range errs {
			errs[i] = err
		}
		return
	}
	b := s.takeBatch()
	if b.large = len(ops) > 16; b.large { // a large batch's counters, by key
		if b.byKey == nil {
			b.byKey = make(map[string]int, len(ops))
		}
		clear(b.byKey)
	}
	for _, o := range ops {
		j, added := b.take(o.counter)
		c := b.cs[j]
		if added {
			c.ttl = (window(o.rules[0]) + 999_999) / 1e6
			c.end = o.start + window(o.rules[0])
		}
		c.sum = counterAdd(c.sum, o.counted())
		b.which = append(b.which, j)
	}
	cmdCtx := ctx // what a command keeps: nothing of a caller's when kept
	if s.reuseCmds {
		cmdCtx = context.Background()
	}
	cs := b.cs[:b.n]
	sent := s.clock() // before the batch is sent: its EXPIREs run later
	var memo *expiryMemo
	var sec uint32
	for _, c := range cs {
		c.keyArg = rebox(c.keyArg, c.key) // one boxing for both commands
		if c.sum == 0 {
			c.getArgs[1] = c.keyArg
			if c.get == nil || !s.reuseCmds {
				c.get = redis.NewStringCmd(cmdCtx, c.getArgs[:]...)
			} else {
				c.get.SetVal("")
				c.get.SetErr(nil)
			}
			b.cmds = append(b.cmds, c.get)
			continue
		}
		if c.expire, c.hash = true, 0; c.ttl > int64(expiryGrace/time.Second) {
			if memo == nil {
				memo = s.expiryMemo(sent)
				sec = memo.sec(sent)
			}
			c.hash = memo.hash(c.key)
			c.expire = !memo.fresh(c.hash, sec)
		}
		c.incrArgs[1], c.incrArgs[2] = c.keyArg, rebox(c.incrArgs[2], c.sum)
		c.expArgs[1], c.expArgs[2] = c.keyArg, rebox(c.expArgs[2], s.expirySeconds(c))
		if c.incr == nil || !s.reuseCmds {
			c.incr = redis.NewIntCmd(cmdCtx, c.incrArgs[:]...)
		} else {
			c.incr.SetVal(0)
			c.incr.SetErr(nil)
		}
		b.cmds = append(b.cmds, c.incr)
		if !c.expire {
			continue
		}
		if c.exp == nil || !s.reuseCmds {
			c.exp = redis.NewBoolCmd(cmdCtx, c.expArgs[:]...)
		} else {
			c.exp.SetVal(false)
			c.exp.SetErr(nil)
		}
		b.cmds = append(b.cmds, c.exp)
	}
	pipe := b.pipe
	if pipe == nil {
		pipe = s.pipe()
		if _, ok := pipe.(*redis.Pipeline); ok { // empty again once Exec returns
			b.pipe = pipe
		}
	}
	_ = pipe.BatchProcess(ctx, b.cmds...) // one append: no growing per command
	_, _ = pipe.Exec(ctx)                 // each command carries its own error
	var made []*counter                   // made anew by an INCRBY alone
	for _, c := range cs {
		var total int64
		switch {
		case c.sum == 0:
			total, c.err = c.get.Int64()
			if errors.Is(c.err, redis.Nil) {
				total, c.err = 0, nil
			}
		case c.expire:
			total, c.err = countedTotal(c.incr)
			if c.err == nil {
				c.err = c.exp.Err()
			}
			if c.err == nil && c.exp.Val() && c.hash != 0 {
				memo.put(c.hash, memo.until(sec, c))
			}
		default:
			if total, c.err = countedTotal(c.incr); c.err == nil && total == c.sum {
				made = append(made, c)
			}
		}
		if c.err != nil {
			c.err = fmt.Errorf("algo: %s on redis: %w", FixedWindow, c.err)
		}
		c.next = total - c.sum
	}
	for i, o := range ops {
		c := cs[b.which[i]]
		if errs[i] = c.err; c.err != nil {
			continue
		}
		before := c.next
		after := counterAdd(before, o.counted())
		c.next = after
		r := o.rules[0]
		st := [1]fixedWindow{{start: o.start, count: max(0, after)}}
		ts := [1]int64{o.now}
		res[i], _ = fixedWindowReport(st[:], o.rules, ts[:], after <= r.Burst, o.amount)
	}
	if made != nil {
		s.reexpire(ctx, memo, made)
	}
	s.giveBatch(b) // not when a hook panicked: its pipeline may hold commands
}

// countedTotal is the count an INCRBY left, or math.MaxInt64 when
// Redis refused it because the counter would pass 2⁶³−1: the counter is
// then as full as it gets, over any limit (a rule's Burst is at most
// sluice.MaxBurst), and its checks are refused, not failed. A caller who
// sets its own cost (Envoy's hits_addend, up to sluice.MaxBurst+1 a
// descriptor) fills a counter in about 9,300 calls; were that a failure of
// the store, five such calls a second would keep the resilient layer's
// breaker open and every key of every caller off Redis.
func countedTotal(incr *redis.IntCmd) (int64, error) {
	total, err := incr.Result()
	if err != nil && overflowed(err) {
		return math.MaxInt64, nil
	}
	return total, err
}

// overflowed reports whether err is Redis's refusal of an INCRBY whose
// result would not fit in 64 bits ("ERR increment or decrement would
// overflow"); the counter keeps its value.
func overflowed(err error) bool {
	var rerr redis.Error
	return errors.As(err, &rerr) && strings.Contains(rerr.Error(), "would overflow")
}

// clock is the store's time: RedisOptions.Now, or time.Now.
func (s *fixedWindowRedis) clock() time.Time {
	if s.now != nil {
		return s.now()
	}
	return time.Now()
}

// expiryMemo returns the store's expiryMemo, made at now when there is
// none yet.
func (s *fixedWindowRedis) expiryMemo(now time.Time) *expiryMemo {
	if m := s.expiries.Load(); m != nil {
		return m
	}
	s.expiries.CompareAndSwap(nil, newExpiryMemo(now))
	return s.expiries.Load()
}

// reexpire gives its expiry to each counter that an INCRBY sent alone
// made anew: its expiry had passed before the INCRBY came, or the counter
// was deleted, or Redis restarted without it. What the memo knew of it is
// dropped first, so that if this fails the next INCRBY of the counter
// carries its EXPIRE.
func (s *fixedWindowRedis) reexpire(ctx context.Context, memo *expiryMemo, made []*counter) {
	pipe := s.pipe()
	exps := make([]*redis.BoolCmd, len(made))
	for i, c := range made {
		memo.forget(c.hash)
		exps[i] = pipe.Expire(ctx, c.key, time.Duration(s.expirySeconds(c))*time.Second)
	}
	sent := s.clock()
	if s.remade != nil {
		s.remade(len(made))
	}
	_, _ = pipe.Exec(ctx)
	sec := memo.sec(sent)
	for i, c := range made {
		if exps[i].Val() {
			memo.put(c.hash, memo.until(sec, c))
		}
	}
}

// expirySeconds is the argument of c's EXPIRE: its window's seconds and
// the jitter, drawn anew.
func (s *fixedWindowRedis) expirySeconds(c *counter) int64 {
	ttl := c.ttl
	if s.jitter > 0 {
		ttl += rand.Int64N(s.jitter)
	}
	return expireSeconds(ttl)
}

// expireSeconds is the argument of EXPIRE for ttl seconds as go-redis's
// Expire sends it (ttl*time.Second in whole seconds, at least 1).
func expireSeconds(ttl int64) int64 {
	d := time.Duration(ttl) * time.Second
	if d > 0 && d < time.Second {
		return 1
	}
	return int64(d / time.Second)
}

// counted is what o adds to its counter: a check's cost, an adjustment's
// delta (a refund takes off).
func (o fwOp) counted() int64 {
	if o.kind == "a" {
		return o.amount
	}
	return max(0, o.amount)
}

// counterAdd is a + b, saturating when b > 0: a counter's count as Redis
// keeps it, which a refund may take below 0.
func counterAdd(a, b int64) int64 {
	if b > 0 {
		return saturatingAdd(a, b)
	}
	return a + b
}

func saturatingAdd(a, b int64) int64 {
	if a > maxMicros-b {
		return maxMicros
	}
	return a + b
}
