package decide

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
)

// Policy limits the requests of one kind: the rules of each class of
// caller, what a request costs, how the store's failure and a denial are
// handled, and what its buckets are keyed by.
type Policy struct {
	// Name identifies the policy in headers, metrics, logs and keys.
	Name string

	// Pattern is a net/http ServeMux pattern: [METHOD ][HOST]/PATH, which
	// the HTTP front doors match requests against (package httplimit).
	// Empty, the policy matches no request and is reached by name only
	// (Core.Decide), as Envoy's descriptors are.
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
	Overrides []IdentityRules

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

	// OnError applies when the store fails: Local (the zero value) asks
	// Config.Fallback first, Open serves, Closed refuses. With
	// Config.StoreOnError, every store call of the policy carries it in
	// sluice.Request.OnError (Local when Local is set), so that a store
	// that decides failures itself (package resilient) decides them by
	// the policy's on_error.
	OnError OnError

	// Local asks Config.Fallback first whatever OnError says; when the
	// Fallback declines, OnError decides (Closed: refuse, else serve).
	// Kept for compatibility: OnError Local says the same.
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

	// WindowKey: the caller's identity (Attributes.Identity) also names
	// its counters on Redis, verbatim (sluice.Request.WindowKey): the
	// Envoy service's envoyproxy/ratelimit-compatible limits, whose
	// counters a Redis shared with envoyproxy/ratelimit holds under the
	// same names. It needs CountDenied and one rule; Core.AdjustRequest
	// adjusts that counter (Core.Adjust, without the identity, cannot).
	WindowKey bool

	// Lease, when set, asks for leases of each key's tokens: every store
	// call of the policy carries it in sluice.Request.Lease, for a store
	// that leases (the gateway's on Redis, redisstore.Leased).
	Lease *sluice.Lease
}

// IdentityRules give one authenticated identity rules of its own (a
// Policy's Overrides; httplimit calls it Override).
type IdentityRules struct {
	Identity string
	Rules    []sluice.Rule
}

// Caller is what a front door verified about the caller of a request.
// Everything in it comes from a credential that was checked, never from a
// header the client could write.
type Caller struct {
	// ID is the caller's identity: its buckets are keyed by it.
	ID string

	// Plan is the plan the credential names, or "" when it names none.
	Plan string

	// Claims are the claims of a verified token (nil for other
	// credentials), for policies that key by a claim.
	Claims map[string]any
}

// Fallback decides a request whose store check failed with err, for
// example against a local bucket or after a circuit breaker opened. It
// returns the result to act on, or ok false to let the policy's OnError
// apply. It is called only for policies whose OnError is Local (the zero
// value) or with Local set.
type Fallback func(ctx context.Context, policy string, req sluice.Request, err error) (res sluice.Result, ok bool)

// ErrUnknownPolicy is returned for a policy name that the Core does not
// have.
var ErrUnknownPolicy = errors.New("httplimit: unknown policy")

// Compiled is a Policy compiled for the hot path: its rule sets, rendered
// once, its key and its counters. A front door gets one from Core.Policy
// (or Core.Each) and hands it back to Core.DecideFor.
type Compiled struct {
	Policy
	anon, authed Rules
	overrides    map[string]*Rules
	plans        map[string]*Rules
	rt           runtimeRules // Config.Overrides (overrides.go)
	counters     *Counters
	local        bool     // Config.Fallback decides when the store fails
	key          *keySpec // nil: the identity rules
}

// ValidPolicyName reports whether name may name a policy: printable
// ASCII without quotes or backslashes, as the RateLimit headers' item
// names carry it (the configuration file's check and New's are this one).
func ValidPolicyName(name string) bool {
	return strings.IndexFunc(name, func(r rune) bool { return r < ' ' || r > '~' || r == '"' || r == '\\' }) < 0
}

func compile(in Policy) (*Compiled, error) {
	if in.Name == "" {
		return nil, errors.New("httplimit: a policy has no name")
	}
	if len(in.Anonymous) == 0 && len(in.Authenticated) == 0 {
		return nil, fmt.Errorf("httplimit: policy %q has no rules", in.Name)
	}
	if !ValidPolicyName(in.Name) {
		return nil, fmt.Errorf("httplimit: policy %q: want a name of printable ASCII without quotes or backslashes (it names the RateLimit headers' items)", in.Name)
	}
	if in.Cost < 0 || in.MaxDelay < 0 {
		return nil, fmt.Errorf("httplimit: policy %q: cost and max delay must not be negative", in.Name)
	}
	if in.MaxDelay > sluice.MaxDelayLimit {
		return nil, fmt.Errorf("httplimit: policy %q: max delay %v: want at most %v", in.Name, in.MaxDelay, sluice.MaxDelayLimit)
	}
	if in.CostHeader != "" && !validHeaderName(in.CostHeader) {
		return nil, fmt.Errorf("httplimit: policy %q: CostHeader %q: want a header name such as X-Sluice-Cost", in.Name, in.CostHeader)
	}
	switch {
	case in.InspectOnly && in.Cost != 0:
		return nil, fmt.Errorf("httplimit: policy %q: InspectOnly takes no token, but Cost is %d; drop one", in.Name, in.Cost)
	case !in.InspectOnly && in.Cost == 0:
		in.Cost = 1 // Go's zero, as YAML's default
	}
	p := &Compiled{Policy: in, overrides: make(map[string]*Rules, len(in.Overrides)), local: in.Local || in.OnError == Local}
	anon, authed := in.Anonymous, in.Authenticated
	if len(anon) == 0 {
		anon = authed
	}
	if len(authed) == 0 {
		authed = anon
	}
	var err error
	if p.anon, err = newRules(&in, Anonymous, anon); err != nil {
		return nil, err
	}
	if p.authed, err = newRules(&in, Authenticated, authed); err != nil {
		return nil, err
	}
	for _, o := range in.Overrides {
		rs, err := newRules(&in, Override, o.Rules)
		if err != nil {
			return nil, fmt.Errorf("%w (override for %q)", err, o.Identity)
		}
		p.overrides[o.Identity] = &rs
	}
	if err := p.compilePlans(); err != nil {
		return nil, err
	}
	if p.key, err = compileKey(&p.Policy); err != nil {
		return nil, err
	}
	return p, nil
}

func newRules(p *Policy, class Class, rules []sluice.Rule) (Rules, error) {
	probe := sluice.Request{Key: "probe", Cost: p.Cost, Rules: rules, CountDenied: p.CountDenied}
	if err := sluice.ValidateRequest(probe); err != nil {
		return Rules{}, fmt.Errorf("httplimit: policy %q: %w", p.Name, err)
	}
	if p.CountDenied && p.Algorithm != "fixed_window" {
		return Rules{}, fmt.Errorf("httplimit: policy %q: CountDenied is for the fixed window; algorithm %q counts no denied request", p.Name, p.Algorithm)
	}
	if p.WindowKey && (!p.CountDenied || len(rules) != 1) {
		return Rules{}, fmt.Errorf("httplimit: policy %q: WindowKey is for the fixed window that counts denied requests (CountDenied), of one rule", p.Name)
	}
	if i := slices.IndexFunc(rules, func(r sluice.Rule) bool { return r.Period != sluice.Rolling }); i >= 0 && p.Algorithm != "" && p.Algorithm != "token_bucket" {
		return Rules{}, fmt.Errorf("httplimit: policy %q: rule %d is a calendar quota, which algorithm %s knows not; want the token bucket (Algorithm \"\")", p.Name, i, p.Algorithm)
	}
	return Rules{Rules: slices.Clone(rules), Class: class, QuotaFields: RenderQuota(p.Name, rules, p.Cost, p.CostHeader)}, nil
}

// RulesFor returns the rules and key class of a caller: the anonymous
// rules, or those of an authenticated caller (see plans.go for the order).
func (p *Compiled) RulesFor(c Caller, authenticated bool) *Rules {
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
