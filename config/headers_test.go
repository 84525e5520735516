package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestResponseOptions: x_ratelimit_headers, retry_after_jitter, deny_body
// and the JWT bounds reach the limiter's options.
func TestResponseOptions(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("429.html", "<p>retry in {{retry_after}} s</p>\n")
	write("secret", strings.Repeat("s", 32))
	c, err := Parse("r.yaml", dir, []byte(`
x_ratelimit_headers: true
retry_after_jitter: 2s
deny_body: {file: 429.html, content_type: "text/html; charset=utf-8"}
identity:
  jwt: {hs256_secret_file: secret, require_exp: true, max_age: 24h}
`))
	if err != nil {
		t.Fatal(err)
	}
	opts, err := c.LimiterOptions()
	if err != nil {
		t.Fatal(err)
	}
	if !opts.XRateLimit || opts.RetryAfterJitter != 2*time.Second || opts.DenyBody == nil ||
		opts.DenyBody.ContentType != "text/html; charset=utf-8" || string(opts.DenyBody.Body) != "<p>retry in {{retry_after}} s</p>\n" {
		t.Fatalf("options %+v, deny body %+v", opts, opts.DenyBody)
	}
	if c.Identity.JWT.MaxAge != 24*time.Hour || !c.Identity.JWT.RequireExp || len(opts.Authenticators) != 1 {
		t.Fatalf("jwt %+v", c.Identity.JWT)
	}
	// Off by default.
	c, err = Parse("empty.yaml", dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if opts, _ := c.LimiterOptions(); opts.XRateLimit || opts.RetryAfterJitter != 0 || opts.DenyBody != nil {
		t.Fatalf("defaults %+v", opts)
	}
}

// TestResponseOptionErrors: each mistake names its line and field, and all
// of them come in one pass.
func TestResponseOptionErrors(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "big.html"), make([]byte, maxDenyBody+1), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "latin1.txt"), []byte{'c', 0xe9}, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ yaml, want string }{
		{"retry_after_jitter: -1s\n", "r.yaml:1: retry_after_jitter: -1s: want 0s (off) up to 1h0m0s"},
		{"retry_after_jitter: 2h\n", "r.yaml:1: retry_after_jitter: 2h0m0s"},
		{"deny_body: {file: nothere.html, content_type: text/html}\n", "r.yaml:1: deny_body.file: cannot read it"},
		{"deny_body: {file: big.html, content_type: text/html}\n", "want a smaller file"},
		{"deny_body:\n  file: big.html\n", "r.yaml:2: deny_body.content_type: missing"},
		{"deny_body: {content_type: text/html}\n", "deny_body.content_type: set without deny_body.file"},
		{"deny_body: {file: latin1.txt, content_type: \"text/plain; charset=utf-8\"}\n", "is not UTF-8 text"},
		{"deny_body: {file: big.html, content_type: \"text/html; ===\"}\n", "is not a media type"},
		{"identity: {jwt: {require_exp: true}}\n", "r.yaml:1: identity.jwt.require_exp: set, but no JWT key is configured"},
		{"identity:\n  jwt:\n    max_age: 1h\n", "r.yaml:3: identity.jwt.max_age: set, but no JWT key"},
		{"identity: {jwt: {max_age: -1h}}\n", "identity.jwt.max_age: -1h0m0s: want 0s (no bound)"},
		{"identity: {jwt: {require_exp: maybe}}\n", `identity.jwt.require_exp: "maybe": want true or false`},
		{"x_ratelimit_header: true\n", `did you mean "x_ratelimit_headers"`},
	} {
		_, err := Parse("r.yaml", dir, []byte(tc.yaml))
		var errs Errors
		if !errors.As(err, &errs) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want one containing %q", tc.yaml, err, tc.want)
		}
	}
	// Several at once.
	_, err := Parse("r.yaml", dir, []byte("retry_after_jitter: -1s\ndeny_body: {content_type: text/html}\nidentity: {jwt: {max_age: 1h}}\n"))
	if n := strings.Count(err.Error(), "r.yaml:"); n != 3 {
		t.Errorf("%d errors in %v, want 3", n, err)
	}
}
