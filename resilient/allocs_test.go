package resilient_test

import (
	"context"
	"log/slog"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/resilient"
)

// A check the store answers takes no allocation of the layer's: its
// request stays on the caller's stack (a Store without ScopeOf), its job
// and timer come from pools. Not under the race detector, which adds an
// allocation a check of its own (and drops some of a pool's items).
func TestCheckAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on the check's path itself")
	}
	ms := memstore.New(memstore.Options{})
	defer ms.Close()
	s := resilient.New(ms, resilient.Options{Logger: slog.New(slog.DiscardHandler)})
	defer s.Close()
	req := sluice.Request{Key: "k", Cost: 1, Rules: []sluice.Rule{{Rate: 1e9, Burst: 1e9}}}
	ctx := context.Background()
	check := func() {
		if res, err := s.Check(ctx, req); err != nil || !res.Allowed {
			t.Fatalf("Check = %+v, %v", res, err)
		}
	}
	check() // the key's buckets, a worker
	if allocs := testing.AllocsPerRun(500, check); allocs > 0 {
		t.Errorf("a check allocates %v times; want none", allocs)
	}
}
