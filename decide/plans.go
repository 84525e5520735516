package decide

import (
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
)

// A plan is a name that a verified credential carries (Caller.Plan: a JWT
// claim, a column of the API keys file) and that a policy may give rules
// of its own (Policy.Plans). The rules of an authenticated caller are, in
// this order, the first that the policy has:
//
//  1. the override for its identity (Policy.Overrides);
//  2. the rules of its plan;
//  3. the rules of Policy.DefaultPlan, when its plan is missing or not
//     among the policy's plans;
//  4. the policy's Authenticated rules, or its Anonymous ones when it has
//     none (keyed by the identity all the same).
//
// An anonymous caller, including one whose credential does not verify,
// gets the Anonymous rules whatever plan it claims: a plan is read only
// from what an Authenticator verified, never from a header. So a caller
// never gets a plan better than its credential names, and a caller whose
// plan is unknown gets the default plan or the policy's base rules.
//
// The buckets of a plan are keyed by the policy, the plan and the
// identity: a caller whose plan changes starts on the buckets of its new
// plan rather than carry the counts of another plan's rules. An identity
// that holds valid credentials of two plans at once therefore has the
// buckets of both, and each is bound by its own plan's rules: the issuer
// granted both plans.

// compilePlans compiles p's plans into rule sets of class p.
func (p *Compiled) compilePlans() error {
	if len(p.Plans) == 0 {
		return nil
	}
	p.plans = make(map[string]*Rules, len(p.Plans))
	for _, name := range slices.Sorted(maps.Keys(p.Plans)) {
		if err := checkPlanName(name); err != nil {
			return fmt.Errorf("httplimit: policy %q: %w", p.Name, err)
		}
		rules := p.Plans[name]
		if len(rules) == 0 {
			return fmt.Errorf("httplimit: policy %q: plan %q has no rules", p.Name, name)
		}
		rs, err := newRules(&p.Policy, Plan, rules)
		if err != nil {
			return fmt.Errorf("%w (plan %q)", err, name)
		}
		rs.Plan = name
		p.plans[name] = &rs
	}
	return nil
}

// checkPlanName refuses plan names that are empty or hold a byte outside
// printable ASCII: a plan is part of a store key, and NUL separates the
// parts of one.
func checkPlanName(name string) error {
	if name == "" {
		return fmt.Errorf("a plan has an empty name")
	}
	if strings.IndexFunc(name, func(r rune) bool { return r <= ' ' || r > '~' }) >= 0 {
		return fmt.Errorf("plan %q: want printable ASCII without spaces", name)
	}
	return nil
}

// planRules returns the rules of an authenticated caller of plan that has
// no override: steps 2 to 4 above.
func (p *Compiled) planRules(plan string) *Rules {
	if rs, ok := p.plans[plan]; ok {
		return rs
	}
	if rs, ok := p.plans[p.DefaultPlan]; ok {
		return rs
	}
	return &p.authed
}

// buildFor builds the key of id under the rule set rs of policy: a plan's
// buckets are the plan's own.
func (k *keyBuf) buildFor(policy string, rs *Rules, id string) {
	if rs.Plan == "" {
		k.build(policy, rs.Class.KeyByte(), id)
		return
	}
	b := append(k.scratch[:0], policy...)
	b = append(b, 0, rs.Class.KeyByte(), 0)
	b = append(b, rs.Plan...)
	b = append(b, 0)
	b = append(b, id...)
	k.sum(b)
}

// keyLen is the length of a store key: 16 bytes of SHA-256, base64url.
const keyLen = 22

// keyBuf builds the store key of (policy, class, identity) without
// allocating until the final string.
type keyBuf struct {
	scratch [256]byte
	out     [keyLen]byte
}

func (k *keyBuf) build(policy string, class byte, id string) {
	b := append(k.scratch[:0], policy...)
	b = append(b, 0, class, 0)
	b = append(b, id...)
	k.sum(b)
}

func (k *keyBuf) buildAddr(policy string, class byte, a netip.Addr) {
	b := append(k.scratch[:0], policy...)
	b = append(b, 0, class, 0)
	b = a.AppendTo(b)
	k.sum(b)
}

func (k *keyBuf) sum(b []byte) {
	s := sha256.Sum256(b)
	base64.RawURLEncoding.Encode(k.out[:], s[:16])
}

func (k *keyBuf) String() string { return string(k.out[:]) }
