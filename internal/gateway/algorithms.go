package gateway

import (
	"context"
	"sync"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/redisstore"
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

	// The lease stores of the token bucket on Redis (nil: leases are
	// not used), one a lease setting, made at its first check and kept
	// across reloads, so the leases held survive a reload.
	redis  *redisstore.Store
	mu     sync.Mutex
	leases map[redisstore.Lease]*redisstore.Leased
}

type algorithmKey struct{}

type leaseKey struct{}

// withLease names the lease setting of the store calls made with ctx.
func withLease(ctx context.Context, l redisstore.Lease) context.Context {
	return context.WithValue(ctx, leaseKey{}, l)
}

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
	// A lease is of the token bucket's buckets: only its checks lease.
	if l, ok := ctx.Value(leaseKey{}).(redisstore.Lease); ok && a.redis != nil {
		if st := a.leased(l); st != nil {
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

// leased returns the lease store of l, made at its first use; nil when l
// is not valid (the configuration refuses it before).
func (a *algorithms) leased(l redisstore.Lease) *redisstore.Leased {
	a.mu.Lock()
	defer a.mu.Unlock()
	if st := a.leases[l]; st != nil {
		return st
	}
	st, err := redisstore.NewLeased(a.redis, l)
	if err != nil {
		return nil
	}
	if a.leases == nil {
		a.leases = map[redisstore.Lease]*redisstore.Leased{}
	}
	a.leases[l] = st
	return st
}

// LeaseAhead is that of the context's lease store, for the resilient
// layer's guard: 0 for a policy without a lease.
func (a *algorithms) LeaseAhead(ctx context.Context) int64 {
	if st, ok := a.pick(ctx).(*redisstore.Leased); ok {
		return st.LeaseAhead(ctx)
	}
	return 0
}

func (a *algorithms) Close() error {
	a.mu.Lock()
	for _, st := range a.leases {
		_ = st.Close() // gives back what the leases hold
	}
	a.leases = nil
	a.mu.Unlock()
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
