package redisstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/redisstore"
)

// TestInspectAgainstMemstore runs one random history of checks and
// adjustments on a real Redis and on memstore, on one injected clock, and
// holds every key's Inspect on both equal, rule by rule; then that
// inspecting changed nothing on Redis: the next check of each key is what
// Inspect said.
func TestInspectAgainstMemstore(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	now := time.Unix(1_700_000_000, 0)
	clock := func() time.Time { return now }
	rs := redisstore.New(client, redisstore.Options{Now: clock, Prefix: "inspect:"})
	defer rs.Close()
	ms := memstore.New(memstore.Options{SweepInterval: -1, Now: clock})
	defer ms.Close()
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))
	ruleSets := [][]sluice.Rule{
		{{Rate: 2, Burst: 10}},
		{{Rate: 5, Burst: 20}, {Rate: 100.0 / 3600, Burst: 50}},
		{{Rate: 0.5, Burst: 3}, {Rate: 10, Burst: 30}, {Rate: 1000.0 / 86400, Burst: 40}},
	}
	keys := make([]string, 12)
	for i := range keys {
		keys[i] = fmt.Sprintf("user-%d", i)
	}
	rulesOf := func(i int) []sluice.Rule { return ruleSets[i%len(ruleSets)] }
	for step := range 600 {
		i := rng.IntN(len(keys))
		now = now.Add(time.Duration(rng.IntN(400)) * time.Millisecond)
		if rng.IntN(5) == 0 {
			delta := int64(rng.IntN(7) - 3)
			a, errA := rs.Adjust(ctx, sluice.Request{Key: keys[i], Rules: rulesOf(i)}, delta)
			b, errB := ms.Adjust(ctx, sluice.Request{Key: keys[i], Rules: rulesOf(i)}, delta)
			if errA != nil || errB != nil || a != b {
				t.Fatalf("step %d adjust: redis %+v %v, memstore %+v %v", step, a, errA, b, errB)
			}
			continue
		}
		req := sluice.Request{Key: keys[i], Cost: int64(rng.IntN(3)), Rules: rulesOf(i)}
		a, errA := rs.Check(ctx, req)
		b, errB := ms.Check(ctx, req)
		if errA != nil || errB != nil || a != b {
			t.Fatalf("step %d check: redis %+v %v, memstore %+v %v", step, a, errA, b, errB)
		}
	}
	now = now.Add(700 * time.Millisecond)
	for i, k := range append(keys, "never-checked") {
		a, errA := rs.Inspect(ctx, sluice.Request{Key: k, Rules: rulesOf(i)})
		b, errB := ms.Inspect(ctx, sluice.Request{Key: k, Rules: rulesOf(i)})
		if errA != nil || errB != nil {
			t.Fatalf("inspect %s: %v, %v", k, errA, errB)
		}
		for r := range a {
			if a[r] != b[r] {
				t.Errorf("inspect %s rule %d: redis %+v, memstore %+v", k, r, a[r], b[r])
			}
		}
		for range 20 {
			if _, err := rs.Inspect(ctx, sluice.Request{Key: k, Rules: rulesOf(i)}); err != nil {
				t.Fatal(err)
			}
		}
		// The next check of the first rule alone would read another state
		// (another number of rules); check the key's own rules at cost 0,
		// which reports the rule with the fewest tokens.
		res, err := rs.Check(ctx, sluice.Request{Key: k, Cost: 0, Rules: rulesOf(i)})
		if err != nil {
			t.Fatal(err)
		}
		if a[res.Rule].Remaining != res.Remaining || a[res.Rule].ResetAfter != res.ResetAfter {
			t.Errorf("%s: the next check sees rule %d with %d remaining, reset %v; Inspect said %+v", k, res.Rule, res.Remaining, res.ResetAfter, a[res.Rule])
		}
	}
}

// TestInspectServerClock: with the server's clock, a fresh key is full
// and a spent one is reported spent, and Inspect writes no key.
func TestInspectServerClock(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	s := redisstore.New(client, redisstore.Options{})
	defer s.Close()
	ctx := context.Background()
	rules := []sluice.Rule{{Rate: 1.0 / 3600, Burst: 5}}
	got, err := s.Inspect(ctx, sluice.Request{Key: "fresh", Rules: rules})
	if err != nil {
		t.Fatal(err)
	}
	if got[0].Remaining != 5 {
		t.Errorf("fresh key: %+v, want 5 remaining", got[0])
	}
	if n, _ := client.DBSize(ctx).Result(); n != 0 {
		t.Errorf("Inspect wrote %d keys", n)
	}
	for range 3 {
		s.Check(ctx, sluice.Request{Key: "spent", Cost: 1, Rules: rules})
	}
	for range 50 {
		got, err = s.Inspect(ctx, sluice.Request{Key: "spent", Rules: rules})
		if err != nil {
			t.Fatal(err)
		}
	}
	if got[0].Remaining != 2 {
		t.Errorf("after 3 of 5: %+v, want 2 remaining", got[0])
	}
	for i := range 2 {
		if res, _ := s.Check(ctx, sluice.Request{Key: "spent", Cost: 1, Rules: rules}); !res.Allowed {
			t.Fatalf("check %d of the 2 Inspect reported was denied", i)
		}
	}
}
