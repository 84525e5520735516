package sluice

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Limiter is the face of golang.org/x/time/rate's Limiter on a Store: Allow
// and Wait for one key against fixed rules. Its fields are the whole
// configuration; it holds no state, so any number of Limiters (in any
// number of processes, on a shared Redis store) may name the same key and
// share its buckets. It is safe for concurrent use.
//
// The zero Limiter is safe to call: with no Store, Allow reports false and
// AllowN, Wait and WaitN return an error wrapping ErrInvalid, as they do
// for a Limiter with no Key or no Rules.
//
//	lim := sluice.Limiter{Store: store, Key: "user-1024", Rules: []sluice.Rule{rule}}
//	if !lim.Allow() { … 429 … }
//	if err := lim.Wait(ctx); err != nil { … }
type Limiter struct {
	Store Store
	Key   string
	Rules []Rule
}

// errNoStore is the answer of a Limiter without a Store.
var errNoStore = fmt.Errorf("%w: sluice.Limiter has no Store", ErrInvalid)

// Allow reports whether one token is there now, and takes it. It reports
// false when the store fails; use AllowN for the error, or give Allow a
// store with a failure policy of its own (package resilient).
func (l Limiter) Allow() bool {
	ok, err := l.AllowN(context.Background(), 1)
	return ok && err == nil
}

// AllowN reports whether n tokens are there now, and takes them if so; a
// denied call takes nothing. The error wraps ErrCostExceedsBurst when n is
// above a rule's burst (such a call could never pass), ErrInvalid for bad
// input, or is the store's own failure.
func (l Limiter) AllowN(ctx context.Context, n int64) (bool, error) {
	if l.Store == nil {
		return false, errNoStore
	}
	res, err := l.Store.Check(ctx, Request{Key: l.Key, Cost: n, Rules: l.Rules})
	if err != nil {
		return false, err
	}
	return res.Allowed, nil
}

// Wait blocks until one token is there and takes it, or until ctx is done.
func (l Limiter) Wait(ctx context.Context) error { return l.WaitN(ctx, 1) }

// WaitN blocks until n tokens are there and takes them. Callers queue in
// arrival order: WaitN reserves the tokens (Request.MaxDelay) and sleeps
// for the reservation's Delay, across processes when the store is shared.
// With a store that does not take reservations (a window algorithm of
// package algo) it asks again after each denial's RetryAfter instead.
//
// Like x/time/rate, it returns at once, taking nothing, with an error
// wrapping context.DeadlineExceeded when the tokens would come after ctx's
// deadline. When ctx is done while it sleeps, it gives the reserved tokens
// back and returns ctx's error. The error wraps ErrCostExceedsBurst when n
// is above a rule's burst.
func (l Limiter) WaitN(ctx context.Context, n int64) error {
	if l.Store == nil {
		return errNoStore
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	// Reserve at most a full refill ahead (and never past MaxDelayLimit):
	// past that the queue is long and waiting for the next chance to
	// reserve is as good.
	var horizon time.Duration
	for _, r := range l.Rules {
		horizon = max(horizon, r.RefillTime())
	}
	horizon = min(horizon, MaxDelayLimit)
	reserve := true
	for {
		deadline, hasDeadline := ctx.Deadline()
		maxDelay := horizon
		if hasDeadline {
			maxDelay = max(0, min(maxDelay, time.Until(deadline)))
		}
		if !reserve {
			maxDelay = 0
		}
		res, err := l.Store.Check(ctx, Request{Key: l.Key, Cost: n, Rules: l.Rules, MaxDelay: maxDelay})
		if err != nil && maxDelay > 0 && errors.Is(err, ErrInvalid) {
			// A store of an algorithm that does not pace (package algo's
			// windows) refuses reservations: ask it plainly, and wait for
			// its retry time between asks.
			reserve = false
			continue
		}
		if err != nil {
			return err
		}
		if res.Allowed {
			if err := sleep(ctx, res.Delay); err != nil {
				l.giveBack(ctx, n)
				return err
			}
			return nil
		}
		if hasDeadline && time.Until(deadline) < res.RetryAfter {
			return fmt.Errorf("sluice: WaitN(%d) for %q would wait %v, past the context's deadline: %w", n, l.Key, res.RetryAfter, context.DeadlineExceeded)
		}
		// A store that denies without a retry time (one that does not
		// know it) is asked again soon, not in a busy loop.
		if err := sleep(ctx, max(res.RetryAfter, time.Millisecond)); err != nil {
			return err
		}
	}
}

// giveBack refunds a reservation that its caller will not use, so that the
// callers queued behind it move up.
func (l Limiter) giveBack(ctx context.Context, n int64) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	_, _ = l.Store.Adjust(ctx, Request{Key: l.Key, Rules: l.Rules}, -n)
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
