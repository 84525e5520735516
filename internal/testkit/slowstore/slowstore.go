// Package slowstore wraps a sluice.Store so that every call waits a
// while first, as a call waits on Redis.
package slowstore

import (
	"context"
	"time"

	"github.com/sluicehq/sluice"
)

// Store is a sluice.Store whose Check and Adjust wait Wait before they
// call the store they wrap.
type Store struct {
	sluice.Store
	Wait time.Duration
}

// Check waits, then checks.
func (s Store) Check(ctx context.Context, req sluice.Request) (sluice.Result, error) {
	time.Sleep(s.Wait)
	return s.Store.Check(ctx, req)
}

// Adjust waits, then adjusts.
func (s Store) Adjust(ctx context.Context, req sluice.Request, delta int64) (sluice.Result, error) {
	time.Sleep(s.Wait)
	return s.Store.Adjust(ctx, req, delta)
}
