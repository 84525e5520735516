package algo_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/memstore"
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

// One store for two algorithms: each request goes to the store of the
// algorithm it names. The token bucket refills continuously, so a spent
// bucket of 1/s has a token back after a second; the fixed window's
// count of the same rule waits for the window's end.
func ExampleRouter() {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	tokenBucket := memstore.New(memstore.Options{Now: clock})
	defer tokenBucket.Close()
	window, err := algo.Memory(algo.FixedWindow, algo.MemoryOptions{Now: clock})
	if err != nil {
		panic(err)
	}
	store, err := algo.NewRouter(tokenBucket, window)
	if err != nil {
		panic(err)
	}
	defer store.Close()
	ctx := context.Background()
	rules := []sluice.Rule{{Rate: 1, Burst: 2}} // a 2 s window for the fixed window
	for _, name := range []string{"", algo.FixedWindow} {
		req := sluice.Request{Key: "client-7", Cost: 2, Rules: rules, Algorithm: name}
		if _, err := store.Check(ctx, req); err != nil { // spends the burst
			panic(err)
		}
		req.Cost = 1
		res, err := store.Check(ctx, req)
		if err != nil {
			panic(err)
		}
		fmt.Printf("%q: allowed=%v retry_after=%v\n", name, res.Allowed, res.RetryAfter)
	}
	_, err = store.Check(ctx, sluice.Request{Key: "client-7", Cost: 1, Rules: rules, Algorithm: "gcra"})
	fmt.Println(errors.Is(err, sluice.ErrInvalid))
	// Output:
	// "": allowed=false retry_after=1s
	// "fixed_window": allowed=false retry_after=2s
	// true
}
