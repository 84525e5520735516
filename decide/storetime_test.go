package decide_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/decide"
	"github.com/sluicehq/sluice/internal/testkit/slowstore"
	"github.com/sluicehq/sluice/memstore"
)

// TestStoreTime: with Config.StoreWaits, the store calls of decisions
// made with a context that carries a StoreTime add their time to it,
// checks and adjustments alike, and only those: the Envoy service's
// pacing leaves it out of a call's own time (envoy_rls.busy_domain_rest).
// Without it (a memory store, whose calls are CPU) they add nothing.
func TestStoreTime(t *testing.T) {
	const wait = 20 * time.Millisecond
	core := func(waits bool) *decide.Core {
		c, err := decide.New(decide.Config{
			Store:      slowstore.Store{Store: memstore.New(memstore.Options{SweepInterval: -1}), Wait: wait},
			Policies:   []decide.Policy{{Name: "p", Cost: 1, Authenticated: []sluice.Rule{{Rate: 1, Burst: 100}}}},
			StoreWaits: waits,
		})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	c := core(true)
	p := c.Lookup("p")
	s := &decide.Subject{Caller: decide.Caller{ID: "k"}, Authenticated: true, Cost: 1}
	// Without one: nothing to add to, and nothing fails.
	if v := c.DecideFor(context.Background(), p, s); v.Err != nil || !v.Result.Allowed {
		t.Fatalf("without a StoreTime: %+v", v)
	}
	var st decide.StoreTime
	ctx := decide.WithStoreTime(context.Background(), &st)
	start := time.Now()
	v := c.DecideFor(ctx, p, s)
	if v.Err != nil || !v.Result.Allowed {
		t.Fatalf("check: %+v", v)
	}
	if _, err := c.AdjustRequest(ctx, p, v.Request, -1); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	if got := st.Total(); got < 2*wait || got > took {
		t.Errorf("StoreTime after a check and an adjustment of %v each: %v; want from %v to the %v they took in all", wait, got, 2*wait, took)
	}
	var none decide.StoreTime
	own := core(false)
	if v := own.DecideFor(decide.WithStoreTime(context.Background(), &none), own.Lookup("p"), s); v.Err != nil {
		t.Fatal(v.Err)
	}
	if got := none.Total(); got != 0 {
		t.Errorf("without StoreWaits: StoreTime %v; want 0 (the store's calls are the caller's own work)", got)
	}
}
