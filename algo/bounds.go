package algo

import (
	"fmt"

	"github.com/sluicehq/sluice"
)

// MaxLogBurst is the largest burst of a sliding_log rule, and the largest
// charge an Adjust may add to a sliding log: the log keeps one entry per
// admitted unit (8 bytes in process, far more in a Redis sorted set), so
// its burst is what a key can cost in memory. Use sliding_window for
// larger bursts: two numbers a rule, whatever the burst.
const MaxLogBurst = 100_000

// validateLog reports why a sliding log cannot take rules, or a charge of
// delta: a burst or a charge above MaxLogBurst. Other algorithms keep a
// fixed state and take any valid rule.
func validateLog(name string, rules []sluice.Rule, delta int64) error {
	if name != SlidingLog {
		return nil
	}
	for i, r := range rules {
		if r.Burst > MaxLogBurst {
			return fmt.Errorf("rule %d: %w: burst %d: sliding_log keeps an entry per unit, want at most %d (or sliding_window)", i, sluice.ErrInvalid, r.Burst, MaxLogBurst)
		}
	}
	if delta > MaxLogBurst {
		return fmt.Errorf("%w: a charge of %d: sliding_log keeps an entry per unit, want at most %d", sluice.ErrInvalid, delta, MaxLogBurst)
	}
	return nil
}
