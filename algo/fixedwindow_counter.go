package algo

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
)

// The fixed window of sluice.Request.WindowKey keeps envoyproxy/ratelimit's
// counters: one per window, named by the WindowKey and the window's
// start in Unix seconds, raised by INCRBY with an EXPIRE of the window's
// length (and the jitter), pipelined. A batch of coalesced checks is one
// INCRBY of their costs' sum per counter (and one EXPIRE); each check is
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
	now := time.Now()
	if s.now != nil {
		now = s.now()
	}
	o.now = now.UnixMicro()
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

// counter is one Redis key of a batch of counter ops.
type counter struct {
	key  string
	sum  int64
	ttl  int64 // seconds
	incr *redis.IntCmd
	exp  *redis.BoolCmd
	get  *redis.StringCmd
	err  error
	next int64 // the count before the next op, in arrival order
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
	var buf [8]counter
	cs := buf[:0]
	var at [16]int
	which := at[:0]
	var byKey map[string]int // a large batch's counters, by key
	if len(ops) > 16 {
		byKey = make(map[string]int, len(ops))
	}
	for _, o := range ops {
		j := -1
		if byKey != nil {
			if k, ok := byKey[o.counter]; ok {
				j = k
			}
		} else {
			for k := range cs {
				if cs[k].key == o.counter {
					j = k
					break
				}
			}
		}
		if j < 0 {
			j = len(cs)
			if byKey != nil {
				byKey[o.counter] = j
			}
			cs = append(cs, counter{key: o.counter, ttl: (window(o.rules[0]) + 999_999) / 1e6})
		}
		cs[j].sum = counterAdd(cs[j].sum, o.counted())
		which = append(which, j)
	}
	pipe := s.pipe()
	for k := range cs {
		c := &cs[k]
		if c.sum == 0 {
			c.get = pipe.Get(ctx, c.key)
			continue
		}
		ttl := c.ttl
		if s.jitter > 0 {
			ttl += rand.Int64N(s.jitter)
		}
		c.incr = pipe.IncrBy(ctx, c.key, c.sum)
		c.exp = pipe.Expire(ctx, c.key, time.Duration(ttl)*time.Second)
	}
	_, _ = pipe.Exec(ctx) // each command carries its own error
	for k := range cs {
		c := &cs[k]
		var total int64
		if c.get != nil {
			total, c.err = c.get.Int64()
			if errors.Is(c.err, redis.Nil) {
				total, c.err = 0, nil
			}
		} else {
			total, c.err = c.incr.Result()
			if c.err == nil {
				c.err = c.exp.Err()
			}
		}
		if c.err != nil {
			c.err = fmt.Errorf("algo: %s on redis: %w", FixedWindow, c.err)
		}
		c.next = total - c.sum
	}
	for i, o := range ops {
		c := &cs[which[i]]
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
