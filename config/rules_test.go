package config

import (
	"fmt"
	"strings"
	"testing"

	"github.com/sluicehq/sluice"
)

// TestRulesStayWithTheirPolicy: every list of rules reaches the limiter on
// its own policy, class, plan and override, never another's, when policies
// share plan names and overridden identities. Each list has a burst of its
// own: 1000×(policy+1) plus 1 anonymous, 2 authenticated, 10+j override j,
// 20+k plan k; every rule carries the cost 1.
func TestRulesStayWithTheirPolicy(t *testing.T) {
	var b strings.Builder
	b.WriteString("identity: {jwt: {hs256_secret_file: jwt.secret, plan_claim: plan}, default_plan: free}\npolicies:\n")
	plans := []string{"free", "pro", "team"}
	for i := range 3 {
		base := int64(1000 * (i + 1))
		fmt.Fprintf(&b, "  - name: p%d\n    match: /p%d/\n", i, i)
		fmt.Fprintf(&b, "    anonymous: [{rate: 1/s, burst: %d}]\n", base+1)
		fmt.Fprintf(&b, "    authenticated: [{rate: 1/s, burst: %d}, {rate: 100/d, burst: %d}]\n", base+2, base+2)
		b.WriteString("    overrides:\n")
		for j, id := range []string{"alice", "bob"} {
			fmt.Fprintf(&b, "      - {identity: %s, authenticated: [{rate: 1/s, burst: %d}]}\n", id, base+10+int64(j))
		}
		b.WriteString("    plans:\n")
		for k, name := range plans {
			fmt.Fprintf(&b, "      %s: [{rate: 1/s, burst: %d}]\n", name, base+20+int64(k))
		}
	}
	c, err := Parse("rules.yaml", planDir(t, ""), []byte(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	for round := range 2 { // a second call finds the same rules
		opts, err := c.LimiterOptions()
		if err != nil {
			t.Fatal(err)
		}
		if len(opts.Policies) != 3 {
			t.Fatalf("%d policies; want 3", len(opts.Policies))
		}
		for i, p := range opts.Policies {
			base := int64(1000 * (i + 1))
			check := func(what string, rules []sluice.Rule, n int, burst int64) {
				t.Helper()
				if len(rules) != n {
					t.Fatalf("round %d: %s of %s: %d rules %+v; want %d", round, what, p.Name, len(rules), rules, n)
				}
				for _, r := range rules {
					if r.Burst != burst {
						t.Errorf("round %d: %s of %s: burst %d; want %d", round, what, p.Name, r.Burst, burst)
					}
				}
			}
			check("anonymous", p.Anonymous, 1, base+1)
			check("authenticated", p.Authenticated, 2, base+2)
			if len(p.Overrides) != 2 {
				t.Fatalf("%s: %d overrides; want 2", p.Name, len(p.Overrides))
			}
			for j, o := range p.Overrides {
				check("override "+o.Identity, o.Rules, 1, base+10+int64(j))
			}
			if len(p.Plans) != len(plans) {
				t.Fatalf("%s: plans %v; want %v", p.Name, p.Plans, plans)
			}
			for k, name := range plans {
				check("plan "+name, p.Plans[name], 1, base+20+int64(k))
			}
			// The limiter's map of plans is its own: changing it changes
			// neither the configuration nor the next call's.
			p.Plans["free"] = nil
			delete(p.Plans, "pro")
		}
	}
}
