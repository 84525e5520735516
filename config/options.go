package config

import (
	"fmt"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"

	"github.com/sluicehq/sluice/httplimit"
)

// LimiterOptions translates c into the options of an httplimit.Limiter:
// everything but the Store, Metrics, Logger and Fallback, which the caller
// supplies. c must come from Load or Parse.
func (c *Config) LimiterOptions() (httplimit.Options, error) {
	opts := httplimit.Options{
		TrustedProxies: c.keys.proxies,
		IPv6Prefix:     c.IPv6Prefix,
		Allowlist:      c.Allowlist.options(),
		Paths:          c.Paths.options(),
	}
	switch c.ForwardedHeader {
	case "x-forwarded-for":
		opts.ForwardedFrom = httplimit.FromXForwardedFor
	case "forwarded":
		opts.ForwardedFrom = httplimit.FromForwarded
	}
	switch c.Headers {
	case "legacy":
		opts.Headers = httplimit.HeadersLegacy
	case "draft":
		opts.Headers = httplimit.HeadersDraft
	case "none":
		opts.Headers = httplimit.HeadersNone
	}
	c.responseOptions(&opts)
	if c.keys.apiKeys != nil {
		opts.Authenticators = append(opts.Authenticators, httplimit.APIKeys(c.Identity.APIKeyHeader, c.keys.apiKeys))
	}
	if c.keys.jwtSecret != nil || c.keys.jwtPublic != nil {
		a, err := httplimit.JWT(httplimit.JWTOptions{
			Header:    c.Identity.JWT.Header,
			Secret:    c.keys.jwtSecret,
			PublicKey: c.keys.jwtPublic,
			Issuer:    c.Identity.JWT.Issuer,
			Audience:  c.Identity.JWT.Audience,

			RequireExp: c.Identity.JWT.RequireExp,
			MaxAge:     c.Identity.JWT.MaxAge,
			PlanClaim:  c.Identity.JWT.PlanClaim,
		})
		if err != nil {
			return opts, fmt.Errorf("%s: identity.jwt: %w", c.File, err)
		}
		opts.Authenticators = append(opts.Authenticators, a)
	}
	for _, p := range c.Policies {
		hp := httplimit.Policy{
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
			hp.Overrides = append(hp.Overrides, httplimit.Override{
				Identity: o.Identity,
				Rules:    o.parsed,
			})
		}
		opts.Policies = append(opts.Policies, hp)
	}
	return opts, nil
}
