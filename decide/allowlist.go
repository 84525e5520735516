package decide

import "net/netip"

// Allowlist names callers that no policy limits, such as health checkers
// and internal monitors: their requests pass without a check, without
// RateLimit headers and without counting against anyone's bucket.
//
// A client address is the one the front door found (package httplimit:
// ClientIP), so only a trusted proxy's forwarding header can put a caller
// in a CIDR; an identity is one that the front door verified, never a
// header the client wrote. The allowlist holds only for Verified subjects.
type Allowlist struct {
	CIDRs      []netip.Prefix // client addresses
	Identities []string       // authenticated identities
}

// allowlist is an Allowlist compiled for the hot path.
type allowlist struct {
	cidrs      []netip.Prefix
	identities map[string]bool
}

func compileAllowlist(a Allowlist) allowlist {
	c := allowlist{}
	for _, p := range a.CIDRs {
		if p.IsValid() {
			c.cidrs = append(c.cidrs, p.Masked())
		}
	}
	if len(a.Identities) > 0 {
		c.identities = make(map[string]bool, len(a.Identities))
		for _, id := range a.Identities {
			c.identities[id] = true
		}
	}
	return c
}

// allowlisted reports whether the subject is on the allowlist.
func (c *Core) allowlisted(s *Subject) bool {
	if s.Authenticated && c.allow.identities[s.ID] {
		return true
	}
	if len(c.allow.cidrs) == 0 {
		return false
	}
	a := s.ClientIP.Unmap()
	for _, p := range c.allow.cidrs {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
