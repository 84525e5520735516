package httplimit

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// JWTOptions configures the JWT Authenticator. Exactly one of Secret and
// PublicKey is set.
type JWTOptions struct {
	// Header carries the token, with or without "Bearer "; empty means
	// Authorization.
	Header string

	// Secret verifies HS256 tokens.
	Secret []byte

	// PublicKey verifies RS256/384/512 and PS256/384/512 (*rsa.PublicKey),
	// ES256/384/512 (*ecdsa.PublicKey) or EdDSA (ed25519.PublicKey) tokens.
	PublicKey crypto.PublicKey

	// Issuer and Audience, when set, must be the token's iss and among
	// its aud.
	Issuer, Audience string

	// RequireExp refuses a token without exp: without it, a token that
	// leaks is good for ever.
	RequireExp bool

	// MaxAge, when positive, refuses a token issued (iat) longer ago than
	// MaxAge, or without iat, or issued more than a minute in the future,
	// whatever its exp says.
	MaxAge time.Duration
}

// maxClockSkew is how far in the future a token's iat may lie: the clock
// of the issuer may run ahead of ours.
const maxClockSkew = time.Minute

// JWT returns an Authenticator that verifies a JSON Web Token (signature,
// exp and nbf when present, exp always with RequireExp, the age with
// MaxAge, and the issuer and audience asked for) and names the caller by
// its subject; Caller.Claims holds the token's claims. Only the algorithms of the configured
// key are accepted, so a token cannot pick "none" or HS256-with-the-public-key.
func JWT(opts JWTOptions) (Authenticator, error) {
	header := http.CanonicalHeaderKey(opts.Header)
	if header == "" {
		header = "Authorization"
	}
	var key any
	var methods []string
	switch k := opts.PublicKey.(type) {
	case nil:
		if len(opts.Secret) == 0 {
			return nil, fmt.Errorf("httplimit: JWT needs a secret or a public key")
		}
		key, methods = opts.Secret, []string{"HS256"}
	case *rsa.PublicKey:
		key, methods = k, []string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512"}
	case *ecdsa.PublicKey:
		key, methods = k, []string{"ES256", "ES384", "ES512"}
	case ed25519.PublicKey:
		key, methods = k, []string{"EdDSA"}
	default:
		return nil, fmt.Errorf("httplimit: JWT public key of type %T; want RSA, ECDSA or Ed25519", opts.PublicKey)
	}
	if opts.PublicKey != nil && len(opts.Secret) > 0 {
		return nil, fmt.Errorf("httplimit: JWT takes a secret or a public key, not both")
	}
	if opts.MaxAge < 0 {
		return nil, fmt.Errorf("httplimit: JWT MaxAge %v: want 0 (no bound) or more", opts.MaxAge)
	}
	popts := []jwt.ParserOption{jwt.WithValidMethods(methods)}
	if opts.RequireExp {
		popts = append(popts, jwt.WithExpirationRequired())
	}
	if opts.Issuer != "" {
		popts = append(popts, jwt.WithIssuer(opts.Issuer))
	}
	if opts.Audience != "" {
		popts = append(popts, jwt.WithAudience(opts.Audience))
	}
	parser := jwt.NewParser(popts...)
	keyFunc := func(*jwt.Token) (any, error) { return key, nil }
	return func(r *http.Request) (Caller, bool) {
		v := r.Header[header]
		if len(v) != 1 {
			return Caller{}, false
		}
		raw := strings.TrimSpace(v[0])
		if len(raw) > 7 && strings.EqualFold(raw[:7], "bearer ") {
			raw = strings.TrimSpace(raw[7:])
		}
		if raw == "" || strings.Count(raw, ".") != 2 {
			return Caller{}, false
		}
		claims := jwt.MapClaims{}
		tok, err := parser.ParseWithClaims(raw, claims, keyFunc)
		if err != nil || !tok.Valid {
			return Caller{}, false
		}
		sub, err := claims.GetSubject()
		if err != nil || sub == "" {
			return Caller{}, false
		}
		if opts.MaxAge > 0 {
			iat, err := claims.GetIssuedAt()
			if err != nil || !youngEnough(iat, opts.MaxAge, time.Now()) {
				return Caller{}, false
			}
		}
		return Caller{ID: sub, Claims: claims}, true
	}, nil
}

// youngEnough reports whether a token issued at iat is at most maxAge old
// at now, and not issued later than the clock skew allows.
func youngEnough(iat *jwt.NumericDate, maxAge time.Duration, now time.Time) bool {
	if iat == nil {
		return false
	}
	age := now.Sub(iat.Time)
	return age <= maxAge && age >= -maxClockSkew
}
