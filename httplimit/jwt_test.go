package httplimit

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// TestJWTRequireExpAndMaxAge: with RequireExp a token without exp buys
// nothing; with MaxAge a token older than the bound, without iat, or
// issued in the future buys nothing, whatever its exp. Forged and expired
// tokens fail under every option.
func TestJWTRequireExpAndMaxAge(t *testing.T) {
	secret := []byte("0123456789abcdef0123456789abcdef")
	now := time.Now()
	sign := func(key []byte, method jwt.SigningMethod, claims jwt.MapClaims) string {
		s, err := jwt.NewWithClaims(method, claims).SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	ecKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	esToken, _ := jwt.NewWithClaims(jwt.SigningMethodES256, jwt.MapClaims{"sub": "bob", "exp": now.Add(time.Hour).Unix()}).SignedString(ecKey)
	// "alg":"none" with the claims of a valid token and no signature.
	none := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none","typ":"JWT"}`)) + "." +
		base64.RawURLEncoding.EncodeToString([]byte(`{"sub":"bob","exp":`+jwtNum(now.Add(time.Hour))+`}`)) + "."
	// A valid token whose payload was edited after signing.
	valid := sign(secret, jwt.SigningMethodHS256, jwt.MapClaims{"sub": "bob", "exp": now.Add(time.Hour).Unix(), "iat": now.Unix()})
	parts := strings.Split(valid, ".")
	edited := parts[0] + "." + base64.RawURLEncoding.EncodeToString([]byte(`{"sub":"admin","exp":`+jwtNum(now.Add(time.Hour))+`,"iat":`+jwtNum(now)+`}`)) + "." + parts[2]

	if _, err := jwt.NewParser().ParseWithClaims(edited, &jwt.RegisteredClaims{}, func(*jwt.Token) (any, error) { return secret, nil }); !errors.Is(err, jwt.ErrTokenSignatureInvalid) {
		t.Fatalf("the edited token fails with %v, want a bad signature", err)
	}
	if _, _, err := jwt.NewParser().ParseUnverified(none, &jwt.RegisteredClaims{}); err != nil {
		t.Fatalf("the alg none token does not parse: %v", err)
	}
	hour, ago := now.Add(time.Hour).Unix(), now.Add(-time.Minute).Unix()
	tokens := map[string]string{
		"fresh":           valid,
		"no exp":          sign(secret, jwt.SigningMethodHS256, jwt.MapClaims{"sub": "bob", "iat": now.Unix()}),
		"no exp, no iat":  sign(secret, jwt.SigningMethodHS256, jwt.MapClaims{"sub": "bob"}),
		"old":             sign(secret, jwt.SigningMethodHS256, jwt.MapClaims{"sub": "bob", "exp": hour, "iat": now.Add(-2 * time.Hour).Unix()}),
		"no iat":          sign(secret, jwt.SigningMethodHS256, jwt.MapClaims{"sub": "bob", "exp": hour}),
		"iat in future":   sign(secret, jwt.SigningMethodHS256, jwt.MapClaims{"sub": "bob", "exp": hour, "iat": now.Add(time.Hour).Unix()}),
		"iat a bit ahead": sign(secret, jwt.SigningMethodHS256, jwt.MapClaims{"sub": "bob", "exp": hour, "iat": now.Add(10 * time.Second).Unix()}),
		"expired":         sign(secret, jwt.SigningMethodHS256, jwt.MapClaims{"sub": "bob", "exp": ago, "iat": now.Add(-2 * time.Minute).Unix()}),
		"wrong secret":    sign([]byte("another-secret-another-secret-xx"), jwt.SigningMethodHS256, jwt.MapClaims{"sub": "bob", "exp": hour, "iat": now.Unix()}),
		"alg none":        none,
		"other algorithm": esToken,
		"edited payload":  edited,
	}
	for _, tc := range []struct {
		name   string
		opts   JWTOptions
		accept []string // the tokens that verify; every other fails
	}{
		{"defaults", JWTOptions{}, []string{"fresh", "no exp", "no exp, no iat", "old", "no iat", "iat in future", "iat a bit ahead"}},
		{"require_exp", JWTOptions{RequireExp: true}, []string{"fresh", "old", "no iat", "iat in future", "iat a bit ahead"}},
		{"max_age", JWTOptions{MaxAge: time.Hour}, []string{"fresh", "no exp", "iat a bit ahead"}},
		{"both", JWTOptions{RequireExp: true, MaxAge: time.Hour}, []string{"fresh", "iat a bit ahead"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := tc.opts
			opts.Secret = secret
			auth, err := JWT(opts)
			if err != nil {
				t.Fatal(err)
			}
			for name, tok := range tokens {
				r := httptest.NewRequest("GET", "/", nil)
				r.Header.Set("Authorization", "Bearer "+tok)
				id, ok := auth(r)
				want := false
				for _, a := range tc.accept {
					want = want || a == name
				}
				if ok != want || (ok && id.ID != "bob") {
					t.Errorf("token %q: identity %q verified %v, want %v", name, id, ok, want)
				}
			}
		})
	}
	if _, err := JWT(JWTOptions{Secret: secret, MaxAge: -time.Second}); err == nil {
		t.Error("a negative MaxAge was accepted")
	}
}

func jwtNum(t time.Time) string { return strconv.FormatInt(t.Unix(), 10) }
