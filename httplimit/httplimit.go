// Package httplimit is sluice's net/http middleware: it picks the policy of
// a request, keys the caller, checks the store, sets the RateLimit headers
// and answers 429, or holds the request until its tokens are there.
//
// A Policy selects requests by a net/http ServeMux pattern ("POST
// /payments/", "GET /products/{id}"); when several match, the most specific
// wins, exactly as the ServeMux would route it, and a request that no
// pattern matches passes unlimited. The request is matched in a normal
// form (see Paths), and that form is what the next handler receives: what
// is matched is what is served. The caller is anonymous, keyed by its
// client IP (see ClientIP for how proxies are trusted), or authenticated,
// keyed by an identity that an Authenticator verified or that the
// application put in the request context with WithIdentity. A credential
// that does not verify is ignored, so it never buys more than the anonymous
// limit. Policy.Key keys by request attributes instead (a header, a path
// wildcard, a verified claim, the client address) or by one bucket for
// all. Keys are the SHA-256 of policy, class and identity (or attributes),
// so no two policies share a bucket and no caller-chosen string reaches
// the store.
//
// Every response of an enforced policy carries the rate limit headers
// (RateLimit-Limit/Remaining/Reset and the draft's RateLimit-Policy and
// RateLimit, or a subset); a denied request gets 429 with Retry-After,
// Cache-Control: no-store and a JSON body, or the quota-exceeded problem
// type when the client prefers application/problem+json. A shadow policy
// decides and counts but never rejects and sets no headers. Each rule of a
// policy is one quota policy item of the draft ("name", "name-1", …), its
// q/w the rule's sustained rate; the headers are set when the response
// header is written, so t counts from then and an upstream's own
// RateLimit fields are replaced rather than joined (see headers.go).
//
// With Policy.MaxDelay the request is paced rather than rejected:
// the store reserves its tokens and the middleware waits before calling the
// next handler; a client that goes away while waiting gets its tokens back.
// With Policy.CostHeader the next handler may report the real cost of the
// request in a response header, which is removed and charged after the fact.
//
// When the store fails, the policy's OnError applies: FailLocal (the zero
// value, as local is the YAML default) lets Options.Fallback decide (a
// local bucket, say) and serves the request when there is none, FailOpen
// serves the request (and counts and logs it), FailClosed answers 503.
//
// # One decision core
//
// The decision is package decide's Core (the policies compiled, plans,
// runtime overrides, keys, the allowlist, the store call with its timeout,
// Fallback and OnError, shadow, outcomes and metrics); this package is its
// HTTP front door, and the gateway's reverse proxy and forward-auth
// endpoint /v1/authz run it too. For each request Handler matches the
// policy, normalises the path, identifies the caller (WithCaller, the
// Authenticators, the client address), reads the attributes a policy's
// Key names, calls decide.Core.DecideFor once, and turns the
// decide.Verdict into a response: the next handler with the rate limit
// headers, a 429, a 503, or a held request. Front doors that decide by
// policy name (POST /v1/check, Envoy's gRPC service) call
// decide.Core.Decide (Limiter.Core) and switch on the same Verdict. A
// front door that decides anything on its own (keys a caller, picks
// rules, applies on_error or shadow) is a bug.
//
// The path of an allowed request through the middleware allocates little:
// see BenchmarkMiddleware.
package httplimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/decide"
)

// HeaderMode selects which rate limit headers a response carries.
type HeaderMode int

const (
	HeadersBoth   HeaderMode = iota // legacy and draft (the default)
	HeadersLegacy                   // RateLimit-Limit, -Remaining, -Reset
	HeadersDraft                    // RateLimit-Policy and RateLimit (draft 10)
	HeadersNone                     // none, but Retry-After on 429
)

// OnError says what a policy does with a request when its store fails:
// decide.OnError (sluice.OnError), the module's one on_error type. Its
// zero value is FailLocal, as the YAML configuration's default is local.
type OnError = decide.OnError

const (
	// FailLocal lets Options.Fallback decide (a local bucket), and serves
	// the request when there is none or it declines: the zero value.
	FailLocal = decide.Local
	// FailOpen serves the request unlimited (and counts and logs it).
	FailOpen = decide.Open
	// FailClosed answers 503.
	FailClosed = decide.Closed
)

// Policy limits the requests that Pattern selects: decide.Policy, which
// the decision core compiles. Pattern is a net/http ServeMux pattern:
// [METHOD ][HOST]/PATH; empty, the policy matches no request and is
// reached by name only (Decide, Check), as Envoy's descriptors are.
type Policy = decide.Policy

// Override gives one authenticated identity its own rules.
type Override = decide.IdentityRules

// Fallback decides a request whose store check failed with err, for
// example against a local bucket or after a circuit breaker opened. It
// returns the result to act on, or ok false to let the policy's OnError
// apply. It is called only for policies whose OnError is FailLocal (the
// zero value) or with Local set.
type Fallback = decide.Fallback

// Options configures a Limiter. Store is required; the rest has defaults.
type Options struct {
	Store    sluice.Store
	Policies []Policy

	// TrustedProxies are the peers whose X-Forwarded-For or Forwarded
	// header is believed. Empty: the connection's address is the client.
	TrustedProxies []netip.Prefix

	// ForwardedFrom says which header the trusted proxies write (and
	// append to): required with TrustedProxies, so that a client cannot
	// slip in the other.
	ForwardedFrom ForwardedFrom

	// Paths says how request paths are normalised before matching; the
	// request passed on to the next handler is the normalised one.
	Paths Paths

	// IPv6Prefix is how many leading bits of an IPv6 address key a client;
	// zero means 64.
	IPv6Prefix int

	Headers HeaderMode

	// XRateLimit also sends X-RateLimit-Limit, -Remaining and -Reset, for
	// clients that know only those: the same limit and remaining as
	// RateLimit-Limit and -Remaining, and the reset as a Unix time in
	// seconds, as GitHub and express-rate-limit send it.
	XRateLimit bool

	// RetryAfterJitter, when positive, adds a random delay of up to this
	// much to every 429's Retry-After (and its t and RateLimit-Reset), so
	// that clients denied together do not all come back together.
	RetryAfterJitter time.Duration

	// DenyBody, when set, is the body of a 429 for clients that do not
	// prefer application/problem+json, in place of sluice's JSON.
	DenyBody *DenyBody

	// Authenticators are tried in order after the request context (see
	// WithIdentity); the first that verifies a credential names the caller.
	Authenticators []Authenticator

	Fallback Fallback

	// StoreOnError passes each policy's OnError to the store: every store
	// call of the policy carries it in sluice.Request.OnError (FailLocal
	// when the policy sets Local), so that a store that decides failures
	// itself (package resilient) decides them by the policy's on_error
	// and not by its own default. Unset, the requests name no failure
	// policy and such a store decides by its own. The gateway sets it.
	StoreOnError bool

	// StoreContext, when set, derives the context of every store call of a
	// request under policy, for a store that reads per-policy settings from
	// the context. The choices of this module's stores travel in the
	// sluice.Request instead (Algorithm, CountDenied and Lease always,
	// OnError with StoreOnError); the gateway uses it only to pick the
	// per-second Redis of `sluice ratelimit` (REDIS_PERSECOND).
	StoreContext func(ctx context.Context, policy *Policy) context.Context

	// StoreWaits says the store's calls wait on another process (Redis):
	// their time is added to a decision context's decide.StoreTime, which
	// a front door leaves out of a call's own time. The gateway sets it
	// for Redis; a memory store's calls are the caller's own CPU.
	StoreWaits bool

	// StoreTimeout, when positive, is the deadline of every store call, so
	// that a store that hangs costs a request at most this long before
	// OnError (or the Fallback) decides. Zero leaves deadlines to the store.
	StoreTimeout time.Duration

	// Metrics, when non-nil, counts decisions and times the store.
	Metrics *Metrics

	// Logger receives store errors and shadow denials, at most a few a
	// second; nil means slog.Default().
	Logger *slog.Logger

	// Allowlist names callers that no policy limits (health checkers).
	Allowlist Allowlist

	// Overrides, when set, are identities' rules that change at runtime;
	// they win over Policy.Overrides (see decide.Overrides).
	Overrides *Overrides

	// Tracer, when set, records a span for each decision of a request
	// (sluice.decision) and one for each store call under it
	// (sluice.store); see package decide. Nil records nothing and costs
	// nothing.
	Tracer trace.Tracer
}

// ErrUnknownPolicy is returned by Limiter.Check for a policy name that the
// Limiter does not have (decide.ErrUnknownPolicy).
var ErrUnknownPolicy = decide.ErrUnknownPolicy

// Limiter is the HTTP front door of a decision core (decide.Core): it
// matches, normalises and identifies requests, and answers them. It is
// safe for concurrent use.
type Limiter struct {
	opts Options // as given, the one home of every option
	core *decide.Core
	mux  *http.ServeMux
	wait func(context.Context, time.Duration) bool // tests replace it

	// methods holds the methods that some pattern names (GET implies
	// HEAD), unless a pattern names none: a request of another method
	// passes without asking the ServeMux.
	methods   map[string]bool
	anyMethod bool
}

// policy is a compiled policy as the ServeMux holds it.
type policy struct{ *decide.Compiled }

// ruleSet is the rules one class of caller is checked against, with the
// header values that depend only on the rules, rendered once.
type ruleSet = decide.Rules

// New compiles opts into a Limiter, or says what is wrong with them.
func New(opts Options) (*Limiter, error) {
	if opts.Store == nil {
		return nil, errors.New("httplimit: Options.Store is nil")
	}
	if err := checkForwarded(opts); err != nil {
		return nil, err
	}
	if err := checkResponseOptions(opts); err != nil {
		return nil, err
	}
	core, err := decide.New(decide.Config{
		Store:        opts.Store,
		Policies:     opts.Policies,
		IPv6Prefix:   opts.IPv6Prefix,
		Fallback:     opts.Fallback,
		StoreOnError: opts.StoreOnError,
		StoreContext: opts.StoreContext,
		StoreWaits:   opts.StoreWaits,
		StoreTimeout: opts.StoreTimeout,
		Metrics:      opts.Metrics,
		Logger:       opts.Logger,
		Allowlist:    opts.Allowlist,
		Overrides:    opts.Overrides,
		Tracer:       opts.Tracer,
	})
	if err != nil {
		return nil, err
	}
	l := &Limiter{opts: opts, core: core, mux: http.NewServeMux(), wait: wait}
	for _, c := range core.Compiled() {
		p := &policy{c}
		if p.Pattern == "" { // without one, the policy is reached by name only
			continue
		}
		if why := decide.AbnormalPattern(p.Pattern); why != "" {
			return nil, fmt.Errorf("httplimit: policy %q: pattern %q holds %s, which no request does once normalised (see Paths); write the path as it is served", p.Name, p.Pattern, why)
		}
		if err := register(l.mux, matchPattern(p.Pattern, l.opts.Paths.CaseInsensitive), p); err != nil {
			return nil, err
		}
		l.noteMethod(p.Pattern)
	}
	return l, nil
}

// Core returns the decision core the limiter decides with, for front doors
// of other protocols that share its policies and store.
func (l *Limiter) Core() *decide.Core { return l.core }

func (l *Limiter) noteMethod(pattern string) {
	if l.methods == nil {
		l.methods = make(map[string]bool)
	}
	i := strings.IndexAny(pattern, " \t")
	if i < 0 || strings.Contains(pattern[:i], "/") {
		l.anyMethod = true // "/path" or "host/path": every method
		return
	}
	method := pattern[:i]
	l.methods[method] = true
	if method == http.MethodGet {
		l.methods[http.MethodHead] = true
	}
}

func register(mux *http.ServeMux, pattern string, p *policy) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("httplimit: policy %q: %v", p.Name, r)
		}
	}()
	mux.Handle(pattern, p)
	return nil
}

// ServeHTTP makes a policy a handler so that the ServeMux can pick it;
// it is never called to serve.
func (p *policy) ServeHTTP(http.ResponseWriter, *http.Request) {}

// Handler returns next wrapped by the limiter. next receives the request
// in normal form (see Paths); a request that has none is refused with 400,
// or 501 for a method spelt in lowercase, and never reaches next.
//
// When next is a PolicyHandlers, a request that a policy matched goes to
// next.ForPolicy(name) instead, so that next can tell requests apart by
// policy without looking again.
func (l *Limiter) Handler(next http.Handler) http.Handler {
	byPolicy, _ := next.(PolicyHandlers)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		nr, err := normalizeRequest(r, l.opts.Paths)
		if err != nil {
			refuse(w, err)
			return
		}
		l.serve(w, nr, next, byPolicy)
	})
}

// PolicyHandlers is a next handler that serves each policy's requests with
// a handler of its own (the gateway counts proxied requests by policy).
// ForPolicy is called for every request a policy matched, so it should
// look up, not build.
type PolicyHandlers interface {
	http.Handler
	ForPolicy(name string) http.Handler
}

// Middleware is New for routers that take a func(http.Handler) http.Handler.
func Middleware(opts Options) (func(http.Handler) http.Handler, error) {
	l, err := New(opts)
	if err != nil {
		return nil, err
	}
	return l.Handler, nil
}

// Policy returns the policy that r falls under, or false when r passes
// unlimited or has no normal form (Handler refuses it).
func (l *Limiter) Policy(r *http.Request) (name string, ok bool) {
	nr, err := normalizeRequest(r, l.opts.Paths)
	if err != nil {
		return "", false
	}
	if p, _ := l.match(nr); p != nil {
		return p.Name, true
	}
	return "", false
}

// serve is the HTTP front door (the middleware, the gateway's proxy and
// its forward auth): it matches r, names its caller, and acts on what the
// decision core decided.
func (l *Limiter) serve(w http.ResponseWriter, r *http.Request, next http.Handler, byPolicy PolicyHandlers) {
	p, path := l.match(r)
	rec := recordFrom(r.Context())
	rec.matched(r, p)
	if p == nil {
		next.ServeHTTP(w, r)
		return
	}
	if byPolicy != nil {
		next = byPolicy.ForPolicy(p.Name)
	}
	// A trusted proxy's forwarding header that names no client is refused
	// like a missing one at forward auth: keyed by the proxy's own
	// address, it would drain the bucket of every client behind it.
	s := decide.Subject{Verified: true, Cost: p.Cost, Holds: true}
	if len(l.opts.TrustedProxies) > 0 {
		var err error
		if s.ClientIP, err = forwardedClient(r, l.opts.TrustedProxies, l.opts.ForwardedFrom); err != nil {
			writeJSONError(w, http.StatusBadRequest, "invalid_request", err.Error(), 0)
			return
		}
	} else {
		s.ClientIP = parseHost(r.RemoteAddr)
	}
	s.Caller, s.Authenticated = l.identify(r)
	if parts := p.KeyParts(); parts != nil {
		readValues(&s, parts, r, path)
	}
	v := l.core.DecideFor(r.Context(), p.Compiled, &s)
	at := monoNow()
	rec.record(&v, s.ID)
	switch v.Act {
	case decide.Pass:
		if v.Outcome == decide.FailedOpen && !p.Shadow && l.sendsHeaders() {
			lw := &limitWriter{ResponseWriter: w, l: l, p: p, r: r, open: true}
			next.ServeHTTP(lw, r)
			lw.finish()
			return
		}
		next.ServeHTTP(w, r)
	case decide.Deny:
		l.deny(w, r, p, v.Rules, v.Result, at)
	case decide.FailClosed:
		writeJSONError(w, http.StatusServiceUnavailable, "rate_limiter_unavailable", "the rate limiter cannot decide right now; retry shortly", 1)
	case decide.Invalid:
		writeJSONError(w, http.StatusInternalServerError, "rate_limiter_error", "the rate limiter cannot decide this request", 0)
	case decide.Serve:
		if v.Result.Delay > 0 && !l.hold(r.Context(), p, rec, &v) {
			return
		}
		l.serveAllowed(w, r, next, p, v.Rules, v.Request.Key, v.Result, at)
	}
}

// hold waits the delay of an allowed verdict, counts it, and reports
// whether to serve: a caller that goes away while held gets its tokens
// back.
func (l *Limiter) hold(ctx context.Context, p *policy, rec *AccessRecord, v *decide.Verdict) bool {
	if !l.wait(ctx, v.Result.Delay) {
		_, _ = l.core.AdjustRequest(context.WithoutCancel(ctx), p.Compiled, v.Request, -v.Request.Cost)
		v.Outcome = decide.Cancelled
		p.Count(v.Outcome)
		rec.decided(v.Outcome, &v.Result)
		return false
	}
	p.Count(v.Outcome)
	rec.decided(v.Outcome, &v.Result)
	return true
}

// Attributes describe the caller of a decision that names its policy
// (Decide), as a front door without an HTTP request knows it.
type Attributes = decide.Attributes

// Verdict is what the decision core decided for Decide.
type Verdict struct {
	sluice.Result

	// Outcome is the decision as sluice_decisions_total counts it
	// (allowed, denied, delayed, shadow_denied, local_allowed,
	// failed_open, …). A shadow denial and a failed-open decision are
	// allowed.
	Outcome string
}

// Decide decides cost tokens under the named policy for the caller that a
// describes: decide.Core.Decide with its answer as a Result and an error.
// The error is ErrUnknownPolicy, an input error (sluice.ErrInvalid,
// sluice.ErrCostExceedsBurst), or, for a policy that fails closed, the
// store's; a policy that fails open answers allowed, with
// Result.DecidedBy sluice.ByOpen.
func (l *Limiter) Decide(ctx context.Context, policyName string, a Attributes, cost int64) (Verdict, error) {
	v := l.core.Decide(ctx, policyName, a, cost)
	out := Verdict{Result: v.Result, Outcome: v.Outcome.String()}
	if v.Act == decide.Invalid || v.Act == decide.FailClosed {
		return out, v.Err
	}
	return out, nil
}

// Verdict is Decide for front doors that switch on what to do: the
// decision core's whole answer (decide.Core.Decide), with its typed
// outcome and the rules it was decided with (for FieldsOf).
func (l *Limiter) Verdict(ctx context.Context, policyName string, a Attributes, cost int64) decide.Verdict {
	return l.core.Decide(ctx, policyName, a, cost)
}

// Check decides cost tokens for key under the named policy: Decide for a
// caller whose verified identity is key (overrides apply), sharing its
// buckets with that identity's requests through the middleware.
func (l *Limiter) Check(ctx context.Context, policyName, key string, cost int64) (sluice.Result, error) {
	if key == "" {
		if l.core.Lookup(policyName) == nil {
			return sluice.Result{}, fmt.Errorf("%w %q", ErrUnknownPolicy, policyName)
		}
		return sluice.Result{}, fmt.Errorf("%w: empty key", sluice.ErrInvalid)
	}
	v, err := l.Decide(ctx, policyName, Attributes{Identity: key}, cost)
	return v.Result, err
}

// match returns the policy of r, a request in normal form, or nil, and the
// escaped path its pattern matched (for the wildcards a Key reads). When
// matching ignores case, the path is matched in lowercase, as the patterns
// were registered. A path with a trailing slash that only a subtree
// pattern's descendants match (such as "/" for /products/1/) is matched
// without the slash when that names an exact pattern (/products/{id}):
// routers such as Express serve both spellings from one route; a router that
// serves them apart is merely limited the stricter way.
func (l *Limiter) match(r *http.Request) (*policy, string) {
	if !l.anyMethod && !l.methods[r.Method] {
		return nil, ""
	}
	path := r.URL.EscapedPath() // the spelling that is passed on
	mr := r
	if l.opts.Paths.CaseInsensitive && hasUpper(path) {
		path = asciiLower(path)
		mr = withPath(r, path)
	}
	p, pattern := l.lookup(mr, path)
	if (p == nil || descendant(pattern, path)) && len(path) > 1 && path[len(path)-1] == '/' {
		bare := path[:len(path)-1]
		if q, qp := l.lookup(withPath(r, bare), bare); q != nil && !subtree(qp) {
			return q, bare
		}
	}
	return p, path
}

// lookup asks the ServeMux for the policy of r, whose path is path. The one
// redirect a normal path can still get, of a subtree root without its
// slash (/payments when only /payments/ is a pattern), is followed, so that
// /payments is limited as /payments/.
func (l *Limiter) lookup(r *http.Request, path string) (*policy, string) {
	h, pattern := l.mux.Handler(r)
	if p, ok := h.(*policy); ok {
		return p, pattern
	}
	if pattern == "" || path == "/" {
		return nil, "" // no pattern matches (or only with another method)
	}
	h, pattern = l.mux.Handler(withPath(r, path+"/"))
	if p, ok := h.(*policy); ok {
		return p, pattern
	}
	return nil, ""
}

// withPath is a shallow copy of r with the escaped path p.
func withPath(r *http.Request, p string) *http.Request {
	u := *r.URL
	u.Path, u.RawPath = unescapePath(p), p
	r2 := *r
	r2.URL = &u
	return &r2
}

// wait sleeps d, and reports false if ctx ended first.
func wait(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// FailsClosed reports whether the named policy answers 503 when its store
// fails (on_error: closed).
func (l *Limiter) FailsClosed(policyName string) bool { return l.core.FailsClosed(policyName) }

// Policies returns the names of the limiter's policies.
func (l *Limiter) Policies() []string { return l.core.Policies() }
