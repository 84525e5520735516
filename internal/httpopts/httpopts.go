// Package httpopts turns a configuration file's httpspec.Spec into the
// options of an httplimit.Limiter: the one place where the file's HTTP
// settings meet the net/http middleware.
package httpopts

import (
	"fmt"

	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/httpspec"
)

// Options translates s into the options of an httplimit.Limiter:
// everything but the Store, Metrics, Logger and Fallback, which the caller
// supplies.
func Options(s httpspec.Spec) (httplimit.Options, error) {
	opts := httplimit.Options{
		TrustedProxies:   s.TrustedProxies,
		IPv6Prefix:       s.IPv6Prefix,
		Allowlist:        s.Allowlist,
		Paths:            httplimit.Paths{CaseInsensitive: s.CaseInsensitive},
		XRateLimit:       s.XRateLimit,
		RetryAfterJitter: s.RetryAfterJitter,
		Policies:         s.Policies,
	}
	switch s.EscapedSlashes {
	case "keep":
		opts.Paths.EscapedSlashes = httplimit.EscapedSlashesKeep
	case "decode":
		opts.Paths.EscapedSlashes = httplimit.EscapedSlashesDecode
	}
	switch s.ForwardedHeader {
	case "x-forwarded-for":
		opts.ForwardedFrom = httplimit.FromXForwardedFor
	case "forwarded":
		opts.ForwardedFrom = httplimit.FromForwarded
	}
	switch s.Headers {
	case "legacy":
		opts.Headers = httplimit.HeadersLegacy
	case "draft":
		opts.Headers = httplimit.HeadersDraft
	case "none":
		opts.Headers = httplimit.HeadersNone
	}
	if s.DenyBody != nil {
		opts.DenyBody = &httplimit.DenyBody{ContentType: s.DenyBody.ContentType, Body: s.DenyBody.Body}
	}
	if s.APIKeys != nil {
		opts.Authenticators = append(opts.Authenticators, httplimit.APIKeys(s.APIKeyHeader, s.APIKeys))
	}
	if j := s.JWT; j != nil {
		a, err := httplimit.JWT(httplimit.JWTOptions{
			Header:    j.Header,
			Secret:    j.Secret,
			PublicKey: j.PublicKey,
			Issuer:    j.Issuer,
			Audience:  j.Audience,

			RequireExp: j.RequireExp,
			MaxAge:     j.MaxAge,
			PlanClaim:  j.PlanClaim,
		})
		if err != nil {
			return opts, fmt.Errorf("%s: identity.jwt: %w", s.File, err)
		}
		opts.Authenticators = append(opts.Authenticators, a)
	}
	return opts, nil
}
