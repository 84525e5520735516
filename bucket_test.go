package sluice

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

const sec = int64(1e6) // one second in the microseconds the math works in

type step struct {
	at        int64 // µs since the start
	cost      int64
	maxDelay  time.Duration
	allowed   bool
	rule      int
	remaining int64
	retry     time.Duration
	reset     time.Duration
	delay     time.Duration
}

func runSteps(t *testing.T, rules []Rule, steps []step) {
	t.Helper()
	const t0 = 1_700_000_000 * sec
	b := make([]Bucket, len(rules))
	for i, r := range rules {
		b[i] = FullBucket(r, t0)
	}
	for i, s := range steps {
		got := Decide(b, rules, t0+s.at, s.cost, s.maxDelay)
		want := Result{Allowed: s.allowed, Rule: s.rule, Limit: rules[s.rule].Burst, Remaining: s.remaining,
			RetryAfter: s.retry, ResetAfter: s.reset, Delay: s.delay}
		if got != want {
			t.Fatalf("step %d (t=%v cost=%d): got %+v\nwant %+v", i, time.Duration(s.at)*time.Microsecond, s.cost, got, want)
		}
	}
}

func TestDecideBurstThenRefill(t *testing.T) {
	ms := time.Millisecond
	rules := []Rule{{Rate: 1, Burst: 3}}
	runSteps(t, rules, []step{
		{at: 0, cost: 1, allowed: true, remaining: 2, reset: 1000 * ms},
		{at: 0, cost: 1, allowed: true, remaining: 1, reset: 2000 * ms},
		{at: 0, cost: 1, allowed: true, remaining: 0, reset: 3000 * ms},
		// Empty: denied with exactly (cost - tokens) / rate.
		{at: 0, cost: 1, allowed: false, remaining: 0, retry: 1000 * ms, reset: 3000 * ms},
		// Half a token: remaining is floored, the wait is the other half.
		{at: sec / 2, cost: 1, allowed: false, remaining: 0, retry: 500 * ms, reset: 2500 * ms},
		// Denials consume nothing: at 1 s the token is there.
		{at: sec, cost: 1, allowed: true, remaining: 0, reset: 3000 * ms},
		// Refill never passes the burst.
		{at: 100 * sec, cost: 0, allowed: true, remaining: 3, reset: 0},
	})
}

func TestDecideFractionalRate(t *testing.T) {
	rules := []Rule{{Rate: 0.5, Burst: 1}}
	runSteps(t, rules, []step{
		{at: 0, cost: 1, allowed: true, remaining: 0, reset: 2 * time.Second},
		{at: sec, cost: 1, allowed: false, remaining: 0, retry: time.Second, reset: time.Second},
		{at: 2 * sec, cost: 1, allowed: true, remaining: 0, reset: 2 * time.Second},
	})
}

func TestDecideRetryExactToTheMillisecond(t *testing.T) {
	// 3/s: one token every 333.333… ms, rounded up to the microsecond.
	rules := []Rule{{Rate: 3, Burst: 1}}
	runSteps(t, rules, []step{
		{at: 0, cost: 1, allowed: true, remaining: 0, reset: 333334 * time.Microsecond},
		{at: 0, cost: 1, allowed: false, remaining: 0, retry: 333334 * time.Microsecond, reset: 333334 * time.Microsecond},
		// Waiting exactly RetryAfter passes, whatever the float rounding.
		{at: 333334, cost: 1, allowed: true, remaining: 0, reset: 333334 * time.Microsecond},
	})
	// 0.3 + 0.7 rounding: 10/s from 0.3 tokens waits 70 ms for one more.
	rules = []Rule{{Rate: 10, Burst: 1}}
	runSteps(t, rules, []step{
		{at: 0, cost: 1, allowed: true, remaining: 0, reset: 100 * time.Millisecond},
		{at: 30_000, cost: 1, allowed: false, remaining: 0, retry: 70 * time.Millisecond, reset: 70 * time.Millisecond},
		{at: 100_000, cost: 1, allowed: true, remaining: 0, reset: 100 * time.Millisecond},
	})
}

func TestDecideCostZeroAndCostEqualToBurst(t *testing.T) {
	rules := []Rule{{Rate: 2, Burst: 4}}
	runSteps(t, rules, []step{
		{at: 0, cost: 0, allowed: true, remaining: 4},
		{at: 0, cost: 4, allowed: true, remaining: 0, reset: 2 * time.Second},
		// Cost 0 inspects an empty bucket: allowed, nothing taken.
		{at: 0, cost: 0, allowed: true, remaining: 0, reset: 2 * time.Second},
		{at: 0, cost: 4, allowed: false, remaining: 0, retry: 2 * time.Second, reset: 2 * time.Second},
		{at: 2 * sec, cost: 4, allowed: true, remaining: 0, reset: 2 * time.Second},
	})
}

func TestDecideSeveralRulesAllOrNothing(t *testing.T) {
	// 10/s burst 5, and 1/m burst 6 (the "daily" rule of this test): one
	// second refills rule 1 by 1/60 of a token, so it waits 59 s, not 60.
	rules := []Rule{{Rate: 10, Burst: 5}, {Rate: 1.0 / 60, Burst: 6}}
	runSteps(t, rules, []step{
		{at: 0, cost: 5, allowed: true, rule: 0, remaining: 0, reset: 500 * time.Millisecond},
		// Rule 0 denies: rule 1 must keep its one remaining token.
		{at: 0, cost: 1, allowed: false, rule: 0, remaining: 0, retry: 100 * time.Millisecond, reset: 500 * time.Millisecond},
		{at: sec, cost: 1, allowed: true, rule: 1, remaining: 0, reset: 359 * time.Second},
		// Rule 0 is full again, rule 1 is empty and makes the caller wait.
		// (1/60 is not exact in float64: 59 s comes out a hair above and is
		// rounded up, by design, to the next microsecond.)
		{at: sec, cost: 1, allowed: false, rule: 1, remaining: 0, retry: 59*time.Second + time.Microsecond, reset: 359 * time.Second},
	})
}

func TestDecideClockBehindNeverMintsTokens(t *testing.T) {
	rules := []Rule{{Rate: 1, Burst: 2}}
	runSteps(t, rules, []step{
		{at: 10 * sec, cost: 2, allowed: true, remaining: 0, reset: 2 * time.Second},
		// A caller 2 s behind: elapsed clamps to 0, nothing is gained…
		{at: 8 * sec, cost: 1, allowed: false, remaining: 0, retry: time.Second, reset: 2 * time.Second},
		// …and the refill time does not move back, so the caller on time
		// is not credited those 2 s either.
		{at: 10*sec + sec/2, cost: 1, allowed: false, remaining: 0, retry: 500 * time.Millisecond, reset: 1500 * time.Millisecond},
	})
}

func TestDecideReservation(t *testing.T) {
	ms := time.Millisecond
	rules := []Rule{{Rate: 10, Burst: 2}}
	runSteps(t, rules, []step{
		{at: 0, cost: 1, maxDelay: 250 * ms, allowed: true, remaining: 1, reset: 100 * ms},
		{at: 0, cost: 1, maxDelay: 250 * ms, allowed: true, remaining: 0, reset: 200 * ms},
		// Queued in arrival order: 100 ms, then 200 ms.
		{at: 0, cost: 1, maxDelay: 250 * ms, allowed: true, remaining: 0, reset: 300 * ms, delay: 100 * ms},
		{at: 0, cost: 1, maxDelay: 250 * ms, allowed: true, remaining: 0, reset: 400 * ms, delay: 200 * ms},
		// The next would wait 300 ms: beyond max delay, denied, nothing taken.
		{at: 0, cost: 1, maxDelay: 250 * ms, allowed: false, remaining: 0, retry: 300 * ms, reset: 400 * ms},
	})
}

func TestAdjustBuckets(t *testing.T) {
	const t0 = 1_700_000_000 * sec
	rules := []Rule{{Rate: 1, Burst: 10}}
	b := []Bucket{FullBucket(rules[0], t0)}
	Decide(b, rules, t0, 4, 0)
	if r := AdjustBuckets(b, rules, t0, 10); r.Allowed || r.Remaining != 0 || r.RetryAfter != 4*time.Second || r.ResetAfter != 14*time.Second {
		t.Fatalf("charge beyond zero: %+v", r)
	}
	if r := Decide(b, rules, t0+3*sec, 1, 0); r.Allowed || r.RetryAfter != 2*time.Second {
		t.Fatalf("after a charge the caller waits: %+v", r)
	}
	if r := AdjustBuckets(b, rules, t0+3*sec, -100); !r.Allowed || r.Remaining != 10 || r.ResetAfter != 0 {
		t.Fatalf("a refund stops at the burst: %+v", r)
	}
}

func TestValidateRequest(t *testing.T) {
	ok := []Rule{{Rate: 1, Burst: 5}}
	cases := []struct {
		name string
		req  Request
		want error
	}{
		{"valid", Request{Key: "k", Cost: 5, Rules: ok}, nil},
		{"cost above burst", Request{Key: "k", Cost: 6, Rules: ok}, ErrCostExceedsBurst},
		{"negative cost", Request{Key: "k", Cost: -1, Rules: ok}, ErrInvalid},
		{"empty key", Request{Cost: 1, Rules: ok}, ErrInvalid},
		{"no rules", Request{Key: "k", Cost: 1}, ErrInvalid},
		{"too many rules", Request{Key: "k", Rules: make([]Rule, MaxRules+1)}, ErrInvalid},
		{"zero rate", Request{Key: "k", Rules: []Rule{{Rate: 0, Burst: 1}}}, ErrInvalid},
		{"zero burst", Request{Key: "k", Rules: []Rule{{Rate: 1, Burst: 0}}}, ErrInvalid},
		{"negative delay", Request{Key: "k", Rules: ok, MaxDelay: -1}, ErrInvalid},
		{"counted cost above burst", Request{Key: "k", Cost: 6, Rules: ok, CountDenied: true}, nil},
		{"counted cost above 2^53", Request{Key: "k", Cost: 1<<53 + 1, Rules: ok, CountDenied: true}, ErrInvalid},
		{"counted, bad rule", Request{Key: "k", Cost: 1, Rules: []Rule{{Rate: 0, Burst: 1}}, CountDenied: true}, ErrInvalid},
	}
	for _, c := range cases {
		err := ValidateRequest(c.req)
		if (c.want == nil) != (err == nil) || (c.want != nil && !errors.Is(err, c.want)) {
			t.Errorf("%s: got %v, want %v", c.name, err, c.want)
		}
	}
}

func TestExpiryAfter(t *testing.T) {
	rules := []Rule{{Rate: 1, Burst: 10}, {Rate: 0.1, Burst: 2}}
	b := []Bucket{{Tokens: 5}, {Tokens: -1}}
	if got, want := ExpiryAfter(b, rules, 0, time.Second), 31*time.Second; got != want {
		t.Fatalf("ExpiryAfter = %v, want %v (30 s to refill rule 1 from -1, plus margin)", got, want)
	}
}

// The one-rule fast path gives exactly what the general loop gives.
func TestDecideOneIsDecide(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for i := 0; i < 200_000; i++ {
		r := Rule{Rate: rng.Float64()*100 + 0.01, Burst: 1 + rng.Int64N(50)}
		b := Bucket{Tokens: rng.Float64()*float64(r.Burst+5) - 5, Last: rng.Int64N(10 * sec)}
		now := rng.Int64N(10 * sec)
		cost := rng.Int64N(r.Burst + 1)
		delay := time.Duration(rng.Int64N(3)) * time.Second
		// A rule listed twice decides as the rule alone, through the loop.
		general := []Bucket{b, b}
		want := Decide(general, []Rule{r, r}, now, cost, delay)
		one := b
		// decideOne writes every field: none of these may survive.
		got := Result{Rule: 3, Remaining: -1, RetryAfter: -1, ResetAfter: -1, Delay: -1, DecidedBy: ByOpen}
		decideOne(&got, &one, r, now, cost, delay)
		if got != want || one != general[0] {
			t.Fatalf("rule %v, bucket %+v, now %d, cost %d, delay %v:\none  %+v %+v\nloop %+v %+v", r, b, now, cost, delay, got, one, want, general[0])
		}
		// And DecideInto of the one rule, the stores' way in, takes that
		// path, over whatever *res held.
		alone := []Bucket{b}
		got = Result{Rule: 3, Remaining: -1, RetryAfter: -1, ResetAfter: -1, Delay: -1, DecidedBy: ByOpen}
		if DecideInto(&got, alone, []Rule{r}, now, cost, delay); got != want || alone[0] != general[0] {
			t.Fatalf("rule %v, bucket %+v, now %d, cost %d, delay %v: DecideInto of one rule %+v %+v, loop %+v %+v", r, b, now, cost, delay, got, alone[0], want, general[0])
		}
	}
}

// TestRoundingIsMathCeilAndFloor holds the inlined rounding of micros and
// remaining to math.Ceil and math.Floor, which the Lua scripts use, over
// random values of every magnitude and the edges around whole numbers.
func TestRoundingIsMathCeilAndFloor(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	check := func(x float64) {
		t.Helper()
		want := int64(0)
		if x > 0 {
			want = int64(math.Ceil(min(x*1e6, maxMicros))) // saturates at MaxWait
		}
		if got := micros(x); got != want {
			t.Fatalf("micros(%v) = %d, want %d", x, got, want)
		}
		want = 0
		if x > 0 {
			want = int64(math.Floor(x + tolerance))
		}
		if got := remaining(x); got != want {
			t.Fatalf("remaining(%v) = %d, want %d", x, got, want)
		}
	}
	for _, x := range []float64{0, -1, 1e-6, 1e-7, 0.5, 1, 1 - 1e-12, 1 + 1e-12, 4.6e12, 9.2e12, 1e13, 1e20, math.Nextafter(1<<62/1e6, 0)} {
		check(x)
	}
	for i := 0; i < 200_000; i++ {
		x := math.Ldexp(rng.Float64(), rng.IntN(80)-30)
		check(x)
		check(math.Round(x))
		check(math.Nextafter(math.Round(x), 0))
	}
}

// DecideInto writes every field of *res on each of its paths: nothing a
// caller's Result held before may show through.
func TestDecideIntoWritesEveryField(t *testing.T) {
	stale := Result{Allowed: true, Rule: 3, Limit: 9, Remaining: -1, RetryAfter: -1, ResetAfter: -1, Delay: -1, DecidedBy: ByOpen}
	r := Rule{Rate: 1, Burst: 5}
	for _, c := range []struct {
		name    string
		buckets []Bucket
		rules   []Rule
	}{
		{"no rules", nil, nil},
		{"fewer buckets than rules", []Bucket{{Tokens: 5}}, []Rule{r, r}},
		{"one rule", []Bucket{{Tokens: 0}}, []Rule{r}},
		{"two rules", []Bucket{{Tokens: 0}, {Tokens: 5}}, []Rule{r, r}},
	} {
		want := Decide(append([]Bucket(nil), c.buckets...), c.rules, sec, 3, 0)
		got := stale
		if DecideInto(&got, c.buckets, c.rules, sec, 3, 0); got != want {
			t.Errorf("%s: DecideInto over %+v gave %+v, want %+v", c.name, stale, got, want)
		}
	}
}
