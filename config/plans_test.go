package config

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// digestLine is a line of an API keys file for key.
func digestLine(key string, rest ...string) string {
	sum := sha256.Sum256([]byte(key))
	return strings.Join(append([]string{hex.EncodeToString(sum[:])}, rest...), " ") + "\n"
}

const plansYAML = `identity:
  api_keys_file: keys.txt
  default_plan: free
  jwt: {hs256_secret_file: jwt.secret, plan_claim: plan}
policies:
  - name: api
    match: /api/
    anonymous: [{rate: 1/s, burst: 2}]
    plans:
      free: [{rate: 10/s, burst: 10}, {rate: 1000/d, burst: 1000}]
      pro:
        - {rate: 100/s, burst: 100}
`

func planDir(t *testing.T, keys string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "keys.txt"), []byte(keys), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "jwt.secret"), []byte("0123456789abcdef0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestPlansLoad: plans, default_plan, plan_claim and the key file's plan
// column reach the limiter's options.
func TestPlansLoad(t *testing.T) {
	dir := planDir(t, digestLine("k1", "alice", "pro")+digestLine("k2", "bob")+digestLine("k3"))
	c, err := Parse("plans.yaml", dir, []byte(plansYAML))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Warnings) != 0 {
		t.Errorf("warnings: %q", c.Warnings)
	}
	keys := c.keys.apiKeys
	if k := keys[sha256.Sum256([]byte("k1"))]; k.ID != "alice" || k.Plan != "pro" {
		t.Errorf("k1 is %+v, want alice on pro", k)
	}
	if k := keys[sha256.Sum256([]byte("k2"))]; k.ID != "bob" || k.Plan != "" {
		t.Errorf("k2 is %+v, want bob without a plan", k)
	}
	opts, err := c.LimiterOptions()
	if err != nil {
		t.Fatal(err)
	}
	p := opts.Policies[0]
	if p.DefaultPlan != "free" || len(p.Plans) != 2 || len(p.Plans["free"]) != 2 || p.Plans["pro"][0].Burst != 100 || p.Plans["free"][1].Rate != 1000.0/86400 {
		t.Errorf("policy %+v", p)
	}
	if len(opts.Authenticators) != 2 {
		t.Errorf("%d authenticators, want the key list and JWT", len(opts.Authenticators))
	}
}

// TestPlansBadFiles: each mistake of a plan is reported with the file, the
// line, the field and what would be valid.
func TestPlansBadFiles(t *testing.T) {
	dir := planDir(t, "# keys\n"+digestLine("k1", "alice", "prp")+digestLine("k2", "bob", "pro")+digestLine("k3", "carol", "pro", "extra"))
	if err := os.WriteFile(filepath.Join(dir, "badplan.txt"), []byte(digestLine("k1", "alice", "p/ro")), 0o600); err != nil {
		t.Fatal(err)
	}
	const pol = "policies:\n  - name: api\n    match: /api/\n    anonymous: [{rate: 1/s, burst: 2}]\n"
	for _, tc := range []struct {
		name, data string
		want       []string
	}{
		{"default plan typo", "identity: {default_plan: fre}\n" + pol + "    plans: {free: [{rate: 1/s, burst: 5}]}\n",
			[]string{`bad.yaml:1: identity.default_plan: plan "fre" is in no policy's plans (did you mean "free"?); want one of free`}},
		{"default plan without plans", "identity:\n  default_plan: free\n" + pol,
			[]string{`bad.yaml:2: identity.default_plan: plan "free": no policy has plans`}},
		{"bad plan name", pol + "    plans:\n      \"fr ee\": [{rate: 1/s, burst: 5}]\n",
			[]string{`bad.yaml:6: policies[0].plans.fr ee: plan "fr ee": want a word of letters`}},
		{"plan without rules", pol + "    plans:\n      free: []\n",
			[]string{"bad.yaml:6: policies[0].plans.free: no rules"}},
		{"bad rate in a plan", pol + "    plans:\n      pro:\n        - {rate: 10/x, burst: 5}\n",
			[]string{"bad.yaml:7: policies[0].plans.pro[0].rate:", "want COUNT/UNIT"}},
		{"burst below cost", pol + "    cost: 3\n    plans:\n      pro: [{rate: 10/s, burst: 2}]\n",
			[]string{"bad.yaml:7: policies[0].plans.pro[0].burst: 2 is below the policy's cost 3"}},
		{"rate out of bounds", pol + "    plans:\n      pro: [{rate: 1/s, burst: 10000000000000000}]\n",
			[]string{"bad.yaml:6: policies[0].plans.pro[0].burst:", "want an integer from 1 to"}},
		{"unknown field in a plan's rule", pol + "    plans:\n      pro: [{rate: 10/s, burts: 5}]\n",
			[]string{"bad.yaml:6: policies[0].plans.pro[0].burts: unknown field (did you mean \"burst\"?)"}},
		{"plans not a mapping", pol + "    plans: [free]\n",
			[]string{"bad.yaml:5: policies[0].plans: want a mapping"}},
		{"plans field typo", pol + "    plan: {free: [{rate: 1/s, burst: 5}]}\n",
			[]string{"bad.yaml:5: policies[0].plan: unknown field (did you mean \"plans\"?)"}},
		{"plan_claim typo", "identity: {jwt: {plan_clam: tier}}\n",
			[]string{"bad.yaml:1: identity.jwt.plan_clam: unknown field (did you mean \"plan_claim\"?)"}},
		{"key file plan typo and a fourth column", "identity: {api_keys_file: keys.txt}\n" + pol + "    plans: {pro: [{rate: 1/s, burst: 5}]}\n",
			[]string{`bad.yaml:1: identity.api_keys_file: plan "prp" is in no policy's plans (did you mean "pro"?); want one of pro (key of "alice")`,
				"keys.txt:4: want a SHA-256 hex digest (64 hex digits), optionally followed by the identity it stands for and its plan"}},
		{"key file plan not a word", "identity: {api_keys_file: badplan.txt}\n" + pol + "    plans: {pro: [{rate: 1/s, burst: 5}]}\n",
			[]string{`bad.yaml:1: identity.api_keys_file:`, `badplan.txt:1: plan "p/ro": want a word`}},
		{"sliding log plan", pol + "    algorithm: sliding_log\n    plans: {pro: [{rate: 1/s, burst: 1000000}]}\n",
			[]string{"bad.yaml:6: policies[0].plans.pro[0].burst: 1000000: sliding_log keeps an entry"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("bad.yaml", dir, []byte(tc.data))
			if err == nil {
				t.Fatalf("accepted:\n%s", tc.data)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error\n%v\nlacks %q", err, w)
				}
			}
		})
	}
}

// TestPlansWarnings: valid files whose plans probably do not do what was
// meant load with a warning.
func TestPlansWarnings(t *testing.T) {
	dir := planDir(t, digestLine("k1", "alice", "pro"))
	for _, tc := range []struct {
		name, data string
		want       []string
	}{
		{"claim without plans", "identity: {jwt: {plan_claim: tier}}\n",
			[]string{"identity.jwt.plan_claim: set, but no policy has plans"}},
		{"no credential names a plan", "policies:\n  - name: api\n    match: /api/\n    anonymous: [{rate: 1/s, burst: 2}]\n    plans: {pro: [{rate: 1/s, burst: 5}]}\n",
			[]string{"warn.yaml:5: policies[0].plans: no credential names a plan"}},
		{"a policy lacks a plan", "identity: {api_keys_file: keys.txt, default_plan: free}\npolicies:\n" +
			"  - {name: a, match: /a/, anonymous: [{rate: 1/s, burst: 2}], plans: {free: [{rate: 1/s, burst: 5}], pro: [{rate: 1/s, burst: 9}]}}\n" +
			"  - {name: b, match: /b/, anonymous: [{rate: 1/s, burst: 2}], plans: {free: [{rate: 1/s, burst: 5}]}}\n",
			[]string{`warn.yaml:4: policies[1].plans: no plan "pro", which policies[0] has: its callers get default_plan "free" here`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse("warn.yaml", dir, []byte(tc.data))
			if err != nil {
				t.Fatal(err)
			}
			got := strings.Join(c.Warnings, "\n")
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("warnings\n%s\nlack %q", got, w)
				}
			}
		})
	}
}

// TestPlansExample: the example configuration shows plans.
func TestPlansExample(t *testing.T) {
	c, err := Load("../examples/sluice.yaml")
	if err != nil {
		t.Fatal(err)
	}
	opts, err := c.LimiterOptions()
	if err != nil {
		t.Fatal(err)
	}
	p := opts.Policies[0]
	if p.DefaultPlan != "free" || len(p.Plans["free"]) != 2 || p.Plans["pro"][0].Burst != 100 || c.Identity.JWT.PlanClaim != "plan" {
		t.Fatalf("payments policy %+v, plan claim %q", p, c.Identity.JWT.PlanClaim)
	}
}
