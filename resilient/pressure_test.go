package resilient_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/resilient"
)

// held is a real store whose calls wait until the test lets them go: a
// store that is slow to answer, standing in for a saturated connection pool.
type held struct {
	sluice.Store
	gate    chan struct{}
	entered chan struct{}
}

func (h *held) Check(ctx context.Context, req sluice.Request) (sluice.Result, error) {
	select {
	case h.entered <- struct{}{}:
	default:
	}
	<-h.gate
	return h.Store.Check(ctx, req)
}

// When every call slot is taken for the whole queue wait, the check is
// decided by the local bucket: counted as busy, never as a failure, and
// the breaker stays closed however many there are.
func TestBusyIsNotAFailure(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := &held{Store: newMemstore(t), gate: make(chan struct{}), entered: make(chan struct{}, 2)}
	s := newStore(t, h, resilient.Options{
		MaxInFlight: 2, QueueWait: 20 * time.Millisecond, Timeout: time.Hour, FailureThreshold: 1, Registerer: reg,
	})
	rules := []sluice.Rule{{Rate: 1, Burst: 10}}
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() { s.Check(ctx, sluice.Request{Key: "held", Cost: 1, Rules: rules}) })
	}
	<-h.entered // both slots taken
	<-h.entered
	for range 10 {
		res, d, err := s.CheckDecision(ctx, sluice.Request{Key: "k", Cost: 1, Rules: rules})
		if err != nil || d.Source != resilient.FromLocal || d.Reason != resilient.ReasonBusy || !errors.Is(d.Err, resilient.ErrBusy) || res.DecidedBy != sluice.ByLocal {
			t.Fatalf("with every slot taken: %+v %+v %v", res, d, err)
		}
	}
	if st := s.State(); st != resilient.StateClosed {
		t.Fatalf("breaker %v after busy checks only", st)
	}
	close(h.gate)
	wg.Wait()
	got := gather(t, reg)
	if got["sluice_store_busy_decisions_total"] != 10 || got[`sluice_store_failure_decisions_total{on_error="local"}`] != 0 {
		t.Fatalf("metrics: busy %v, failure decisions %v", got["sluice_store_busy_decisions_total"], got[`sluice_store_failure_decisions_total{on_error="local"}`])
	}
	// The slots are free again: the store decides.
	if _, d, err := s.CheckDecision(ctx, sluice.Request{Key: "k2", Cost: 1, Rules: rules}); err != nil || d.Source != resilient.FromStore {
		t.Fatalf("after the slots freed: %+v %v", d, err)
	}
}

// A Redis out of memory refuses writes: an OOM answer is a store failure,
// with its reason, and the failure policy decides.
func TestOutOfMemoryIsAFailure(t *testing.T) {
	srv := redistest.Start(t, redistest.WithArgs("--maxmemory-policy", "noeviction"))
	s := newStore(t, redisstore.New(redisClient(t, srv), redisstore.Options{}), resilient.Options{Timeout: time.Second})
	rules := []sluice.Rule{{Rate: 1, Burst: 3}}
	warmUp(t, s, sluice.Request{Key: "warm-up", Cost: 1, Rules: rules})
	if err := srv.Client(t).ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	res, d, err := s.CheckDecision(ctx, sluice.Request{Key: "k", Cost: 1, Rules: rules})
	if err != nil || d.Source != resilient.FromLocal || d.Reason != resilient.ReasonOOM {
		t.Fatalf("Redis out of memory: %+v %+v %v", res, d, err)
	}
	t.Logf("decided by %v: %v", d.Source, d.Err)
}

// A store that forgets a spent bucket (a flush, an eviction) does not hand
// its caller a fresh one: the guard, charged with what this instance
// admitted, denies once the slack of a deadline's refill and a token is
// used.
func TestGuardCatchesAForgottenBucket(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, redisstore.New(redisClient(t, srv), redisstore.Options{}), resilient.Options{DenialCacheSize: -1})
	rules := []sluice.Rule{{Rate: 1, Burst: 3}}
	req := sluice.Request{Key: "spender", Cost: 1, Rules: rules}
	warmUp(t, s, sluice.Request{Key: "warm-up", Cost: 1, Rules: rules})
	start := time.Now()
	admitted := 0
	for range 3 {
		if res, _ := s.Check(ctx, req); res.Allowed {
			admitted++
		}
	}
	if err := srv.Client(t).FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	var forgotten int
	for range 10 {
		res, d, err := s.CheckDecision(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if res.Allowed {
			admitted++
		}
		if d.Reason == resilient.ReasonForgotten {
			forgotten++
		}
	}
	// Slack: ceil(1/s × 50ms) + 1 = 2 tokens beyond the burst.
	bound := 3 + 2 + rules[0].Rate*time.Since(start).Seconds()
	t.Logf("admitted %d (bound %.1f), %d denied by the guard", admitted, bound, forgotten)
	if float64(admitted) > bound || forgotten == 0 {
		t.Fatalf("after Redis forgot the bucket: admitted %d, bound %.1f, %d guard denials", admitted, bound, forgotten)
	}
}
