package algo

import (
	"context"
	"errors"
	"fmt"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/coalesce"
)

// Router is one sluice.Store for every algorithm: it sends each call to
// the store of its request's algorithm (sluice.Request.Algorithm), the
// token bucket store when the request names none or token_bucket. One
// store in front of them all means one resilient layer (one breaker, one
// denial cache) guards them all; a denial cache cannot mix algorithms up,
// since every policy's keys are its own.
//
// A request that names an algorithm the Router has no store of is an
// error wrapping sluice.ErrInvalid: a Router never decides a request by
// another algorithm than the one it names.
type Router struct {
	tokenBucket sluice.Store
	others      map[string]Store // by Algorithm()
}

var _ sluice.Inspector = (*Router)(nil)

// NewRouter returns a Router that sends the token bucket's requests to
// tokenBucket (a memstore or redisstore Store) and those of another
// algorithm to the store of others of that algorithm. It is an error for
// tokenBucket or a store of others to be nil, or for two stores of others
// (or one and tokenBucket) to have the same algorithm.
func NewRouter(tokenBucket sluice.Store, others ...Store) (*Router, error) {
	if tokenBucket == nil {
		return nil, errors.New("algo: NewRouter: no token bucket store")
	}
	r := &Router{tokenBucket: tokenBucket, others: make(map[string]Store, len(others))}
	for _, st := range others {
		if st == nil {
			return nil, errors.New("algo: NewRouter: a nil store")
		}
		name := st.Algorithm()
		if name == "" {
			return nil, errors.New("algo: NewRouter: a store that names no algorithm")
		}
		if _, dup := r.others[name]; dup || name == TokenBucket {
			return nil, fmt.Errorf("algo: NewRouter: two stores of algorithm %q", name)
		}
		r.others[name] = st
	}
	return r, nil
}

// store returns the store of req's algorithm.
func (r *Router) store(req *sluice.Request) (sluice.Store, error) {
	if req.Algorithm == "" || req.Algorithm == TokenBucket {
		return r.tokenBucket, nil
	}
	if st := r.others[req.Algorithm]; st != nil {
		return st, nil
	}
	return nil, fmt.Errorf("%w: algorithm %q: the store has none of it", sluice.ErrInvalid, req.Algorithm)
}

// Check decides req in the store of its algorithm.
func (r *Router) Check(ctx context.Context, req sluice.Request) (sluice.Result, error) {
	st, err := r.store(&req)
	if err != nil {
		return sluice.Result{}, err
	}
	return st.Check(ctx, req)
}

// SendCheck sends req's check to the store of its algorithm without
// waiting for it, when that store can (coalesce.Sender); false, having
// answered nothing, when it cannot or req names no store's algorithm
// (Check then says why).
func (r *Router) SendCheck(ctx context.Context, req sluice.Request, a coalesce.Answerer) (coalesce.Withdrawer, bool) {
	st, err := r.store(&req)
	if err != nil {
		return nil, false
	}
	if sd, ok := st.(coalesce.Sender); ok {
		return sd.SendCheck(ctx, req, a)
	}
	return nil, false
}

var _ coalesce.Sender = (*Router)(nil)

// Sends says whether SendCheck sends req: whether the store of its
// algorithm can (coalesce.Sender).
func (r *Router) Sends(req sluice.Request) bool {
	st, err := r.store(&req)
	if err != nil {
		return false
	}
	sd, ok := st.(coalesce.Sender)
	return ok && sd.Sends(req)
}

// Adjust adjusts req's buckets in the store of its algorithm.
func (r *Router) Adjust(ctx context.Context, req sluice.Request, delta int64) (sluice.Result, error) {
	st, err := r.store(&req)
	if err != nil {
		return sluice.Result{}, err
	}
	return st.Adjust(ctx, req, delta)
}

// Inspect asks the store of req's algorithm, when it can inspect; else
// the error is sluice.ErrNotInspectable.
func (r *Router) Inspect(ctx context.Context, req sluice.Request) ([]sluice.Result, error) {
	st, err := r.store(&req)
	if err != nil {
		return nil, err
	}
	if ins, ok := st.(sluice.Inspector); ok {
		return ins.Inspect(ctx, req)
	}
	return nil, sluice.ErrNotInspectable
}

// Close closes the stores of the other algorithms, not the token bucket
// store, which its caller made and closes.
func (r *Router) Close() error {
	var errs []error
	for _, st := range r.others {
		errs = append(errs, st.Close())
	}
	return errors.Join(errs...)
}
