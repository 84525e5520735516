package httplimit

import (
	"net/http"
	"strconv"
	"time"

	"github.com/sluicehq/sluice"
)

// For front doors that decide by name (Check) and hand the response
// fields to someone else to send, such as Envoy's response_headers_to_add.

// Fields returns the header fields that a response of the named policy
// carries for res, a decision of Check (or Decide) for key made elapsed ago, exactly as
// the middleware would set them: the rate limit headers of Options.Headers
// and XRateLimit and, when res denies, Retry-After (with the jitter of
// Options.RetryAfterJitter). A shadow policy, and a name the Limiter does
// not have, carry none: nil.
func (l *Limiter) Fields(policyName, key string, res sluice.Result, elapsed time.Duration) http.Header {
	p, ok := l.byName[policyName]
	if !ok || p.Shadow {
		return nil
	}
	rs := p.rulesFor(Caller{ID: key}, true)
	h := make(http.Header, 6)
	if !res.Allowed {
		secs := l.retrySeconds(res, elapsed)
		l.putHeaders(h, rs, res.Rule, res.Remaining, secs, new([numVals]string))
		h["Retry-After"] = []string{strconv.FormatInt(secs, 10)}
		return h
	}
	l.putHeaders(h, rs, res.Rule, res.Remaining, ceilSeconds(res.ResetAfter-elapsed), new([numVals]string))
	return h
}
