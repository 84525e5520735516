package config

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice"
)

// rlsDir writes descriptor files into a fresh config_dir and returns the
// directory of the configuration file.
func rlsDir(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "rl"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, "rl", name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

const rlsSection = "envoy_rls: {listen: 127.0.0.1:8081, config_dir: rl}\n"

// The example of envoyproxy/ratelimit's README loads as it is: every
// limit a policy reached only by name, unlimited and 0 none.
func TestEnvoyRLSLoadsItsExample(t *testing.T) {
	dir := rlsDir(t, map[string]string{"config.yaml": `---
domain: mongo_cps
descriptors:
  - key: database
    value: users
    rate_limit:
      unit: second
      requests_per_unit: 500
  - key: database
    value: default
    rate_limit:
      unit: second
      requests_per_unit: 500
`, "rl.yml": `domain: rl
descriptors:
  - key: source_cluster
    value: proxy
    descriptors:
      - key: destination_cluster
        value: bkthomps
        rate_limit:
          replaces:
            - name: bkthomps
          unit: minute
          requests_per_unit: 2
  - key: foo
    rate_limit: {unit: MINUTE, requests_per_unit: 2}
    descriptors:
      - key: bar
        value: banned
        rate_limit: {name: banned_limit, unit: minute, requests_per_unit: 0}
      - key: bay
        rate_limit: {unlimited: true}
  - key: path
    value: /api/*
    share_threshold: true
    value_to_metric: true
    detailed_metric: true
    rate_limit: {unit: week, requests_per_unit: 7, algorithm: sliding_window, on_error: closed}
`, "notes.txt": "not a descriptor file"})
	c, err := Parse(filepath.Join(dir, "sluice.yaml"), dir, []byte(rlsSection))
	if err != nil {
		t.Fatal(err)
	}
	e := c.EnvoyRLS
	if len(e.Domains()) != 2 {
		t.Fatalf("domains %v", e.Domains())
	}
	var names []string
	for _, p := range e.Policies() {
		names = append(names, p.Name)
		if p.Pattern != "" {
			t.Fatalf("%s has a pattern", p.Name)
		}
	}
	want := "rls:mongo_cps/database=users rls:mongo_cps/database=default rls:rl/source_cluster=proxy/destination_cluster=bkthomps rls:rl/foo rls:rl/path=%2Fapi%2F* " +
		"rls:@limit/SECOND rls:@limit/MINUTE rls:@limit/HOUR rls:@limit/DAY rls:@limit/WEEK rls:@limit/MONTH rls:@limit/YEAR"
	if got := strings.Join(names, " "); got != want {
		t.Fatalf("policies\n%s\nwant\n%s", got, want)
	}
	foo := e.Domains()["rl"].Children["foo"]
	if l := foo.Limit; l.Unit != "MINUTE" || l.UnitSeconds != 60 || l.RequestsPerUnit != 2 || !l.Counted {
		t.Fatalf("foo: %+v", l)
	}
	if l := foo.Children["bar_banned"].Limit; l.Policy != "" || l.Name != "banned_limit" {
		t.Fatalf("banned: %+v", l)
	}
	if l := foo.Children["bay"].Limit; !l.Unlimited || l.Policy != "" {
		t.Fatalf("bay: %+v", l)
	}
	api := e.Domains()["rl"].Children["path_/api/*"]
	if api.Shared != "/api/*" || api.Limit.Counted || e.Domains()["rl"].Wildcards[0] != "path_/api/*" {
		t.Fatalf("path: %+v %+v", api, api.Limit)
	}
	last := e.Policies()[len(e.Policies())-8] // the file's last, before the seven of the overrides
	if last.Algorithm != "sliding_window" || last.OnError != sluice.OnErrorClosed || last.Authenticated[0].Burst != 7 {
		t.Fatalf("sliding window policy: %+v", last)
	}
}

// What cannot be mapped is an error naming the descriptor file, the line
// and the field, as for sluice.yaml itself.
func TestEnvoyRLSErrors(t *testing.T) {
	for _, tc := range []struct{ name, data, want string }{
		{"unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: fortnight\n      requests_per_unit: 1\n",
			`unit.yaml:5: descriptors[0].rate_limit.unit: "fortnight": want one of second, minute`},
		{"typo", "domain: d\ndescriptors:\n  - key: k\n    rate_limits: {unit: second, requests_per_unit: 1}\n",
			`typo.yaml:4: descriptors[0].rate_limits: unknown field (did you mean "rate_limit"?)`},
		{"nokey", "domain: d\ndescriptors:\n  - value: v\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
			`nokey.yaml:3: descriptors[0].key: missing`},
		{"nodomain", "descriptors:\n  - key: k\n", `nodomain.yaml: domain: missing`},
		{"dupkey", "domain: d\ndescriptors:\n  - key: k\n    value: v\n  - key: k\n    value: v\n",
			`dupkey.yaml:5: descriptors[1].key: key "k" with value "v" is given twice`},
		{"unlimitedunit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true, unit: second}\n",
			`unlimitedunit.yaml:4: descriptors[0].rate_limit.unit: "second" with unlimited: true`},
		{"replaceself", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      name: a\n      unit: second\n      requests_per_unit: 1\n      replaces: [{name: a}]\n",
			`replaceself.yaml:8: descriptors[0].rate_limit.replaces[0].name: "a" is this rate_limit's own name`},
		{"replaceempty", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      replaces:\n        - name: \"\"\n",
			`replaceempty.yaml:8: descriptors[0].rate_limit.replaces[0].name: missing`},
		{"share", "domain: d\ndescriptors:\n  - key: k\n    value: v\n    share_threshold: true\n",
			`share.yaml:5: descriptors[0].share_threshold: needs a wildcard value`},
		{"negative", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: -1}\n",
			`negative.yaml:4: descriptors[0].rate_limit.requests_per_unit: -1: want a whole number from 0 to 4294967295`},
		{"algo", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, algorithm: gcra}\n",
			`algo.yaml:4: descriptors[0].rate_limit.algorithm: "gcra": want one of token_bucket`},
		{"burst", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, burst: 5}\n",
			`burst.yaml:4: descriptors[0].rate_limit.burst: 5: burst is for algorithm: token_bucket or leaky_bucket`},
		{"yaml", "domain: d\ndescriptors:\n  - key: [\n", `yaml.yaml:3: not valid YAML`},
		{"list", "domain: d\ndescriptors:\n  key: k\n", `list.yaml:3: descriptors: want a list`},
		{"metadata", "domain: d\ndescriptors:\n  - key: k\n    metadata: 5\n",
			`metadata.yaml:4: descriptors[0].metadata: want a mapping of names to values`},
		{"metakey", "domain: d\ndescriptors:\n  - key: k\n    metadata:\n      ? [a, b]\n      : c\n",
			`metakey.yaml:5: descriptors[0].metadata: a metadata name must be a plain value, not a list`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := rlsDir(t, map[string]string{tc.name + ".yaml": tc.data})
			_, err := Parse("sluice.yaml", dir, []byte(rlsSection))
			if err == nil {
				t.Fatal("no error")
			}
			want := filepath.Join(dir, "rl", tc.want)
			if !strings.Contains(err.Error(), want) {
				t.Fatalf("error:\n%v\nwant it to hold:\n%s", err, want)
			}
		})
	}
}

func TestEnvoyRLSDuplicateDomain(t *testing.T) {
	dir := rlsDir(t, map[string]string{"a.yaml": "domain: d\n", "b.yml": "\n\ndomain: d\n"})
	_, err := Parse("sluice.yaml", dir, []byte(rlsSection))
	want := filepath.Join(dir, "rl", "b.yml") + `:3: domain: "d" is also the domain of ` + filepath.Join(dir, "rl", "a.yaml") + ":1"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("error %v, want %s", err, want)
	}
}

func TestEnvoyRLSSection(t *testing.T) {
	c, err := Parse("empty.yaml", ".", nil)
	if err != nil || c.EnvoyRLS.Enabled() || len(c.EnvoyRLS.Policies()) != 0 {
		t.Fatalf("default: %+v, %v", c.EnvoyRLS, err)
	}
	for _, tc := range []struct{ data, want string }{
		{"envoy_rls:\n  listen: nowhere\n", `bad.yaml:2: envoy_rls.listen: "nowhere": want HOST:PORT`},
		{"envoy_rls:\n  listen: 127.0.0.1:8070\n", `bad.yaml:2: envoy_rls.listen: "127.0.0.1:8070" is also the traffic, admin or decision listener`},
		{"envoy_rls:\n  listen: 127.0.0.1:8081\n  config_dir: missing\n", `bad.yaml:3: envoy_rls.config_dir: cannot read the descriptor files`},
		{"envoy_rls:\n  listn: 127.0.0.1:8081\n", `bad.yaml:2: envoy_rls.listn: unknown field (did you mean "listen"?)`},
		{"envoy_rls:\n  response_headers: upstream\n", `bad.yaml:2: envoy_rls.response_headers: "upstream": want sluice`},
		{"envoy_rls:\n  reset_header: \"X Reset\"\n", `bad.yaml:2: envoy_rls.reset_header: "X Reset": want a header name`},
	} {
		_, err := Parse("bad.yaml", t.TempDir(), []byte(tc.data))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("%q: error %v, want %s", tc.data, err, tc.want)
		}
	}
	dir := rlsDir(t, map[string]string{"a.yaml": "domain: d\n"})
	c, err = Parse("warn.yaml", dir, []byte("envoy_rls: {config_dir: rl}\n"))
	if err != nil || len(c.Warnings) != 1 || !strings.Contains(c.Warnings[0], "envoy_rls.listen is empty") {
		t.Fatalf("config_dir without listen: %v %v", c.Warnings, err)
	}
}

// What envoyproxy/ratelimit's main added in 2026 loads: metadata: as a
// protobuf Struct on the limit, a '*' anywhere in a value as a wildcard
// (share_threshold too), quota_mode.
func TestEnvoyRLSMainAdditions(t *testing.T) {
	dir := rlsDir(t, map[string]string{"main.yaml": `domain: rl
descriptors:
  - key: service
    value: service_1
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
    metadata:
      service_with_quota:
        name: "service_1"
      n: 2
      on: true
      none: ~
      when: 2026-07-01
      list: [1.5, x]
  - key: path
    value: /api*v1
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: multi
    value: a*b*c
    metadata: {}
    rate_limit: {unit: minute, requests_per_unit: 10}
`})
	c, err := Parse(filepath.Join(dir, "sluice.yaml"), dir, []byte(rlsSection))
	if err != nil {
		t.Fatal(err)
	}
	top := c.EnvoyRLS.Domains()["rl"]
	svc := top.Children["service_service_1"].Limit
	if !svc.Quota || svc.Metadata == nil {
		t.Fatalf("service_1: %+v", svc)
	}
	got, err := json.Marshal(svc.Metadata.AsMap())
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"list":[1.5,"x"],"n":2,"none":null,"on":true,"service_with_quota":{"name":"service_1"},"when":"2026-07-01"}`; string(got) != want {
		t.Fatalf("metadata %s, want %s", got, want)
	}
	if m := top.Children["multi_a*b*c"].Limit.Metadata; m != nil {
		t.Fatalf("empty metadata: %v", m)
	}
	if top.Children["path_/api*v1"].Shared != "/api*v1" {
		t.Fatalf("share_threshold of a middle wildcard: %+v", top.Children["path_/api*v1"])
	}
	for _, tc := range []struct {
		final, want string
	}{
		{"path_/apiv1", "path_/api*v1"}, {"path_/api/x/v1", "path_/api*v1"}, {"path_/api/v2", ""}, {"path_/apv1", ""},
		{"multi_abc", "multi_a*b*c"}, {"multi_a-b-c", "multi_a*b*c"}, {"multi_ab", ""}, {"multi_acb", ""}, {"multi_abcabc", "multi_a*b*c"},
		{"multi_ac", ""}, {"service_service_1", ""},
	} {
		if _, key := top.Wildcard(tc.final); key != tc.want {
			t.Errorf("Wildcard(%q) = %q, want %q", tc.final, key, tc.want)
		}
	}
}

func TestGlobMatch(t *testing.T) {
	for _, tc := range []struct {
		pattern, s string
		want       bool
	}{
		{"a*", "a", true}, {"a*", "abc", true}, {"a*", "b", false},
		{"*z", "z", true}, {"*z", "az", true}, {"*z", "za", false},
		{"a*a", "a", false}, {"a*a", "aa", true}, {"a*a", "aba", true},
		{"a*b*c", "abc", true}, {"a*b*c", "acbc", true}, {"a*b*c", "acb", false},
		{"ab*ba", "aba", false}, {"ab*ba", "abba", true},
		{"*", "", true}, {"**", "x", true}, {"x*y*z*", "xyz", true}, {"x*y*z*", "xzy", false},
	} {
		if got := globMatch(strings.Split(tc.pattern, "*"), tc.s); got != tc.want {
			t.Errorf("globMatch(%q, %q) = %v, want %v", tc.pattern, tc.s, got, tc.want)
		}
	}
}

// Limits that envoyproxy/ratelimit loads side by side get policies of
// their own, though their parts hold the characters that separate the
// parts of a name: key a=b beside key a with value b, a value b/c beside
// value b with a child key c, domain z/a beside domain z with key a, and
// domain @limit with key SECOND beside the override policies.
func TestEnvoyRLSNamesDoNotCollide(t *testing.T) {
	limit := "rate_limit: {unit: hour, requests_per_unit: 5}"
	dir := rlsDir(t, map[string]string{
		"x.yaml":   "domain: x\ndescriptors:\n  - key: a=b\n    " + limit + "\n  - key: a\n    value: b\n    " + limit + "\n",
		"y.yaml":   "domain: y\ndescriptors:\n  - key: a\n    value: b/c\n    " + limit + "\n  - key: a\n    value: b\n    descriptors:\n      - key: c\n        " + limit + "\n",
		"z1.yaml":  "domain: z/a\ndescriptors:\n  - key: b\n    " + limit + "\n",
		"z2.yaml":  "domain: z\ndescriptors:\n  - key: a\n    descriptors:\n      - key: b\n        " + limit + "\n",
		"at.yaml":  "domain: '@limit'\ndescriptors:\n  - key: SECOND\n    " + limit + "\n",
		"pct.yaml": "domain: p\ndescriptors:\n  - key: a\n    value: '%2F'\n    " + limit + "\n  - key: a\n    value: /\n    " + limit + "\n",
		"q.yaml":   "domain: q\ndescriptors:\n  - key: a\n    value: 'caf\u00e9 \"x\" \\'\n    " + limit + "\n",
	})
	c, err := Parse(filepath.Join(dir, "sluice.yaml"), dir, []byte(rlsSection))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, p := range c.EnvoyRLS.Policies() {
		if !isPrintable(p.Name) || strings.ContainsAny(p.Name, `"\`) {
			t.Errorf("policy %q: not a name the RateLimit headers can carry", p.Name)
		}
		if seen[p.Name] {
			t.Fatalf("two policies named %q", p.Name)
		}
		seen[p.Name] = true
	}
	for _, want := range []string{"rls:x/a%3Db", "rls:x/a=b", "rls:y/a=b%2Fc", "rls:y/a=b/c", "rls:z%2Fa/b", "rls:z/a/b",
		"rls:%40limit/SECOND", "rls:@limit/SECOND", "rls:p/a=%252F", "rls:p/a=%2F", `rls:q/a=caf%C3%A9 %22x%22 %5C`} {
		if !seen[want] {
			t.Errorf("no policy %q in %v", want, seen)
		}
	}
	if len(seen) != 10+7 { // the files' and one override policy a unit
		t.Errorf("%d policies, want 17: %v", len(seen), seen)
	}
}

// A policy of the configuration file may not take a name of the Envoy
// service's limits: `sluice check-config` said ok to one named like a
// descriptor's limit, and `sluice serve` then stopped with two policies
// of one name.
func TestPolicyNamesOfTheEnvoyServiceAreReserved(t *testing.T) {
	dir := rlsDir(t, map[string]string{"d.yaml": "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 5}\n"})
	_, err := Parse(filepath.Join(dir, "sluice.yaml"), dir, []byte(rlsSection+"policies:\n  - name: rls:d/k\n    match: /\n    anonymous: [{rate: 1/s, burst: 1}]\n"))
	if err == nil || !strings.Contains(err.Error(), `sluice.yaml:3: policies[0].name: "rls:d/k": names beginning rls: are those of the Envoy service's limits (envoy_rls); want another, such as d/k`) {
		t.Fatalf("Parse = %v", err)
	}
}
