package sluice_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/memstore"
)

func newLimiter(t *testing.T, rate string, burst int64) sluice.Limiter {
	t.Helper()
	store := memstore.New(memstore.Options{})
	t.Cleanup(func() { store.Close() })
	rule, err := sluice.NewRule(rate, burst)
	if err != nil {
		t.Fatal(err)
	}
	return sluice.Limiter{Store: store, Key: "k", Rules: []sluice.Rule{rule}}
}

func TestLimiterAllow(t *testing.T) {
	lim := newLimiter(t, "1/h", 3)
	var got []bool
	for range 5 {
		got = append(got, lim.Allow())
	}
	if want := []bool{true, true, true, false, false}; !equal(got, want) {
		t.Fatalf("Allow: %v, want %v", got, want)
	}

	lim = newLimiter(t, "1/h", 3)
	ctx := context.Background()
	if ok, err := lim.AllowN(ctx, 2); !ok || err != nil {
		t.Fatalf("AllowN(2) = %v, %v", ok, err)
	}
	if ok, err := lim.AllowN(ctx, 2); ok || err != nil {
		t.Fatalf("AllowN(2) with one token left = %v, %v; want false and nothing taken", ok, err)
	}
	if ok, err := lim.AllowN(ctx, 1); !ok || err != nil {
		t.Fatalf("AllowN(1) = %v, %v: the denied AllowN(2) took a token", ok, err)
	}
	if _, err := lim.AllowN(ctx, 4); !errors.Is(err, sluice.ErrCostExceedsBurst) {
		t.Fatalf("AllowN above the burst: %v, want ErrCostExceedsBurst", err)
	}
	if err := lim.WaitN(ctx, 4); !errors.Is(err, sluice.ErrCostExceedsBurst) {
		t.Fatalf("WaitN above the burst: %v, want ErrCostExceedsBurst", err)
	}
	if (sluice.Limiter{Store: lim.Store, Key: "k"}).Allow() {
		t.Fatal("Allow with no rules: true, want false")
	}
}

// TestLimiterWaitPaces: goroutines that Wait on one key together are
// served no faster than the bucket allows, and all of them are served.
func TestLimiterWaitPaces(t *testing.T) {
	const rate, burst, callers = 50.0, 5, 30
	lim := newLimiter(t, "50/s", burst)
	ctx := context.Background()
	start := time.Now()
	var served atomic.Int64
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			if err := lim.Wait(ctx); err != nil {
				t.Error(err)
				return
			}
			served.Add(1)
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if served.Load() != callers {
		t.Fatalf("%d of %d served", served.Load(), callers)
	}
	// callers tokens cannot be there before (callers - burst) / rate.
	if least := time.Duration(float64(callers-burst) / rate * float64(time.Second)); elapsed < least-5*time.Millisecond {
		t.Fatalf("%d waits took %v; the bucket cannot serve them before %v", callers, elapsed, least)
	}
}

// TestLimiterWaitDeadline: a Wait whose tokens would come after the
// context's deadline returns at once, with DeadlineExceeded, taking
// nothing.
func TestLimiterWaitDeadline(t *testing.T) {
	lim := newLimiter(t, "1/h", 1)
	if err := lim.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := lim.Wait(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait for a token an hour away with a minute's deadline: %v, want DeadlineExceeded", err)
	}
	if ctx.Err() != nil {
		t.Fatal("Wait waited for the deadline instead of returning at once")
	}
	res, err := lim.Store.Check(context.Background(), sluice.Request{Key: "k", Cost: 1, Rules: lim.Rules})
	if err != nil || res.RetryAfter > time.Hour {
		t.Fatalf("after a refused Wait the next token is %v away (%v); want at most an hour: nothing reserved", res.RetryAfter, err)
	}
	done, cancel2 := context.WithCancel(context.Background())
	cancel2()
	if err := lim.Wait(done); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait on a done context: %v", err)
	}
}

// TestLimiterWaitCancelledWhileSleeping: a Wait cancelled while it sleeps
// on its reservation returns Canceled and gives the tokens back, so the
// callers behind it are not pushed back by a request that never ran.
func TestLimiterWaitCancelledWhileSleeping(t *testing.T) {
	lim := newLimiter(t, "1/m", 1)
	lim.Allow()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- lim.Wait(ctx) }()
	// The waiter reserves the token a minute away and sleeps; wait until
	// the reservation shows in the store, then cancel it.
	for {
		res, err := lim.Store.Check(context.Background(), sluice.Request{Key: "k", Cost: 0, Rules: lim.Rules})
		if err != nil {
			t.Fatal(err)
		}
		if res.ResetAfter > time.Minute+time.Second {
			break
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait cancelled while sleeping: %v", err)
	}
	res, err := lim.Store.Check(context.Background(), sluice.Request{Key: "k", Cost: 0, Rules: lim.Rules})
	if err != nil || res.ResetAfter > time.Minute {
		t.Fatalf("after the cancel the bucket is full in %v (%v); want at most a minute: the reservation was given back", res.ResetAfter, err)
	}
}

func equal(a, b []bool) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestLimiterWaitWithoutReservations: on a store that refuses reservations
// (a fixed window), Wait still serves every caller, no faster than the
// window allows.
func TestLimiterWaitWithoutReservations(t *testing.T) {
	store, err := algo.Memory(algo.FixedWindow, algo.MemoryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	rule := sluice.Rule{Rate: 20, Burst: 2} // 2 per 100 ms window
	lim := sluice.Limiter{Store: store, Key: "k", Rules: []sluice.Rule{rule}}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	for i := range 7 {
		if err := lim.Wait(ctx); err != nil {
			t.Fatalf("Wait %d: %v", i, err)
		}
	}
	// 7 requests at 2 per window need at least 4 windows: 3 boundaries
	// crossed, at least 200 ms after the first window's start.
	if elapsed := time.Since(start); elapsed < 200*time.Millisecond {
		t.Fatalf("7 waits on 2 per 100 ms took %v", elapsed)
	}
}
