package redisstore

import (
	"context"
	"encoding/binary"
	"math"
	"time"

	"github.com/sluicehq/sluice"
)

// RunBatchSkewed is RunBatch with the script's clock at server instead of
// the store's: the calendar boundaries come from the store's clock, as in
// server-clock mode they come from the gateway's while the script reads
// Redis's TIME.
func RunBatchSkewed(ctx context.Context, s *Store, batch []BatchOp, server time.Time) ([]sluice.Result, error) {
	ops := make([]op, len(batch))
	for i, b := range batch {
		ops[i] = b.op()
	}
	c := s.prepare(ops)
	binary.LittleEndian.PutUint64(c.nums, math.Float64bits(float64(server.UnixMicro())))
	reply, err := c.script.Run(ctx, s.client, c.keys, c.nums).Text()
	res := make([]sluice.Result, len(batch))
	return res, c.parse(reply, err, ops, res)
}
