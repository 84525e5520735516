package redisstore

import (
	"context"

	"github.com/sluicehq/sluice"
)

// CheckBatch sends reqs to Redis in one script call, as a coalesced batch.
func CheckBatch(ctx context.Context, s *Store, reqs []sluice.Request) ([]sluice.Result, error) {
	ops := make([]op, len(reqs))
	for i, r := range reqs {
		ops[i] = op{key: r.Key, amount: r.Cost, maxDelayUs: r.MaxDelay.Microseconds(), rules: r.Rules}
	}
	res := make([]sluice.Result, len(reqs))
	return res, s.runBatch(ctx, ops, res)
}
