package httplimit

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
)

// Header names, canonical so that http.Header.Get finds them; on the wire
// names are case-insensitive.
var (
	hLimit     = http.CanonicalHeaderKey("RateLimit-Limit")
	hRemaining = http.CanonicalHeaderKey("RateLimit-Remaining")
	hReset     = http.CanonicalHeaderKey("RateLimit-Reset")
	hPolicy    = http.CanonicalHeaderKey("RateLimit-Policy")
	hRateLimit = http.CanonicalHeaderKey("RateLimit")
)

// ProblemType is the problem type of a 429 for clients that accept
// application/problem+json (IETF httpapi RateLimit headers draft).
const ProblemType = "https://iana.org/assignments/http-problem-types#quota-exceeded"

// setHeaders writes the headers of res, for the rule it reports. It
// allocates one string for all dynamic values and one slice for all of
// them; the values that depend only on the rule are rendered at New.
func (l *Limiter) setHeaders(h http.Header, p *policy, rs *ruleSet, res sluice.Result) {
	if l.headers == HeadersNone {
		return
	}
	reset := ceilSeconds(res.ResetAfter)
	var scratch [96]byte
	b := strconv.AppendInt(scratch[:0], res.Remaining, 10)
	remEnd := len(b)
	b = strconv.AppendInt(b, reset, 10)
	resetEnd := len(b)
	if l.headers != HeadersLegacy {
		b = appendQuoted(b, p.Name)
		b = append(b, ";r="...)
		b = strconv.AppendInt(b, res.Remaining, 10)
		b = append(b, ";t="...)
		b = strconv.AppendInt(b, reset, 10)
	}
	s := string(b)
	vals := make([]string, 5)
	vals[0], vals[1], vals[2] = rs.limit[res.Rule], s[:remEnd], s[remEnd:resetEnd]
	vals[3], vals[4] = rs.policy[res.Rule], s[resetEnd:]
	if l.headers != HeadersDraft {
		h[hLimit], h[hRemaining], h[hReset] = vals[0:1:1], vals[1:2:2], vals[2:3:3]
	}
	if l.headers != HeadersLegacy {
		h[hPolicy], h[hRateLimit] = vals[3:4:4], vals[4:5:5]
	}
}

// ceilSeconds rounds d up to whole seconds.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// quote renders name as a structured-field string ("payments").
func quote(name string) string { return string(appendQuoted(nil, name)) }

func appendQuoted(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		if s[i] == '"' || s[i] == '\\' {
			b = append(b, '\\')
		}
		b = append(b, s[i])
	}
	return append(b, '"')
}

type errorBody struct {
	Error             string `json:"error"`
	Message           string `json:"message"`
	RetryAfterSeconds int64  `json:"retry_after_seconds"`
}

type problemBody struct {
	Type              string   `json:"type"`
	Title             string   `json:"title"`
	Status            int      `json:"status"`
	Detail            string   `json:"detail"`
	ViolatedPolicies  []string `json:"violated-policies"`
	RetryAfterSeconds int64    `json:"retry_after_seconds"`
}

// deny answers 429 for policy name.
func deny(w http.ResponseWriter, r *http.Request, name string, retryAfter time.Duration) {
	secs := max(1, ceilSeconds(retryAfter))
	h := w.Header()
	h.Set("Retry-After", strconv.FormatInt(secs, 10))
	h.Set("Cache-Control", "no-store")
	h.Del("Content-Length")
	msg := fmt.Sprintf("rate limit of policy %q exceeded; retry in %d s", name, secs)
	var body any = errorBody{Error: "rate_limit_exceeded", Message: msg, RetryAfterSeconds: secs}
	ctype := "application/json"
	if acceptsProblem(r.Header.Values("Accept")) {
		ctype = "application/problem+json"
		body = problemBody{
			Type:              ProblemType,
			Title:             "Request cannot be satisfied as assigned quota has been exceeded",
			Status:            http.StatusTooManyRequests,
			Detail:            msg,
			ViolatedPolicies:  []string{name},
			RetryAfterSeconds: secs,
		}
	}
	h.Set("Content-Type", ctype)
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusTooManyRequests)
	_ = json.NewEncoder(w).Encode(body)
}

// acceptsProblem reports whether an Accept header lists
// application/problem+json with a non-zero quality.
func acceptsProblem(accept []string) bool {
	for _, v := range accept {
		for part := range strings.SplitSeq(v, ",") {
			media, params, _ := strings.Cut(part, ";")
			if !strings.EqualFold(strings.TrimSpace(media), "application/problem+json") {
				continue
			}
			q := 1.0
			for p := range strings.SplitSeq(params, ";") {
				if k, val, ok := strings.Cut(strings.TrimSpace(p), "="); ok && strings.EqualFold(k, "q") {
					if f, err := strconv.ParseFloat(strings.TrimSpace(val), 64); err == nil {
						q = f
					}
				}
			}
			if q > 0 {
				return true
			}
		}
	}
	return false
}

// writeJSONError answers status with the JSON error body of the 429.
func writeJSONError(w http.ResponseWriter, status int, code, msg string, retryAfter int64) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	if retryAfter > 0 {
		h.Set("Retry-After", strconv.FormatInt(retryAfter, 10))
	}
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(errorBody{Error: code, Message: msg, RetryAfterSeconds: retryAfter})
}

// logLimiter lets one log line through every logEvery and counts the rest,
// so a dead store or a flood does not become a flood of logs.
type logLimiter struct {
	next    atomic.Int64
	dropped atomic.Int64
}

const logEvery = 5 * time.Second

func (l *logLimiter) allow() bool {
	now := time.Now().UnixNano()
	n := l.next.Load()
	if now < n || !l.next.CompareAndSwap(n, now+int64(logEvery)) {
		l.dropped.Add(1)
		return false
	}
	return true
}

func (l *logLimiter) suppressed() int64 { return l.dropped.Swap(0) }
