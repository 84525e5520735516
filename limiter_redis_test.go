package sluice_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
	"github.com/sluicehq/sluice/redisstore"
)

// TestLimiterOnRedis: Limiters of two separate clients (two processes, as
// far as Redis can tell) on one key share its bucket: their Waits queue
// together and are served no faster than the rule allows, and Allow sees
// the tokens the other took.
func TestLimiterOnRedis(t *testing.T) {
	srv := redistest.Start(t)
	rule, err := sluice.NewRule("40/s", 4)
	if err != nil {
		t.Fatal(err)
	}
	var lims [2]sluice.Limiter
	for i := range lims {
		lims[i] = sluice.Limiter{Store: redisstore.New(srv.Client(t), redisstore.Options{}), Key: "shared", Rules: []sluice.Rule{rule}}
	}
	const callers = 24 // 12 a client
	start := time.Now()
	var served atomic.Int64
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := lims[i%2].Wait(ctx); err != nil {
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
	if least := time.Duration(float64(callers-rule.Burst) / rule.Rate * float64(time.Second)); elapsed < least-5*time.Millisecond {
		t.Fatalf("%d waits on two clients took %v; one shared bucket cannot serve them before %v", callers, elapsed, least)
	}

	// Drain the bucket through one client; the other sees it empty.
	slow := sluice.Limiter{Store: lims[0].Store, Key: "drained", Rules: []sluice.Rule{{Rate: 1.0 / 3600, Burst: 2}}}
	other := sluice.Limiter{Store: lims[1].Store, Key: "drained", Rules: slow.Rules}
	if ok, err := slow.AllowN(context.Background(), 2); !ok || err != nil {
		t.Fatalf("AllowN(2) on a full bucket: %v, %v", ok, err)
	}
	if other.Allow() {
		t.Fatal("the second client does not see the tokens the first took")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := other.Wait(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait for a token an hour away: %v, want DeadlineExceeded at once", err)
	}
}
