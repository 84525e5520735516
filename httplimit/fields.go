package httplimit

import (
	"net/http"
	"strconv"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/decide"
)

// For front doors that decide by name (Check) and hand the response
// fields to someone else to send, such as Envoy's response_headers_to_add.

// Fields returns the header fields that a response of the named policy
// carries for res, a decision of Check (or Decide) for key made elapsed
// ago: FieldsOf with the rules of the caller key.
//
// Deprecated: it picks the caller's rules a second time, after the
// decision; if overrides changed in between, the fields describe other
// rules than the ones decided. Use Verdict and FieldsOf.
func (l *Limiter) Fields(policyName, key string, res sluice.Result, elapsed time.Duration) http.Header {
	p := l.core.Lookup(policyName)
	if p == nil || p.Shadow {
		return nil
	}
	return l.FieldsOf(p.RulesFor(Caller{ID: key}, true), res, elapsed)
}

// FieldsOf returns the header fields of a response decided under rules
// (a Verdict's Rules) with result res elapsed ago, exactly as the
// middleware would set them for an enforced policy: the rate limit
// headers of Options.Headers and XRateLimit and, when res denies,
// Retry-After (with the jitter of Options.RetryAfterJitter), but for a
// refusal that no wait would lift (a cost beyond the burst). Nil rules
// (nothing was decided) carry none. A shadow policy's responses carry no
// fields: a front door leaves them out itself.
func (l *Limiter) FieldsOf(rules *decide.Rules, res sluice.Result, elapsed time.Duration) http.Header {
	if rules == nil {
		return nil
	}
	h := make(http.Header, 6)
	if !res.Allowed && neverPasses(res) {
		l.putHeaders(h, rules, res.Rule, res.Remaining, ceilSeconds(res.ResetAfter-elapsed), new([numVals]string))
		return h
	}
	if !res.Allowed {
		secs := l.retrySeconds(res, elapsed)
		l.putHeaders(h, rules, res.Rule, res.Remaining, secs, new([numVals]string))
		h["Retry-After"] = []string{strconv.FormatInt(secs, 10)}
		return h
	}
	l.putHeaders(h, rules, res.Rule, res.Remaining, ceilSeconds(res.ResetAfter-elapsed), new([numVals]string))
	return h
}

// AppendFields appends to dst the fields FieldsOf returns, each as its
// canonical name and its value, in the order RateLimit-Limit,
// RateLimit-Remaining, RateLimit-Reset, RateLimit-Policy, RateLimit,
// X-RateLimit-Limit, X-RateLimit-Remaining, X-RateLimit-Reset,
// Retry-After: FieldsOf without a map, for a front door that copies the
// fields into a list of its own (Envoy's response_headers_to_add).
func (l *Limiter) AppendFields(dst []decide.Field, rules *decide.Rules, res sluice.Result, elapsed time.Duration) []decide.Field {
	if rules == nil {
		return dst
	}
	if !res.Allowed && !neverPasses(res) {
		secs := l.retrySeconds(res, elapsed)
		dst = l.appendHeaders(dst, rules, res.Rule, res.Remaining, secs)
		return append(dst, decide.Field{Name: "Retry-After", Value: strconv.FormatInt(secs, 10)})
	}
	return l.appendHeaders(dst, rules, res.Rule, res.Remaining, ceilSeconds(res.ResetAfter-elapsed))
}

// neverPasses reports whether res refuses a request that no wait lets
// through (an Invalid verdict: its cost is beyond the burst), which a
// bucket's denial never does (it says when to retry): no Retry-After
// tells the client to come back.
func neverPasses(res sluice.Result) bool { return !res.Allowed && res.RetryAfter <= 0 }
