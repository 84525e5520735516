package memstore_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
)

// A store in process memory, on a clock the example moves by hand (Now;
// leave it nil for the system's clock).
func ExampleNew() {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	store := memstore.New(memstore.Options{Now: func() time.Time { return now }})
	defer store.Close()
	ctx := context.Background()
	rules := []sluice.Rule{{Rate: 2, Burst: 4}} // 2/s, burst 4

	req := sluice.Request{Key: "client-7", Cost: 3, Rules: rules}
	for range 2 {
		res, err := store.Check(ctx, req)
		if err != nil {
			panic(err)
		}
		fmt.Printf("allowed=%v remaining=%d retry_after=%v\n", res.Allowed, res.Remaining, res.RetryAfter)
	}
	now = now.Add(time.Second) // two tokens come back
	res, err := store.Check(ctx, req)
	if err != nil {
		panic(err)
	}
	fmt.Printf("allowed=%v remaining=%d reset_after=%v\n", res.Allowed, res.Remaining, res.ResetAfter)

	// Inspect reads the standing without taking a token.
	usage, err := store.Inspect(ctx, sluice.Request{Key: "client-7", Rules: rules})
	if err != nil {
		panic(err)
	}
	fmt.Printf("remaining=%d of %d\n", usage[0].Remaining, usage[0].Limit)
	// Output:
	// allowed=true remaining=1 retry_after=0s
	// allowed=false remaining=1 retry_after=1s
	// allowed=true remaining=0 reset_after=2s
	// remaining=0 of 4
}
