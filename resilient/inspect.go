package resilient

import (
	"context"
	"fmt"

	"github.com/sluicehq/sluice"
)

var _ sluice.Inspector = (*Store)(nil)

// Inspect asks the primary store for req.Key's standing on every rule, within
// the store's deadline (see sluice.Inspector). It reads only, so no
// failure policy applies: when the primary fails the error is returned,
// and a primary that cannot inspect gives sluice.ErrNotInspectable.
func (s *Store) Inspect(ctx context.Context, req sluice.Request) ([]sluice.Result, error) {
	ins, ok := s.primary.(sluice.Inspector)
	if !ok {
		return nil, fmt.Errorf("resilient: %w", sluice.ErrNotInspectable)
	}
	ctx, cancel := context.WithTimeout(ctx, s.maxWait)
	defer cancel()
	return ins.Inspect(ctx, req)
}
