package algo

import (
	"math"
	"time"

	"github.com/sluicehq/sluice"
)

// tolerance absorbs float64 rounding in comparisons against a limit, as in
// package sluice; common.lua uses the same constant.
const tolerance = 1e-9

// outcome is what one rule says about a check: the time until a denied
// request would pass (0 when this rule lets it), the whole units left, and
// the time until the rule is back to its idle state.
type outcome struct {
	retry, remaining, reset int64 // µs, units, µs
}

// pick builds the Result from every rule's outcome, the way the token
// bucket reports: denied, the rule that makes the caller wait longest;
// allowed, the rule with the fewest units left, ties going to the one
// furthest from idle. retry is the overall wait (the largest rule's, or
// more when a pacing bound applies); delay is the wait of an admitted,
// paced request.
func pick(rules []sluice.Rule, out []outcome, allowed bool, retry, delay int64) sluice.Result {
	best, bestRem, bestReset, bestRetry := 0, int64(math.MaxInt64), int64(-1), int64(0)
	for i := range rules {
		o := out[i]
		if !allowed {
			if o.retry > bestRetry {
				best, bestRetry = i, o.retry
			}
			continue
		}
		if o.remaining < bestRem || (o.remaining == bestRem && o.reset > bestReset) {
			best, bestRem, bestReset = i, o.remaining, o.reset
		}
	}
	if allowed {
		retry = 0
	}
	return sluice.Result{
		Allowed:    allowed,
		Rule:       best,
		Limit:      rules[best].Burst,
		Remaining:  out[best].remaining,
		RetryAfter: time.Duration(retry) * time.Microsecond,
		ResetAfter: time.Duration(out[best].reset) * time.Microsecond,
		Delay:      time.Duration(delay) * time.Microsecond,
	}
}

// window is W of rule r in microseconds (see Window): Burst/Rate seconds
// rounded up to the µs, except that a quotient float64 rounding puts a
// hair off a whole number of µs is that number. Without it, 7 per minute
// (rate 7/60) would have a window of 60.000001 s, not the minute it says.
func window(r sluice.Rule) int64 {
	us := float64(r.Burst) / r.Rate * 1e6
	if n := math.Round(us); n >= 1 && n < maxMicros && math.Abs(us-n) <= tolerance*n {
		return int64(n)
	}
	return r.RefillTime().Microseconds()
}

// remaining is the whole number of units in room, never below zero.
func remaining(room float64) int64 {
	if room <= 0 {
		return 0
	}
	return int64(math.Floor(room + tolerance))
}

// maxMicros is where every span saturates, as in package sluice: 2^53 µs
// (sluice.MaxWait), exact in float64, so common.lua clamps to the same
// number. It also bounds a window's count: no charge wraps it.
const maxMicros = 1 << 53

// ceilMicros rounds a span of microseconds up; a non-positive span is 0,
// and one of maxMicros or more (infinite included) is maxMicros.
func ceilMicros(us float64) int64 {
	if us <= 0 {
		return 0
	}
	if !(us < maxMicros) {
		return maxMicros
	}
	return int64(math.Ceil(us))
}

// addCount is a window's count plus delta, between 0 and maxMicros: a
// charge saturates instead of wrapping (count is within those bounds).
func addCount(count, delta int64) int64 {
	if delta > maxMicros-count {
		return maxMicros
	}
	return max(0, count+delta)
}

// resize returns s with n zero elements when it does not hold n already:
// state stored for another number of rules starts again, idle.
func resize[T any](s *[]T, n int) []T {
	if len(*s) != n {
		*s = make([]T, n)
	}
	return *s
}

func timeMicros(us int64) time.Duration { return time.Duration(us) * time.Microsecond }
