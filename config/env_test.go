package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeConfig writes data as sluice.yaml in a new directory and returns
// its path.
func writeConfig(t *testing.T, data string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestEnvExpansion: ${VAR} and ${VAR:-default} in several kinds of field,
// $$ as a literal dollar, a lone $ kept, keys never expanded.
func TestEnvExpansion(t *testing.T) {
	path := writeConfig(t, `store:
  type: redis
  redis: {url: "redis://app:${SLUICE_TEST_REDIS_PW}@127.0.0.1:${SLUICE_TEST_REDIS_PORT:-6379}/${SLUICE_TEST_DB:-0}"}
admin: {token_file: "${SLUICE_TEST_ADMIN_TOKEN_FILE}"}
identity:
  jwt: {issuer: "https://issuer.example/$${NOT_A_VAR}/$$/a$b", audience: "${SLUICE_TEST_EMPTY:-}"}
policies:
  - name: api
    match: /
    anonymous: [{rate: "${SLUICE_TEST_RATE}", burst: "${SLUICE_TEST_BURST:-7}"}]
`)
	tokenFile := filepath.Join(filepath.Dir(path), "admin.token")
	if err := os.WriteFile(tokenFile, []byte("an-admin-token-of-enough-length-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SLUICE_TEST_REDIS_PW", "pa$$w0rd-x")
	t.Setenv("SLUICE_TEST_REDIS_PORT", "6390")
	t.Setenv("SLUICE_TEST_DB", "") // set but empty: the default
	t.Setenv("SLUICE_TEST_ADMIN_TOKEN_FILE", tokenFile)
	t.Setenv("SLUICE_TEST_RATE", "5/s")
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	// A value is expanded once: the $$ in the password stays two dollars.
	if got, want := c.Store.Redis.URL, "redis://app:pa$$w0rd-x@127.0.0.1:6390/0"; got != want {
		t.Errorf("store.redis.url = %q, want %q", got, want)
	}
	if c.Admin.TokenFile != tokenFile || len(c.Admin.token) == 0 {
		t.Errorf("admin.token_file = %q (token read: %v), want %q", c.Admin.TokenFile, len(c.Admin.token) > 0, tokenFile)
	}
	if got := c.Policies[0].Anonymous[0]; got.Rate != "5/s" || got.Burst != 7 {
		t.Errorf("rule = %+v, want rate 5/s and the default burst 7", got)
	}
	if got, want := c.Identity.JWT.Issuer, "https://issuer.example/${NOT_A_VAR}/$/a$b"; got != want {
		t.Errorf("issuer = %q, want %q", got, want)
	}
	if c.Identity.JWT.Audience != "" {
		t.Errorf("audience = %q, want the empty default", c.Identity.JWT.Audience)
	}

	// Keys are not values: a ${...} key is an unknown field, as written.
	_, err = Parse("keys.yaml", ".", []byte("${SLUICE_TEST_RATE}: 1\npolicies: []\n"))
	if err == nil || !strings.Contains(err.Error(), `keys.yaml:1: ${SLUICE_TEST_RATE}: unknown field`) {
		t.Fatalf("a ${...} key: %v, want it reported as an unknown field", err)
	}
}

// TestEnvUnset: a variable unset without a default is an error naming the
// file, the line, the field and the variable; so are malformed ones.
func TestEnvUnset(t *testing.T) {
	os.Unsetenv("SLUICE_TEST_UNSET") // not t.Setenv: the test needs it absent
	cases := []struct{ yaml, want string }{
		{"policies:\n  - name: api\n    match: /\n    anonymous: [{rate: \"${SLUICE_TEST_UNSET}\", burst: 1}]\n",
			"env.yaml:4: policies[0].anonymous[0].rate: ${SLUICE_TEST_UNSET} is not set in the environment and has no default; set SLUICE_TEST_UNSET or write ${SLUICE_TEST_UNSET:-default}"},
		{"upstream: http://${SLUICE_TEST_HOST\npolicies: []\n",
			"env.yaml:1: upstream: a ${ without its closing }; want ${VAR} or ${VAR:-default}, or $${ for a literal ${"},
		{"upstream: http://${1HOST}\npolicies: []\n",
			`env.yaml:1: upstream: "1HOST" in ${...}: want a variable name`},
		{"upstream: http://${}\npolicies: []\n",
			`env.yaml:1: upstream: "" in ${...}: want a variable name`},
	}
	for _, c := range cases {
		_, err := Parse("env.yaml", ".", []byte(c.yaml))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q:\n got %v\nwant %s", c.yaml, err, c.want)
		}
		// The field is reported once: its value, left unexpanded, is not
		// checked again as an invalid rate or URL.
		var es Errors
		if errors.As(err, &es) && len(es) != 1 {
			t.Errorf("%q: %d errors, want the one:\n%v", c.yaml, len(es), err)
		}
	}
}

// TestEnvValuesNeverShown: an error about a value that came from the
// environment names the variable, never the value, whichever check finds
// it: decoding, validation, or a warning.
func TestEnvValuesNeverShown(t *testing.T) {
	const secret = "hunter2-s3cret"
	cases := []struct {
		name, yaml, value, want string
	}{
		{"rate", "policies:\n  - {name: api, match: /, anonymous: [{rate: \"${SLUICE_TEST_V}\", burst: 1}]}\n",
			"10/" + secret, "policies[0].anonymous[0].rate: rate \"${SLUICE_TEST_V}\""},
		{"integer", "policies:\n  - {name: api, match: /, anonymous: [{rate: 1/s, burst: \"${SLUICE_TEST_V}\"}]}\n",
			secret, `"${SLUICE_TEST_V}": want an integer`},
		{"short integer", "policies:\n  - {name: api, match: /, anonymous: [{rate: 1/s, burst: \"${SLUICE_TEST_V}\"}]}\n",
			"x", `"${SLUICE_TEST_V}": want an integer`},
		{"redis url", "store: {type: redis, redis: {url: \"${SLUICE_TEST_V}\"}}\npolicies: []\n",
			"redis://:" + secret + "@[::1/0", "store.redis.url: \"${SLUICE_TEST_V}\""},
		{"part of a url", "store: {type: redis, redis: {url: \"redis://app:${SLUICE_TEST_V}@127.0.0.1:6379/x\"}}\npolicies: []\n",
			secret, "database"},
		{"list wanted", "trusted_proxies: \"${SLUICE_TEST_V}\"\npolicies: []\n",
			secret, `want a list (- item, or [a, b]), not "${SLUICE_TEST_V}"`},
		{"key file", "identity: {api_keys_file: \"${SLUICE_TEST_V}\"}\npolicies: []\n",
			"/nonexistent/" + secret, "${SLUICE_TEST_V}"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("SLUICE_TEST_V", c.value)
			_, err := Parse("env.yaml", t.TempDir(), []byte(c.yaml))
			if err == nil {
				t.Fatal("accepted")
			}
			if strings.Contains(err.Error(), c.value) {
				t.Fatalf("the value from the environment is in the error:\n%v", err)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error:\n%v\nwant it to contain %s", err, c.want)
			}
			var es Errors
			if !errors.As(err, &es) || es[0].Line == 0 || es[0].Field == "" {
				t.Fatalf("not a FieldError with line and field: %#v", err)
			}
		})
	}

	// Redact, for what the gateway logs, and the warnings (none of which
	// shows a value today: this holds the mechanism for the next one).
	t.Setenv("SLUICE_TEST_V", "/login-"+secret)
	c, err := Parse("env.yaml", ".", []byte("upstream: http://127.0.0.1:3000\npolicies:\n  - {name: login, match: \"POST ${SLUICE_TEST_V}\", anonymous: [{rate: 1/s, burst: 1}]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Redact("policies[0].match", c.Policies[0].Match); got != "POST ${SLUICE_TEST_V}" {
		t.Fatalf("Redact = %q", got)
	}
	warnings := []string{"env.yaml:3: policies[0].match: " + c.Policies[0].Match + " is odd"}
	c.env.redact(nil, warnings)
	if strings.Contains(warnings[0], secret) {
		t.Fatalf("the value from the environment is in a warning: %s", warnings[0])
	}
}

// TestIncomplete: what check-config and a reload treat as a file cut
// short.
func TestIncomplete(t *testing.T) {
	cases := []struct {
		yaml  string
		empty bool
		want  string // "" when complete
	}{
		{"", true, "the file is empty"},
		{"# only a comment\n\n", true, "the file is empty"},
		{"---\n", true, "the file is empty"},
		{"listen: 127.0.0.1:8080\nupstream: http://127.0.0.1:3000\n", false, "x.yaml: policies: missing"},
		{"upstream: http://127.0.0.1:3000\npolicies:\n", false, "x.yaml:2: policies: missing or without a value"},
		{"policies: ~\n", false, "policies: missing"},
		{"policies: []\n", false, ""},
		{"policies: [{name: a, match: /, anonymous: [{rate: 1/s, burst: 1}]}]\n", false, ""},
	}
	for _, c := range cases {
		cfg, err := Parse("x.yaml", ".", []byte(c.yaml))
		if err != nil {
			t.Fatalf("%q: %v", c.yaml, err)
		}
		f := cfg.Incomplete()
		switch {
		case cfg.Empty() != c.empty:
			t.Errorf("%q: Empty() = %v", c.yaml, cfg.Empty())
		case c.want == "" && f != nil:
			t.Errorf("%q: incomplete: %v", c.yaml, f)
		case c.want != "" && (f == nil || !strings.Contains(f.Error(), c.want)):
			t.Errorf("%q: %v, want %q", c.yaml, f, c.want)
		}
	}
}
