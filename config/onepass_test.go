package config

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// eightMistakes holds mistakes of the three kinds that decoding and
// validation find: unknown fields, values of the wrong type, and values of
// the right type that are not valid.
const eightMistakes = `listen: 127.0.0.1:8080
stoer: {type: redis}
headers: some
ipv6_prefix: lots
policies:
  - name: a
    match: /a
    cost: many
    anonymous: [{rate: 10/x, burst: 5}]
    mdoe: shadow
  - name: a
    match: /b
    anonymous: [{rate: 1/s, burst: 0}]
`

var eightWant = []string{
	"bad.yaml:2: stoer: unknown field",
	"bad.yaml:3: headers: \"some\"",
	"bad.yaml:4: ipv6_prefix: \"lots\": want an integer",
	"bad.yaml:8: policies[0].cost: \"many\": want an integer",
	"bad.yaml:9: policies[0].anonymous[0].rate: rate \"10/x\"",
	"bad.yaml:10: policies[0].mdoe: unknown field (did you mean \"mode\"?)",
	"bad.yaml:11: policies[1].name: \"a\" is also the name of policies[0]",
	"bad.yaml:13: policies[1].anonymous[0].burst: 0: want an integer of at least 1",
}

// TestEveryMistakeInOnePass: one Parse reports all eight mistakes, in the
// order of their lines, and nothing else.
func TestEveryMistakeInOnePass(t *testing.T) {
	_, err := Parse("bad.yaml", t.TempDir(), []byte(eightMistakes))
	var es Errors
	if !errors.As(err, &es) {
		t.Fatalf("Parse = %v; want Errors", err)
	}
	if len(es) != len(eightWant) {
		t.Errorf("%d errors; want %d:\n%v", len(es), len(eightWant), err)
	}
	for i, want := range eightWant {
		if i < len(es) && !strings.HasPrefix(es[i].Error(), want) {
			t.Errorf("error %d = %q; want it to start with %q", i, es[i].Error(), want)
		}
	}
}

// TestDecodingMistakesAreNotReportedTwice: a value that does not decode is
// reported once, not again by validation as missing or zero; neither is
// the field a misspelt one was meant to be.
func TestDecodingMistakesAreNotReportedTwice(t *testing.T) {
	for _, tc := range []struct {
		name, data string
		want       []string
	}{
		{"burst of the wrong type", "policies:\n  - name: a\n    match: /\n    anonymous: [{rate: 1/s, burst: lots}]\n",
			[]string{":4: policies[0].anonymous[0].burst: \"lots\": want an integer"}},
		{"rate of the wrong type", "policies:\n  - name: a\n    match: /\n    anonymous: [{rate: [1], burst: 1}]\n",
			[]string{":4: policies[0].anonymous[0].rate: want a string, not a list"}},
		{"misspelt burst", "policies:\n  - name: a\n    match: /\n    anonymous:\n      - rate: 1/s\n        burts: 5\n",
			[]string{":6: policies[0].anonymous[0].burts: unknown field (did you mean \"burst\"?)"}},
		{"policy not a mapping", "policies:\n  - just a string\n  - {name: b, match: /b, anonymous: [{rate: 1/q, burst: 1}]}\n",
			[]string{":2: policies[0]: want a mapping", ":3: policies[1].anonymous[0].rate:"}},
		{"file not a mapping", "- a\n- b\n", []string{":1: want a mapping"}},
	} {
		_, err := Parse("bad.yaml", t.TempDir(), []byte(tc.data))
		var es Errors
		if !errors.As(err, &es) {
			t.Errorf("%s: Parse = %v; want Errors", tc.name, err)
			continue
		}
		if len(es) != len(tc.want) {
			t.Errorf("%s: %d errors, want %d:\n%v", tc.name, len(es), len(tc.want), err)
			continue
		}
		for i, want := range tc.want {
			if !strings.Contains(es[i].Error(), want) {
				t.Errorf("%s: error %d = %q; want %q", tc.name, i, es[i].Error(), want)
			}
		}
	}
}

// FuzzParseOnePass: whatever mix of decoding and validation mistakes a file
// holds, Parse reports them without panicking, and never reports one field
// twice on the same line.
func FuzzParseOnePass(f *testing.F) {
	f.Add(eightMistakes)
	f.Add("policies: [null, {name: a}, [1], {name: b, match: /b, cost: x, anonymous: [{rate: 1/s, burst: y}], overrides: [null, {identity: z, authenticated: [x]}]}]\n")
	f.Add("store: {type: redis, redis: {url: [x], cluster_addrs: 3, sentinel: {master: [], addrs: x}, tls: 1, password_file: []}}\nallowlist: {cidrs: x, identities: [[], 1]}\n")
	f.Add("identity: {jwt: {hs256_secret_file: [], public_key_file: {}}, api_keys_file: 1}\ntrusted_proxies: [x, [], 10.0.0.0/8]\n")
	f.Add("identity: {default_plan: [x], jwt: {plan_claim: {}}}\npolicies: [{name: a, match: /a, plans: {[x]: y, free: ~, pro: [{rate: x}], pro: 1, \"a b\": [], <<: {}}}, {name: b, plans: [1]}]\n")
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data string) {
		_, err := Parse("fuzz.yaml", dir, []byte(data))
		var es Errors
		if !errors.As(err, &es) {
			return
		}
		seen := make(map[string]bool)
		for _, e := range es {
			k := fmt.Sprintf("%d %s", e.Line, e.Field)
			if seen[k] && e.Field != "" && !strings.HasSuffix(e.Field, "_file") {
				t.Fatalf("%s reported twice:\n%v", k, err)
			}
			seen[k] = true
		}
	})
}
