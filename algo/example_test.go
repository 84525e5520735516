package algo_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
)

// A fixed window of the rule 3 per 10 s: three requests in a window, and
// the fourth waits for the next one; the clock stands where the example
// sets it.
func ExampleMemory() {
	now := time.Date(2026, 1, 1, 12, 0, 4, 0, time.UTC) // 4 s into a 10 s window
	store, err := algo.Memory(algo.FixedWindow, algo.MemoryOptions{Now: func() time.Time { return now }})
	if err != nil {
		panic(err)
	}
	defer store.Close()
	rule := sluice.Rule{Rate: 0.3, Burst: 3}
	fmt.Println(store.Algorithm(), "window", algo.Window(rule))
	ctx := context.Background()
	check := func() {
		res, err := store.Check(ctx, sluice.Request{Key: "client-7", Cost: 1, Rules: []sluice.Rule{rule}})
		if err != nil {
			panic(err)
		}
		fmt.Printf("allowed=%v remaining=%d retry_after=%v\n", res.Allowed, res.Remaining, res.RetryAfter)
	}
	for range 4 {
		check()
	}
	now = now.Add(6 * time.Second) // the next window
	check()
	// Output:
	// fixed_window window 10s
	// allowed=true remaining=2 retry_after=0s
	// allowed=true remaining=1 retry_after=0s
	// allowed=true remaining=0 retry_after=0s
	// allowed=false remaining=0 retry_after=6s
	// allowed=true remaining=2 retry_after=0s
}
