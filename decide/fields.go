package decide

import (
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/sluicehq/sluice"
)

// The RateLimit field values (IETF httpapi RateLimit headers draft 10)
// that depend only on a rule set: a front door renders a response's fields
// from them and a Verdict's Result, whatever its protocol.

// Field is one response field: its canonical name and its value.
type Field struct{ Name, Value string }

// QuotaFields are the RateLimit field values of a rule set that depend only
// on its rules, rendered once when a policy is compiled.
//
// Each rule is one quota policy item of draft 10, named after the policy:
// the first rule takes the policy's name, the others the name followed by
// "-" and their index ("payments", "payments-1"). RateLimit-Policy lists
// every item; RateLimit reports the item of the rule that sluice.Result
// reports (the one closest to running out, or that makes a denied caller
// wait longest) under that same name.
type QuotaFields struct {
	Policy string   // the RateLimit-Policy value: every rule's item
	Item   []string // per rule: its name as a structured-field string
	Name   []string // per rule: its name, for violated-policies
	Limit  []string // per rule: its burst, in the unit of the fields
	Per    int64    // tokens a unit of the fields stands for
}

// RenderQuota renders the quota fields of rules under the policy name.
// A policy whose cost is fixed counts in requests: a rule of rate R and
// burst B at cost c is stated as R/c requests a second and ⌊B/c⌋ requests
// of burst. A policy whose cost is 0 or is reported after the fact
// (CostHeader) counts in tokens; its items say so with sluice-unit.
func RenderQuota(name string, rules []sluice.Rule, cost int64, costHeader string) QuotaFields {
	qh := QuotaFields{Per: 1}
	tokens := costHeader != "" || cost == 0
	if !tokens {
		qh.Per = cost
	}
	var policy []byte
	for i, r := range rules {
		item := name
		if i > 0 {
			item += "-" + strconv.Itoa(i)
		}
		qh.Name = append(qh.Name, item)
		qh.Item = append(qh.Item, quote(item))
		burst := min(r.Burst/qh.Per, MaxSFInteger)
		qh.Limit = append(qh.Limit, strconv.FormatInt(burst, 10))
		q, w := QuotaWindow(r.Rate/float64(qh.Per), burst)
		if r.Period != sluice.Rolling { // a calendar quota: q a period, w its nominal length
			q, w = burst, int64(r.Period.Nominal()/time.Second)
		}
		if i > 0 {
			policy = append(policy, ", "...)
		}
		policy = AppendQuoted(policy, item)
		policy = fmt.Appendf(policy, ";q=%d;w=%d", q, w)
		if burst != q {
			policy = fmt.Appendf(policy, ";sluice-burst=%d", burst)
		}
		if tokens {
			policy = append(policy, `;sluice-unit="tokens"`...)
		}
	}
	qh.Policy = string(policy)
	return qh
}

// MaxSFInteger is the largest Integer a structured field can carry.
const MaxSFInteger = 999_999_999_999_999

// QuotaWindow states a token bucket of rate (units a second) and burst as
// a draft 10 quota policy: q units per w seconds, both whole numbers, with
// q/w at most rate and within 1% of it, the sustained rate a client can
// keep up (never above, so that a client pacing itself at q/w is never
// denied). It tries w = the time burst takes to refill first, so that q is
// the burst when the numbers allow it, then longer windows until one is
// exact enough (one always is by w = 100/rate, where rounding q down costs
// at most 1%). Rates beyond what a structured field can hold are clamped.
func QuotaWindow(rate float64, burst int64) (q, w int64) {
	if !(rate > 0) || math.IsInf(rate, 0) {
		return 0, 1
	}
	w0 := max(1, math.Round(float64(burst)/rate))
	last := max(w0, math.Ceil(100/rate))
	for wf := w0; wf <= last && wf <= MaxSFInteger; wf++ {
		qf := quotaIn(rate, wf)
		if qf >= 1 && qf <= MaxSFInteger && rate-qf/wf < 0.01*rate*(1-1e-9) {
			return int64(qf), int64(wf)
		}
		if wf-w0 > 100_000 {
			break // a burst far from its rate: jump to the window that works
		}
	}
	wf := min(math.Ceil(100/rate), MaxSFInteger)
	qf := min(max(1, quotaIn(rate, wf)), MaxSFInteger)
	return int64(qf), int64(wf)
}

// quotaIn is the whole number of units rate grants in w seconds, rounded
// down; a product that floating point puts a hair below a whole number
// (3/s × 10 s = 29.999999999999996) counts as that number.
func quotaIn(rate, w float64) float64 {
	x := rate * w
	if r := math.Round(x); math.Abs(x-r) <= 1e-9*x {
		return r
	}
	return math.Floor(x)
}

// quote renders name as a structured-field string ("payments").
func quote(name string) string { return string(AppendQuoted(nil, name)) }

// AppendQuoted renders s as a structured-field string. A structured-field
// string holds only printable ASCII: other bytes become '?', so that a
// policy named in another script still gives a header every parser reads.
func AppendQuoted(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20 || c > 0x7e:
			b = append(b, '?')
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}
