package config

import (
	"fmt"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
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

// logBounds reports the rules of a sliding_log policy whose burst is above
// algo.MaxLogBurst: the log keeps an entry per admitted unit, so its
// burst is what one key can cost in memory.
func (v *validator) logBounds(at string, p *Policy) {
	if p.Algorithm != algo.SlidingLog {
		return
	}
	check := func(field string, rules []Rule) {
		for i, r := range rules {
			if r.Burst > algo.MaxLogBurst {
				v.fail(fmt.Sprintf("%s[%d].burst", field, i), "%d: sliding_log keeps an entry per admitted unit; want at most %d, or algorithm: sliding_window", r.Burst, algo.MaxLogBurst)
			}
		}
	}
	check(at+".anonymous", p.Anonymous)
	check(at+".authenticated", p.Authenticated)
	for j, o := range p.Overrides {
		check(fmt.Sprintf("%s.overrides[%d].authenticated", at, j), o.Authenticated)
	}
}
