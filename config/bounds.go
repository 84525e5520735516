package config

import (
	"strings"
	"time"

	"github.com/sluicehq/sluice"
)

// ruleBounds reports, on the field to change, a rule whose arithmetic
// could overflow or lose precision: a rate above sluice.MaxRate, a burst
// above sluice.MaxBurst, or a refill time (burst/rate) above
// sluice.MaxRefillTime. These are the bounds of sluice.Rule.Validate, so a
// file that loads never hands a store a rule it refuses. With a Redis
// store shared by several instances, the local fallback's share of the
// rule (rate and burst divided by store.instances, the burst at least 1
// and at least the cost) must be within them too. It returns whether the
// rule is within bounds.
func (v *validator) ruleBounds(at string, r sluice.Rule, cost int64) bool {
	if r.Burst > sluice.MaxBurst {
		v.fail(at+".burst", "%d: want an integer from 1 to %d (float64 counts every token exactly up to there)", r.Burst, int64(sluice.MaxBurst))
		return false
	}
	if err := r.Validate(); err != nil {
		v.fail(at+".rate", "%s", strings.TrimPrefix(err.Error(), sluice.ErrInvalid.Error()+": "))
		return false
	}
	n := int64(v.c.Store.Instances)
	if v.c.Store.Type != "redis" || n <= 1 {
		return true
	}
	share := sluice.Rule{Rate: r.Rate / float64(n), Burst: max(r.Burst/n, 1, cost)}
	if err := share.Validate(); err != nil {
		v.fail(at+".rate", "the local fallback's share with store.instances %d: %s", n, strings.TrimPrefix(err.Error(), sluice.ErrInvalid.Error()+": "))
		return false
	}
	return true
}

// maxDelay reports a max_delay that is negative or above
// sluice.MaxDelayLimit: a request is held to pace it, not parked for
// later, and the bound keeps every wait far from overflow.
func (v *validator) maxDelay(field string, d time.Duration) {
	if d < 0 || d > sluice.MaxDelayLimit {
		v.fail(field, "%v: want 0s (reject) or a positive duration of at most %v to pace requests, such as 500ms", d, sluice.MaxDelayLimit)
	}
}
