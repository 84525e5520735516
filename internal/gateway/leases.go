package gateway

import (
	"context"
	"sync"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/coalesce"
	"github.com/sluicehq/sluice/redisstore"
)

// leases is the gateway's token bucket store on Redis: a request that asks
// for a lease (sluice.Request.Lease, from a policy's lease:) goes to the
// lease store of its setting, made at its first check and kept across
// reloads, so the leases held survive a reload; every other request goes
// to the Redis store itself.
type leases struct {
	redis   *redisstore.Store
	bySetup sync.Map   // sluice.Lease → *redisstore.Leased; read without a lock on every leased check
	mu      sync.Mutex // makes a setting's store once
	closed  bool
}

func (l *leases) pick(req *sluice.Request) sluice.Store {
	if req.Lease == nil {
		return l.redis
	}
	if st, ok := l.bySetup.Load(*req.Lease); ok {
		return st.(*redisstore.Leased)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if st, ok := l.bySetup.Load(*req.Lease); ok {
		return st.(*redisstore.Leased)
	}
	if l.closed {
		return l.redis // shutting down: nothing more is leased
	}
	st, err := redisstore.NewLeased(l.redis, redisstore.Lease{Tokens: req.Lease.Tokens, TTL: req.Lease.TTL})
	if err != nil {
		return l.redis // not a valid lease: the configuration refuses it before
	}
	l.bySetup.Store(*req.Lease, st)
	return st
}

func (l *leases) Check(ctx context.Context, req sluice.Request) (sluice.Result, error) {
	return l.pick(&req).Check(ctx, req)
}

var _ coalesce.Sender = (*leases)(nil)

// Sends says whether SendCheck sends req: a request without a lease, to
// a Redis store that coalesces.
func (l *leases) Sends(req sluice.Request) bool {
	return req.Lease == nil && l.redis.Sends(req)
}

// SendCheck sends req's check to the Redis store's coalescing queue
// without waiting for it (coalesce.Sender), when the store it goes to can
// send: not a leased request's (its lease store decides it on a worker).
func (l *leases) SendCheck(ctx context.Context, req sluice.Request, a coalesce.Answerer) (coalesce.Withdrawer, bool) {
	if sd, ok := l.pick(&req).(coalesce.Sender); ok {
		return sd.SendCheck(ctx, req, a)
	}
	return nil, false
}

func (l *leases) Adjust(ctx context.Context, req sluice.Request, delta int64) (sluice.Result, error) {
	return l.pick(&req).Adjust(ctx, req, delta)
}

// Inspect reads the Redis bucket (a lease store shows the same).
func (l *leases) Inspect(ctx context.Context, req sluice.Request) ([]sluice.Result, error) {
	return l.redis.Inspect(ctx, req)
}

// Close gives back what every lease store holds; it does not close the
// Redis store.
func (l *leases) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	l.bySetup.Range(func(k, st any) bool {
		_ = st.(*redisstore.Leased).Close()
		l.bySetup.Delete(k)
		return true
	})
	return nil
}
