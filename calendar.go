package sluice

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Period is the calendar period of a quota: a Rule whose Period is set
// grants Burst tokens per calendar day, week or month in its Zone, all of
// them back at the start of the next period, instead of refilling a token
// bucket continuously. The zero Period, Rolling, is an ordinary token
// bucket.
type Period uint8

const (
	// Rolling is a token bucket refilled continuously at Rule.Rate.
	Rolling Period = iota
	// Day runs from midnight to midnight: 23 or 25 hours on the days a
	// daylight-saving change happens in the zone.
	Day
	// Week is an ISO week: Monday midnight to the next Monday midnight.
	Week
	// Month runs from midnight of its first day to midnight of the first
	// day of the next month: 28 to 31 days.
	Month
)

var periodNames = [...]string{Rolling: "rolling", Day: "day", Week: "week", Month: "month"}

// String returns rolling, day, week or month.
func (p Period) String() string {
	if int(p) < len(periodNames) {
		return periodNames[p]
	}
	return "Period(" + strconv.Itoa(int(p)) + ")"
}

// Nominal is the length a period is stated as where one number must stand
// for it (a quota's Rate, the w of the RateLimit-Policy header): a day is
// 24 hours, a week 7 days, a month 30 days. Boundaries never use it.
func (p Period) Nominal() time.Duration {
	switch p {
	case Day:
		return 24 * time.Hour
	case Week:
		return 7 * 24 * time.Hour
	case Month:
		return 30 * 24 * time.Hour
	}
	return 0
}

// NewQuota returns the calendar quota of n tokens per period in zone (nil
// means UTC): Burst n, and Rate n over the period's Nominal length, which
// stands in for it wherever a rate is needed (a degraded local fallback,
// the headers' w). The error wraps ErrInvalid.
func NewQuota(n int64, period Period, zone *time.Location) (Rule, error) {
	r := Rule{Burst: n, Period: period, Zone: zone}
	if period != Rolling && period <= Month {
		r.Rate = quotaRate(n, period)
	}
	return r, r.Validate()
}

func quotaRate(n int64, p Period) float64 {
	return float64(n) / p.Nominal().Seconds()
}

// ParseQuota reads a calendar quota written as COUNT/PERIOD: COUNT a whole
// number of at least 1, PERIOD day, week or month (100000/month, 1000/day).
// The error wraps ErrInvalid and states this grammar.
func ParseQuota(s string) (int64, Period, error) {
	bad := func(why string) (int64, Period, error) {
		return 0, Rolling, fmt.Errorf("%w: quota %q: %s; want COUNT/PERIOD such as 1000/day, 20000/week or 100000/month (COUNT a whole number of at least 1, PERIOD day, week or month)", ErrInvalid, s, why)
	}
	count, unit, ok := strings.Cut(strings.TrimSpace(s), "/")
	if !ok {
		return bad("no '/'")
	}
	n, err := strconv.ParseInt(strings.TrimSpace(count), 10, 64)
	if err != nil {
		return bad(fmt.Sprintf("count %q is not a whole number", strings.TrimSpace(count)))
	}
	if n < 1 {
		return bad("count must be at least 1")
	}
	switch strings.TrimSpace(unit) {
	case "day":
		return n, Day, nil
	case "week":
		return n, Week, nil
	case "month":
		return n, Month, nil
	}
	return bad(fmt.Sprintf("unknown period %q", strings.TrimSpace(unit)))
}

// validateQuota is Validate for a calendar quota.
func (r Rule) validateQuota() error {
	if r.Period > Month {
		return fmt.Errorf("%w: period %v: want Rolling, Day, Week or Month", ErrInvalid, r.Period)
	}
	if r.Burst < 1 || r.Burst > MaxBurst {
		return fmt.Errorf("%w: quota %d: want an integer from 1 to %d", ErrInvalid, r.Burst, int64(MaxBurst))
	}
	if r.Rate != quotaRate(r.Burst, r.Period) {
		return fmt.Errorf("%w: rate %v of a quota of %d a %v: want %v, the quota over the period's nominal length; build quotas with NewQuota", ErrInvalid, r.Rate, r.Burst, r.Period, quotaRate(r.Burst, r.Period))
	}
	return nil
}

// Window returns the calendar period of r that holds t: its start and its
// end (the start of the next), in r's Zone. For a Rolling rule both are t.
func (r Rule) Window(t time.Time) (start, end time.Time) {
	zone := r.Zone
	if zone == nil {
		zone = time.UTC
	}
	t = t.In(zone)
	y, m, d := t.Date()
	switch r.Period {
	case Day:
		start, end = time.Date(y, m, d, 0, 0, 0, 0, zone), time.Date(y, m, d+1, 0, 0, 0, 0, zone)
	case Week:
		d -= (int(t.Weekday()) + 6) % 7 // back to Monday
		start, end = time.Date(y, m, d, 0, 0, 0, 0, zone), time.Date(y, m, d+7, 0, 0, 0, 0, zone)
	case Month:
		start, end = time.Date(y, m, 1, 0, 0, 0, 0, zone), time.Date(y, m+1, 1, 0, 0, 0, 0, zone)
	default:
		return t, t
	}
	// In a zone whose clocks skip midnight, time.Date may place a boundary
	// an hour off; the period must still hold t.
	if start.After(t) {
		start = t
	}
	if !end.After(t) {
		end = t.Add(time.Microsecond)
	}
	return start, end
}

// periodEnd is the end, in Unix µs, of r's period that holds now.
func periodEnd(r Rule, now int64) int64 {
	_, end := r.Window(time.UnixMicro(now))
	return end.UnixMicro()
}

// renew returns the tokens and the period end of the quota b of r at now:
// b as it is while its period lasts (Last is the period's end), else the
// whole quota for the period that holds now. A key with no state (Last ≤
// now, as FullBucket gives) gets the whole quota. The end never moves
// backwards, so a clock that is behind never hands out a new period.
func renew(b Bucket, r Rule, now int64) Bucket {
	if b.Last > now {
		return b
	}
	return Bucket{Tokens: float64(r.Burst), Last: periodEnd(r, now)}
}
