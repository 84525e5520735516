package config

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
)

// Plans are a policy's authenticated rules by plan name:
//
//	plans:
//	  free: [{rate: 10/s, burst: 20}, {rate: 1000/d, burst: 1000}]
//	  pro:  [{rate: 100/s, burst: 200}]
//
// A caller's plan comes only from its verified credential: the string
// claim identity.jwt.plan_claim names, or the third column of
// identity.api_keys_file ("SHA256HEX identity plan"). An authenticated
// caller gets, in this order, the first that its policy has: the override
// for its identity, the rules of its plan, the rules of
// identity.default_plan, the policy's authenticated rules, its anonymous
// rules. A caller whose credential does not verify is anonymous whatever
// plan it claims; a plan is never read from a header the client wrote.
//
// Load refuses a plan name that is not a word of letters, digits, _ and
// -, a plan without rules, a default_plan or a key file's plan that no
// policy has (with the nearest name), and checks a plan's rules as it
// checks the others. It warns when a policy lacks a plan that another
// policy has (that plan's callers fall back to the default here), and
// when plans are set but no credential can name one.
type Plans map[string][]Rule

// maxPlanName bounds a plan's name; a plan name is a word, not a document.
const maxPlanName = 64

func validPlanName(s string) bool {
	if s == "" || len(s) > maxPlanName {
		return false
	}
	for _, r := range s {
		if !(r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			return false
		}
	}
	return true
}

const planNameWant = "want a word of letters, digits, _ and - (at most 64), such as free or pro"

// decodeMap fills a map with string keys from a mapping; the value of key
// k is at path.k.
func (d *decoder) decodeMap(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.MappingNode {
		d.fail(n.Line, path, "want a mapping (name: value), not %s", kindName(n))
		return
	}
	m := reflect.MakeMapWithSize(v.Type(), len(n.Content)/2)
	badKey := false
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode || k.Tag == "!!merge" {
			if !badKey { // one report for the mapping, at its first bad key
				d.fail(k.Line, path, "a key of %s; want plain names, and merge keys (<<) written out", kindName(k))
			}
			badKey = true
			continue
		}
		at := joinPath(path, k.Value)
		key := reflect.ValueOf(k.Value).Convert(v.Type().Key())
		if m.MapIndex(key).IsValid() {
			d.fail(k.Line, at, "set twice; keep one")
			continue
		}
		e := reflect.New(v.Type().Elem()).Elem()
		d.decode(val, e, at)
		m.SetMapIndex(key, e)
	}
	v.Set(m)
}

// plans checks the plans of every policy, identity.default_plan and the
// plans of the API keys file, after policies().
func (v *validator) plans() {
	c := v.c
	defined := make(map[string]int) // plan -> the first policy that has it
	for i := range c.Policies {
		p := &c.Policies[i]
		for _, name := range slices.Sorted(maps.Keys(p.Plans)) {
			field := fmt.Sprintf("policies[%d].plans.%s", i, name)
			if !validPlanName(name) {
				v.fail(field, "plan %q: %s", name, planNameWant)
				continue
			}
			if _, ok := defined[name]; !ok {
				defined[name] = i
			}
			if len(p.Plans[name]) == 0 {
				v.fail(field, "no rules; want the authenticated rules of this plan, such as [{rate: 100/s, burst: 200}]")
				continue
			}
			if p.parsed.plans == nil {
				p.parsed.plans = make(map[string][]sluice.Rule, len(p.Plans))
			}
			p.parsed.plans[name] = v.rules(field, p.Plans[name], *p.Cost)
			for j, r := range p.Plans[name] {
				if p.Algorithm == algo.SlidingLog && r.Burst > algo.MaxLogBurst {
					v.fail(fmt.Sprintf("%s[%d].burst", field, j), "%d: sliding_log keeps an entry per admitted unit; want at most %d, or algorithm: sliding_window", r.Burst, algo.MaxLogBurst)
				}
			}
		}
	}
	names := slices.Sorted(maps.Keys(defined))
	unknown := func(plan string) string {
		if len(names) == 0 {
			return fmt.Sprintf("plan %q: no policy has plans; want plans: in a policy, such as plans: {%s: [{rate: 100/s, burst: 200}]}", plan, plan)
		}
		msg := fmt.Sprintf("plan %q is in no policy's plans", plan)
		if s := closest(plan, names); s != "" {
			msg += fmt.Sprintf(" (did you mean %q?)", s)
		}
		return msg + "; want one of " + strings.Join(names, ", ")
	}
	if dp := c.Identity.DefaultPlan; dp != "" {
		if !validPlanName(dp) {
			v.fail("identity.default_plan", "%q: %s", dp, planNameWant)
		} else if _, ok := defined[dp]; !ok {
			v.fail("identity.default_plan", "%s", unknown(dp))
		}
	}
	keyPlans := v.keyFilePlans(defined, unknown)
	if len(names) == 0 {
		if c.Identity.JWT.PlanClaim != "" {
			v.planWarning("identity.jwt.plan_claim", "set, but no policy has plans: the claim changes no limit")
		}
		return
	}
	if c.Identity.JWT.PlanClaim == "" && !keyPlans {
		v.planWarning(fmt.Sprintf("policies[%d].plans", defined[names[0]]), "no credential names a plan (set identity.jwt.plan_claim, or a third column in identity.api_keys_file), so every caller gets the default plan or the authenticated rules")
	}
	for i := range c.Policies {
		p := &c.Policies[i]
		if len(p.Plans) == 0 {
			continue
		}
		for _, name := range names {
			if _, ok := p.Plans[name]; !ok {
				fallback := "its authenticated rules"
				if _, ok := p.Plans[c.Identity.DefaultPlan]; ok {
					fallback = fmt.Sprintf("default_plan %q", c.Identity.DefaultPlan)
				}
				v.planWarning(fmt.Sprintf("policies[%d].plans", i), fmt.Sprintf("no plan %q, which policies[%d] has: its callers get %s here", name, defined[name], fallback))
			}
		}
	}
}

// keyFilePlans refuses the plans of the API keys file that no policy has,
// and reports whether any key names a plan.
func (v *validator) keyFilePlans(defined map[string]int, unknown func(string) string) bool {
	keys := v.c.keys.apiKeys
	named := false
	var bad []string
	for _, caller := range keys {
		if caller.Plan == "" {
			continue
		}
		named = true
		if _, ok := defined[caller.Plan]; !ok {
			bad = append(bad, fmt.Sprintf("%s (key of %q)", unknown(caller.Plan), caller.ID))
		}
	}
	slices.Sort(bad)
	for _, msg := range bad {
		v.fail("identity.api_keys_file", "%s", msg)
	}
	return named
}

func (v *validator) planWarning(field, msg string) {
	e := FieldError{File: v.file, Line: v.line(field), Field: field, Msg: msg}
	v.c.Warnings = append(v.c.Warnings, e.Error())
}

// planRules returns the parsed rules of p's plans, for the limiter: a map
// of its own, so that the limiter never shares the configuration's.
func (p *Policy) planRules() map[string][]sluice.Rule {
	if len(p.Plans) == 0 {
		return nil
	}
	out := make(map[string][]sluice.Rule, len(p.Plans))
	for name := range p.Plans {
		out[name] = p.parsed.plans[name]
	}
	return out
}
