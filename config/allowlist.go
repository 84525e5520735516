package config

import (
	"fmt"
	"net/netip"

	"github.com/sluicehq/sluice/decide"
)

// Allowlist names callers that no policy limits, such as health checkers:
// client addresses (after trusted_proxies) and authenticated identities
// (after verification).
type Allowlist struct {
	CIDRs      []string `yaml:"cidrs"`      // CIDRs or single addresses
	Identities []string `yaml:"identities"` // JWT sub, or an API key's identity

	prefixes []netip.Prefix
}

func (v *validator) allowlist() {
	a := &v.c.Allowlist
	a.prefixes = nil
	for i, s := range a.CIDRs {
		p, err := parsePrefix(s)
		if err != nil {
			v.fail(fmt.Sprintf("allowlist.cidrs[%d]", i), "%q: want a CIDR such as 10.0.0.0/8 or fd00::/8, or a single address", s)
			continue
		}
		a.prefixes = append(a.prefixes, p)
	}
	for i, id := range a.Identities {
		if id == "" {
			v.fail(fmt.Sprintf("allowlist.identities[%d]", i), "empty; want an authenticated identity such as the sub of a JWT or the name of an API key")
		}
	}
}

func (a Allowlist) options() decide.Allowlist {
	return decide.Allowlist{CIDRs: a.prefixes, Identities: a.Identities}
}
