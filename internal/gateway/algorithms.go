package gateway

import (
	"context"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/httplimit"
)

// algorithms is the gateway's one store: it sends each check to the store
// of its policy's algorithm, named in the context. One store, so one
// resilient layer (one breaker, one denial cache) guards them all; the
// denial cache cannot mix algorithms up, since every policy's keys are its
// own.
type algorithms struct {
	routeStore  // by pick
	tokenBucket sluice.Store
	others      map[string]sluice.Store // by algo name
	closers     []func() error
}

type algorithmKey struct{}

// withAlgorithm names the algorithm of the store calls made with ctx.
func withAlgorithm(ctx context.Context, p *httplimit.Policy) context.Context {
	if p.Algorithm == "" || p.Algorithm == algo.TokenBucket {
		return ctx
	}
	return context.WithValue(ctx, algorithmKey{}, p.Algorithm)
}

func (a *algorithms) pick(ctx context.Context) sluice.Store {
	if name, ok := ctx.Value(algorithmKey{}).(string); ok {
		if st := a.others[name]; st != nil {
			return st
		}
	}
	return a.tokenBucket
}

// routeStore is a store that sends each call to the store the call's
// context picks: the algorithm's (algorithms), the per-second Redis's
// (perSecondStore).
type routeStore func(ctx context.Context) sluice.Store

func (pick routeStore) Check(ctx context.Context, req sluice.Request) (sluice.Result, error) {
	return pick(ctx).Check(ctx, req)
}

func (pick routeStore) Adjust(ctx context.Context, key string, delta int64, rules []sluice.Rule) (sluice.Result, error) {
	return pick(ctx).Adjust(ctx, key, delta, rules)
}

// Inspect asks the store picked, when it can inspect.
func (pick routeStore) Inspect(ctx context.Context, key string, rules []sluice.Rule) ([]sluice.Result, error) {
	if ins, ok := pick(ctx).(sluice.Inspector); ok {
		return ins.Inspect(ctx, key, rules)
	}
	return nil, sluice.ErrNotInspectable
}

func (a *algorithms) Close() error {
	for _, c := range a.closers {
		_ = c()
	}
	return nil
}

// newAlgorithms builds the store of every algorithm beside the token
// bucket with build.
func newAlgorithms(tokenBucket sluice.Store, build func(name string) (algo.Store, error)) (*algorithms, error) {
	a := &algorithms{tokenBucket: tokenBucket, others: map[string]sluice.Store{}}
	a.routeStore = a.pick
	for _, name := range algo.Names() {
		if name == algo.TokenBucket {
			continue
		}
		st, err := build(name)
		if err != nil {
			a.Close()
			return nil, err
		}
		a.others[name] = st
		a.closers = append(a.closers, st.Close)
	}
	return a, nil
}
