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

func (a *algorithms) Check(ctx context.Context, req sluice.Request) (sluice.Result, error) {
	return a.pick(ctx).Check(ctx, req)
}

func (a *algorithms) Adjust(ctx context.Context, key string, delta int64, rules []sluice.Rule) (sluice.Result, error) {
	return a.pick(ctx).Adjust(ctx, key, delta, rules)
}

// Inspect asks the store of the context's algorithm, when it can inspect.
func (a *algorithms) Inspect(ctx context.Context, key string, rules []sluice.Rule) ([]sluice.Result, error) {
	if ins, ok := a.pick(ctx).(sluice.Inspector); ok {
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
