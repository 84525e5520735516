package algo

import "github.com/sluicehq/sluice"

// leakyBucket is the state of one rule of the leaky bucket, a shaper: the
// time (Unix µs, fractional) at which its queue is empty, each queued unit
// taking 1/Rate seconds to leave. The queue ahead of a request at now is
// (next - now) × Rate units and holds at most Burst, the one leaving
// included.
//
// A request of cost c waits d = the longest queue ahead of it, over its
// rules, and is admitted when every queue has room for it, d × Rate + c ≤
// Burst (and d ≤ MaxDelay when one is set); it is then held d (the
// Result's Delay, as for a token bucket reservation, Request.MaxDelay) and every
// rule's queue grows to now + d + c/Rate. A request that finds a queue
// full is dropped, and nothing is queued. So requests leave at Rate, and
// of a burst of n arriving at once exactly min(n, Burst) pass.
type leakyBucket struct {
	next float64
}

// decideLeakyBucket queues cost on every rule at now if they all have
// room and the wait is within maxDelay (µs; 0 means no bound beyond the
// queue). It returns the Result and the time (Unix µs) at which every
// queue is empty.
func decideLeakyBucket(s *[]leakyBucket, rules []sluice.Rule, now, cost int64, maxDelay int64, _ bool) (sluice.Result, int64) {
	st := resize(s, len(rules))
	c, t := float64(cost), float64(now)
	d := 0.0 // µs until the request's turn: the longest queue ahead
	for i := range rules {
		d = max(d, st[i].next-t)
	}
	allowed := maxDelay <= 0 || d <= float64(maxDelay)
	var out [sluice.MaxRules]outcome
	var retry int64
	for i, r := range rules {
		if float64(d*r.Rate)/1e6+c > float64(r.Burst)+tolerance {
			allowed = false
		}
		// Room for c again once the wait has fallen to (Burst - c)/Rate.
		out[i].retry = ceilMicros(d - float64(float64(r.Burst-cost)*1e6)/r.Rate)
		retry = max(retry, out[i].retry)
	}
	if maxDelay > 0 {
		retry = max(retry, ceilMicros(d-float64(maxDelay)))
	}
	var delay int64
	if allowed && cost > 0 {
		for i, r := range rules {
			st[i].next = t + d + float64(c*1e6)/r.Rate
		}
		delay = ceilMicros(d)
	}
	res, idle := leakyBucketReport(st, rules, now, out[:], allowed, retry)
	res.Delay = timeMicros(delay)
	return res, idle
}

// adjustLeakyBucket adds delta more units to every queue (or takes -delta
// out, down to empty). Allowed reports whether every queue is within its
// Burst afterwards.
func adjustLeakyBucket(s *[]leakyBucket, rules []sluice.Rule, now, delta int64) (sluice.Result, int64) {
	st := resize(s, len(rules))
	t := float64(now)
	var out [sluice.MaxRules]outcome
	var retry int64
	allowed := true
	for i, r := range rules {
		st[i].next = max(t, max(t, st[i].next)+float64(float64(delta)*1e6)/r.Rate)
		q := st[i].next - t
		if float64(q*r.Rate)/1e6 > float64(r.Burst)+tolerance {
			allowed = false
			out[i].retry = ceilMicros(q - float64(float64(r.Burst)*1e6)/r.Rate)
			retry = max(retry, out[i].retry)
		}
	}
	return leakyBucketReport(st, rules, now, out[:], allowed, retry)
}

func leakyBucketReport(st []leakyBucket, rules []sluice.Rule, now int64, out []outcome, allowed bool, retry int64) (sluice.Result, int64) {
	t := float64(now)
	idle := now
	for i, r := range rules {
		q := max(0, st[i].next-t)
		out[i].remaining = remaining(float64(r.Burst) - float64(q*r.Rate)/1e6)
		out[i].reset = ceilMicros(q)
		idle = max(idle, now+out[i].reset)
	}
	return pick(rules, out, allowed, retry, 0), idle
}
