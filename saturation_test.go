package sluice

import (
	"encoding/binary"
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

// The extreme values of issue 18 (finding 6) are refused by the library as
// check-config refuses them, and values just inside the bounds pass.
func TestBoundsRefusedByLibrary(t *testing.T) {
	ok := []Rule{{Rate: 1, Burst: 1}}
	for _, c := range []struct {
		name string
		req  Request
		want string
	}{
		{"rate 1e-300", Request{Key: "k", Cost: 1, Rules: []Rule{{Rate: 1e-300, Burst: 1}}}, "want at most 366 days"},
		{"rate 5e-324", Request{Key: "k", Cost: 1, Rules: []Rule{{Rate: 5e-324, Burst: 1}}}, "want at most 366 days"},
		{"rate NaN", Request{Key: "k", Cost: 1, Rules: []Rule{{Rate: math.NaN(), Burst: 1}}}, "above 0 and at most 1e+09"},
		{"rate +Inf", Request{Key: "k", Cost: 1, Rules: []Rule{{Rate: math.Inf(1), Burst: 1}}}, "above 0 and at most 1e+09"},
		{"rate above MaxRate", Request{Key: "k", Cost: 1, Rules: []Rule{{Rate: 1e9 + 1, Burst: 1}}}, "at most 1e+09"},
		{"burst of int64", Request{Key: "k", Cost: 1, Rules: []Rule{{Rate: 1, Burst: math.MaxInt64}}}, "from 1 to 1000000000000000"},
		{"burst above MaxBurst", Request{Key: "k", Cost: 1, Rules: []Rule{{Rate: 1e9, Burst: MaxBurst + 1}}}, "from 1 to"},
		{"second rule too slow", Request{Key: "k", Cost: 1, Rules: []Rule{{Rate: 1, Burst: 1}, {Rate: 1.0 / (400 * 86400), Burst: 1}}}, "rule 1:"},
		{"max delay of int64", Request{Key: "k", Cost: 1, Rules: ok, MaxDelay: 2562047 * time.Hour}, "want 0 to 1h0m0s"},
		{"max delay just above", Request{Key: "k", Cost: 1, Rules: ok, MaxDelay: MaxDelayLimit + 1}, "want 0 to 1h0m0s"},
	} {
		err := ValidateRequest(c.req)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: ValidateRequest = %v; want ErrInvalid saying %q", c.name, err, c.want)
		}
	}
	for _, r := range []Rule{
		{Rate: MaxRate, Burst: MaxBurst},
		{Rate: 1.0 / MaxRefillTime.Seconds(), Burst: 1},
		{Rate: 1000 / MaxRefillTime.Seconds(), Burst: 1000},
	} {
		if err := ValidateRequest(Request{Key: "k", Cost: 1, Rules: []Rule{r}, MaxDelay: MaxDelayLimit}); err != nil {
			t.Errorf("%v refused: %v", r, err)
		}
	}
	if _, err := NewRule("1e-300/s", 1); !errors.Is(err, ErrInvalid) {
		t.Errorf("NewRule(1e-300/s, 1) = %v; want ErrInvalid", err)
	}
	if _, err := NewRule("1/8784h", 1); err != nil {
		t.Errorf("NewRule(1/8784h, 1) = %v; want a rule that refills in 366 days", err)
	}
}

// Debt charged by Adjust has no bound, so the waits it causes saturate at
// MaxWait instead of wrapping to a negative number (which admitted every
// request, or said Retry-After: 1 for a bucket that never refills).
func TestWaitsSaturate(t *testing.T) {
	r := []Rule{{Rate: 1.0 / MaxRefillTime.Seconds(), Burst: 1}}
	now := int64(1_700_000_000) * sec
	b := []Bucket{FullBucket(r[0], now)}
	res := AdjustBuckets(b, r, now, math.MaxInt64)
	if res.Allowed || res.RetryAfter != MaxWait || res.ResetAfter != MaxWait || res.Remaining != 0 {
		t.Fatalf("after a charge of MaxInt64: %+v; want denied, RetryAfter and ResetAfter at MaxWait", res)
	}
	res = Decide(b, r, now, 1, MaxDelayLimit)
	if res.Allowed || res.RetryAfter != MaxWait || res.Delay != 0 {
		t.Fatalf("check after the charge: %+v; want denied for MaxWait", res)
	}
	if d := ExpiryAfter(b, r, now, math.MaxInt64); d != math.MaxInt64 {
		t.Fatalf("ExpiryAfter with the largest margin = %v; want it saturated", d)
	}
	// A clock so far ahead that now - last wraps int64 still refills (to
	// the burst), and one so far behind gains nothing.
	b = []Bucket{{Tokens: 0, Last: math.MinInt64 + 1}}
	if got := refill(b[0], r[0], math.MaxInt64); got != 1 {
		t.Fatalf("refill across the whole int64 range = %v; want the burst", got)
	}
	b = []Bucket{{Tokens: 0, Last: math.MaxInt64}}
	if got := refill(b[0], r[0], math.MinInt64); got != 0 {
		t.Fatalf("refill with a clock behind by the whole int64 range = %v; want 0", got)
	}
}

// FuzzBucketMath drives the bucket math with extreme rules, times, costs
// and charges. For any valid input it never returns a negative or wrapped
// value: waits within [0, MaxWait], remaining within [0, burst], a delay
// within the max delay; and a denied caller who waits RetryAfter (when it
// did not saturate) is admitted, so RetryAfter is never shorter than the
// true wait (beyond float64 rounding at magnitudes above 2^20 tokens, which
// only debt charged by Adjust reaches: see roundingSlack), counted from the bucket's latest time (a clock that is behind
// it sees the bucket as it was then: skew never mints tokens). Inputs that are not valid must be refused by
// ValidateRequest; then the fuzzer moves them into the valid domain, so
// every input exercises the math. The seeds run in every `go test`.
func FuzzBucketMath(f *testing.F) {
	op := func(kind byte, v int64) []byte {
		return binary.LittleEndian.AppendUint64([]byte{kind}, uint64(v))
	}
	ops := func(parts ...[]byte) []byte {
		var b []byte
		for _, p := range parts {
			b = append(b, p...)
		}
		return b
	}
	const (
		advance = iota
		check
		adjust
		checkCost
	)
	year := int64(MaxRefillTime / time.Microsecond)
	drain := ops(op(check, 0), op(check, 0), op(check, 0), op(advance, 1), op(check, 0))
	// The values, then the edges of the bounds.
	f.Add(1e-300, int64(1), 0.0, int64(0), int64(1), int64(2562047*time.Hour), int64(0), drain)
	f.Add(5e-324, int64(1), 0.0, int64(0), int64(1), int64(0), int64(0), drain)
	f.Add(1.0, int64(math.MaxInt64), 0.0, int64(0), int64(1), int64(0), int64(0), drain)
	f.Add(float64(MaxRate), int64(MaxBurst), 1.0/MaxRefillTime.Seconds(), int64(1), int64(1), int64(MaxDelayLimit), int64(math.MaxInt64-1),
		ops(op(checkCost, MaxBurst), op(adjust, math.MaxInt64), op(check, 0), op(advance, year), op(check, 0), op(adjust, math.MinInt64), op(check, 0)))
	f.Add(1.0/MaxRefillTime.Seconds(), int64(1), 0.0, int64(0), int64(1), int64(MaxDelayLimit), int64(0),
		ops(op(check, 0), op(check, 0), op(adjust, math.MaxInt64), op(adjust, math.MaxInt64), op(check, 0), op(advance, math.MaxInt64), op(check, 0)))
	f.Add(10.0, int64(100), 1e9, int64(MaxBurst), int64(5), int64(time.Second), int64(-1),
		ops(op(advance, math.MinInt64), op(check, 0), op(advance, math.MaxInt64), op(check, 0), op(checkCost, 100), op(checkCost, 100), op(checkCost, 100)))
	f.Add(0.5, int64(2), 0.0, int64(0), int64(2), int64(time.Hour), int64(1_700_000_000_000_000),
		ops(op(checkCost, 2), op(checkCost, 2), op(checkCost, 2), op(advance, 3_999_999), op(checkCost, 2), op(adjust, -5), op(check, 0)))

	f.Fuzz(func(t *testing.T, rate1 float64, burst1 int64, rate2 float64, burst2 int64, cost int64, maxDelay int64, now int64, program []byte) {
		rules := []Rule{{Rate: rate1, Burst: burst1}}
		if burst2 != 0 {
			rules = append(rules, Rule{Rate: rate2, Burst: burst2})
		}
		req := Request{Key: "k", Cost: cost, Rules: rules, MaxDelay: time.Duration(maxDelay)}
		if err := ValidateRequest(req); err != nil {
			if !errors.Is(err, ErrInvalid) && !errors.Is(err, ErrCostExceedsBurst) {
				t.Fatalf("ValidateRequest(%+v) = %v; want ErrInvalid or ErrCostExceedsBurst", req, err)
			}
			for i := range rules {
				rules[i] = intoBounds(rules[i])
			}
			req.MaxDelay = time.Duration(uint64(maxDelay) % uint64(MaxDelayLimit+1))
			req.Cost = int64(uint64(cost) % uint64(minBurst(rules)+1))
			if err := ValidateRequest(req); err != nil {
				t.Fatalf("moved into bounds, %+v is still refused: %v", req, err)
			}
		}
		b := make([]Bucket, len(rules))
		for i, r := range rules {
			b[i] = FullBucket(r, now)
		}
		for len(program) >= 9 {
			kind, v := program[0]%4, int64(binary.LittleEndian.Uint64(program[1:9]))
			program = program[9:]
			switch kind {
			case advance:
				now += v // wraps on purpose: a clock may jump anywhere
			case adjust:
				res := AdjustBuckets(b, rules, now, v)
				checkResult(t, "adjust", res, rules, 0)
			default:
				c := req.Cost
				if kind == checkCost {
					c = int64(uint64(v) % uint64(minBurst(rules)+1))
				}
				before := append([]Bucket(nil), b...)
				res := Decide(b, rules, now, c, req.MaxDelay)
				checkResult(t, "check", res, rules, req.MaxDelay)
				if !res.Allowed && res.RetryAfter < MaxWait {
					// Waiting RetryAfter is enough: from the state before the
					// denial (a denial changes nothing but the refill), and
					// from the bucket's latest time (a clock behind it sees the
					// bucket as it was then, so its wait counts from then).
					from := now
					for _, x := range b {
						from = max(from, x.Last)
					}
					later := from + res.RetryAfter.Microseconds()
					if later < from {
						continue // the clock itself would wrap
					}
					slack := roundingSlack(before, rules)
					again := Decide(before, rules, later, c, 0)
					if !again.Allowed && again.RetryAfter > slack {
						t.Fatalf("denied with RetryAfter %v, then denied again after waiting it: %+v (rules %v, cost %d)", res.RetryAfter, again, rules, c)
					}
				}
			}
		}
	})
}

// roundingSlack is how far float64 rounding may put the refill of buckets
// behind the exact one: a few units in the last place of the largest
// magnitude involved, turned into time at the rule's rate. Below about
// 2^20 tokens it is under the tolerance and the slack is zero; a debt of
// 10^17 tokens (charged by Adjust) makes it a few microseconds.
func roundingSlack(b []Bucket, rules []Rule) time.Duration {
	var slack time.Duration
	for i, r := range rules {
		m := max(math.Abs(b[i].Tokens), float64(r.Burst))
		ulp := math.Nextafter(m, math.Inf(1)) - m
		if 4*ulp > tolerance {
			slack = max(slack, durationOf(4*ulp/r.Rate)+time.Microsecond)
		}
	}
	return slack
}

func checkResult(t *testing.T, what string, res Result, rules []Rule, maxDelay time.Duration) {
	t.Helper()
	r := rules[res.Rule]
	switch {
	case res.Limit != r.Burst:
		t.Fatalf("%s: limit %d, want the burst %d: %+v", what, res.Limit, r.Burst, res)
	case res.Remaining < 0 || res.Remaining > r.Burst:
		t.Fatalf("%s: remaining %d outside [0, %d]: %+v", what, res.Remaining, r.Burst, res)
	case res.RetryAfter < 0 || res.RetryAfter > MaxWait, res.ResetAfter < 0 || res.ResetAfter > MaxWait:
		t.Fatalf("%s: a wait outside [0, MaxWait]: %+v", what, res)
	case res.Delay < 0 || res.Delay > maxDelay:
		t.Fatalf("%s: delay outside [0, %v]: %+v", what, maxDelay, res)
	case res.Allowed && res.RetryAfter != 0:
		t.Fatalf("%s: allowed with a RetryAfter: %+v", what, res)
	case what == "check" && !res.Allowed && res.RetryAfter <= maxDelay:
		t.Fatalf("%s: denied though the wait %v is within the max delay %v: %+v", what, res.RetryAfter, maxDelay, res)
	}
}

// intoBounds moves any rule into the valid domain, keeping its extremes
// reachable: a burst from 1 to MaxBurst, a rate up to MaxRate and no
// slower than a refill in MaxRefillTime.
func intoBounds(r Rule) Rule {
	r.Burst = 1 + int64(uint64(r.Burst)%MaxBurst)
	rate := math.Abs(r.Rate)
	if math.IsNaN(rate) || rate == 0 {
		rate = 1
	}
	slowest := float64(r.Burst) / MaxRefillTime.Seconds()
	r.Rate = min(MaxRate, max(rate, slowest))
	return r
}

func minBurst(rules []Rule) int64 {
	m := rules[0].Burst
	for _, r := range rules[1:] {
		m = min(m, r.Burst)
	}
	return m
}
