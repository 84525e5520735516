package gateway

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/sluicehq/sluice/decide"
	"github.com/sluicehq/sluice/httplimit"
)

// The decision API: POST /v1/check on the decision listener (and on the
// traffic listener only with decision_api.on_traffic_listener). It decides
// through the same httplimit.Limiter as the proxy, so a key here is the
// bucket of that identity's proxied requests: which is why it sits behind
// its own listener and, optionally, a bearer token.

// maxCheckBody bounds a /v1/check body; the three fields need far less.
const maxCheckBody = 64 << 10

// maxCheckKey bounds the key, in bytes.
const maxCheckKey = 1024

// DecisionAPI returns the handler of the decision listener: the decision API.
func (g *Gateway) DecisionAPI() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/check", func(w http.ResponseWriter, r *http.Request) {
		g.serveCheck(w, r, g.state.Load())
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "not_found", "the decision listener serves POST /v1/check and forward auth on /v1/authz")
	})
	// /v1/authz/PATH carries the original path as the client sent it,
	// which the ServeMux would clean and redirect: it is routed first.
	serve := func(w http.ResponseWriter, r *http.Request) {
		if isAuthz(r.URL.Path) {
			g.serveAuthz(w, r, g.state.Load(), false)
			return
		}
		mux.ServeHTTP(w, r)
	}
	if g.tracer != nil {
		return g.decisionFlight.guard(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			g.serveTraced(w, r, serve)
		}))
	}
	return g.decisionFlight.guard(http.HandlerFunc(serve))
}

type checkRequest struct {
	Policy     string
	Key        string
	Cost       *int64
	Attributes map[string]string // "attributes": what a policy's key: reads
}

// maxCheckAttributes bounds the attributes of one check; a key has at most
// 8 parts.
const maxCheckAttributes = 16

type checkResponse struct {
	Allowed      bool   `json:"allowed"`
	Policy       string `json:"policy"`
	Limit        int64  `json:"limit"`
	Remaining    int64  `json:"remaining"`
	RetryAfterMs int64  `json:"retry_after_ms"`
	ResetAfterMs int64  `json:"reset_after_ms"`
	DelayMs      int64  `json:"delay_ms,omitempty"`
	// StoreError: the store did not take part (it failed), and DecidedBy
	// says what decided instead.
	StoreError bool   `json:"store_error,omitempty"`
	DecidedBy  string `json:"decided_by"`
	// ShadowDenied: a shadow policy would have denied; allowed is true.
	ShadowDenied bool `json:"shadow_denied,omitempty"`
	// Rules, with cost 0, is the standing on every rule of the key's
	// rules, read without consuming (admin.go).
	Rules []ruleUsage `json:"rules,omitempty"`
}

// serveCheck is POST /v1/check: {"policy":"payments","key":"user-1024","cost":1}.
// The order of the checks matters: a caller without the token learns
// nothing, not even which methods or bodies would be accepted.
func (g *Gateway) serveCheck(w http.ResponseWriter, r *http.Request, st *state) {
	token := st.cfg.DecisionAPI.Token()
	authorized := false
	if token != nil {
		if !bearerMatches(r.Header.Get("Authorization"), token) {
			g.rejected("decision", "unauthorized")
			w.Header().Set("WWW-Authenticate", `Bearer realm="sluice"`)
			writeError(w, http.StatusUnauthorized, "unauthorized", "this API needs Authorization: Bearer TOKEN")
			return
		}
		authorized = true
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", "use POST with a JSON body such as {\"policy\":\"payments\",\"key\":\"user-1024\",\"cost\":1}")
		return
	}
	if !isJSON(r.Header.Get("Content-Type")) {
		w.Header().Set("Accept-Post", "application/json")
		writeError(w, http.StatusUnsupportedMediaType, "unsupported_media_type", "send Content-Type: application/json")
		return
	}
	body, status, err := readBody(w, r, maxCheckBody)
	if err != nil {
		g.rejected("decision", rejectReason(status))
		writeError(w, status, errorCode(status), err.Error())
		return
	}
	req, err := parseCheck(body)
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request", err.Error())
		return
	}
	switch {
	case req.Policy == "":
		writeError(w, http.StatusBadRequest, "invalid_request", "policy is missing; want the name of a configured policy")
		return
	case req.Key == "" && req.Attributes == nil:
		writeError(w, http.StatusBadRequest, "invalid_request", "key is missing; want the caller's identity, such as user-1024 (or, for a policy with key:, its attributes)")
		return
	case len(req.Key) > maxCheckKey:
		writeError(w, http.StatusBadRequest, "invalid_request", fmt.Sprintf("key is longer than %d bytes", maxCheckKey))
		return
	case req.Cost != nil && *req.Cost < 0:
		writeError(w, http.StatusBadRequest, "invalid_request", fmt.Sprintf("cost %d: want 0 or more (0 only inspects)", *req.Cost))
		return
	}
	cost := int64(1)
	if req.Cost != nil {
		cost = *req.Cost
	}
	attrs, err := checkAttributes(req)
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request", err.Error())
		return
	}
	v := st.limiter.Core().Decide(r.Context(), req.Policy, attrs, cost)
	switch v.Act {
	case decide.Invalid:
		if errors.Is(v.Err, decide.ErrUnknownPolicy) {
			msg := fmt.Sprintf("no policy is named %q", req.Policy)
			if authorized {
				// Only a caller that proved it holds the token is told the
				// configuration.
				msg += fmt.Sprintf("; configured: %v", st.limiter.Policies())
			}
			writeError(w, http.StatusBadRequest, "unknown_policy", msg)
			return
		}
		writeError(w, http.StatusBadRequest, "invalid_request", v.Err.Error())
		return
	case decide.FailClosed:
		writeError(w, http.StatusServiceUnavailable, "rate_limiter_unavailable", "the store cannot decide right now and the policy fails closed")
		return
	}
	res := v.Result
	var rules []ruleUsage
	if cost == 0 {
		rules = usageOf(r.Context(), st.limiter, req.Policy, req.Key)
	}
	writeJSON(w, http.StatusOK, checkResponse{
		Rules:        rules,
		Allowed:      res.Allowed,
		Policy:       req.Policy,
		Limit:        res.Limit,
		Remaining:    res.Remaining,
		RetryAfterMs: ceilMs(res.RetryAfter),
		ResetAfterMs: ceilMs(res.ResetAfter),
		DelayMs:      ceilMs(res.Delay),
		StoreError:   res.DecidedBy.Degraded(),
		DecidedBy:    res.DecidedBy.String(),
		ShadowDenied: v.Outcome == decide.ShadowDenied,
	})
}

// checkAttributes turns a check into the attributes of a decision: key is
// the caller's identity, and attributes holds what a policy's key: reads,
// named as in the configuration ("header:X-Tenant", "path:tenant",
// "claim:org") and "client_ip" for the client's address.
func checkAttributes(req checkRequest) (httplimit.Attributes, error) {
	a := httplimit.Attributes{Identity: req.Key}
	for name, v := range req.Attributes {
		if name == "client_ip" {
			ip, err := netip.ParseAddr(v)
			if err != nil {
				return a, fmt.Errorf("attributes.client_ip %q: want an IPv4 or IPv6 address such as 192.0.2.7", truncate(v))
			}
			a.ClientIP = ip
			continue
		}
		kind, field, ok := strings.Cut(name, ":")
		switch {
		case !ok || field == "" || (kind != "header" && kind != "path" && kind != "claim"):
			return a, fmt.Errorf("attributes: %q: want names such as header:X-Tenant, path:tenant, claim:org or client_ip", truncate(name))
		case kind == "header":
			name = "header:" + http.CanonicalHeaderKey(field)
		}
		if a.Values == nil {
			a.Values = make(map[string]string, len(req.Attributes))
		}
		if _, dup := a.Values[name]; dup {
			return a, fmt.Errorf("attributes: %q is given twice (header names ignore case); give it once", truncate(name))
		}
		a.Values[name] = v
	}
	if a.Identity == "" && !a.ClientIP.IsValid() && len(a.Values) == 0 {
		return a, errors.New("key is missing; want the caller's identity, such as user-1024 (or, for a policy with key:, its attributes)")
	}
	return a, nil
}

// bearerMatches reports whether an Authorization header carries token. The
// comparison is of SHA-256 digests in constant time, so neither the
// token's bytes nor its length leak through timing.
func bearerMatches(header string, token []byte) bool {
	scheme, got, ok := strings.Cut(strings.TrimSpace(header), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	a := sha256.Sum256([]byte(strings.TrimSpace(got)))
	b := sha256.Sum256(token)
	return subtle.ConstantTimeCompare(a[:], b[:]) == 1
}

// isJSON reports whether a Content-Type is application/json (in UTF-8, the
// only charset JSON has). Anything else, form and text types included, is
// refused: a browser cannot send application/json to another origin
// without a CORS preflight, which this API never answers.
func isJSON(ctype string) bool {
	mt, params, err := mime.ParseMediaType(ctype)
	if err != nil || mt != "application/json" {
		return false
	}
	cs, ok := params["charset"]
	return !ok || strings.EqualFold(cs, "utf-8")
}

// parseCheck reads the body of /v1/check strictly: one JSON object whose
// field names are exactly policy, key and cost, each at most once, with
// strings that are valid UTF-8. encoding/json would match names without
// case, let the last of two win, and turn invalid UTF-8 and lone
// surrogates into U+FFFD, so that different keys would share a bucket;
// here each is an error.
func parseCheck(body []byte) (checkRequest, error) {
	var req checkRequest
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return req, syntaxError(err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return req, errors.New(`the body is not a JSON object; want {"policy":"payments","key":"user-1024","cost":1}`)
	}
	var seen [4]bool
	for dec.More() {
		start := dec.InputOffset()
		if _, err := dec.Token(); err != nil {
			return req, syntaxError(err)
		}
		name, ok := rawString(body[start:dec.InputOffset()])
		if !ok {
			return req, errors.New("a field name is not valid UTF-8 (or holds a lone surrogate escape)")
		}
		field := -1
		switch name {
		case "policy":
			field = 0
		case "key":
			field = 1
		case "cost":
			field = 2
		case "attributes":
			field = 3
		default:
			return req, fmt.Errorf("unknown field %q; want policy, key, cost and attributes, spelt exactly so", truncate(name))
		}
		if seen[field] {
			return req, fmt.Errorf("field %q is given twice; give it once", name)
		}
		seen[field] = true
		if field == 3 {
			if req.Attributes, err = parseAttributes(dec, body); err != nil {
				return req, err
			}
			continue
		}
		start = dec.InputOffset()
		val, err := dec.Token()
		if err != nil {
			return req, syntaxError(err)
		}
		switch field {
		case 0, 1:
			if _, ok := val.(string); !ok {
				return req, fmt.Errorf("%s: want a string", name)
			}
			s, ok := rawString(body[start:dec.InputOffset()])
			if !ok {
				return req, fmt.Errorf("%s is not valid UTF-8 (or holds a lone surrogate escape such as \\ud800); send the identity as UTF-8 text", name)
			}
			if field == 0 {
				req.Policy = s
			} else {
				req.Key = s
			}
		case 2:
			if val == nil {
				continue // null: the policy's cost
			}
			num, ok := val.(json.Number)
			if !ok {
				return req, errors.New("cost: want an integer of 0 or more")
			}
			n, err := strconv.ParseInt(num.String(), 10, 64)
			if err != nil {
				return req, fmt.Errorf("cost %s: want an integer of 0 or more", truncate(num.String()))
			}
			req.Cost = &n
		}
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return req, syntaxError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return req, errors.New("the body holds more than one JSON value")
	}
	return req, nil
}

// parseAttributes reads the object of "attributes" as strictly as the
// rest of the body: string values, valid UTF-8, each name once.
func parseAttributes(dec *json.Decoder, body []byte) (map[string]string, error) {
	const want = `attributes: want an object of strings such as {"header:X-Tenant":"acme","client_ip":"192.0.2.7"}`
	tok, err := dec.Token()
	if err != nil {
		return nil, syntaxError(err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, errors.New(want)
	}
	attrs := make(map[string]string)
	for dec.More() {
		start := dec.InputOffset()
		if _, err := dec.Token(); err != nil {
			return nil, syntaxError(err)
		}
		name, ok := rawString(body[start:dec.InputOffset()])
		if !ok {
			return nil, errors.New("attributes: a name is not valid UTF-8 (or holds a lone surrogate escape)")
		}
		if _, dup := attrs[name]; dup {
			return nil, fmt.Errorf("attributes: %q is given twice; give it once", truncate(name))
		}
		if len(attrs) == maxCheckAttributes {
			return nil, fmt.Errorf("attributes: more than %d", maxCheckAttributes)
		}
		start = dec.InputOffset()
		val, err := dec.Token()
		if err != nil {
			return nil, syntaxError(err)
		}
		if _, ok := val.(string); !ok {
			return nil, fmt.Errorf("attributes: %q: want a string", truncate(name))
		}
		v, ok := rawString(body[start:dec.InputOffset()])
		if !ok {
			return nil, fmt.Errorf("attributes: %q is not valid UTF-8 (or holds a lone surrogate escape)", truncate(name))
		}
		attrs[name] = v
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return nil, syntaxError(err)
	}
	return attrs, nil
}

func syntaxError(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return errors.New("the body ends before its JSON object does")
	}
	return fmt.Errorf("the body is not valid JSON: %v", err)
}

func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// rawString decodes the JSON string literal at the end of seg (which may
// begin with the white space, comma or colon before it) as JSON's
// grammar has it, refusing what encoding/json would silently replace by
// U+FFFD: bytes that are not UTF-8, and \u escapes of a surrogate that is
// not half of a pair. The decoder has already checked the literal's syntax.
func rawString(seg []byte) (string, bool) {
	s := bytes.TrimLeft(seg, " \t\r\n,:")
	if len(s) < 2 || s[0] != '"' || s[len(s)-1] != '"' {
		return "", false
	}
	s = s[1 : len(s)-1]
	if !utf8.Valid(s) {
		return "", false
	}
	if bytes.IndexByte(s, '\\') < 0 {
		return string(s), true
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); {
		c := s[i]
		if c != '\\' {
			b.WriteByte(c)
			i++
			continue
		}
		if i+1 >= len(s) {
			return "", false
		}
		switch s[i+1] {
		case '"', '\\', '/':
			b.WriteByte(s[i+1])
		case 'b':
			b.WriteByte('\b')
		case 'f':
			b.WriteByte('\f')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 't':
			b.WriteByte('\t')
		case 'u':
			r, ok := hex4(s[i+2:])
			if !ok {
				return "", false
			}
			i += 6
			if utf16.IsSurrogate(r) {
				if r >= 0xDC00 { // a low surrogate with no high one before it
					return "", false
				}
				if i+1 >= len(s) || s[i] != '\\' || s[i+1] != 'u' {
					return "", false
				}
				lo, ok := hex4(s[i+2:])
				if !ok || lo < 0xDC00 || lo > 0xDFFF {
					return "", false
				}
				r = utf16.DecodeRune(r, lo)
				i += 6
			}
			b.WriteRune(r)
			continue
		default:
			return "", false
		}
		i += 2
	}
	return b.String(), true
}

func hex4(s []byte) (rune, bool) {
	if len(s) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range s[:4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}
