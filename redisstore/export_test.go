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
		ops[i] = b.op()
	}
	res := make([]sluice.Result, len(batch))
	return res, s.runBatch(ctx, ops, res)
}

func (b BatchOp) op() op {
	r := b.Req
	return op{key: r.Key, adjust: b.Adjust, amount: r.Cost, maxDelayUs: r.MaxDelay.Microseconds(), rules: r.Rules}
}

// SendBatch sends batch as a coalescing Store sends one batch: a script
// call per Cluster slot, all in one pipeline, on a Cluster. The keys may
// be in any slots.
func SendBatch(s *Store, batch []BatchOp) ([]sluice.Result, error) {
	ops := make([]op, len(batch))
	for i, b := range batch {
		ops[i] = b.op()
	}
	snd := newSender(s)
	res := make([]sluice.Result, len(batch))
	errs := make([]error, len(batch))
	snd.send(context.Background(), ops, res, errs)
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return res, nil
}

// Queued returns how many checks of a coalescing Store wait in its queue.
func Queued(s *Store) int { return s.batcher.Queued() }
