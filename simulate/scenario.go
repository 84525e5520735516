package simulate

import (
	"hash/fnv"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
)

// event is one request: its time in Unix µs and the index of its key.
type event struct {
	at  int64
	key int32
}

// traffic is a scenario's requests, in time order.
type traffic struct {
	name   string
	about  string
	keys   []string
	events []event
}

// scenarioNames lists the synthetic scenarios, in the order `all` runs them.
var scenarioNames = []string{"steady", "bursty", "boundary", "many-keys"}

// start is the simulated clock's origin: a round date, so window edges of
// whole seconds fall on whole seconds of it.
const start = int64(1_767_225_600_000_000) // 2026-01-01T00:00:00Z

// params are what a synthetic scenario is built from.
type params struct {
	rule     sluice.Rule
	duration int64 // µs
	keys     int
	seed     uint64
}

// rngFor gives each scenario its own stream of the seed, so a scenario's
// traffic does not depend on which others run.
func rngFor(p params, name string) *rand.Rand {
	h := fnv.New64a()
	h.Write([]byte(name))
	return rand.New(rand.NewPCG(p.seed, h.Sum64()))
}

func generate(name string, p params) traffic {
	rng := rngFor(p, name)
	r := p.rule
	w := algo.Window(r).Microseconds()
	end := start + p.duration
	var ev []event
	poisson := func(rate float64, key int32) {
		for t := start + int64(rng.ExpFloat64()/rate*1e6); t < end; t += int64(rng.ExpFloat64() / rate * 1e6) {
			ev = append(ev, event{t, key})
		}
	}
	tr := traffic{name: name, keys: []string{"client-1"}}
	switch name {
	case "steady":
		poisson(1.5*r.Rate, 0)
		tr.about = "one client, Poisson arrivals at 1.5 × the rate"
	case "bursty":
		// Bursts of 5% to 40% of the burst within 50 ms, a mean of 0.3 W
		// apart, over a background of 0.2 × the rate: about the rate on
		// average, far above it within a burst.
		lo, hi := max(1, r.Burst/20), max(2, 2*r.Burst/5)
		for t := start; t < end; t += int64(rng.ExpFloat64() * 0.3 * float64(w)) {
			for range lo + rng.Int64N(hi-lo+1) {
				ev = append(ev, event{min(end-1, t+rng.Int64N(50_000)), 0})
			}
		}
		poisson(0.2*r.Rate, 0)
		tr.about = "one client, bursts of 5-40% of the burst within 50 ms, 0.3 W apart on average, over 0.2 × the rate"
	case "boundary":
		// The burst evenly in the half second before every other window
		// edge and the burst again in the half second after it: the
		// fixed window's worst case, quiet in between so each attack
		// starts from idle state.
		span := min(int64(500_000), w/2)
		first := (start/w + 1) * w
		for e := first; e+span <= end; e += 2 * w {
			for i := range 2 * r.Burst {
				ev = append(ev, event{e - span + i*span/r.Burst, 0})
			}
		}
		tr.about = "one client sending the burst in the half second before every other window edge and again in the half second after"
	case "many-keys":
		tr.keys = make([]string, p.keys)
		for i := range tr.keys {
			tr.keys[i] = "client-" + strconv.Itoa(i+1)
		}
		// Zipf popularity: a few keys far above their limit, a long tail
		// far below; in all, keys × rate / 10 requests a second.
		z := rand.NewZipf(rng, 1.1, 1, uint64(p.keys-1))
		total := float64(p.keys) * r.Rate / 10
		for t := start + int64(rng.ExpFloat64()/total*1e6); t < end; t += int64(rng.ExpFloat64() / total * 1e6) {
			ev = append(ev, event{t, int32(z.Uint64())})
		}
		tr.about = strconv.Itoa(p.keys) + " clients of Zipf(1.1) popularity, keys × rate / 10 requests a second in all"
	}
	slices.SortStableFunc(ev, func(a, b event) int { return cmpInt(a.at, b.at) })
	tr.events = ev
	return tr
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// worstIn is the largest number of times (ascending) in any [a, a+span).
func worstIn(times []int64, span int64) int {
	most, from := 0, 0
	for to := range times {
		for times[to]-times[from] >= span {
			from++
		}
		most = max(most, to-from+1)
	}
	return most
}

// bounds are the most any [a, a+T) may hold per key, T = 1 s and W, as
// docs/algorithms.md derives them: B + R·T for the token bucket, the
// sliding counter (T ≤ W) and what enters the leaky bucket (the leaky
// bucket emits at most R·T + 1); L per window for the sliding log; 2L for
// the fixed window.
func bounds(name string, r sluice.Rule, t float64, w float64) int {
	bt := int(math.Floor(float64(r.Burst) + r.Rate*t + 1e-9))
	switch name {
	case algo.SlidingLog:
		return int(r.Burst) * int(math.Ceil(t/w-1e-9))
	case algo.FixedWindow:
		return int(r.Burst) * (int(math.Ceil(t/w-1e-9)) + 1)
	case algo.LeakyBucket:
		return int(math.Floor(r.Rate*t+1e-9)) + 1
	}
	if name == algo.SlidingWindow && t > w {
		return -1 // derived for T ≤ W only
	}
	return bt
}
