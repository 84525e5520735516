package redisstore

import (
	"context"

	"github.com/sluicehq/sluice"
)

// BatchOp is a check of Req, or with Adjust an adjustment of Req.Key's
// buckets by Req.Cost (negative refunds).
type BatchOp struct {
	Req    sluice.Request
	Adjust bool
}

// RunBatch sends ops to Redis in one script call, as a coalesced batch.
func RunBatch(ctx context.Context, s *Store, batch []BatchOp) ([]sluice.Result, error) {
	ops := make([]op, len(batch))
	for i, b := range batch {
		r := b.Req
		ops[i] = op{key: r.Key, adjust: b.Adjust, amount: r.Cost, maxDelayUs: r.MaxDelay.Microseconds(), rules: r.Rules}
	}
	res := make([]sluice.Result, len(batch))
	return res, s.runBatch(ctx, ops, res)
}

// Queued returns how many checks of a coalescing Store wait in its queue.
func Queued(s *Store) int {
	s.batcher.mu.Lock()
	defer s.batcher.mu.Unlock()
	return len(s.batcher.pending)
}
