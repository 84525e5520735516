// Package httpspec is what a configuration file says about the HTTP front
// door, as plain data: package config fills a Spec, and package httpopts
// turns it into httplimit.Options. It imports neither, so that package
// config (and the Envoy front door, which reads it) links neither the
// net/http middleware nor a JWT library.
package httpspec

import (
	"crypto"
	"net/netip"
	"time"

	"github.com/sluicehq/sluice/decide"
)

// Spec is a validated file's options for an httplimit.Limiter, but for the
// Store, Metrics, Logger and Fallback, which the gateway supplies.
type Spec struct {
	File string // the file, for errors

	TrustedProxies  []netip.Prefix
	ForwardedHeader string // auto, x-forwarded-for or forwarded
	IPv6Prefix      int

	CaseInsensitive bool
	EscapedSlashes  string // reject, keep or decode

	Headers          string // legacy, draft, both or none
	XRateLimit       bool
	RetryAfterJitter time.Duration
	DenyBody         *DenyBody // nil: sluice's JSON

	APIKeyHeader string
	APIKeys      map[[32]byte]decide.Caller // nil: no API keys; SHA-256 of a key -> its caller
	JWT          *JWT                       // nil: no JWTs

	Allowlist decide.Allowlist
	Policies  []decide.Policy
}

// DenyBody is the body of a 429 in place of sluice's JSON.
type DenyBody struct {
	ContentType string
	Body        []byte
}

// JWT is how tokens are verified; exactly one of Secret and PublicKey is
// set.
type JWT struct {
	Header           string
	Secret           []byte
	PublicKey        crypto.PublicKey
	Issuer, Audience string
	RequireExp       bool
	MaxAge           time.Duration
	PlanClaim        string
}
