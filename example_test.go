package sluice_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
)

// The token bucket itself: Decide applies checks to a key's buckets at
// the times given (Unix microseconds), with no store and no clock.
func ExampleDecide() {
	rule, err := sluice.NewRule("10/s", 3) // a token every 100 ms, at most 3 saved up
	if err != nil {
		panic(err)
	}
	rules := []sluice.Rule{rule}
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC).UnixMicro()
	buckets := []sluice.Bucket{sluice.FullBucket(rule, now)}
	for range 4 {
		res := sluice.Decide(buckets, rules, now, 1, 0)
		fmt.Println(res.Allowed, res.Remaining, res.RetryAfter)
	}
	now += 250_000 // 250 ms later: two and a half tokens are back
	res := sluice.Decide(buckets, rules, now, 1, 0)
	fmt.Println(res.Allowed, res.Remaining, res.RetryAfter)
	// Output:
	// true 2 0s
	// true 1 0s
	// true 0 0s
	// false 0 100ms
	// true 1 0s
}

// Allow on any Store: here the in-memory one, on a clock that stands still.
func ExampleLimiter_Allow() {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	store := memstore.New(memstore.Options{Now: func() time.Time { return now }})
	defer store.Close()
	rule, err := sluice.NewRule("1/m", 2)
	if err != nil {
		panic(err)
	}
	lim := sluice.Limiter{Store: store, Key: "user-1024", Rules: []sluice.Rule{rule}}
	fmt.Println(lim.Allow(), lim.Allow(), lim.Allow())

	// The zero Limiter answers instead of panicking.
	var zero sluice.Limiter
	_, err = zero.AllowN(context.Background(), 1)
	fmt.Println(zero.Allow(), errors.Is(err, sluice.ErrInvalid))
	// Output:
	// true true false
	// false true
}

// Wait takes a token when it comes: a caller that finds the bucket empty
// reserves the next token and sleeps until it is due. One whose context
// ends before then returns at once, taking nothing.
func ExampleLimiter_Wait() {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC) // the store's clock stands still
	store := memstore.New(memstore.Options{Now: func() time.Time { return now }})
	defer store.Close()
	rule, err := sluice.NewRule("20/s", 1) // a token every 50 ms
	if err != nil {
		panic(err)
	}
	lim := sluice.Limiter{Store: store, Key: "worker", Rules: []sluice.Rule{rule}}
	ctx := context.Background()
	fmt.Println(lim.Wait(ctx)) // the token that is there
	fmt.Println(lim.Wait(ctx)) // reserves the next one and sleeps 50 ms for it

	short, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel()
	err = lim.Wait(short) // the next token is 100 ms away, past the deadline
	fmt.Println(errors.Is(err, context.DeadlineExceeded))
	// Output:
	// <nil>
	// <nil>
	// true
}
