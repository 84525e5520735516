package sluice

import (
	"fmt"
	"math"
	"time"
)

// Bucket is the stored state of one token bucket: the tokens it held at
// Last, a time in Unix microseconds. For a calendar quota (Rule.Period),
// Tokens are what is left of the quota and Last is the end of the period
// they belong to. Stores keep one Bucket per rule; most callers never see
// one.
type Bucket struct {
	Tokens float64
	Last   int64
}

// FullBucket is the state of a key that has none: full, as of now.
func FullBucket(r Rule, now int64) Bucket {
	return Bucket{Tokens: float64(r.Burst), Last: now}
}

// Bounds of a valid rule and request (Rule.Validate, ValidateRequest;
// check-config refuses the same values when it loads a file). Within them
// float64 counts every token of a bucket exactly, and every wait the math
// computes is far below MaxWait, where it would saturate.
const (
	// MaxRate is the fastest rate: 10^9 tokens per second.
	MaxRate = 1e9

	// MaxBurst is the largest burst: 10^15 tokens, well inside the 2^53
	// whole numbers that float64 holds exactly.
	MaxBurst = 1_000_000_000_000_000

	// MaxRefillTime is the longest a rule may take to refill an empty
	// bucket, Burst/Rate: a year of 366 days. It sets the slowest rate a
	// burst may have (1/366d for a burst of 1), and so how long a key's
	// state is kept.
	MaxRefillTime = 366 * 24 * time.Hour

	// MaxDelayLimit is the longest Request.MaxDelay: an hour. A request is
	// held for pacing, not parked for later.
	MaxDelayLimit = time.Hour

	// MaxWait is where every duration the math returns saturates: 2^53 µs,
	// about 285 years. No wait of a valid rule comes near it, but debt
	// charged by Adjust has no bound; beyond MaxWait a RetryAfter or
	// ResetAfter says "not within any time that matters" instead of
	// wrapping to a negative number.
	MaxWait = maxMicros * time.Microsecond
)

// maxMicros is MaxWait in microseconds. 2^53 is exact in float64, so the
// Lua scripts clamp to the very same number.
const maxMicros = 1 << 53

// refillBound is MaxRefillTime in seconds, with room for the rounding of a
// rate written as COUNT/UNIT (1/366d refills in 366 days, not a hair more).
const refillBound = float64(MaxRefillTime/time.Second) * (1 + 1e-9)

// tolerance absorbs the rounding of float64 arithmetic in the comparison of
// tokens against a cost, so that a caller who waits exactly RetryAfter is
// never denied by a rounding error (0.1 + 0.2 < 0.3 in float64). It is far
// below any real refill: at 1e6 tokens/s one microsecond brings 1 token.
// The Lua script uses the same constant.
const tolerance = 1e-9

// refill returns the tokens in b at now under r:
// min(burst, tokens + max(0, now - last) * rate). A clock that is behind
// the last refill sees the bucket as it was then: skew never mints tokens.
// The explicit float64 conversions stop the compiler from fusing the
// multiply and add (as it may on arm64), which would break bit-for-bit
// agreement with the Lua script.
func refill(b Bucket, r Rule, now int64) float64 {
	var elapsed int64
	if now > b.Last {
		if elapsed = now - b.Last; elapsed < 0 { // wrapped: more than int64 holds
			elapsed = math.MaxInt64
		}
	}
	gained := float64(float64(elapsed) / 1e6 * r.Rate)
	tokens, burst := float64(b.Tokens+gained), float64(r.Burst)
	if tokens > burst { // math.Min, but inlined: neither is ever NaN
		return burst
	}
	return tokens
}

// Decide applies a check of cost (and, when maxDelay > 0, a reservation
// that waits at most maxDelay) to buckets, one per rule, at now in Unix
// microseconds, and updates buckets in place. It is the one definition of
// the token bucket and of reservations that every store shares. Input must be valid (see
// ValidateRequest): Decide does not check it, except that with no rules,
// or fewer buckets than rules, it decides nothing and returns the zero
// Result, a denial.
//
// All rules are refilled to now; a calendar quota whose period has ended
// is whole again (renew). The request passes when every bucket holds at
// least cost tokens (or, for a reservation, will within maxDelay: never a
// quota short of cost, which would wait for its next period); then cost is
// taken from every bucket, else from none. The refill and the time of it
// are recorded either way, and Last never moves backwards.
func Decide(buckets []Bucket, rules []Rule, now, cost int64, maxDelay time.Duration) (res Result) {
	DecideInto(&res, buckets, rules, now, cost, maxDelay)
	return res
}

// DecideInto is Decide writing the Result to *res, for a store's hot
// path: a Result that a call returns by value is stored field by field
// and then moved 16 bytes at a time, a copy that stalls the processor
// about as long as hashing a key takes (memstore's check of a hot key
// decides through DecideInto for that). Every field of *res is written.
func DecideInto(res *Result, buckets []Bucket, rules []Rule, now, cost int64, maxDelay time.Duration) {
	switch {
	case len(rules) == 0 || len(buckets) < len(rules):
		*res = Result{}
	case len(rules) == 1 && rules[0].Period == Rolling:
		decideOne(res, &buckets[0], rules[0], now, cost, maxDelay)
	default:
		*res = decideMany(buckets, rules, now, cost, maxDelay)
	}
}

func decideMany(buckets []Bucket, rules []Rule, now, cost int64, maxDelay time.Duration) Result {
	c := float64(cost)
	var wait int64 // µs until every bucket holds cost
	short := false // a quota holds less than cost: no reservation
	for i, r := range rules {
		if r.Period != Rolling {
			buckets[i] = renew(buckets[i], r, now)
			if buckets[i].Tokens+tolerance < c {
				short = true
				if w := buckets[i].Last - now; w > wait {
					wait = w
				}
			}
			continue
		}
		tokens := refill(buckets[i], r, now)
		buckets[i].Tokens = tokens
		if buckets[i].Last < now {
			buckets[i].Last = now
		}
		if tokens+tolerance < c {
			if w := micros((c - tokens) / r.Rate); w > wait {
				wait = w
			}
		}
	}
	allowed := wait == 0 || (maxDelay > 0 && !short && wait <= maxDelay.Microseconds())
	if allowed {
		for i := range rules {
			buckets[i].Tokens -= c
		}
	}
	res := report(buckets, rules, now, c, allowed)
	if allowed && wait > 0 {
		res.Delay = time.Duration(wait) * time.Microsecond
	}
	return res
}

// decideOne is Decide for a single rule, the common case, with the loops
// and the report unrolled: the same arithmetic in the same order, so the
// same bits (TestDecideOneIsDecide holds them together).
func decideOne(res *Result, b *Bucket, r Rule, now, cost int64, maxDelay time.Duration) {
	c := float64(cost)
	tokens := refill(*b, r, now)
	if b.Last < now {
		b.Last = now
	}
	var wait int64
	if tokens+tolerance < c {
		wait = micros((c - tokens) / r.Rate)
	}
	*res = Result{Allowed: wait == 0 || (maxDelay > 0 && wait <= maxDelay.Microseconds()), Limit: r.Burst}
	switch {
	case !res.Allowed:
		res.RetryAfter = time.Duration(wait) * time.Microsecond
	case wait > 0:
		res.Delay = time.Duration(wait) * time.Microsecond
		tokens -= c
	default:
		tokens -= c
	}
	b.Tokens = tokens
	res.Remaining = remaining(tokens)
	res.ResetAfter = time.Duration(micros((float64(r.Burst)-tokens)/r.Rate)) * time.Microsecond
}

// AdjustBuckets charges delta more tokens (or refunds -delta, up to the
// burst) to buckets at now, after refilling them. Allowed in the result
// reports whether every bucket is at or above zero afterwards. A calendar
// quota is renewed first, so debt never outlives its period. With no
// rules, or fewer buckets than rules, it changes nothing and returns the
// zero Result.
func AdjustBuckets(buckets []Bucket, rules []Rule, now, delta int64) Result {
	if len(rules) == 0 || len(buckets) < len(rules) {
		return Result{}
	}
	allowed := true
	for i, r := range rules {
		if r.Period != Rolling {
			b := renew(buckets[i], r, now)
			b.Tokens = math.Min(float64(r.Burst), b.Tokens-float64(delta))
			buckets[i] = b
			if b.Tokens+tolerance < 0 {
				allowed = false
			}
			continue
		}
		tokens := math.Min(float64(r.Burst), refill(buckets[i], r, now)-float64(delta))
		buckets[i].Tokens = tokens
		if buckets[i].Last < now {
			buckets[i].Last = now
		}
		if tokens+tolerance < 0 {
			allowed = false
		}
	}
	return report(buckets, rules, now, 0, allowed)
}

// report builds the Result of buckets after a decision at now. Denied:
// the rule that makes the caller wait longest for cost tokens. Allowed:
// the rule with the fewest whole tokens left, ties going to the one
// furthest from full. A calendar quota is full again, and has cost tokens
// again, when its period ends.
func report(buckets []Bucket, rules []Rule, now int64, cost float64, allowed bool) Result {
	best, bestKey, bestReset := 0, int64(math.MaxInt64), int64(-1)
	var retry int64
	for i, r := range rules {
		reset := resetAfter(buckets[i], r, now)
		if !allowed {
			w := int64(0)
			if buckets[i].Tokens+tolerance < cost {
				if r.Period != Rolling {
					w = buckets[i].Last - now
				} else {
					w = micros((cost - buckets[i].Tokens) / r.Rate)
				}
			}
			if w > retry {
				best, retry = i, w
			}
			continue
		}
		if rem := remaining(buckets[i].Tokens); rem < bestKey || (rem == bestKey && reset > bestReset) {
			best, bestKey, bestReset = i, rem, reset
		}
	}
	return Result{
		Allowed:    allowed,
		Rule:       best,
		Limit:      rules[best].Burst,
		Remaining:  remaining(buckets[best].Tokens),
		RetryAfter: time.Duration(retry) * time.Microsecond,
		ResetAfter: time.Duration(resetAfter(buckets[best], rules[best], now)) * time.Microsecond,
	}
}

// resetAfter is the µs until b of r is full again: for a calendar quota
// that has been drawn on, the end of its period.
func resetAfter(b Bucket, r Rule, now int64) int64 {
	if r.Period != Rolling {
		if b.Tokens < float64(r.Burst) && b.Last > now {
			return b.Last - now
		}
		return 0
	}
	return micros((float64(r.Burst) - b.Tokens) / r.Rate)
}

// remaining is the whole number of tokens in a bucket, never below zero.
func remaining(tokens float64) int64 {
	if tokens <= 0 {
		return 0
	}
	return int64(tokens + tolerance) // truncation is math.Floor for a positive number
}

// micros rounds seconds up to whole microseconds; a non-positive span is
// 0, and a span of MaxWait or more (infinite included) is MaxWait: a wait
// saturates, it never wraps to a negative number.
func micros(seconds float64) int64 {
	if seconds <= 0 {
		return 0
	}
	us := float64(seconds * 1e6)
	if !(us < maxMicros) {
		return maxMicros
	}
	n := int64(us) // math.Ceil, inlined: truncate, then round up a fraction
	if float64(n) < us {
		n++
	}
	return n
}

func durationOf(seconds float64) time.Duration {
	return time.Duration(micros(seconds)) * time.Microsecond
}

// ExpiryAfter is how long a key's state must be kept after now: until
// every bucket is full again (a calendar quota drawn on: until its period
// ends), which is when dropping it loses nothing, plus margin. A rule
// with no bucket (buckets shorter than rules) counts as full.
func ExpiryAfter(buckets []Bucket, rules []Rule, now int64, margin time.Duration) time.Duration {
	var longest int64
	for i, r := range rules[:min(len(rules), len(buckets))] {
		if t := resetAfter(buckets[i], r, now); t > longest {
			longest = t
		}
	}
	d := time.Duration(longest) * time.Microsecond // at most MaxWait: no overflow
	if margin > math.MaxInt64-d {
		return math.MaxInt64
	}
	return d + margin
}

// ValidateRequest reports why req cannot be checked, or nil. The error
// wraps ErrInvalid or ErrCostExceedsBurst.
func ValidateRequest(req Request) error {
	// The common case, a valid check of one rule, is decided inline; the
	// rest, and every error, in validateRequest.
	if len(req.Rules) == 1 && req.Key != "" && req.Cost >= 0 && req.MaxDelay >= 0 && req.MaxDelay <= MaxDelayLimit {
		// burst ≤ rate × refillBound also says rate > 0 (and not NaN).
		if r := req.Rules[0]; r.Period == Rolling && r.Rate <= MaxRate && r.Burst >= 1 && r.Burst <= MaxBurst && float64(r.Burst) <= r.Rate*refillBound && req.Cost <= r.Burst {
			return nil
		}
	}
	return validateRequest(req)
}

func validateRequest(req Request) error {
	if req.Key == "" {
		return fmt.Errorf("%w: empty key", ErrInvalid)
	}
	if req.Cost < 0 {
		return fmt.Errorf("%w: cost %d: want 0 or more", ErrInvalid, req.Cost)
	}
	if req.MaxDelay < 0 || req.MaxDelay > MaxDelayLimit {
		return fmt.Errorf("%w: max delay %v: want 0 to %v", ErrInvalid, req.MaxDelay, MaxDelayLimit)
	}
	if req.CountDenied {
		// Any cost may be counted; 2^53 keeps the counts exact in float64.
		if req.Cost > 1<<53 {
			return fmt.Errorf("%w: cost %d: want at most 2^53", ErrInvalid, req.Cost)
		}
		return validateRules(req.Rules, 0)
	}
	return validateRules(req.Rules, req.Cost)
}

// ValidateAdjust reports why an adjustment cannot be made, or nil.
func ValidateAdjust(key string, rules []Rule) error {
	if key == "" {
		return fmt.Errorf("%w: empty key", ErrInvalid)
	}
	return validateRules(rules, 0)
}

func validateRules(rules []Rule, cost int64) error {
	if len(rules) == 0 || len(rules) > MaxRules {
		return fmt.Errorf("%w: %d rules: want 1 to %d", ErrInvalid, len(rules), MaxRules)
	}
	for i, r := range rules {
		if err := r.Validate(); err != nil {
			return fmt.Errorf("rule %d: %w", i, err)
		}
		if cost > r.Burst {
			return fmt.Errorf("%w: cost %d is above the burst %d of rule %d (%v): such a request can never pass", ErrCostExceedsBurst, cost, r.Burst, i, r)
		}
	}
	return nil
}
