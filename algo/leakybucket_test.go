package algo

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testkit/fakeclock"
)

// The leaky bucket against a reference queue written from its definition:
// a FIFO of at most B requests (the one leaving included), each leaving
// 1/R after the one before it. At 50/s each request takes exactly
// 20 000 µs, so the reference is exact integer arithmetic. Random
// arrivals at about twice the rate: every admission, drop and delay
// agrees, requests leave exactly 1/R apart, and what is dropped is exactly
// what found the queue full.
func TestLeakyBucketEmitsAtRateAndDropsOverflow(t *testing.T) {
	r := sluice.Rule{Rate: 50, Burst: 20}
	const slot = 20_000 // µs per request at 50/s
	c := fakeclock.New(time.UnixMicro(edge))
	s, err := Memory(LeakyBucket, MemoryOptions{Now: c.Now, SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	req := sluice.Request{Key: "k", Cost: 1, Rules: []sluice.Rule{r}}

	rng := rand.New(rand.NewPCG(3, 4))
	var leaves []int64 // reference: when each queued request has left
	var emitted []int64
	at, offered, dropped := edge, 0, 0
	for range 20_000 {
		at += rng.Int64N(slot) // mean slot/2: twice the rate
		c.SetMicros(at)
		for len(leaves) > 0 && leaves[0] <= at {
			leaves = leaves[1:]
		}
		wantAdmit := len(leaves) < int(r.Burst)
		var wantDelay int64
		if wantAdmit {
			start := at
			if n := len(leaves); n > 0 {
				start = leaves[n-1]
			}
			wantDelay = start - at
			leaves = append(leaves, start+slot)
		}
		res, err := s.Check(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		offered++
		if res.Allowed != wantAdmit || res.Delay != time.Duration(wantDelay)*time.Microsecond {
			t.Fatalf("request %d at +%dµs: got allowed=%v delay=%v, reference allowed=%v delay=%dµs (queue %d)",
				offered, at-edge, res.Allowed, res.Delay, wantAdmit, wantDelay, len(leaves))
		}
		if !res.Allowed {
			dropped++
			if res.RetryAfter <= 0 || res.RetryAfter > slot*time.Microsecond {
				t.Fatalf("dropped with retry after %v, want (0, one slot]", res.RetryAfter)
			}
			continue
		}
		emitted = append(emitted, at+wantDelay)
	}
	for i := 1; i < len(emitted); i++ {
		if gap := emitted[i] - emitted[i-1]; gap < slot {
			t.Fatalf("requests %d and %d leave %dµs apart, less than 1/R = %dµs", i-1, i, gap, slot)
		}
	}
	span := float64(emitted[len(emitted)-1]-emitted[0]) / 1e6
	rate := float64(len(emitted)-1) / span
	t.Logf("offered %d, queued %d, dropped %d; emitted at %.3f/s (rule %v/s)", offered, len(emitted), dropped, rate, r.Rate)
	if rate > r.Rate || rate < 0.99*r.Rate {
		t.Fatalf("emitted at %.3f/s, want %v/s under a load twice the rate", rate, r.Rate)
	}
	if dropped == 0 {
		t.Fatal("nothing dropped under twice the rate")
	}
}

// A burst of B+37 at one instant: exactly B are queued, at delays 0, 1/R,
// ..., (B-1)/R, and exactly 37 are dropped. A max delay shortens the
// queue to the requests that can leave within it.
func TestLeakyBucketBurst(t *testing.T) {
	r := sluice.Rule{Rate: 4, Burst: 10}
	c := fakeclock.New(time.UnixMicro(edge))
	s, _ := Memory(LeakyBucket, MemoryOptions{Now: c.Now, SweepInterval: -1})
	defer s.Close()
	req := sluice.Request{Key: "k", Cost: 1, Rules: []sluice.Rule{r}}
	queued := 0
	for i := range int(r.Burst) + 37 {
		res, _ := s.Check(ctx, req)
		if res.Allowed {
			if want := time.Duration(i) * 250 * time.Millisecond; res.Delay != want {
				t.Fatalf("request %d: delay %v, want %v", i, res.Delay, want)
			}
			queued++
		}
	}
	if queued != int(r.Burst) {
		t.Fatalf("queued %d of a burst of %d, want exactly %d", queued, r.Burst+37, r.Burst)
	}
	req.Key, req.MaxDelay = "paced", time.Second
	queued = 0
	for range 20 {
		if res, _ := s.Check(ctx, req); res.Allowed {
			queued++
		}
	}
	if queued != 5 { // delays 0, 0.25, 0.5, 0.75 and 1 s
		t.Fatalf("with a max delay of 1s queued %d, want 5", queued)
	}
}
