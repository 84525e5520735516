package config

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
)

func TestAllowlist(t *testing.T) {
	c, err := Parse("a.yaml", t.TempDir(), []byte("allowlist:\n  cidrs: [10.0.0.0/8, 192.0.2.1, \"2001:db8::/32\"]\n  identities: [health-checker]\n"))
	if err != nil {
		t.Fatal(err)
	}
	opts, err := c.LimiterOptions()
	if err != nil {
		t.Fatal(err)
	}
	want := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.0.2.1/32"), netip.MustParsePrefix("2001:db8::/32")}
	if !slices.Equal(opts.Allowlist.CIDRs, want) || !slices.Equal(opts.Allowlist.Identities, []string{"health-checker"}) {
		t.Fatalf("Allowlist = %+v", opts.Allowlist)
	}
	_, err = Parse("a.yaml", t.TempDir(), []byte("allowlist:\n  cidrs: [10.0.0.0/33]\n  identities: [\"\"]\n  ips: [1.2.3.4]\n"))
	for _, w := range []string{"a.yaml:2: allowlist.cidrs[0]: \"10.0.0.0/33\"", "a.yaml:3: allowlist.identities[0]: empty", "a.yaml:4: allowlist.ips: unknown field"} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("error %v; want %q", err, w)
		}
	}
}
