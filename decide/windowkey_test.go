package decide_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/decide"
	"github.com/sluicehq/sluice/internal/testkit/fakeclock"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
)

// TestAdjustRequestWindowKey: under a policy of WindowKey (the Envoy
// service's envoyproxy/ratelimit counters) AdjustRequest changes the very
// Redis key its checks count in, the counter of the caller's identity in
// the window, and no other; Adjust, without the identity, must not be the
// way (it would name another key).
func TestAdjustRequestWindowKey(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	client := srv.Client(t)
	clock := fakeclock.New(time.Date(2026, 3, 1, 12, 0, 30, 0, time.UTC))
	store, err := algo.Redis(algo.FixedWindow, client, algo.RedisOptions{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	rule := sluice.Rule{Rate: 5.0 / 60, Burst: 5}
	c, err := decide.New(decide.Config{Store: store, Policies: []decide.Policy{{Name: "rls", Cost: 1,
		Authenticated: []sluice.Rule{rule}, Algorithm: algo.FixedWindow, CountDenied: true, WindowKey: true}}})
	if err != nil {
		t.Fatal(err)
	}
	p := c.Lookup("rls")
	s := &decide.Subject{Caller: decide.Caller{ID: "dom_k_v_"}, Authenticated: true, Cost: 1}
	var v decide.Verdict
	for range 3 {
		if v = c.DecideFor(ctx, p, s); v.Err != nil || !v.Result.Allowed {
			t.Fatalf("check: %+v", v)
		}
	}
	counter := algo.CounterKey("dom_k_v_", rule, clock.Now())
	count := func() string {
		t.Helper()
		n, err := client.Get(ctx, counter).Result()
		if err != nil {
			t.Fatalf("GET %s: %v", counter, err)
		}
		return n
	}
	if n := count(); n != "3" {
		t.Fatalf("counter %s = %s after 3 checks; want 3", counter, n)
	}
	res, err := c.AdjustRequest(ctx, p, v.Request, -2)
	if err != nil {
		t.Fatal(err)
	}
	if n := count(); n != "1" {
		t.Errorf("counter %s = %s after a refund of 2; want 1 (the refund went elsewhere)", counter, n)
	}
	if res.Remaining != 4 {
		t.Errorf("refund's result: %+v; want 4 remaining of 5", res)
	}
	if _, err := c.AdjustRequest(ctx, p, v.Request, 4); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != "5" {
		t.Errorf("counter %s = %s after a charge of 4; want 5", counter, n)
	}
	if v = c.DecideFor(ctx, p, s); v.Result.Allowed {
		t.Errorf("a check after the charge filled the window: %+v; want refused", v.Result)
	}
	keys, err := client.Keys(ctx, "*").Result()
	if err != nil || len(keys) != 1 || keys[0] != counter {
		t.Errorf("Redis holds %v (%v); want the counter %s alone", keys, err, counter)
	}
}
