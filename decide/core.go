package decide

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice"
)

// Config is what a Core is built from. Store is required; the rest has
// defaults.
type Config struct {
	Store    sluice.Store
	Policies []Policy

	// IPv6Prefix is how many leading bits of an IPv6 address key a client;
	// zero means 64.
	IPv6Prefix int

	Fallback Fallback

	// StoreOnError passes each policy's OnError to the store: every store
	// call of the policy carries it in sluice.Request.OnError (Local when
	// the policy sets Local), so that a store that decides failures
	// itself (package resilient) decides them by the policy's on_error
	// and not by its own default. Unset, the requests name no failure
	// policy and such a store decides by its own. The gateway sets it.
	StoreOnError bool

	// StoreContext, when set, derives the context of every store call of a
	// decision under policy, for a store that reads per-policy settings from
	// the context. The choices of this module's stores travel in the
	// sluice.Request instead (Algorithm, CountDenied and Lease always,
	// OnError with StoreOnError); the gateway uses it only to pick the
	// per-second Redis of `sluice ratelimit` (REDIS_PERSECOND).
	StoreContext func(ctx context.Context, policy *Policy) context.Context

	// StoreWaits says the store's calls wait on another process (Redis):
	// the time of each is added to the StoreTime of the decision's
	// context (WithStoreTime), which a front door leaves out of a call's
	// own time. Unset, store calls count as the caller's own work, as a
	// memory store's are: its CPU.
	StoreWaits bool

	// StoreTimeout, when positive, is the deadline of every store call.
	StoreTimeout time.Duration

	// Metrics, when non-nil, counts decisions and times the store.
	Metrics *Metrics

	// Logger receives store errors and shadow denials, at most a few a
	// second; nil means slog.Default().
	Logger *slog.Logger

	// Allowlist names callers that no policy limits.
	Allowlist Allowlist

	// Overrides, when set, are identities' rules that change at runtime;
	// they win over Policy.Overrides.
	Overrides *Overrides

	// Tracer, when set, records a sluice.decision span for each decision
	// and a sluice.store span for each store call under it.
	Tracer trace.Tracer
}

// Core is the decision: the compiled policies, the store and what applies
// when it fails. Every front door calls Decide (by policy name) or
// DecideFor (a policy it matched itself) once per decision and acts on the
// Verdict. It is safe for concurrent use.
type Core struct {
	store     sluice.Store
	policies  []*Compiled // in the order of Config.Policies
	byName    map[string]*Compiled
	ipv6Bits  int
	fallback  Fallback
	storeCtx  func(context.Context, *Policy) context.Context
	onError   bool // Config.StoreOnError
	waits     bool // Config.StoreWaits
	timeout   time.Duration
	metrics   *Metrics
	log       *slog.Logger
	errLog    logLimiter
	shadowLog logLimiter
	allow     allowlist
	tracer    trace.Tracer // nil: no spans
}

// New compiles cfg into a Core, or says what is wrong with it.
func New(cfg Config) (*Core, error) {
	if cfg.Store == nil {
		return nil, errors.New("decide: Config.Store is nil")
	}
	c := &Core{
		store:    cfg.Store,
		byName:   make(map[string]*Compiled, len(cfg.Policies)),
		ipv6Bits: cfg.IPv6Prefix,
		fallback: cfg.Fallback,
		storeCtx: cfg.StoreContext,
		onError:  cfg.StoreOnError,
		waits:    cfg.StoreWaits,
		timeout:  cfg.StoreTimeout,
		metrics:  cfg.Metrics,
		log:      cfg.Logger,
		allow:    compileAllowlist(cfg.Allowlist),
		tracer:   cfg.Tracer,
	}
	switch {
	case c.ipv6Bits == 0:
		c.ipv6Bits = 64
	case c.ipv6Bits < 0 || c.ipv6Bits > 128:
		return nil, fmt.Errorf("httplimit: IPv6Prefix %d: want 1 to 128 leading bits of an IPv6 address (0: 64)", c.ipv6Bits)
	}
	if c.log == nil {
		c.log = slog.Default()
	}
	for i := range cfg.Policies {
		p, err := compile(cfg.Policies[i])
		if err != nil {
			return nil, err
		}
		if _, dup := c.byName[p.Name]; dup {
			return nil, fmt.Errorf("httplimit: two policies are named %q", p.Name)
		}
		p.counters = c.metrics.ForPolicy(p.Name)
		p.rt.attach(cfg.Overrides, c.log)
		c.byName[p.Name] = p
		c.policies = append(c.policies, p)
	}
	return c, nil
}

// Compiled returns the compiled policies, in the order of Config.Policies.
func (c *Core) Compiled() []*Compiled { return c.policies }

// Lookup returns the named policy, or nil. A nil Core has none.
func (c *Core) Lookup(name string) *Compiled {
	if c == nil {
		return nil
	}
	return c.byName[name]
}

// Policies returns the names of the core's policies, sorted.
func (c *Core) Policies() []string {
	if c == nil {
		return nil
	}
	names := make([]string, 0, len(c.byName))
	for n := range c.byName {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// FailsClosed reports whether the named policy refuses when its store
// fails (on_error: closed).
func (c *Core) FailsClosed(policyName string) bool {
	p := c.Lookup(policyName)
	return p != nil && p.OnError == Closed
}

// Subject is the caller of one decision, as a front door knows it.
type Subject struct {
	Caller
	// Authenticated: Caller.ID is a verified identity (else anonymous).
	Authenticated bool

	// ClientIP is the client's address (not grouped by the IPv6 prefix);
	// the zero Addr when unknown.
	ClientIP netip.Addr

	// Verified: the front door verified the caller itself (an HTTP
	// request): the allowlist applies, the key attributes are in Values,
	// and an unknown client address keys as such rather than refusing.
	// Otherwise the identity and address are stated (Decide), and the
	// attributes are in Attrs.
	Verified bool

	// Values are the values of the policy's KeyParts, by index, that a
	// Verified front door read from the request; empty: absent.
	Values [MaxKeyParts]string

	// Attrs are the key attributes of a by-name decision, by
	// KeyPart.Name.
	Attrs map[string]string

	Cost int64

	// Holds: the front door holds a delayed request itself and counts it
	// (Compiled.Count); otherwise the core counts it as delayed.
	Holds bool
}

// Attributes describe the caller of a decision that names its policy
// (Core.Decide), as a front door without an HTTP request knows it.
type Attributes struct {
	// Identity is the caller's verified identity (overrides apply, and
	// its buckets are those of its requests through the middleware), or
	// empty for an anonymous caller.
	Identity string

	// ClientIP is the client's address, when known: the key of an
	// anonymous caller, and of {client_ip: true}. IPv6 addresses are
	// grouped by Config.IPv6Prefix.
	ClientIP netip.Addr

	// Values are the attributes a policy's Key reads, by the name Key
	// gives them: "header:X-Tenant", "path:tenant", "claim:org".
	Values map[string]string
}

// Decide decides cost tokens under the named policy for the caller that a
// describes: the by-name front door of the core, for the gateway's
// decision API and Envoy's rate limit service. It goes through the same
// steps as DecideFor: the key, the rules of the caller's class, the store
// with its Fallback and OnError, shadow; not the allowlist, which holds
// only for callers a front door verified itself. Its Act is Invalid, with
// Err, for an unknown policy (ErrUnknownPolicy) and bad input
// (sluice.ErrInvalid, sluice.ErrCostExceedsBurst); FailClosed, with the
// store's error, when the store failed and the policy fails closed; Pass
// for a shadow denial and a failure served open (Result.Allowed is true
// then).
func (c *Core) Decide(ctx context.Context, policyName string, a Attributes, cost int64) Verdict {
	p := c.Lookup(policyName)
	if p == nil {
		return Verdict{Act: Invalid, Outcome: None, Err: fmt.Errorf("%w %q", ErrUnknownPolicy, policyName)}
	}
	if err := p.checkValues(a.Values); err != nil {
		return Verdict{Act: Invalid, Outcome: None, Err: err}
	}
	s := Subject{Caller: Caller{ID: a.Identity}, Authenticated: a.Identity != "", Attrs: a.Values, Cost: cost}
	if a.ClientIP.IsValid() {
		s.ClientIP = a.ClientIP.Unmap().WithZone("")
	}
	v := c.DecideFor(ctx, p, &s)
	if v.Act == FailClosed {
		v.Err = fmt.Errorf("httplimit: policy %q fails closed: %w", p.Name, v.Err)
	}
	return v
}

// DecideFor is the decision core: for subject s under p it goes policy →
// caller → key → rules → store → result: the allowlist (Verified callers
// only), the key (Policy.Key or the identity rules), the rules of the
// caller's class, the store call with its timeout, Fallback and OnError,
// shadow (Resolve), and the count of every outcome. A front door
// translates its protocol into a Subject and the Verdict back, and
// decides nothing itself.
func (c *Core) DecideFor(ctx context.Context, p *Compiled, s *Subject) Verdict {
	if c.tracer != nil {
		return c.decideTraced(ctx, p, s)
	}
	return c.decide(ctx, p, s)
}

func (c *Core) decide(ctx context.Context, p *Compiled, s *Subject) Verdict {
	v := Verdict{Outcome: None}
	// Only a caller that the front door verified itself is allowlisted:
	// the identity or address of a by-name decision is stated.
	if s.Verified && c.allowlisted(s) {
		v.Act, v.Outcome, v.Result = Pass, Allowlisted, sluice.Result{Allowed: true}
		return v
	}
	v.Rules = p.RulesFor(s.Caller, s.Authenticated)
	var kb keyBuf
	if err := c.buildKey(&kb, p, v.Rules, s); err != nil {
		v.Act, v.Err = Invalid, err
		return v
	}
	v.Request = sluice.Request{Key: kb.String(), Cost: s.Cost, Rules: v.Rules.Rules, MaxDelay: p.MaxDelay, CountDenied: p.CountDenied}
	if p.WindowKey {
		v.Request.WindowKey = s.ID
	}
	if p.Shadow {
		v.Request.MaxDelay = 0 // a shadow policy never holds a request either
	}
	res, err := c.check(ctx, p, v.Request)
	v.Act, v.Outcome, v.Result = Resolve(res, err, p.Shadow, p.OnError)
	switch v.Outcome {
	case None:
		v.Err = err
		return v
	case FailedClosed:
		v.Err = err
		c.logStoreError(p, err, "closed")
	case ShadowDenied:
		if c.shadowLog.allow() {
			c.log.Info("sluice: shadow policy would have rejected", "policy", p.Name, "retry_after", res.RetryAfter, "suppressed", c.shadowLog.suppressed())
		}
	case FailedOpen:
		if err != nil {
			c.logStoreError(p, err, "open")
		}
	}
	if v.Act == Serve && v.Result.Delay > 0 && s.Holds {
		return v // counted by the front door
	}
	p.counters.Inc(v.Outcome)
	return v
}

// Count counts an outcome the front door decided in the end: a held
// request as Delayed, or Cancelled when its caller left.
func (p *Compiled) Count(o Outcome) { p.counters.Inc(o) }

// clientAddr returns the subject's client address grouped by the IPv6
// prefix; false when unknown.
func (c *Core) clientAddr(s *Subject) (netip.Addr, bool) {
	a := s.ClientIP
	if a.Is6() && c.ipv6Bits < 128 {
		if p, err := a.Prefix(c.ipv6Bits); err == nil {
			a = p.Addr()
		}
	}
	return a, a.IsValid()
}

// onErrors holds one of each failure policy, for the store requests to
// point to (sluice.Request.OnError): no allocation per request, and no
// pointer into a policy that a store could write through.
var onErrors = [...]OnError{Local: Local, Open: Open, Closed: Closed}

// storeOnError returns the failure policy that p's store requests carry:
// Local when the Fallback decides first, else p's OnError.
func (p *Compiled) storeOnError() *OnError {
	if p.local {
		return &onErrors[Local]
	}
	if int(p.OnError) < len(onErrors) {
		return &onErrors[p.OnError]
	}
	return nil // not a failure policy: the store's own
}

// storeRequest returns req with p's choices for its store: its algorithm
// and, with Config.StoreOnError, its failure policy.
func (c *Core) storeRequest(p *Compiled, req sluice.Request) sluice.Request {
	req.Algorithm = p.Algorithm
	req.Lease = p.Lease
	if c.onError {
		req.OnError = p.storeOnError()
	}
	return req
}

// check asks the store, timing it.
func (c *Core) check(ctx context.Context, p *Compiled, req sluice.Request) (sluice.Result, error) {
	req = c.storeRequest(p, req)
	if c.storeCtx != nil {
		ctx = c.storeCtx(ctx, &p.Policy)
	}
	if c.tracer != nil {
		return c.checkTraced(ctx, p, req)
	}
	return c.checkStore(ctx, p, req)
}

// checkStore is check without the span: the store call with its timeout,
// and the Fallback when it failed.
func (c *Core) checkStore(ctx context.Context, p *Compiled, req sluice.Request) (sluice.Result, error) {
	start := time.Now()
	var res sluice.Result
	var err error
	if c.timeout > 0 {
		tctx, cancel := context.WithTimeout(ctx, c.timeout)
		res, err = c.store.Check(tctx, req)
		cancel()
	} else {
		res, err = c.store.Check(ctx, req)
	}
	took := time.Since(start)
	c.metrics.Observe(OpCheck, took, err)
	if c.waits {
		addStoreTime(ctx, took)
	}
	if err != nil && p.local && c.fallback != nil && !IsInputError(err) {
		if fres, ok := c.fallback(ctx, p.Name, req, err); ok {
			c.logStoreError(p, err, "local")
			fres.DecidedBy = sluice.ByLocal
			return fres, nil
		}
	}
	return res, err
}

// Adjust charges (delta > 0) or refunds (delta < 0) the buckets of key
// under p after the fact: a cost reported by the response, the tokens of
// a caller that left while held. A policy of WindowKey counts in the
// counter of its caller's identity, which key does not name: adjust it
// with AdjustRequest and the Verdict's Request, else Adjust would change
// other Redis keys than its checks count in.
func (c *Core) Adjust(ctx context.Context, p *Compiled, key string, delta int64, rules []sluice.Rule) (sluice.Result, error) {
	return c.adjust(ctx, p, sluice.Request{Key: key, Rules: rules}, delta)
}

// AdjustRequest is Adjust of the key and rules of req, the Request of a
// Verdict of p: under a policy of WindowKey, the counter its check
// counted in (req.WindowKey, the caller's identity).
func (c *Core) AdjustRequest(ctx context.Context, p *Compiled, req sluice.Request, delta int64) (sluice.Result, error) {
	r := sluice.Request{Key: req.Key, Rules: req.Rules}
	if p.WindowKey {
		r.WindowKey, r.CountDenied = req.WindowKey, p.CountDenied
	}
	return c.adjust(ctx, p, r, delta)
}

func (c *Core) adjust(ctx context.Context, p *Compiled, req sluice.Request, delta int64) (sluice.Result, error) {
	if c.storeCtx != nil {
		ctx = c.storeCtx(ctx, &p.Policy)
	}
	start := time.Now()
	if c.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	res, err := c.store.Adjust(ctx, c.storeRequest(p, req), delta)
	took := time.Since(start)
	c.metrics.Observe(OpAdjust, took, err)
	if c.waits {
		addStoreTime(ctx, took)
	}
	if err != nil {
		c.logStoreError(p, err, "adjust skipped")
	}
	return res, err
}

func (c *Core) logStoreError(p *Compiled, err error, action string) {
	if c.errLog.allow() {
		c.log.Warn("sluice: store failed", "policy", p.Name, "on_error", action, "err", err, "suppressed", c.errLog.suppressed())
	}
}

// WarnLimited logs a warning about a front door's requests through the same limiter
// as store errors, at most one every few seconds.
func (c *Core) WarnLimited(msg string, args ...any) {
	if c.errLog.allow() {
		c.log.Warn(msg, args...)
	}
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
