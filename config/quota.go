package config

import (
	"fmt"
	"strings"
	"time"
	_ "time/tzdata" // quota_time_zone must load on hosts without a zone database

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
)

// Calendar quotas. A rule written
//
//	- quota: 100000/month
//
// grants 100000 tokens per calendar month (or day, or ISO week from Monday)
// in the zone quota_time_zone names (UTC by default), all of them back at
// the start of the next period. It takes the place of rate and burst, so a
// rolling rate (rate: 10000/d, a bucket that refills continuously) and a
// calendar quota never share a spelling.

// quotaTimeZone loads quota_time_zone into the key material, UTC when it
// is not set.
func (v *validator) quotaTimeZone() {
	v.c.keys.quotaZone = time.UTC
	name := v.c.QuotaTimeZone
	if name == "" {
		return
	}
	const want = "want an IANA time zone name such as UTC, Europe/Berlin or America/New_York (names are case-sensitive)"
	if name == "Local" {
		v.fail("quota_time_zone", "%q depends on the host's settings; %s", name, want)
		return
	}
	zone, err := time.LoadLocation(name)
	if err != nil {
		v.fail("quota_time_zone", "%q is not a known time zone; %s", name, want)
		return
	}
	v.c.keys.quotaZone = zone
}

// quota parses the calendar quota of rule r at path at, for a policy of
// the given cost, and reports whether it is valid.
func (v *validator) quota(at string, r Rule, cost int64) (sluice.Rule, bool) {
	ok := true
	if r.Rate != "" || v.has(at+".rate") {
		v.fail(at+".rate", "a rule is either quota: (a calendar quota) or rate: and burst: (a token bucket); remove rate: or quota:")
		ok = false
	}
	if v.has(at + ".burst") {
		v.fail(at+".burst", "a quota's count is its burst (quota: 100000/month grants 100000 at once); remove burst:")
		ok = false
	}
	n, period, err := sluice.ParseQuota(r.Quota)
	if err != nil {
		v.fail(at+".quota", "%s", strings.TrimPrefix(err.Error(), sluice.ErrInvalid.Error()+": "))
		return sluice.Rule{}, false
	}
	if n > sluice.MaxBurst {
		v.fail(at+".quota", "%d: want at most %d a period (float64 counts every token exactly up to there)", n, int64(sluice.MaxBurst))
		return sluice.Rule{}, false
	}
	if cost > n {
		v.fail(at+".quota", "%d a %v is below the policy's cost %d: such a request could never pass; raise the quota or lower the cost", n, period, cost)
		ok = false
	}
	q, err := sluice.NewQuota(n, period, v.c.keys.quotaZone)
	if err != nil {
		v.fail(at+".quota", "%s", strings.TrimPrefix(err.Error(), sluice.ErrInvalid.Error()+": "))
		return sluice.Rule{}, false
	}
	return q, ok
}

// quotaAlgorithm reports calendar quotas in a policy whose algorithm is
// not the token bucket: package algo's windows and logs know no calendar.
func (v *validator) quotaAlgorithm(at string, p *Policy) {
	if p.Algorithm == algo.TokenBucket || p.Algorithm == "" {
		return
	}
	check := func(field string, rules []Rule) {
		for i, r := range rules {
			if r.Quota != "" {
				v.fail(fmt.Sprintf("%s[%d].quota", field, i), "algorithm %s knows no calendar; want algorithm: token_bucket for a policy with quotas", p.Algorithm)
			}
		}
	}
	check(at+".anonymous", p.Anonymous)
	check(at+".authenticated", p.Authenticated)
	for j, o := range p.Overrides {
		check(fmt.Sprintf("%s.overrides[%d].authenticated", at, j), o.Authenticated)
	}
	for name, rules := range p.Plans {
		check(fmt.Sprintf("%s.plans.%s", at, name), rules)
	}
}

// calendarHint is what a rate error adds when the rate names a calendar
// period that rates do not know.
func calendarHint(rate string) string {
	_, unit, _ := strings.Cut(rate, "/")
	switch strings.TrimSpace(unit) {
	case "w", "week", "mo", "month", "M", "y", "year":
		return "; for a quota that resets each calendar day, week or month write quota: COUNT/day, COUNT/week or COUNT/month in place of rate and burst"
	}
	return ""
}

// QuotaZone is the loaded quota_time_zone: where calendar quotas' days,
// weeks and months begin (UTC when unset).
func (c *Config) QuotaZone() *time.Location {
	if c.keys.quotaZone == nil {
		return time.UTC
	}
	return c.keys.quotaZone
}
