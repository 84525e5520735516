package httplimit

import (
	"context"
	"sync"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
)

// LocalFallback returns a Fallback that decides, while the shared store
// fails, against local, an in-process store, with every rule's rate and
// burst divided by instances (the number of gateways sharing the store),
// so that an outage does not multiply the limit by the number of gateways.
func LocalFallback(local *memstore.Store, instances int) Fallback {
	instances = max(1, instances)
	var scaled sync.Map // *sluice.Rule (first of a rule list) -> []sluice.Rule
	return func(ctx context.Context, _ string, req sluice.Request, _ error) (sluice.Result, bool) {
		rules, ok := scaled.Load(&req.Rules[0])
		if !ok {
			rs := make([]sluice.Rule, len(req.Rules))
			for i, r := range req.Rules {
				rs[i] = sluice.Rule{Rate: r.Rate / float64(instances), Burst: max(1, r.Burst/int64(instances))}
				if r.Period != sluice.Rolling { // a calendar quota: its share per period
					rs[i], _ = sluice.NewQuota(rs[i].Burst, r.Period, r.Zone)
				}
			}
			rules, _ = scaled.LoadOrStore(&req.Rules[0], rs)
		}
		req.Rules = rules.([]sluice.Rule)
		for _, r := range req.Rules {
			if req.Cost > r.Burst {
				req.Cost = r.Burst // a local share smaller than the cost still lets it pass at its pace
			}
		}
		res, err := local.Check(ctx, req)
		return res, err == nil
	}
}
