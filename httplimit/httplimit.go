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
// This package is sluice's decision core, built on package decide (the
// protocol-free part: on_error, key classes, rule sets and their field
// values, the on_error and shadow step, outcomes, metrics and the
// Verdict), and every front door goes through it: the middleware
// (Handler), the gateway's reverse proxy and its forward-auth endpoint
// /v1/authz (both run Handler), the decision API POST /v1/check and
// Envoy's gRPC rate limit service (both call Verdict, by policy name, and
// switch on its decide.Act). Each front door only translates: it fills in a
// subject (the request, or the attributes it was given) and calls
// Limiter.decide in httplimit.go, which goes policy → caller → key → rules
// → store → result: the allowlist (for callers it verified itself, not
// the stated identity of a by-name decision), the key (Policy.Key, or the
// identity rules), the rules of the caller's class, the store call with its timeout,
// Fallback and OnError, shadow (decide.Resolve), and the count of every
// outcome; then the front door turns the verdict into its protocol's
// answer. A front door
// that decides anything on its own (keys a caller, picks rules, applies
// on_error or shadow) is a bug.
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
	"slices"
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

// Policy limits the requests that Pattern selects.
type Policy struct {
	// Name identifies the policy in headers, metrics, logs and keys.
	Name string

	// Pattern is a net/http ServeMux pattern: [METHOD ][HOST]/PATH. Empty,
	// the policy matches no request and is reached by name only (Decide,
	// Check), as Envoy's descriptors are.
	Pattern string

	// Cost is the number of tokens one request takes; zero means 1, as in
	// the YAML configuration. A policy that only inspects (with
	// CostHeader, say) sets InspectOnly instead.
	Cost int64

	// InspectOnly takes no token when the request comes in (Cost 0): the
	// buckets are only read, and CostHeader (when set) charges after the
	// fact. Cost must then be zero.
	InspectOnly bool

	// CostHeader, when set, is a response header in which the next handler
	// reports the real cost of the request; it is removed from the response
	// and the difference to Cost is charged (or refunded).
	CostHeader string

	// Anonymous rules apply per client IP to callers without a verified
	// identity, Authenticated rules per identity to the others. When one
	// list is empty, that class uses the other list (still keyed by its
	// own key: IP or identity).
	Anonymous     []sluice.Rule
	Authenticated []sluice.Rule

	// Overrides give single identities rules of their own.
	Overrides []Override

	// Plans give the authenticated callers of each plan (Caller.Plan)
	// rules of their own, keyed by plan and identity. DefaultPlan is the
	// plan of a caller whose plan is not among them. An authenticated
	// caller gets its override, else its plan's rules, else DefaultPlan's,
	// else Authenticated (or Anonymous when that is empty).
	Plans       map[string][]sluice.Rule
	DefaultPlan string

	// MaxDelay > 0 paces instead of rejecting: a request whose tokens will
	// be there within MaxDelay waits for them.
	MaxDelay time.Duration

	// Shadow decides and counts but never rejects, and sets no headers.
	Shadow bool

	// OnError applies when the store fails: FailLocal (the zero value)
	// asks Options.Fallback first, FailOpen serves, FailClosed answers
	// 503. With Options.StoreOnError, every store call of the policy
	// carries it in sluice.Request.OnError (FailLocal when Local is set),
	// so that a store that decides failures itself (package resilient)
	// decides them by the policy's on_error.
	OnError OnError

	// Local asks Options.Fallback first whatever OnError says; when the
	// Fallback declines, OnError decides (FailClosed: 503, else serve).
	// Kept for compatibility: OnError FailLocal says the same.
	Local bool

	// Key, when set, keys the policy's buckets by request attributes (a
	// header, a path wildcard, a verified claim, the client address) or
	// by one bucket for all, in place of the identity rules: see Key.
	Key Key

	// Algorithm names the policy's algorithm (see package algo) for a
	// Store that serves several (algo.Router): every store call of the
	// policy carries it in sluice.Request.Algorithm. Empty: the token
	// bucket.
	Algorithm string

	// CountDenied counts a denied request's cost too, in the same store
	// call (sluice.Request.CountDenied): envoyproxy/ratelimit's fixed
	// window. It needs Algorithm "fixed_window".
	CountDenied bool
}

// Override gives one authenticated identity its own rules.
type Override struct {
	Identity string
	Rules    []sluice.Rule
}

// Fallback decides a request whose store check failed with err, for
// example against a local bucket or after a circuit breaker opened. It
// returns the result to act on, or ok false to let the policy's OnError
// apply. It is called only for policies whose OnError is FailLocal (the
// zero value) or with Local set.
type Fallback func(ctx context.Context, policy string, req sluice.Request, err error) (res sluice.Result, ok bool)

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
	// request under policy.
	//
	// Deprecated: a policy's choices for its store travel in its
	// sluice.Requests (Algorithm and CountDenied always, OnError with
	// StoreOnError), and no store of this module reads a context value.
	// StoreContext still derives the contexts, for a store of one's own
	// that reads them.
	StoreContext func(ctx context.Context, policy *Policy) context.Context

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
	// they win over Policy.Overrides (see overrides.go).
	Overrides *Overrides

	// Tracer, when set, records a span for each decision of a request
	// (sluice.decision) and one for each store call under it
	// (sluice.store); see tracing.go. Nil records nothing and costs
	// nothing.
	Tracer trace.Tracer
}

// ErrUnknownPolicy is returned by Limiter.Check for a policy name that the
// Limiter does not have.
var ErrUnknownPolicy = errors.New("httplimit: unknown policy")

// Limiter holds the compiled policies. It is safe for concurrent use.
type Limiter struct {
	store     sluice.Store
	mux       *http.ServeMux
	byName    map[string]*policy
	proxies   []netip.Prefix
	forwarded ForwardedFrom
	paths     Paths
	ipv6Bits  int
	headers   HeaderMode
	xHeaders  bool
	jitter    time.Duration
	denyBody  *DenyBody
	auth      []Authenticator
	fallback  Fallback
	metrics   *Metrics
	log       *slog.Logger
	errLog    logLimiter
	shadowLog logLimiter
	wait      func(context.Context, time.Duration) bool // tests replace it
	timeout   time.Duration
	onError   bool // Options.StoreOnError
	storeCtx  func(context.Context, *Policy) context.Context
	allow     allowlist
	tracer    trace.Tracer // nil: no spans

	// methods holds the methods that some pattern names (GET implies
	// HEAD), unless a pattern names none: a request of another method
	// passes without asking the ServeMux.
	methods   map[string]bool
	anyMethod bool
}

// policy is a Policy compiled for the hot path.
type policy struct {
	Policy
	anon, authed ruleSet
	overrides    map[string]*ruleSet
	plans        map[string]*ruleSet
	rt           runtimeRules // Options.Overrides (overrides.go)
	counters     *decide.Counters
	local        bool     // Options.Fallback decides when the store fails
	key          *keySpec // nil: the identity rules
}

// ruleSet is the rules one class of caller is checked against, with the
// header values that depend only on the rules, rendered once.
type ruleSet = decide.Rules

// New compiles opts into a Limiter, or says what is wrong with them.
func New(opts Options) (*Limiter, error) {
	if opts.Store == nil {
		return nil, errors.New("httplimit: Options.Store is nil")
	}
	l := &Limiter{
		store:     opts.Store,
		mux:       http.NewServeMux(),
		byName:    make(map[string]*policy, len(opts.Policies)),
		proxies:   opts.TrustedProxies,
		forwarded: opts.ForwardedFrom,
		paths:     opts.Paths,
		ipv6Bits:  opts.IPv6Prefix,
		headers:   opts.Headers,
		xHeaders:  opts.XRateLimit,
		jitter:    opts.RetryAfterJitter,
		denyBody:  opts.DenyBody,
		auth:      opts.Authenticators,
		fallback:  opts.Fallback,
		metrics:   opts.Metrics,
		log:       opts.Logger,
		wait:      wait,
		timeout:   opts.StoreTimeout,
		onError:   opts.StoreOnError,
		storeCtx:  opts.StoreContext,
		allow:     compileAllowlist(opts.Allowlist),
		tracer:    opts.Tracer,
	}
	if err := checkForwarded(opts); err != nil {
		return nil, err
	}
	if err := checkResponseOptions(opts); err != nil {
		return nil, err
	}
	if l.ipv6Bits <= 0 || l.ipv6Bits > 128 {
		l.ipv6Bits = 64
	}
	if l.log == nil {
		l.log = slog.Default()
	}
	for i := range opts.Policies {
		p, err := compile(opts.Policies[i])
		if err != nil {
			return nil, err
		}
		if p.key, err = compileKey(&p.Policy); err != nil {
			return nil, err
		}
		if _, dup := l.byName[p.Name]; dup {
			return nil, fmt.Errorf("httplimit: two policies are named %q", p.Name)
		}
		if p.Pattern != "" { // without one, the policy is reached by name only
			if err := register(l.mux, matchPattern(p.Pattern, l.paths.CaseInsensitive), p); err != nil {
				return nil, err
			}
			l.noteMethod(p.Pattern)
		}
		p.counters = l.metrics.ForPolicy(p.Name)
		p.rt.attach(opts.Overrides, l.log)
		l.byName[p.Name] = p
	}
	return l, nil
}

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

func compile(in Policy) (*policy, error) {
	if in.Name == "" {
		return nil, errors.New("httplimit: a policy has no name")
	}
	if len(in.Anonymous) == 0 && len(in.Authenticated) == 0 {
		return nil, fmt.Errorf("httplimit: policy %q has no rules", in.Name)
	}
	if in.Cost < 0 || in.MaxDelay < 0 {
		return nil, fmt.Errorf("httplimit: policy %q: cost and max delay must not be negative", in.Name)
	}
	switch {
	case in.InspectOnly && in.Cost != 0:
		return nil, fmt.Errorf("httplimit: policy %q: InspectOnly takes no token, but Cost is %d; drop one", in.Name, in.Cost)
	case !in.InspectOnly && in.Cost == 0:
		in.Cost = 1 // Go's zero, as YAML's default
	}
	p := &policy{Policy: in, overrides: make(map[string]*ruleSet, len(in.Overrides)), local: in.Local || in.OnError == FailLocal}
	anon, authed := in.Anonymous, in.Authenticated
	if len(anon) == 0 {
		anon = authed
	}
	if len(authed) == 0 {
		authed = anon
	}
	var err error
	if p.anon, err = newRuleSet(&in, decide.Anonymous, anon); err != nil {
		return nil, err
	}
	if p.authed, err = newRuleSet(&in, decide.Authenticated, authed); err != nil {
		return nil, err
	}
	for _, o := range in.Overrides {
		rs, err := newRuleSet(&in, decide.Override, o.Rules)
		if err != nil {
			return nil, fmt.Errorf("%w (override for %q)", err, o.Identity)
		}
		p.overrides[o.Identity] = &rs
	}
	if err := p.compilePlans(); err != nil {
		return nil, err
	}
	return p, nil
}

func newRuleSet(p *Policy, class decide.Class, rules []sluice.Rule) (ruleSet, error) {
	probe := sluice.Request{Key: "probe", Cost: p.Cost, Rules: rules, CountDenied: p.CountDenied}
	if err := sluice.ValidateRequest(probe); err != nil {
		return ruleSet{}, fmt.Errorf("httplimit: policy %q: %w", p.Name, err)
	}
	if p.CountDenied && p.Algorithm != "fixed_window" {
		return ruleSet{}, fmt.Errorf("httplimit: policy %q: CountDenied is for the fixed window; algorithm %q counts no denied request", p.Name, p.Algorithm)
	}
	if i := slices.IndexFunc(rules, func(r sluice.Rule) bool { return r.Period != sluice.Rolling }); i >= 0 && p.Algorithm != "" && p.Algorithm != "token_bucket" {
		return ruleSet{}, fmt.Errorf("httplimit: policy %q: rule %d is a calendar quota, which algorithm %s knows not; want the token bucket (Algorithm \"\")", p.Name, i, p.Algorithm)
	}
	return ruleSet{Rules: slices.Clone(rules), Class: class, QuotaFields: decide.RenderQuota(p.Name, rules, p.Cost, p.CostHeader)}, nil
}

// rulesFor returns the rules and key class of a caller: the anonymous
// rules, or those of an authenticated caller (see plans.go for the order).
func (p *policy) rulesFor(c Caller, authenticated bool) *ruleSet {
	if !authenticated {
		return &p.anon
	}
	if o := p.runtime(c.ID); o != nil {
		return o
	}
	if o, ok := p.overrides[c.ID]; ok {
		return o
	}
	return p.planRules(c.Plan)
}

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
		nr, err := normalizeRequest(r, l.paths)
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
	nr, err := normalizeRequest(r, l.paths)
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
	rec := decisionFrom(r.Context())
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
	var addr netip.Addr
	if len(l.proxies) > 0 {
		var err error
		if addr, err = forwardedClient(r, l.proxies, l.forwarded); err != nil {
			writeJSONError(w, http.StatusBadRequest, "invalid_request", err.Error(), 0)
			return
		}
	}
	caller, authenticated := l.identify(r)
	s := subject{caller: caller, authenticated: authenticated, r: r, path: path, cost: p.Cost, holds: true, rec: rec}
	if len(l.proxies) > 0 {
		s.addr, s.hasAddr = l.group(addr), true
	}
	var v verdict
	if l.tracer != nil {
		v = l.decideTraced(r.Context(), p, &s)
	} else {
		v = l.decide(r.Context(), p, &s)
	}
	switch v.Act {
	case decide.Pass:
		next.ServeHTTP(w, r)
	case decide.Deny:
		l.deny(w, r, p, v.Rules, v.Result, v.at)
	case decide.FailClosed:
		writeJSONError(w, http.StatusServiceUnavailable, "rate_limiter_unavailable", "the rate limiter cannot decide right now; retry shortly", 1)
	case decide.Invalid:
		writeJSONError(w, http.StatusInternalServerError, "rate_limiter_error", "the rate limiter cannot decide this request", 0)
	case decide.Serve:
		if v.Result.Delay > 0 && !l.hold(r.Context(), p, &s, &v) {
			return
		}
		l.serveAllowed(w, r, next, p, v.Rules, v.Request.Key, v.Result, v.at)
	}
}

// The decision core. Every front door (serve for HTTP; Decide and Check
// for callers that name the policy) fills in a subject and calls decide,
// which alone goes policy → caller → key → rules → store → result: the
// allowlist (HTTP callers only), the key (Policy.Key or the identity
// rules), the rules of the caller's class, the store call with its
// timeout, Fallback and OnError, shadow, and the counting of every outcome. A front door translates its
// protocol into a subject and the verdict back, and decides nothing itself.

// subject is what a front door knows about the caller of one decision.
type subject struct {
	caller        Caller
	authenticated bool

	// r is the request (nil for a by-name decision) and path the escaped
	// path its policy's pattern matched.
	r    *http.Request
	path string

	// ip is the client's address of a by-name decision (zero: unknown);
	// addr is the client's address grouped by the IPv6 prefix, once a key
	// asked for it (hasAddr).
	ip      netip.Addr
	addr    netip.Addr
	hasAddr bool

	// values are the key attributes of a by-name decision, by name
	// ("header:X-Tenant", "path:tenant", "claim:org").
	values map[string]string

	cost int64

	// holds: the front door holds a delayed request itself and calls
	// hold, which counts it; otherwise decide counts it as delayed.
	holds bool

	rec *Decision // the access log's record, or nil
}

// clientAddr returns the subject's client address, grouped by the IPv6
// prefix, reading it from the request the first time; false when unknown.
func (s *subject) clientAddr(l *Limiter) (netip.Addr, bool) {
	if !s.hasAddr {
		if s.r != nil {
			s.addr = l.clientAddr(s.r)
		} else {
			s.addr = l.group(s.ip)
		}
		s.hasAddr = true
	}
	return s.addr, s.hasAddr && s.addr.IsValid()
}

// verdict is the decision core's answer (decide.Verdict) and when it was
// decided: Retry-After counts from then.
type verdict struct {
	decide.Verdict
	at moment
}

// decide is the decision core: see above.
func (l *Limiter) decide(ctx context.Context, p *policy, s *subject) verdict {
	v := verdict{Verdict: decide.Verdict{Outcome: decide.None}}
	// Only a caller that the limiter verified itself is allowlisted: the
	// identity or address of a by-name decision is stated, not verified.
	if s.r != nil && l.allowlisted(s.r, s.caller.ID, s.authenticated) {
		v.Act, v.Outcome, v.Result = decide.Pass, decide.Allowlisted, sluice.Result{Allowed: true}
		s.rec.decided(v.Outcome, nil)
		return v
	}
	v.Rules = p.rulesFor(s.caller, s.authenticated)
	s.rec.caller(v.Rules.Class, s.caller.ID)
	var kb keyBuf
	if err := l.buildKey(&kb, p, v.Rules, s); err != nil {
		v.Act, v.Err = decide.Invalid, err
		return v
	}
	v.Request = sluice.Request{Key: kb.String(), Cost: s.cost, Rules: v.Rules.Rules, MaxDelay: p.MaxDelay, CountDenied: p.CountDenied}
	if p.Shadow {
		v.Request.MaxDelay = 0 // a shadow policy never holds a request either
	}
	res, err := l.check(ctx, p, v.Request)
	v.at = monoNow()
	v.Act, v.Outcome, v.Result = decide.Resolve(res, err, p.Shadow, p.OnError)
	switch v.Outcome {
	case decide.None:
		v.Err = err
		return v
	case decide.FailedClosed:
		v.Err = err
		l.logStoreError(p, err, "closed")
	case decide.ShadowDenied:
		if l.shadowLog.allow() {
			l.log.Info("sluice: shadow policy would have rejected", "policy", p.Name, "retry_after", res.RetryAfter, "suppressed", l.shadowLog.suppressed())
		}
	case decide.FailedOpen:
		if err != nil {
			l.logStoreError(p, err, "open")
		}
	}
	if v.Act == decide.Serve && v.Result.Delay > 0 && s.holds {
		return v // counted by hold
	}
	l.count(p, s, &v)
	return v
}

// count counts the verdict's outcome and records it for the access log.
func (l *Limiter) count(p *policy, s *subject, v *verdict) {
	p.counters.Inc(v.Outcome)
	res := &v.Result
	if v.Outcome == decide.FailedOpen || v.Outcome == decide.FailedClosed {
		res = nil
	}
	s.rec.decided(v.Outcome, res)
}

// hold waits the delay of an allowed verdict, counts it, and reports
// whether to serve: a caller that goes away while held gets its tokens
// back.
func (l *Limiter) hold(ctx context.Context, p *policy, s *subject, v *verdict) bool {
	if !l.wait(ctx, v.Result.Delay) {
		_, _ = l.adjust(context.WithoutCancel(ctx), p, v.Request.Key, -v.Request.Cost, v.Request.Rules)
		v.Outcome = decide.Cancelled
		l.count(p, s, v)
		return false
	}
	l.count(p, s, v)
	return true
}

// Attributes describe the caller of a decision that names its policy
// (Decide), as a front door without an HTTP request knows it.
type Attributes struct {
	// Identity is the caller's verified identity (overrides apply, and
	// its buckets are those of its requests through the middleware), or
	// empty for an anonymous caller.
	Identity string

	// ClientIP is the client's address, when known: the key of an
	// anonymous caller, and of {client_ip: true}. IPv6 addresses are
	// grouped by Options.IPv6Prefix.
	ClientIP netip.Addr

	// Values are the attributes a policy's Key reads, by the name Key
	// gives them: "header:X-Tenant", "path:tenant", "claim:org".
	Values map[string]string
}

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
// decides: the by-name front door of the decision core, for the gateway's
// decision API and Envoy's rate limit service. It goes through the same
// steps as a request through Handler: the key, the rules of the caller's
// class, the store with its Fallback and OnError, shadow; not the
// allowlist, which holds only for callers the limiter verified itself. A
// policy with MaxDelay reserves, and Result.Delay says how long the caller
// should wait. The error is ErrUnknownPolicy, an input error
// (sluice.ErrInvalid, sluice.ErrCostExceedsBurst), or, for a policy that
// fails closed, the store's; a policy that fails open answers allowed, with
// Result.DecidedBy sluice.ByOpen.
func (l *Limiter) Decide(ctx context.Context, policyName string, a Attributes, cost int64) (Verdict, error) {
	v := l.Verdict(ctx, policyName, a, cost)
	out := Verdict{Result: v.Result, Outcome: v.Outcome.String()}
	if v.Act == decide.Invalid || v.Act == decide.FailClosed {
		return out, v.Err
	}
	return out, nil
}

// Verdict is Decide for front doors that switch on what to do: the
// decision core's whole answer, with its typed outcome and the rules it
// was decided with (for Fields). Its Act is decide.Invalid, with Err, for
// an unknown policy (ErrUnknownPolicy) and for bad input (sluice.ErrInvalid,
// sluice.ErrCostExceedsBurst); decide.FailClosed, with the store's error,
// when the store failed and the policy fails closed; decide.Pass for a
// shadow denial and a failure served open (Result.Allowed is true then).
func (l *Limiter) Verdict(ctx context.Context, policyName string, a Attributes, cost int64) decide.Verdict {
	p, ok := l.byName[policyName]
	if !ok {
		return decide.Verdict{Act: decide.Invalid, Outcome: decide.None, Err: fmt.Errorf("%w %q", ErrUnknownPolicy, policyName)}
	}
	if err := p.checkValues(a.Values); err != nil {
		return decide.Verdict{Act: decide.Invalid, Outcome: decide.None, Err: err}
	}
	s := subject{caller: Caller{ID: a.Identity}, authenticated: a.Identity != "", values: a.Values, cost: cost}
	if a.ClientIP.IsValid() {
		s.ip = a.ClientIP.Unmap().WithZone("")
	}
	var v verdict
	if l.tracer != nil {
		v = l.decideTraced(ctx, p, &s)
	} else {
		v = l.decide(ctx, p, &s)
	}
	if v.Act == decide.FailClosed {
		v.Err = fmt.Errorf("httplimit: policy %q fails closed: %w", p.Name, v.Err)
	}
	return v.Verdict
}

// Check decides cost tokens for key under the named policy: Decide for a
// caller whose verified identity is key (overrides apply), sharing its
// buckets with that identity's requests through the middleware. Envoy's
// rate limit service and the gateway's decision API call it.
func (l *Limiter) Check(ctx context.Context, policyName, key string, cost int64) (sluice.Result, error) {
	if key == "" {
		if _, ok := l.byName[policyName]; !ok {
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
	if l.paths.CaseInsensitive && hasUpper(path) {
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

// onErrors holds one of each failure policy, for the store requests to
// point to (sluice.Request.OnError): no allocation per request, and no
// pointer into a policy that a store could write through.
var onErrors = [...]OnError{FailLocal: FailLocal, FailOpen: FailOpen, FailClosed: FailClosed}

// storeOnError returns the failure policy that p's store requests carry:
// Local when the Fallback decides first, else p's OnError.
func (p *policy) storeOnError() *OnError {
	if p.local {
		return &onErrors[FailLocal]
	}
	if int(p.OnError) < len(onErrors) {
		return &onErrors[p.OnError]
	}
	return nil // not a failure policy: the store's own
}

// storeRequest returns req with p's choices for its store: its algorithm
// and, with Options.StoreOnError, its failure policy.
func (l *Limiter) storeRequest(p *policy, req sluice.Request) sluice.Request {
	req.Algorithm = p.Algorithm
	if l.onError {
		req.OnError = p.storeOnError()
	}
	return req
}

// check asks the store, timing it.
func (l *Limiter) check(ctx context.Context, p *policy, req sluice.Request) (sluice.Result, error) {
	req = l.storeRequest(p, req)
	if l.storeCtx != nil {
		ctx = l.storeCtx(ctx, &p.Policy)
	}
	if l.tracer != nil {
		return l.checkTraced(ctx, p, req)
	}
	return l.checkStore(ctx, p, req)
}

// checkStore is check without the span: the store call with its timeout,
// and the Fallback when it failed.
func (l *Limiter) checkStore(ctx context.Context, p *policy, req sluice.Request) (sluice.Result, error) {
	start := time.Now()
	var res sluice.Result
	var err error
	if l.timeout > 0 {
		tctx, cancel := context.WithTimeout(ctx, l.timeout)
		res, err = l.store.Check(tctx, req)
		cancel()
	} else {
		res, err = l.store.Check(ctx, req)
	}
	l.metrics.Observe(decide.OpCheck, time.Since(start), err)
	if err != nil && p.local && l.fallback != nil && !decide.IsInputError(err) {
		if fres, ok := l.fallback(ctx, p.Name, req, err); ok {
			l.logStoreError(p, err, "local")
			fres.DecidedBy = sluice.ByLocal
			return fres, nil
		}
	}
	return res, err
}

func (l *Limiter) adjust(ctx context.Context, p *policy, key string, delta int64, rules []sluice.Rule) (sluice.Result, error) {
	if l.storeCtx != nil {
		ctx = l.storeCtx(ctx, &p.Policy)
	}
	start := time.Now()
	if l.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, l.timeout)
		defer cancel()
	}
	res, err := l.store.Adjust(ctx, l.storeRequest(p, sluice.Request{Key: key, Rules: rules}), delta)
	l.metrics.Observe(decide.OpAdjust, time.Since(start), err)
	if err != nil {
		l.logStoreError(p, err, "adjust skipped")
	}
	return res, err
}

func (l *Limiter) logStoreError(p *policy, err error, action string) {
	if l.errLog.allow() {
		l.log.Warn("sluice: store failed", "policy", p.Name, "on_error", action, "err", err, "suppressed", l.errLog.suppressed())
	}
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
func (l *Limiter) FailsClosed(policyName string) bool {
	p, ok := l.byName[policyName]
	return ok && p.OnError == FailClosed
}

// Policies returns the names of the limiter's policies.
func (l *Limiter) Policies() []string {
	names := make([]string, 0, len(l.byName))
	for n := range l.byName {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}
