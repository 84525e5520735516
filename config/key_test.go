package config

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/memstore"
)

func TestKey(t *testing.T) {
	pol := func(match, key string) string {
		return "policies:\n  - name: t\n    match: \"" + match + "\"\n    anonymous: [{rate: 1/s, burst: 5}]\n    key: " + key + "\n"
	}
	for _, tc := range []struct {
		name, data string
		want       []string // each must appear in the error; none: valid
	}{
		{"global", pol("/", "global"), nil},
		{"attributes", pol("/tenants/{tenant}/", "[{header: X-Tenant}, {path: tenant}, {client_ip: true}]"), nil},
		{"block list", pol("/", "\n      - header: X-Tenant\n      - client_ip: true"), nil},
		{"typo of global", pol("/", "globl"), []string{`bad.yaml:5: policies[0].key: "globl" (did you mean "global"?): want global, or a list`}},
		{"attribute without list", pol("/", "\"header: X-Tenant\""), []string{`policies[0].key: "header: X-Tenant" (an attribute goes in a list`}},
		{"mapping", pol("/", "{header: X-Tenant}"), []string{"policies[0].key: want global, or a list of attributes", "not a mapping"}},
		{"empty list", pol("/", "[]"), []string{"policies[0].key: an empty list keys by nothing"}},
		{"unknown attribute", pol("/", "[{heder: X-Tenant}]"), []string{`bad.yaml:5: policies[0].key[0].heder: unknown field (did you mean "header"?)`}},
		{"two in one item", pol("/", "[{header: X-Tenant, claim: org}]"), []string{"policies[0].key[0]: want exactly one of header, path, claim and client_ip"}},
		{"client_ip false", pol("/", "[{client_ip: false}]"), []string{"policies[0].key[0]: want exactly one"}},
		{"twice", pol("/", "[{header: x-tenant}, {header: X-Tenant}]"), []string{"policies[0].key[1]: header:X-Tenant is also key[0]"}},
		{"bad header", pol("/", "[{header: \"X Tenant\"}]"), []string{`policies[0].key[0].header: "X Tenant": want a header name`}},
		{"no wildcard", pol("/tenants/", "[{path: tenant}]"), []string{`bad.yaml:5: policies[0].key[0].path: path wildcard {tenant}: the pattern "/tenants/" has no wildcards`}},
		{"other wildcard", pol("GET /t/{id}/", "[{path: tenant}]"), []string{`policies[0].key[0].path: path wildcard {tenant}: the pattern "GET /t/{id}/" has none of that name; it has {id}`}},
		{"claim without jwt", pol("/", "[{claim: org}]"), []string{`policies[0].key[0].claim: "org": claims come only from verified tokens; configure identity.jwt`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse("bad.yaml", t.TempDir(), []byte(tc.data))
			if tc.want == nil {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				opts, err := c.LimiterOptions()
				if err != nil {
					t.Fatal(err)
				}
				if _, err := httplimit.New(httplimit.Options{Store: memstore.New(memstore.Options{SweepInterval: -1}), Policies: opts.Policies}); err != nil {
					t.Fatalf("httplimit refuses what config accepted: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("accepted:\n%s", tc.data)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\nwant it to contain %q", err, w)
				}
			}
		})
	}
}

func TestKeyOptions(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "secret"), []byte("0123456789abcdef0123456789abcdef"), 0o600); err != nil {
		t.Fatal(err)
	}
	data := "identity: {jwt: {hs256_secret_file: secret}}\npolicies:\n" +
		"  - {name: a, match: \"/t/{tenant}/\", anonymous: [{rate: 1/s, burst: 5}], key: [{header: x-tenant}, {path: tenant}, {claim: org}, {client_ip: true}]}\n" +
		"  - {name: b, match: \"/b/\", anonymous: [{rate: 1/s, burst: 5}], key: global}\n" +
		"  - {name: c, match: \"/c/\", anonymous: [{rate: 1/s, burst: 5}]}\n"
	c, err := Parse("ok.yaml", dir, []byte(data))
	if err != nil {
		t.Fatal(err)
	}
	opts, err := c.LimiterOptions()
	if err != nil {
		t.Fatal(err)
	}
	want := []httplimit.Key{
		{Parts: []httplimit.KeyPart{{Header: "x-tenant"}, {Path: "tenant"}, {Claim: "org"}, {ClientIP: true}}},
		{Global: true},
		{},
	}
	for i, w := range want {
		if got := opts.Policies[i].Key; !reflect.DeepEqual(got, w) {
			t.Errorf("policy %d: key %+v, want %+v", i, got, w)
		}
	}
}
