package algo

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testkit/fakeclock"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
)

var errHook = errors.New("the hook failed the batch")

// What counterHook does to a pipeline of counters.
const (
	hookPass  = iota // sends it
	hookFail         // fails it, each command with errHook, unsent
	hookServe        // answers it itself, unsent: values only, no error set
	hookSkip         // answers nothing and sends nothing
)

// counterHook is a go-redis hook that passes, fails, serves or skips the
// pipelines of counters by its mode: a batch whose commands go-redis
// leaves as the hook left them.
type counterHook struct {
	pipelinesOnly
	mode atomic.Int32
}

func (h *counterHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if name := cmds[0].Name(); name != "incrby" && name != "get" { // a new connection's set-up
			return next(ctx, cmds)
		}
		switch h.mode.Load() {
		case hookFail:
			for _, cmd := range cmds {
				cmd.SetErr(errHook)
			}
			return errHook
		case hookServe:
			for _, cmd := range cmds {
				switch cmd := cmd.(type) {
				case *redis.IntCmd:
					cmd.SetVal(4)
				case *redis.BoolCmd:
					cmd.SetVal(true)
				case *redis.StringCmd:
					cmd.SetVal("4")
				}
			}
			return nil
		case hookSkip:
			return nil
		}
		return next(ctx, cmds)
	}
}

// The commands a batch of counters reuses from the batch before carry
// nothing of it: whether the batch before failed or succeeded, and this
// one fails, succeeds, or is answered by a hook that sets only values or
// nothing at all, each check gets what it gets with commands made for the
// batch (a store that has sent nothing before).
func TestFixedWindowCountersReuseNothingOfTheBatchBefore(t *testing.T) {
	client := redistest.Start(t).Client(t)
	hook := &counterHook{}
	client.AddHook(hook)
	c := fakeclock.New(time.Date(2026, 3, 1, 12, 0, 30, 0, time.UTC))
	opts := RedisOptions{Now: c.Now, DisableCoalescing: true}
	rs, _ := Redis(FixedWindow, client, opts)
	defer rs.Close()
	reused := rs.(*fixedWindowRedis)
	if !reused.reuseCmds {
		t.Fatal("a *redis.Client's store does not reuse its commands: this test proves nothing")
	}
	rules := []sluice.Rule{{Rate: 10.0 / 60, Burst: 10}}
	batch := func(s *fixedWindowRedis, prefix string, rng *rand.Rand) ([]sluice.Result, []error) {
		ops := make([]fwOp, 2+rng.IntN(5))
		for i := range ops {
			ops[i] = fwOp{key: "k", kind: "d", amount: rng.Int64N(3), rules: rules} // 0: a GET when its counter's ops all are
			s.counterOp(&ops[i], fmt.Sprintf("%s_%d_", prefix, rng.IntN(3)))
		}
		res, errs := make([]sluice.Result, len(ops)), make([]error, len(ops))
		s.sendCounters(ctx, ops, res, errs)
		return res, errs
	}
	modes := []int32{hookPass, hookFail, hookServe, hookSkip}
	names := []string{"pass", "fail", "serve", "skip"}
	var steps []int32 // every mode after every mode
	for _, a := range modes {
		for _, b := range modes {
			steps = append(steps, a, b)
		}
	}
	var kept *redis.IntCmd
	for step, mode := range steps {
		hook.mode.Store(mode)
		seed := uint64(step)
		got, gotErrs := batch(reused, "reused", rand.New(rand.NewPCG(seed, 1)))
		fs, _ := Redis(FixedWindow, client, opts)
		want, wantErrs := batch(fs.(*fixedWindowRedis), "fresh", rand.New(rand.NewPCG(seed, 1)))
		fs.Close()
		for i := range got {
			g, w := fmt.Sprint(gotErrs[i]), fmt.Sprint(wantErrs[i])
			if got[i] != want[i] || g != w {
				t.Fatalf("step %d (%s after %s), op %d:\nreused commands %+v, %s\nnew commands    %+v, %s",
					step, names[mode], names[steps[max(0, step-1)]], i, got[i], g, want[i], w)
			}
		}
		b := <-reused.batches
		if step > 0 && b.cs[0].incr != kept && b.cs[0].incr != nil && kept != nil {
			t.Fatalf("step %d: the batch made its commands anew: this test proves nothing", step)
		}
		if b.cs[0].incr != nil {
			kept = b.cs[0].incr
		}
		reused.batches <- b
	}
}
