package sluice

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Rule is one token bucket: capacity Burst, refilled continuously at Rate
// tokens per second. The zero Rule is invalid; build one with NewRule or
// ParseRate, or fill both fields and call Validate.
//
// A Rule whose Period is set is a calendar quota instead (build it with
// NewQuota): Burst tokens per calendar day, week or month in Zone, all of
// them back at the start of the next period; see Period.
type Rule struct {
	Rate  float64 // tokens per second, > 0, may be fractional
	Burst int64   // capacity in tokens, ≥ 1

	Period Period         // Rolling (a token bucket), or the calendar period of a quota
	Zone   *time.Location // where a quota's periods begin; nil means UTC
}

// NewRule returns the rule of the given rate (as ParseRate reads it) and
// burst, or an error wrapping ErrInvalid.
func NewRule(rate string, burst int64) (Rule, error) {
	perSecond, err := ParseRate(rate)
	if err != nil {
		return Rule{}, err
	}
	r := Rule{Rate: perSecond, Burst: burst}
	return r, r.Validate()
}

// Validate reports whether r can be checked: a rate above zero and at most
// MaxRate, a burst from 1 to MaxBurst, and a refill time (Burst/Rate) of
// at most MaxRefillTime; for a calendar quota, a known Period, a quota
// from 1 to MaxBurst and the Rate NewQuota gives it. The error wraps
// ErrInvalid.
func (r Rule) Validate() error {
	if r.Period != Rolling {
		return r.validateQuota()
	}
	if !(r.Rate > 0) || !(r.Rate <= MaxRate) {
		return fmt.Errorf("%w: rate %v: want a number of tokens per second above 0 and at most %g", ErrInvalid, r.Rate, float64(MaxRate))
	}
	if r.Burst < 1 || r.Burst > MaxBurst {
		return fmt.Errorf("%w: burst %d: want an integer from 1 to %d", ErrInvalid, r.Burst, int64(MaxBurst))
	}
	if !(float64(r.Burst) <= r.Rate*refillBound) {
		return fmt.Errorf("%w: %s with burst %d refills an empty bucket in %s: want at most 366 days; raise the rate to at least %d/8784h or lower the burst",
			ErrInvalid, FormatRate(r.Rate), r.Burst, span(float64(r.Burst)/r.Rate), r.Burst)
	}
	return nil
}

// span writes a number of seconds for a message about bounds: as a Go
// duration up to two days, then in days, then years.
func span(seconds float64) string {
	switch {
	case !(seconds < 1000*365*86400):
		return "more than 1000 years"
	case seconds >= 2*365*86400:
		return strconv.FormatFloat(math.Round(seconds/(365*86400)), 'f', -1, 64) + " years"
	case seconds >= 2*86400:
		return strconv.FormatFloat(math.Round(seconds/86400), 'f', -1, 64) + " days"
	}
	return time.Duration(seconds * float64(time.Second)).Round(time.Millisecond).String()
}

// RefillTime is the time r takes to refill an empty bucket.
func (r Rule) RefillTime() time.Duration {
	return durationOf(float64(r.Burst) / r.Rate)
}

// String formats r as "RATE burst N", with RATE as ParseRate reads it.
func (r Rule) String() string {
	if r.Period != Rolling {
		s := strconv.FormatInt(r.Burst, 10) + "/" + r.Period.String() + " quota"
		if r.Zone != nil && r.Zone != time.UTC {
			s += " in " + r.Zone.String()
		}
		return s
	}
	return FormatRate(r.Rate) + " burst " + strconv.FormatInt(r.Burst, 10)
}

var rateUnits = []struct {
	name    string
	seconds float64
}{
	{"s", 1}, {"m", 60}, {"h", 3600}, {"d", 86400},
}

// ParseRate reads a rate written as COUNT/UNIT and returns it in tokens per
// second. This is the whole grammar:
//
//	COUNT  a decimal number greater than zero: 10, 0.5, 1e3
//	UNIT   s, sec or second
//	       m, min or minute
//	       h or hour
//	       d or day
//	       or a Go duration with its number: 10s, 1m30s, 500ms
//
// Units are lower case (10/S is an error, so that M never reads as month),
// and spaces around COUNT and UNIT are ignored. For example 10/s, 600/m,
// 1000/h, 10000/d, 0.5/s, 5/second and 100/10s. The error wraps ErrInvalid
// and states this grammar.
func ParseRate(s string) (float64, error) {
	bad := func(why string) (float64, error) {
		return 0, fmt.Errorf("%w: rate %q: %s; want COUNT/UNIT such as 10/s, 600/m, 1000/h, 10000/d or 0.5/s (%s)", ErrInvalid, s, why, rateUnitGrammar)
	}
	count, unit, ok := strings.Cut(strings.TrimSpace(s), "/")
	if !ok {
		return bad("no '/'")
	}
	n, err := strconv.ParseFloat(strings.TrimSpace(count), 64)
	if err != nil || math.IsNaN(n) || math.IsInf(n, 0) {
		return bad(fmt.Sprintf("count %q is not a number", count))
	}
	if n <= 0 {
		return bad("count must be greater than zero")
	}
	seconds, err := unitSeconds(strings.TrimSpace(unit))
	if err != nil {
		return bad(err.Error())
	}
	rate := n / seconds
	if !(rate > 0) || math.IsInf(rate, 0) {
		return bad("out of range")
	}
	return rate, nil
}

// rateUnitGrammar is what UNIT may be, for error messages.
const rateUnitGrammar = "UNIT is s, sec, second, m, min, minute, h, hour, d, day, or a duration such as 10s, 1m30s or 500ms"

func unitSeconds(unit string) (float64, error) {
	switch unit {
	case "s", "sec", "second":
		return 1, nil
	case "m", "min", "minute":
		return 60, nil
	case "h", "hour":
		return 3600, nil
	case "d", "day":
		return 86400, nil
	}
	d, err := time.ParseDuration(unit)
	if err != nil || !strings.ContainsAny(unit[:1], "0123456789.") { // no sign: 10/+1s is a typo
		return 0, fmt.Errorf("unknown unit %q", unit)
	}
	if d <= 0 {
		return 0, fmt.Errorf("unit %q must be a positive duration", unit)
	}
	return d.Seconds(), nil
}

// FormatRate writes a rate in tokens per second the way a person writes
// it and ParseRate reads it back:
//
//  1. a whole count in the smallest of s, m, h, d that makes it whole (10/s,
//     62/m, 1/m, 10000/d), allowing for the last bits of floating point
//     noise, so 62/m is 62/m and not 1.0333333333333334/s or 3720/h;
//  2. else the shortest count with at most three decimals per s, m, h or
//     d that reads back exactly (20.46/m);
//  3. else a whole count per whole number of seconds, up to a day (1/7s),
//     or one per whole number of hours or seconds beyond (1/8784h);
//  4. else as 2, within floating point noise (a what-if's 62/m × 0.33);
//  5. else the shortest decimal per second that reads back exactly.
//
// The text parses back to perSecond, or in steps 1 and 4 to the whole or
// decimal rate perSecond was meant to be, within a relative 1e-9.
func FormatRate(perSecond float64) string {
	if !(perSecond > 0) || math.IsInf(perSecond, 0) {
		return strconv.FormatFloat(perSecond, 'g', -1, 64) + "/s"
	}
	for _, u := range rateUnits {
		if n, ok := nearWhole(perSecond*u.seconds, 1); ok && n >= 1 && n < 1e15 {
			return strconv.FormatFloat(n, 'f', -1, 64) + "/" + u.name
		}
	}
	if t := decimalRate(perSecond, true); t != "" {
		return t
	}
	for d := 2.0; d <= 86400; d++ {
		if n := math.Round(perSecond * d); n >= 1 && n < 1e15 && n/d == perSecond {
			return strconv.FormatFloat(n, 'f', -1, 64) + "/" + strconv.FormatFloat(d, 'f', -1, 64) + "s"
		}
	}
	// Slower than one a day: one per whole number of hours or seconds.
	if d := math.Round(1 / perSecond); d > 86400 && d < 1e15 && 1/d == perSecond {
		if math.Mod(d, 3600) == 0 {
			return "1/" + strconv.FormatFloat(d/3600, 'f', -1, 64) + "h"
		}
		return "1/" + strconv.FormatFloat(d, 'f', -1, 64) + "s"
	}
	if t := decimalRate(perSecond, false); t != "" {
		return t
	}
	return strconv.FormatFloat(perSecond, 'g', -1, 64) + "/s"
}

// decimalRate writes perSecond as the shortest count with at most three
// decimals per s, m, h or d that reads back exactly, or with exact unset
// within floating point noise; "" when there is none.
func decimalRate(perSecond float64, exact bool) string {
	best := ""
	for _, scale := range []float64{10, 100, 1000} {
		for _, u := range rateUnits {
			n, ok := nearWhole(perSecond*u.seconds, scale)
			if !ok || n < 1 || n >= 1e15 {
				continue
			}
			count := strconv.FormatFloat(n/scale, 'f', -1, 64)
			v, err := strconv.ParseFloat(count, 64)
			if (!exact || (err == nil && v/u.seconds == perSecond)) && (best == "" || len(count)+len(u.name)+1 < len(best)) {
				best = count + "/" + u.name
			}
		}
	}
	return best
}

// nearWhole rounds x × scale to a whole number and says whether x × scale
// was that number but for floating point noise (a relative 1e-9).
func nearWhole(x, scale float64) (float64, bool) {
	n := math.Round(x * scale)
	return n, math.Abs(x*scale-n) <= 1e-9*math.Abs(x*scale)
}
