package bench

import (
	"context"
	"sync"
	"time"

	gl "github.com/sethvargo/go-limiter"
	"github.com/sethvargo/go-limiter/memorystore"
	ulule "github.com/ulule/limiter/v3"
	ulmemory "github.com/ulule/limiter/v3/drivers/store/memory"
	"golang.org/x/time/rate"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
)

// Limiter is one library seen the same way as every other: take cost
// tokens for key, and say whether the request passes.
type Limiter interface {
	Allow(ctx context.Context, key string, cost int64) (bool, error)
	Close() error
}

// The rule every library is given: a burst so large that every check of
// the suite takes the allow path, the common case in production, whatever
// the speed of the library, and a rate low enough for every peer's
// arithmetic (redis_rate's float seconds since 2017 cannot add the
// nanosecond a token of 10⁹/s would take, and then stores nothing). Each
// peer gets the nearest equivalent it has.
const (
	RuleRate  = 1e5 // tokens per second
	RuleBurst = 1e9
	// RuleRefill is the time to refill the whole burst: go-limiter's and
	// ulule's window.
	RuleRefill = time.Duration(RuleBurst / RuleRate * float64(time.Second))
)

// MemoryLibraries names the in-memory limiters, sluice first, and the
// floor: a sharded map that limits nothing.
var MemoryLibraries = []string{"sluice", "x/time/rate", "sethvargo", "ulule", "floor"}

// NewMemory returns the named in-memory limiter, empty.
func NewMemory(name string) Limiter {
	switch name {
	case "sluice":
		return newSluiceMem()
	case "x/time/rate":
		return &xrateLimiter{}
	case "floor":
		return newFloorMap()
	case "sethvargo":
		st, err := memorystore.New(&memorystore.Config{
			Tokens:        RuleBurst,
			Interval:      RuleRefill,
			SweepInterval: time.Hour, // as sluice's sweep is off: no sweep in the timed part
			SweepMinTTL:   time.Hour,
		})
		if err != nil {
			panic(err)
		}
		return &sethvargoLimiter{st: st}
	case "ulule":
		st := ulmemory.NewStoreWithOptions(ulule.StoreOptions{
			Prefix:          "ulule",
			CleanUpInterval: time.Hour,
		})
		return &ululeLimiter{l: ulule.New(st, ulule.Rate{Period: RuleRefill, Limit: RuleBurst})}
	}
	panic("bench: unknown memory library " + name)
}

// SupportsCost reports whether the named library can take more than one
// token in one call; go-limiter's Take always takes one.
func SupportsCost(name string) bool { return name != "sethvargo" }

var sluiceRules = []sluice.Rule{{Rate: RuleRate, Burst: RuleBurst}}

type sluiceMem struct{ st *memstore.Store }

func newSluiceMem() *sluiceMem {
	return &sluiceMem{st: memstore.New(memstore.Options{SweepInterval: -1})}
}

func (l *sluiceMem) Allow(ctx context.Context, key string, cost int64) (bool, error) {
	res, err := l.st.Check(ctx, sluice.Request{Key: key, Cost: cost, Rules: sluiceRules})
	return res.Allowed, err
}

func (l *sluiceMem) Close() error { return l.st.Close() }

// xrateLimiter is the usual way to key x/time/rate: one Limiter per key,
// found in a sync.Map, created on first use.
type xrateLimiter struct{ m sync.Map }

func (l *xrateLimiter) Allow(_ context.Context, key string, cost int64) (bool, error) {
	v, ok := l.m.Load(key)
	if !ok {
		v, _ = l.m.LoadOrStore(key, rate.NewLimiter(RuleRate, RuleBurst))
	}
	return v.(*rate.Limiter).AllowN(time.Now(), int(cost)), nil
}

func (l *xrateLimiter) Close() error { return nil }

type sethvargoLimiter struct{ st gl.Store }

func (l *sethvargoLimiter) Allow(ctx context.Context, key string, _ int64) (bool, error) {
	_, _, _, ok, err := l.st.Take(ctx, key)
	return ok, err
}

func (l *sethvargoLimiter) Close() error { return l.st.Close(context.Background()) }

// ululeLimiter is ulule/limiter: a fixed-window counter, not a token
// bucket, with the library's own Limiter in front of its store.
type ululeLimiter struct{ l *ulule.Limiter }

func (l *ululeLimiter) Allow(ctx context.Context, key string, cost int64) (bool, error) {
	c, err := l.l.Increment(ctx, key, cost)
	return !c.Reached, err
}

func (l *ululeLimiter) Close() error { return nil }

// LibID is a library's name as a benchmark name part (no slashes).
func LibID(name string) string {
	if name == "x/time/rate" {
		return "xrate"
	}
	return name
}
