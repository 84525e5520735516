package algo

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testkit/fakeclock"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
)

// units are the spans a rate is written per (envoyproxy/ratelimit's
// second to year among them).
var units = []time.Duration{time.Second, time.Minute, time.Hour, 24 * time.Hour, 7 * 24 * time.Hour, 30 * 24 * time.Hour, 365 * 24 * time.Hour}

// n per unit has a window of exactly one unit, for every n, although
// float64 puts n/(n/60) a hair above 60 for many n (7, 11, 21, …).
func TestWindowOfNPerUnitIsTheUnit(t *testing.T) {
	for _, u := range units {
		for n := int64(1); n <= 100_000; n++ {
			r := sluice.Rule{Rate: float64(n) / u.Seconds(), Burst: n}
			if got := Window(r); got != u {
				t.Fatalf("%d per %v: window %v, want %v", n, u, got, u)
			}
		}
	}
	// A window that is not a whole number of µs still rounds up.
	if got := Window(sluice.Rule{Rate: 3, Burst: 1}); got != 333334*time.Microsecond {
		t.Fatalf("1 per 1/3 s: window %v, want 333.334ms", got)
	}
}

// The Lua script snaps the window as the Go code does: 7 per minute
// resets on the minute in both stores.
func TestRedisWindowOfNPerUnit(t *testing.T) {
	client := redistest.Start(t).Client(t)
	start := time.Date(2026, 3, 1, 12, 0, 30, 0, time.UTC)
	c := fakeclock.New(start)
	ms, err := Memory(FixedWindow, MemoryOptions{Now: c.Now, SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer ms.Close()
	rs, err := Redis(FixedWindow, client, RedisOptions{Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int64{7, 11, 21, 42} {
		rules := []sluice.Rule{{Rate: float64(n) / 60, Burst: n}}
		for _, st := range []Store{ms, rs} {
			res, err := st.Check(ctx, sluice.Request{Key: "k" + st.Algorithm(), Cost: 1, Rules: rules})
			if err != nil {
				t.Fatal(err)
			}
			if res.ResetAfter != 30*time.Second {
				t.Fatalf("%d/min in %T: reset after %v, want 30s (the minute's end)", n, st, res.ResetAfter)
			}
			_, _ = st.Adjust(ctx, sluice.Request{Key: "k" + st.Algorithm(), Rules: rules}, -1)
		}
	}
}
