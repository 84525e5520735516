package algo

import (
	"math"
	"math/rand/v2"
	"sort"
	"testing"

	"github.com/sluicehq/sluice"
)

// burstyArrivals is on/off traffic for one key: bursts of 5 to 40
// requests within 50 ms, a mean of 3 s apart, over a background of
// 2 requests a second; Unix µs, ascending.
func burstyArrivals(seed uint64, from, seconds int64) []int64 {
	rng := rand.New(rand.NewPCG(seed, 99))
	var at []int64
	end := from + seconds*1_000_000
	for t := from; t < end; t += int64(rng.ExpFloat64() * 3e6) {
		for range 5 + rng.IntN(36) {
			at = append(at, t+rng.Int64N(50_000))
		}
	}
	for t := from; t < end; t += int64(rng.ExpFloat64() * 0.5e6) {
		at = append(at, t)
	}
	sort.Slice(at, func(i, j int) bool { return at[i] < at[j] })
	return at
}

// The sliding window counter against the exact log on bursty traffic.
//
// The error, derived: at time t, a fraction f into the fixed window
// [s, s+W), the counter estimates the units in (t-W, t] as
// E = prev·(1-f) + cur. The exact count of the same admitted units is
// X = cur + (the previous window's units later than t-W) =
// cur + prev - C, where C counts the previous window's units in
// [s-W, t-W], its first f·W. So
//
//	E - X = C - prev·f
//
// the gap between how many of the previous window's units really came in
// its first f·W and how many an even spread would put there. As
// 0 ≤ C ≤ prev, the error lies in [-prev·f, prev·(1-f)]: never more than
// prev ≤ L, zero for evenly spread traffic, and largest when the previous
// window's units came in one burst at one end. The test measures E - X at
// every check of a bursty run, asserts the identity and the bound, and
// reports the figures (simulate shows them too).
func TestSlidingWindowErrorOnBurstyTraffic(t *testing.T) {
	r := sluice.Rule{Rate: 10, Burst: 100}
	rules := []sluice.Rule{r}
	w := window(r)
	arrivals := burstyArrivals(1, edge, 600)

	var st []slidingWindow
	var admitted []int64 // the exact log of what the counter admitted
	var sumAbs, worst float64
	disagree, checks := 0, 0
	for _, at := range arrivals {
		// The counter's state and estimate just before the check.
		probe := append([]slidingWindow(nil), st...)
		resize(&probe, 1)
		tt := probe[0].roll(w, at)
		est := probe[0].estimate(w, tt)
		f := float64(tt-probe[0].start) / float64(w)
		prev := float64(probe[0].prev)

		from := sort.Search(len(admitted), func(j int) bool { return admitted[j] > tt-w })
		exact := float64(len(admitted) - from)
		first := sort.Search(len(admitted), func(j int) bool { return admitted[j] >= probe[0].start-w })
		upTo := sort.Search(len(admitted), func(j int) bool { return admitted[j] > tt-w })
		c := float64(upTo - first) // C: previous window's units in [s-W, t-W]
		if probe[0].prev == 0 {
			c = 0
		}

		e := est - exact
		if math.Abs(e-(c-prev*f)) > 1e-6 {
			t.Fatalf("at %d: E - X = %v, but C - prev·f = %v", at, e, c-prev*f)
		}
		if e < -prev*f-1e-6 || e > prev*(1-f)+1e-6 {
			t.Fatalf("at %d: error %v outside [-prev·f, prev·(1-f)] = [%v, %v]", at, e, -prev*f, prev*(1-f))
		}
		sumAbs += math.Abs(e)
		worst = max(worst, math.Abs(e))
		checks++
		if (est+1 <= float64(r.Burst)+tolerance) != (exact+1 <= float64(r.Burst)) {
			disagree++
		}

		res, _ := decideSlidingWindow(&st, rules, at, 1, 0, false)
		if res.Allowed {
			admitted = append(admitted, at)
		}
	}
	mean := sumAbs / float64(checks) / float64(r.Burst)
	t.Logf("%d checks, %d admitted: |E-X| mean %.2f%% of L, worst %.0f units (bound: prev ≤ L = %d); decisions differing from the exact log's on the same history: %d (%.2f%%)",
		checks, len(admitted), 100*mean, worst, r.Burst, disagree, 100*float64(disagree)/float64(checks))
	if worst > float64(r.Burst) {
		t.Fatalf("worst error %v above L", worst)
	}

	// Against an exact log run on the same arrivals: the counter admits
	// within its bound in every interval, and about as much overall.
	exactRun := admittedTimes(t, SlidingLog, r, arrivals)
	counter := admittedTimes(t, SlidingWindow, r, arrivals)
	if got, limit := mostIn(counter, w), 2*int(r.Burst); got > limit {
		t.Fatalf("counter admitted %d within one window, above L + prev ≤ 2L = %d", got, limit)
	}
	diff := float64(len(counter)-len(exactRun)) / float64(len(exactRun))
	t.Logf("admitted: sliding log %d, sliding counter %d (%+.2f%%); most in one window: %d vs %d",
		len(exactRun), len(counter), 100*diff, mostIn(exactRun, w), mostIn(counter, w))
}
