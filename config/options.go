package config

import (
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/decide"
	"github.com/sluicehq/sluice/internal/httpspec"
)

// HTTPSpec is what c says about the HTTP front door, as plain data that
// package httpopts (or config/httpconfig) turns into the options of an
// httplimit.Limiter; package config itself links neither the middleware
// nor a JWT library. c must come from Load or Parse.
func (c *Config) HTTPSpec() httpspec.Spec {
	s := httpspec.Spec{
		File:             c.File,
		TrustedProxies:   c.keys.proxies,
		ForwardedHeader:  c.ForwardedHeader,
		IPv6Prefix:       c.IPv6Prefix,
		CaseInsensitive:  c.Paths.Case == "insensitive",
		EscapedSlashes:   c.Paths.EscapedSlashes,
		Headers:          c.Headers,
		XRateLimit:       c.XRateLimitHeaders,
		RetryAfterJitter: c.RetryAfterJitter,
		APIKeyHeader:     c.Identity.APIKeyHeader,
		APIKeys:          c.keys.apiKeys,
		Allowlist:        c.Allowlist.options(),
	}
	if c.DenyBody.body != nil {
		s.DenyBody = &httpspec.DenyBody{ContentType: c.DenyBody.ContentType, Body: c.DenyBody.body}
	}
	if c.keys.jwtSecret != nil || c.keys.jwtPublic != nil {
		j := c.Identity.JWT
		s.JWT = &httpspec.JWT{
			Header:     j.Header,
			Secret:     c.keys.jwtSecret,
			PublicKey:  c.keys.jwtPublic,
			Issuer:     j.Issuer,
			Audience:   j.Audience,
			RequireExp: j.RequireExp,
			MaxAge:     j.MaxAge,
			PlanClaim:  j.PlanClaim,
		}
	}
	for _, p := range c.Policies {
		hp := decide.Policy{
			Name:          p.Name,
			Pattern:       p.Match,
			Cost:          *p.Cost,
			CostHeader:    p.CostHeader,
			Anonymous:     p.parsed.anonymous,
			Authenticated: p.parsed.authenticated,
			Plans:         p.planRules(),
			DefaultPlan:   c.Identity.DefaultPlan,
			MaxDelay:      p.MaxDelay,
			Shadow:        p.Mode == "shadow",
			Key:           p.Key.options(),
		}
		if p.Algorithm != algo.TokenBucket {
			hp.Algorithm = p.Algorithm
		}
		hp.OnError = p.parsed.onError
		if p.Lease != nil {
			hp.Lease = &sluice.Lease{Tokens: p.Lease.Tokens, TTL: p.Lease.TTL}
		}
		for _, o := range p.Overrides {
			hp.Overrides = append(hp.Overrides, decide.IdentityRules{
				Identity: o.Identity,
				Rules:    o.parsed,
			})
		}
		s.Policies = append(s.Policies, hp)
	}
	return s
}
