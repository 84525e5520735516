package httplimit

import (
	"net/http"
	"net/netip"
)

// Allowlist names callers that no policy limits, such as health checkers
// and internal monitors: their requests pass without a check, without
// RateLimit headers and without counting against anyone's bucket.
//
// A client address is the one ClientIP finds, so only a trusted proxy's
// forwarding header can put a caller in a CIDR; an identity is one that an
// Authenticator verified (or WithIdentity set), never a header the client
// wrote.
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

// allowlisted reports whether the caller of r, identified as id (when
// authenticated), is on the allowlist.
func (l *Limiter) allowlisted(r *http.Request, id string, authenticated bool) bool {
	if authenticated && l.allow.identities[id] {
		return true
	}
	if len(l.allow.cidrs) == 0 {
		return false
	}
	a := clientIP(r, l.proxies, l.forwarded).Unmap()
	for _, p := range l.allow.cidrs {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
