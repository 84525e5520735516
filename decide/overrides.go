package decide

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/sluicehq/sluice"
)

// Overrides are rules of single identities that change while the Core
// runs (the gateway's admin API sets them). For an identity and policy
// they win over Policy.Overrides and Policy.Authenticated; an identity
// without one falls back to those. The zero value holds none and is ready
// to use; it is safe for concurrent use, and one Overrides may serve any
// number of Cores (the gateway's, across reloads).
//
// A request looks its identity up in an immutable snapshot, with two
// atomic loads and a map lookup; Replace publishes a new snapshot, which
// each Core compiles once (rules and headers) at its next request.
//
// State: an override's buckets are the identity's override buckets, the
// same key as a Policy.Overrides entry, and stored by rule position, as
// every key is. So changing an override's rates or bursts keeps what the
// identity has spent (a bucket above its new burst is capped at it);
// setting the very same rules again changes nothing; a change of the
// number of rules starts that key's buckets full (a store keeps one state
// per number of rules); and deleting the override returns the identity to
// its static rules' key, as it was left. Only the admin changes which key
// and rules an identity has: nothing in a request can.
type Overrides struct {
	cur atomic.Pointer[overrideTable]
}

// overrideTable is one immutable snapshot of Overrides.
type overrideTable struct {
	gen   uint64                              // unique among every Overrides' snapshots
	rules map[string]map[string][]sluice.Rule // policy → identity → rules
}

// overrideGen numbers snapshots, so that a Core knows when to compile.
var overrideGen atomic.Uint64

// Replace makes rules, policy name → identity → rules, the whole set of
// overrides. It keeps a copy; rules are not checked here (see
// Core.ValidateRules): a policy of a Core ignores, and logs, an
// override its policy refuses, and rules of unknown policies are ignored.
func (o *Overrides) Replace(rules map[string]map[string][]sluice.Rule) {
	t := &overrideTable{gen: overrideGen.Add(1), rules: make(map[string]map[string][]sluice.Rule, len(rules))}
	for policy, ids := range rules {
		m := make(map[string][]sluice.Rule, len(ids))
		for id, rs := range ids {
			m[id] = slices.Clone(rs)
		}
		t.rules[policy] = m
	}
	o.cur.Store(t)
}

// Set makes rules, policy name → rules, identity's whole set of
// overrides (none: an empty or nil map), keeping the others'. It copies
// only the maps of the policies whose overrides of identity change, not
// every identity's rules as Replace does. As with Replace, rules are not
// checked here: an override its policy refuses (a burst below the
// policy's cost, a rate of 0, no rule) is ignored and logged at request
// time, and the caller keeps the policy's own rules, which may be looser
// than the override meant. Check them first with Core.ValidateRules, as
// the admin API does.
func (o *Overrides) Set(identity string, rules map[string][]sluice.Rule) {
	old := o.cur.Load()
	t := &overrideTable{gen: overrideGen.Add(1), rules: make(map[string]map[string][]sluice.Rule)}
	if old != nil {
		maps.Copy(t.rules, old.rules) // the identity maps are shared until changed
	}
	for policy, ids := range t.rules {
		if _, ok := ids[identity]; ok && rules[policy] == nil {
			m := maps.Clone(ids)
			delete(m, identity)
			t.rules[policy] = m
		}
	}
	for policy, rs := range rules {
		m := maps.Clone(t.rules[policy])
		if m == nil {
			m = make(map[string][]sluice.Rule, 1)
		}
		m[identity] = slices.Clone(rs)
		t.rules[policy] = m
	}
	o.cur.Store(t)
}

// Rules returns identity's runtime rules under policy, if it has some.
func (o *Overrides) Rules(policy, identity string) ([]sluice.Rule, bool) {
	t := o.cur.Load()
	if t == nil {
		return nil, false
	}
	rs, ok := t.rules[policy][identity]
	return slices.Clone(rs), ok
}

// runtimeRules is a policy's view of Overrides: the snapshot it last
// compiled into rule sets.
type runtimeRules struct {
	src      *Overrides
	log      *slog.Logger
	mu       sync.Mutex // serialises compiling
	compiled atomic.Pointer[compiledOverrides]
}

type compiledOverrides struct {
	gen  uint64
	sets map[string]*Rules
}

// attach makes the policy follow src (nil: no runtime overrides).
func (r *runtimeRules) attach(src *Overrides, log *slog.Logger) {
	r.src, r.log = src, log
}

// runtime returns the rule set of identity's runtime override, or nil.
func (p *Compiled) runtime(id string) *Rules {
	if p.rt.src == nil {
		return nil
	}
	t := p.rt.src.cur.Load()
	if t == nil {
		return nil
	}
	c := p.rt.compiled.Load()
	if c == nil || c.gen != t.gen {
		c = p.compileRuntime(t)
	}
	return c.sets[id]
}

// compileRuntime builds the rule sets of t's overrides of p, once per
// snapshot. An override p refuses (its cost above a burst, say, after a
// reload raised the cost) is left out, so the identity keeps its static
// rules, and logged.
func (p *Compiled) compileRuntime(t *overrideTable) *compiledOverrides {
	p.rt.mu.Lock()
	defer p.rt.mu.Unlock()
	if c := p.rt.compiled.Load(); c != nil && c.gen == t.gen {
		return c
	}
	ids := t.rules[p.Name]
	c := &compiledOverrides{gen: t.gen, sets: make(map[string]*Rules, len(ids))}
	for _, id := range slices.Sorted(maps.Keys(ids)) {
		rs, err := newRules(&p.Policy, Override, ids[id])
		if err != nil {
			if p.rt.log != nil {
				p.rt.log.Warn("sluice: runtime override ignored; the identity keeps its static rules", "policy", p.Name, "identity", id, "err", err)
			}
			continue
		}
		c.sets[id] = &rs
	}
	p.rt.compiled.Store(c)
	return c
}

// ValidateRules reports whether rules may be an override of the named
// policy: 1 to sluice.MaxRules valid rules, none with a burst below the
// policy's cost. The error wraps ErrUnknownPolicy, sluice.ErrInvalid or
// sluice.ErrCostExceedsBurst.
func (c *Core) ValidateRules(policyName string, rules []sluice.Rule) error {
	p := c.Lookup(policyName)
	if p == nil {
		return fmt.Errorf("%w %q", ErrUnknownPolicy, policyName)
	}
	_, err := newRules(&p.Policy, Override, rules)
	return err
}

// Usage is an identity's standing under one policy.
type Usage struct {
	// Rules are the identity's rules now, and Source says where they come
	// from: "runtime" (Overrides), "override" (Policy.Overrides) or
	// "authenticated" (the policy's rules for every identity).
	Rules  []sluice.Rule
	Source string
	// Results has one entry per rule, as sluice.Inspector reports it.
	Results []sluice.Result
}

// Usage reports the standing of an authenticated caller (its identity,
// and its plan when it has one) on every rule of the named policy, taking
// nothing, from the same buckets its requests and Check use. The
// error wraps ErrUnknownPolicy, sluice.ErrNotInspectable when the store
// cannot read without consuming, or is the store's failure.
func (c *Core) Usage(ctx context.Context, policyName string, caller Caller) (Usage, error) {
	p, rs, key, err := c.callerKey(policyName, caller)
	if err != nil {
		return Usage{}, err
	}
	u := Usage{Rules: slices.Clone(rs.Rules), Source: p.source(caller.ID, rs)}
	ins, ok := c.store.(sluice.Inspector)
	if !ok {
		return u, sluice.ErrNotInspectable
	}
	if c.storeCtx != nil {
		ctx = c.storeCtx(ctx, &p.Policy)
	}
	u.Results, err = ins.Inspect(ctx, c.storeRequest(p, sluice.Request{Key: key, Rules: rs.Rules}))
	return u, err
}

// Reset fills every bucket of identity under the named policy: those of
// its rules now, those of its static rules (so that deleting a runtime
// override afterwards finds them full too), and those of every plan of
// the policy, whichever its credentials name. It fails when the
// store did not take the refill, even when a failure policy answered for
// it (resilient's open or local).
func (c *Core) Reset(ctx context.Context, policyName, identity string) error {
	p, rs, key, err := c.callerKey(policyName, Caller{ID: identity})
	if err != nil {
		return err
	}
	if err := c.refill(ctx, p, key, rs.Rules); err != nil {
		return err
	}
	for _, name := range slices.Sorted(maps.Keys(p.plans)) {
		prs := p.plans[name]
		if prs == rs {
			continue
		}
		var kb keyBuf
		kb.buildFor(p.Name, prs, identity)
		if err := c.refill(ctx, p, kb.String(), prs.Rules); err != nil {
			return err
		}
	}
	static := &p.authed
	if o, ok := p.overrides[identity]; ok {
		static = o
	}
	if static == rs || static.Class == rs.Class && slices.Equal(static.Rules, rs.Rules) {
		return nil
	}
	var kb keyBuf
	kb.build(p.Name, static.Class.KeyByte(), identity)
	return c.refill(ctx, p, kb.String(), static.Rules)
}

// refill refunds a whole burst, and more, to every bucket of key.
func (c *Core) refill(ctx context.Context, p *Compiled, key string, rules []sluice.Rule) error {
	res, err := c.adjust(ctx, p, sluice.Request{Key: key, Rules: rules}, -sluice.MaxBurst)
	if err == nil && res.DecidedBy.Degraded() {
		err = fmt.Errorf("httplimit: the store is failing and did not take the reset (decided by %s); retry", res.DecidedBy)
	}
	return err
}

// callerKey returns the policy, rule set and store key of an
// authenticated caller, as its requests compute them.
func (c *Core) callerKey(policyName string, caller Caller) (*Compiled, *Rules, string, error) {
	identity := caller.ID
	p := c.Lookup(policyName)
	if p == nil {
		return nil, nil, "", fmt.Errorf("%w %q", ErrUnknownPolicy, policyName)
	}
	if identity == "" {
		return nil, nil, "", fmt.Errorf("%w: empty identity", sluice.ErrInvalid)
	}
	rs := p.RulesFor(caller, true)
	var kb keyBuf
	kb.buildFor(p.Name, rs, identity)
	return p, rs, kb.String(), nil
}

func (p *Compiled) source(identity string, rs *Rules) string {
	switch {
	case rs == p.runtime(identity):
		return "runtime"
	case rs == p.overrides[identity]:
		return "override"
	case rs.Class == Plan:
		return "plan " + rs.Plan
	}
	return "authenticated"
}
