package algo

import (
	"math"
	"sort"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testkit/fakeclock"
)

// The bounds, for a rule of rate R and burst B (window W = B/R, limit
// L = B per window), on the units admitted in any half-open interval
// [a, a+T) with T ≤ W:
//
//   - token bucket: B + R·T. The bucket holds at most B at a and gains R·T
//     by a+T; every admitted unit took a token.
//   - sliding log: L. At the last admission x < a+T, every earlier one in
//     [a, x] is later than x - W (as a > x - W), so it was in the log, and
//     the log let at most L through.
//   - sliding window counter: B + R·T. Let x be the last admission in the
//     interval, in the fixed window [s, s+W), a fraction f = (x-s)/W in.
//     If a ≥ s the interval's units are all in cur ≤ L. Otherwise they are
//     some of the previous window's prev units plus cur(x), and admitting
//     at x needed prev·(1-f) + cur(x) ≤ L; so they number at most
//     prev + L - prev·(1-f) = L + prev·f ≤ L + L·T/W = B + R·T, as
//     f < (a+T-s)/W ≤ T/W and prev ≤ L.
//   - fixed window: 2L. The interval meets at most two aligned windows,
//     each admitting at most L, and the boundary attack gets all of it.
//   - leaky bucket: B + R·T enter the queue (it holds B at a, and R·T
//     leave by a+T).
func bound(name string, r sluice.Rule, T time.Duration) int {
	bt := float64(r.Burst) + r.Rate*T.Seconds()
	switch name {
	case SlidingLog:
		return int(r.Burst)
	case FixedWindow:
		return int(2 * r.Burst)
	}
	return int(math.Floor(bt + 1e-9))
}

// admittedTimes runs arrivals (Unix µs, ascending) of cost 1 for one key
// through the named in-memory store and returns the times admitted.
func admittedTimes(t *testing.T, name string, r sluice.Rule, arrivals []int64) []int64 {
	t.Helper()
	c := fakeclock.New(time.UnixMicro(arrivals[0]))
	s, err := Memory(name, MemoryOptions{Now: c.Now, SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	req := sluice.Request{Key: "attacker", Cost: 1, Rules: []sluice.Rule{r}}
	var admitted []int64
	for _, at := range arrivals {
		c.SetMicros(at)
		res, err := s.Check(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if res.Allowed {
			admitted = append(admitted, at)
		}
	}
	return admitted
}

// mostIn is the largest number of times (ascending) in any [a, a+span).
func mostIn(times []int64, span int64) int {
	most, from := 0, 0
	for to := range times {
		for times[to]-times[from] >= span {
			from++
		}
		most = max(most, to-from+1)
	}
	return most
}

// edge is a window edge for every rule used here: a multiple of 10 s (and
// of 1 s) from the Unix epoch.
var edge = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC).UnixMicro()

// The boundary attack: quiet, then 200 requests evenly in the second
// before a window edge and 200 in the second after it, against 10/s with
// burst 100 (W = 10 s, L = 100). The fixed window lets through about 2L
// within those two seconds; the others keep their bounds for T = 2 s.
func TestBoundaryAttack(t *testing.T) {
	r := sluice.Rule{Rate: 10, Burst: 100}
	if w := Window(r); w != 10*time.Second {
		t.Fatalf("window %v, want 10s", w)
	}
	var arrivals []int64
	for i := range 400 {
		arrivals = append(arrivals, edge-1_000_000+int64(i)*5_000)
	}
	const T = 2 * time.Second
	for _, name := range Names() {
		got := len(admittedTimes(t, name, r, arrivals))
		limit := bound(name, r, T)
		t.Logf("%-14s admitted %3d in the 2 s around the edge (bound %d)", name, got, limit)
		if got > limit {
			t.Errorf("%s admitted %d in %v, above its bound %d", name, got, T, limit)
		}
		if name == FixedWindow && got < 2*int(r.Burst)*95/100 {
			t.Errorf("fixed window admitted %d, want about 2L = %d: the attack should work", got, 2*r.Burst)
		}
		if name != FixedWindow && got > int(r.Burst)*6/5 {
			t.Errorf("%s admitted %d: want no double burst", name, got)
		}
	}
}

// A flood (a request every 2 ms for 60 s, far above the rate) probes every
// interval: the most admitted in any [a, a+T) stays within each bound, for
// T of 1 s, 2 s and the whole window.
func TestBoundsUnderFlood(t *testing.T) {
	r := sluice.Rule{Rate: 10, Burst: 100}
	var arrivals []int64
	for at := edge - 5_000_000; at < edge+55_000_000; at += 2_000 {
		arrivals = append(arrivals, at)
	}
	for _, name := range Names() {
		admitted := admittedTimes(t, name, r, arrivals)
		if !sort.SliceIsSorted(admitted, func(i, j int) bool { return admitted[i] < admitted[j] }) {
			t.Fatal("unsorted")
		}
		for _, T := range []time.Duration{time.Second, 2 * time.Second, Window(r)} {
			got, limit := mostIn(admitted, T.Microseconds()), bound(name, r, T)
			if got > limit {
				t.Errorf("%s: %d admitted within %v, above its bound %d", name, got, T, limit)
			}
		}
		// Long run: every algorithm has the token bucket's rate.
		if n, want := len(admitted), 100+10*60; n > want || n < want*8/10 {
			t.Errorf("%s admitted %d in 60 s, want about B + 60·R = %d", name, n, want)
		}
	}
}
