package decide

import (
	"context"
	"sync/atomic"
	"time"
)

// StoreTime adds up how long the store calls of the decisions made with a
// context that carries it took (WithStoreTime), when the Core's store
// waits on another process (Config.StoreWaits): the time a front door's
// call spent waiting on Redis, which is not its own work. The Envoy
// service paces a flooding domain by its calls' own time, the call's time
// less this (envoy_rls.busy_domain_rest), so that a decision that waits on
// Redis is not taken for one that keeps a CPU busy. It is safe for
// concurrent use; its zero value is ready.
type StoreTime struct{ n atomic.Int64 }

// StoreTimeKey is the context key of a *StoreTime. A context type that
// answers Value itself (the Envoy service's stream) may answer it with one
// of its own, which spares a context layer per call; others use
// WithStoreTime.
type StoreTimeKey struct{}

// WithStoreTime returns ctx carrying t: the store calls of decisions made
// with it add their time to t.
func WithStoreTime(ctx context.Context, t *StoreTime) context.Context {
	return context.WithValue(ctx, StoreTimeKey{}, t)
}

// Total is the time added so far.
func (t *StoreTime) Total() time.Duration { return time.Duration(t.n.Load()) }

func (t *StoreTime) add(d time.Duration) { t.n.Add(int64(d)) }

// addStoreTime adds d to ctx's StoreTime, if it carries one.
func addStoreTime(ctx context.Context, d time.Duration) {
	if t, _ := ctx.Value(StoreTimeKey{}).(*StoreTime); t != nil {
		t.add(d)
	}
}
