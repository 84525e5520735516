package httplimit

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/decide"
)

// Header names, canonical so that http.Header.Get finds them; on the wire
// names are case-insensitive.
var (
	hLimit      = http.CanonicalHeaderKey("RateLimit-Limit")
	hRemaining  = http.CanonicalHeaderKey("RateLimit-Remaining")
	hReset      = http.CanonicalHeaderKey("RateLimit-Reset")
	hPolicy     = http.CanonicalHeaderKey("RateLimit-Policy")
	hRateLimit  = http.CanonicalHeaderKey("RateLimit")
	hXLimit     = http.CanonicalHeaderKey("X-RateLimit-Limit")
	hXRemaining = http.CanonicalHeaderKey("X-RateLimit-Remaining")
	hXReset     = http.CanonicalHeaderKey("X-RateLimit-Reset")
)

// ProblemType is the problem type of a 429 for clients that accept
// application/problem+json (IETF httpapi RateLimit headers draft).
const ProblemType = "https://iana.org/assignments/http-problem-types#quota-exceeded"

// DenyBody is a 429 body of your own, sent in place of sluice's JSON to
// every client that does not prefer application/problem+json.
type DenyBody struct {
	// ContentType is the body's media type, such as
	// "text/html; charset=utf-8".
	ContentType string

	// Body is sent as it is, except that every "{{retry_after}}" becomes
	// the number of seconds of the response's Retry-After.
	Body []byte
}

// retryAfterMark is the one substitution a DenyBody knows.
const retryAfterMark = "{{retry_after}}"

// The values of one response's headers, as substrings of one string.
const (
	vLimit = iota
	vRemaining
	vReset
	vPolicy
	vRateLimit
	vXReset
	numVals
)

// sendsHeaders reports whether responses carry any rate limit header.
func (l *Limiter) sendsHeaders() bool { return l.opts.Headers != HeadersNone || l.opts.XRateLimit }

// putHeaders sets the rate limit headers of a result into h: rule and
// remaining as sluice.Result reports them, reset as the seconds of
// RateLimit-Reset and t. It replaces any of those names that h held
// already (an upstream's own). It allocates one string for all the values
// that change per response and keeps the slices in vals, which must
// outlive h's use.
func (l *Limiter) putHeaders(h http.Header, rs *ruleSet, rule int, remaining, reset int64, vals *[numVals]string) {
	if !l.sendsHeaders() {
		return
	}
	legacy, draft := l.fieldValues(rs, rule, remaining, reset, vals)
	if l.opts.Headers != HeadersNone {
		setOrDel(h, hLimit, vals[vLimit:vLimit+1:vLimit+1], legacy)
		setOrDel(h, hRemaining, vals[vRemaining:vRemaining+1:vRemaining+1], legacy)
		setOrDel(h, hReset, vals[vReset:vReset+1:vReset+1], legacy)
		setOrDel(h, hPolicy, vals[vPolicy:vPolicy+1:vPolicy+1], draft)
		setOrDel(h, hRateLimit, vals[vRateLimit:vRateLimit+1:vRateLimit+1], draft)
	}
	if l.opts.XRateLimit {
		h[hXLimit] = vals[vLimit : vLimit+1 : vLimit+1]
		h[hXRemaining] = vals[vRemaining : vRemaining+1 : vRemaining+1]
		h[hXReset] = vals[vXReset : vXReset+1 : vXReset+1]
	}
}

// appendHeaders appends to dst the fields putHeaders sets into a header
// that holds none of them, in the order of its names, without a map.
func (l *Limiter) appendHeaders(dst []decide.Field, rs *ruleSet, rule int, remaining, reset int64) []decide.Field {
	if !l.sendsHeaders() {
		return dst
	}
	var vals [numVals]string
	legacy, draft := l.fieldValues(rs, rule, remaining, reset, &vals)
	if l.opts.Headers != HeadersNone && legacy {
		dst = append(dst, decide.Field{Name: hLimit, Value: vals[vLimit]}, decide.Field{Name: hRemaining, Value: vals[vRemaining]}, decide.Field{Name: hReset, Value: vals[vReset]})
	}
	if l.opts.Headers != HeadersNone && draft {
		dst = append(dst, decide.Field{Name: hPolicy, Value: vals[vPolicy]}, decide.Field{Name: hRateLimit, Value: vals[vRateLimit]})
	}
	if l.opts.XRateLimit {
		dst = append(dst, decide.Field{Name: hXLimit, Value: vals[vLimit]}, decide.Field{Name: hXRemaining, Value: vals[vRemaining]}, decide.Field{Name: hXReset, Value: vals[vXReset]})
	}
	return dst
}

// fieldValues renders the values of the rate limit headers of a result
// into vals, as one string, and says which of the IETF fields the options
// send: the legacy ones (RateLimit-Limit, -Remaining, -Reset) and draft
// 10's (RateLimit-Policy, RateLimit).
func (l *Limiter) fieldValues(rs *ruleSet, rule int, remaining, reset int64, vals *[numVals]string) (legacy, draft bool) {
	if rule < 0 || rule >= len(rs.Item) {
		rule = 0 // a Fallback's result that names no rule of ours
	}
	rem := min(max(0, remaining)/rs.Per, decide.MaxSFInteger)
	var scratch [128]byte
	b := strconv.AppendInt(scratch[:0], rem, 10)
	remEnd := len(b)
	b = strconv.AppendInt(b, reset, 10)
	resetEnd := len(b)
	draft = l.opts.Headers == HeadersBoth || l.opts.Headers == HeadersDraft
	if draft {
		b = append(b, rs.Item[rule]...)
		b = append(b, ";r="...)
		b = strconv.AppendInt(b, rem, 10)
		b = append(b, ";t="...)
		b = strconv.AppendInt(b, reset, 10)
	}
	rlEnd := len(b)
	if l.opts.XRateLimit {
		b = strconv.AppendInt(b, time.Now().Unix()+reset, 10)
	}
	s := string(b)
	vals[vLimit], vals[vRemaining], vals[vReset] = rs.Limit[rule], s[:remEnd], s[remEnd:resetEnd]
	vals[vPolicy], vals[vRateLimit], vals[vXReset] = rs.Policy, s[resetEnd:rlEnd], s[rlEnd:]
	legacy = l.opts.Headers == HeadersBoth || l.opts.Headers == HeadersLegacy
	return legacy, draft
}

// undeclareOwned returns the Trailer declaration tr without the names
// sluice sets in the header, so that an upstream cannot send them again as
// trailers (which draft 10 forbids, and which would contradict sluice's).
func (l *Limiter) undeclareOwned(tr []string) []string {
	var out []string
	for _, line := range tr {
		for name := range strings.SplitSeq(line, ",") {
			name = strings.TrimSpace(name)
			if name != "" && !l.owns(http.CanonicalHeaderKey(name)) {
				out = append(out, name)
			}
		}
	}
	if len(out) == 0 {
		return nil
	}
	return []string{strings.Join(out, ", ")}
}

// owns reports whether k (canonical) is a name sluice sets and replaces.
func (l *Limiter) owns(k string) bool {
	switch k {
	case hLimit, hRemaining, hReset, hPolicy, hRateLimit:
		return l.opts.Headers != HeadersNone
	case hXLimit, hXRemaining, hXReset:
		return l.opts.XRateLimit
	}
	return false
}

func setOrDel(h http.Header, k string, v []string, set bool) {
	if set {
		h[k] = v
	} else {
		delete(h, k)
	}
}

// retrySeconds is the Retry-After of a denial written elapsed after the
// decision: the time until the request would pass, plus the configured
// jitter, rounded up, at least 1. It is also the 429's t and
// RateLimit-Reset, so that a client reading any of them waits as long.
func (l *Limiter) retrySeconds(res sluice.Result, elapsed time.Duration) int64 {
	d := res.RetryAfter - elapsed
	if l.opts.RetryAfterJitter > 0 && d < math.MaxInt64-l.opts.RetryAfterJitter { // a saturated wait stays saturated
		d += time.Duration(rand.Int64N(int64(l.opts.RetryAfterJitter) + 1))
	}
	return max(1, ceilSeconds(d))
}

// moment is a reading of the monotonic clock, for the time between a
// decision and its response: it costs one clock read where time.Now costs
// two (wall and monotonic), and the allowed path takes two of them.
type moment time.Duration

var clockBase = time.Now()

func monoNow() moment { return moment(time.Since(clockBase)) }

func sinceMoment(m moment) time.Duration { return time.Duration(monoNow() - m) }

// ceilSeconds rounds d up to whole seconds.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	s := int64(d / time.Second)
	if d%time.Second != 0 {
		s++ // without d + time.Second - 1, which wraps near the largest Duration
	}
	return s
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

// deny answers 429 for a request of p that res denied at decided: the
// rate limit headers, Retry-After, and a body in the form the client
// prefers. Retry-After, RateLimit-Reset and t are one number.
func (l *Limiter) deny(w http.ResponseWriter, r *http.Request, p *policy, rs *ruleSet, res sluice.Result, decided moment) {
	secs := l.retrySeconds(res, sinceMoment(decided))
	h := w.Header()
	l.putHeaders(h, rs, res.Rule, res.Remaining, secs, new([numVals]string))
	h.Set("Retry-After", strconv.FormatInt(secs, 10))
	h.Set("Cache-Control", "no-store")
	h.Del("Content-Length")
	h.Set("X-Content-Type-Options", "nosniff")
	custom := l.opts.DenyBody
	ctype := "application/json"
	if custom != nil {
		ctype = custom.ContentType
	}
	if preferProblem(r.Header.Values("Accept"), ctype) {
		h.Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusTooManyRequests)
		rule := res.Rule
		if rule < 0 || rule >= len(rs.Name) {
			rule = 0
		}
		_ = json.NewEncoder(w).Encode(problemBody{
			Type:              ProblemType,
			Title:             "Request cannot be satisfied as assigned quota has been exceeded",
			Status:            http.StatusTooManyRequests,
			Detail:            denyMessage(p.Name, secs),
			ViolatedPolicies:  []string{rs.Name[rule]},
			RetryAfterSeconds: secs,
		})
		return
	}
	h.Set("Content-Type", ctype)
	w.WriteHeader(http.StatusTooManyRequests)
	if custom != nil {
		n := strconv.FormatInt(secs, 10)
		_, _ = w.Write([]byte(strings.ReplaceAll(string(custom.Body), retryAfterMark, n)))
		return
	}
	_ = json.NewEncoder(w).Encode(errorBody{Error: "rate_limit_exceeded", Message: denyMessage(p.Name, secs), RetryAfterSeconds: secs})
}

func denyMessage(policy string, secs int64) string {
	return fmt.Sprintf("rate limit of policy %q exceeded; retry in %d s", policy, secs)
}

// acceptsProblem reports whether an Accept header prefers
// application/problem+json to sluice's application/json.
func acceptsProblem(accept []string) bool { return preferProblem(accept, "application/json") }

// preferProblem reports whether Accept gives application/problem+json a
// higher quality than ctype, the body sluice sends otherwise. Each media
// type takes the quality of the most specific range that matches it (RFC
// 9110 §12.5.1); a type no range matches has quality 0; ties, and no
// Accept at all, keep ctype.
func preferProblem(accept []string, ctype string) bool {
	if len(accept) == 0 {
		return false
	}
	mt, _, _ := strings.Cut(ctype, ";")
	mt = strings.TrimSpace(mt)
	qp, qo := acceptQuality(accept, "application/problem+json"), acceptQuality(accept, mt)
	return qp > qo
}

// acceptQuality returns the quality that Accept gives media type mt
// (type/subtype): that of the most specific matching range, in thousandths.
func acceptQuality(accept []string, mt string) int {
	typ, _, _ := strings.Cut(mt, "/")
	best, bestSpec := 0, -1
	for _, v := range accept {
		for v != "" {
			var elem string
			elem, v = nextAcceptElem(v)
			rng, params, _ := strings.Cut(elem, ";")
			rng = strings.TrimSpace(rng)
			spec := -1
			switch {
			case strings.EqualFold(rng, mt):
				spec = 2
			case len(rng) == len(typ)+2 && strings.EqualFold(rng[:len(typ)], typ) && rng[len(typ):] == "/*":
				spec = 1
			case rng == "*/*":
				spec = 0
			}
			if spec < bestSpec || spec < 0 {
				continue
			}
			q := qualityOf(params)
			if spec > bestSpec || q > best {
				best, bestSpec = q, spec
			}
		}
	}
	return best
}

// nextAcceptElem splits off the first comma-separated element of an
// Accept value, keeping commas inside quoted parameter values.
func nextAcceptElem(v string) (elem, rest string) {
	quoted := false
	for i := 0; i < len(v); i++ {
		switch c := v[i]; {
		case c == '\\' && quoted:
			i++
		case c == '"':
			quoted = !quoted
		case c == ',' && !quoted:
			return v[:i], v[i+1:]
		}
	}
	return v, ""
}

// qualityOf reads the q parameter of an Accept element's parameters, in
// thousandths: 1000 when there is none or it is not a valid qvalue.
func qualityOf(params string) int {
	for params != "" {
		var p string
		p, params, _ = strings.Cut(params, ";")
		k, val, ok := strings.Cut(strings.TrimSpace(p), "=")
		if !ok || !strings.EqualFold(strings.TrimSpace(k), "q") {
			continue
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if err != nil || math.IsNaN(f) {
			return 1000
		}
		return int(math.Round(min(1, max(0, f)) * 1000))
	}
	return 1000
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

// maxJitter bounds Options.RetryAfterJitter: a herd spread over more than
// an hour is a herd told to go away.
const maxJitter = time.Hour

// checkResponseOptions says what is wrong with the options of responses.
func checkResponseOptions(opts Options) error {
	if opts.Headers < HeadersBoth || opts.Headers > HeadersNone {
		return fmt.Errorf("httplimit: Headers %d: want HeadersBoth, HeadersLegacy, HeadersDraft or HeadersNone", opts.Headers)
	}
	if opts.RetryAfterJitter < 0 || opts.RetryAfterJitter > maxJitter {
		return fmt.Errorf("httplimit: RetryAfterJitter %v: want 0 (off) up to %v", opts.RetryAfterJitter, maxJitter)
	}
	if b := opts.DenyBody; b != nil {
		if b.ContentType == "" {
			return fmt.Errorf("httplimit: DenyBody has no ContentType")
		}
		if strings.ContainsAny(b.ContentType, "\r\n") {
			return fmt.Errorf("httplimit: DenyBody.ContentType %q: want a media type on one line", b.ContentType)
		}
	}
	return nil
}
