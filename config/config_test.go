package config

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/httplimit"
)

func TestExampleIsValid(t *testing.T) {
	c, err := Load("../examples/sluice.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Policies) < 2 || c.Store.Type != "memory" || c.Store.Redis.Timeout != 50*time.Millisecond {
		t.Fatalf("example read as %+v", c)
	}
	opts, err := c.LimiterOptions()
	if err != nil {
		t.Fatal(err)
	}
	p := opts.Policies[0]
	if p.Name != "payments" || p.Pattern != "POST /payments/" || p.Cost != 1 || len(p.Authenticated) != 2 ||
		p.Authenticated[1].Burst != 10000 || len(p.Overrides) != 1 || p.Overrides[0].Rules[0].Burst != 500 {
		t.Fatalf("payments policy %+v", p)
	}
	if got := opts.Policies[1].Anonymous[0]; got.Rate != 20 || got.Burst != 100 || opts.Policies[1].Cost != 1 {
		t.Fatalf("products rule %+v", got)
	}
}

func TestEmptyConfig(t *testing.T) {
	for _, data := range []string{"", "# nothing\n", "{}\n", "policies: []\n"} {
		c, err := Parse("empty.yaml", ".", []byte(data))
		if err != nil {
			t.Fatalf("%q: %v", data, err)
		}
		if c.Listen != "127.0.0.1:8080" || c.AdminListen != "127.0.0.1:9090" || c.Store.Type != "memory" ||
			c.Store.OnError != "local" || c.Headers != "both" || c.IPv6Prefix != 64 || c.Identity.APIKeyHeader != "X-API-Key" {
			t.Fatalf("defaults: %+v", c)
		}
	}
}

func TestMinimalPolicy(t *testing.T) {
	c, err := Parse("min.yaml", ".", []byte("policies:\n  - {name: a, match: /, anonymous: [{rate: 0.5/s, burst: 1}]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	opts, _ := c.LimiterOptions()
	if p := opts.Policies[0]; p.Cost != 1 || p.Shadow || p.OnError != httplimit.FailLocal || p.Anonymous[0].Rate != 0.5 {
		t.Fatalf("%+v", p)
	}
}

// TestBadFiles holds each kind of mistake to its message: the file, the
// line, the field and what would be valid.
func TestBadFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("short.secret", "too short\n")
	write("keys.txt", "# comment\nnot-a-digest\n")
	// The same key twice, spelt in another case the second time (hex
	// digits are one digest either way), with another identity and plan.
	const digest = "2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae"
	write("dupkeys.txt", digest+" alice free\n\n# comment\n"+strings.Repeat("ab", 32)+" bob\n"+strings.ToUpper(digest)+" mallory pro\n")
	write("longkeys.txt", strings.Repeat("a", 70<<10)+"\n")
	write("private.pem", "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n")

	const pol = "policies:\n  - name: api\n    match: \"GET /api/\"\n"
	for _, tc := range []struct {
		name, data string
		want       []string // substrings of the message
	}{
		{"unknown top-level field", "listen: 127.0.0.1:8080\nstoer: {}\n", []string{"bad.yaml:2: stoer: unknown field", `did you mean "store"`}},
		{"unknown policy field", pol + "    anonymous: [{rate: 1/s, burst: 1}]\n    burts: 3\n", []string{"bad.yaml:5: policies[0].burts: unknown field", "valid here: name, match"}},
		{"unknown rule field", pol + "    anonymous: [{rate: 1/s, burst: 1, cost: 2}]\n", []string{"bad.yaml:4: policies[0].anonymous[0].cost: unknown field", "valid here: rate, burst"}},
		{"bad rate unit", pol + "    anonymous:\n      - rate: 10/x\n        burst: 5\n", []string{"bad.yaml:5: policies[0].anonymous[0].rate:", `"10/x"`, "want COUNT/UNIT such as 10/s"}},
		{"rate without unit", pol + "    anonymous: [{rate: \"10\", burst: 5}]\n", []string{"bad.yaml:4: policies[0].anonymous[0].rate:", "no '/'"}},
		{"zero rate", pol + "    anonymous: [{rate: 0/s, burst: 5}]\n", []string{"bad.yaml:4: policies[0].anonymous[0].rate:", "greater than zero"}},
		{"burst 0", pol + "    anonymous:\n      - rate: 1/s\n        burst: 0\n", []string{"bad.yaml:6: policies[0].anonymous[0].burst: 0: want an integer of at least 1"}},
		{"burst missing", pol + "    anonymous: [{rate: 1/s}]\n", []string{"bad.yaml:4: policies[0].anonymous[0].burst: missing"}},
		{"burst not a number", pol + "    anonymous: [{rate: 1/s, burst: lots}]\n", []string{"bad.yaml:4: policies[0].anonymous[0].burst: \"lots\": want an integer"}},
		{"cost above burst", pol + "    cost: 10\n    authenticated:\n      - {rate: 1/s, burst: 5}\n", []string{"bad.yaml:6: policies[0].authenticated[0].burst: 5 is below the policy's cost 10"}},
		{"negative cost", pol + "    cost: -1\n    anonymous: [{rate: 1/s, burst: 5}]\n", []string{"bad.yaml:4: policies[0].cost: -1: want 0 or more"}},
		{"no rules", pol, []string{"bad.yaml:2: policies[0]: no rules"}},
		{"bad pattern", "policies:\n  - name: api\n    match: \"GET /api/{id\"\n    anonymous: [{rate: 1/s, burst: 1}]\n", []string{"bad.yaml:3: policies[0].match:", "ServeMux pattern"}},
		{"bad method", "policies:\n  - name: api\n    match: \"G@T /api/\"\n    anonymous: [{rate: 1/s, burst: 1}]\n", []string{"bad.yaml:3: policies[0].match:"}},
		{"missing match", "policies:\n  - name: api\n    anonymous: [{rate: 1/s, burst: 1}]\n", []string{"bad.yaml:2: policies[0].match: missing"}},
		{"conflicting patterns", "policies:\n  - {name: a, match: \"GET /x/\", anonymous: [{rate: 1/s, burst: 1}]}\n  - {name: b, match: \"GET /x/\", anonymous: [{rate: 1/s, burst: 1}]}\n", []string{"bad.yaml:3: policies[1].match:", "policies[0].match"}},
		{"duplicate names", "policies:\n  - {name: a, match: \"GET /x/\", anonymous: [{rate: 1/s, burst: 1}]}\n  - {name: a, match: \"GET /y/\", anonymous: [{rate: 1/s, burst: 1}]}\n", []string{"bad.yaml:3: policies[1].name:", "also the name of policies[0] (line 2)"}},
		{"name with a quote", "policies:\n  - {name: 'a\"b', match: /, anonymous: [{rate: 1/s, burst: 1}]}\n", []string{"bad.yaml:2: policies[0].name:", "printable ASCII"}},
		{"missing name", "policies:\n  - {match: \"GET /x/\", anonymous: [{rate: 1/s, burst: 1}]}\n", []string{"bad.yaml:2: policies[0].name: missing"}},
		{"bad mode", pol + "    anonymous: [{rate: 1/s, burst: 1}]\n    mode: dry-run\n", []string{"bad.yaml:5: policies[0].mode: \"dry-run\": want one of enforce, shadow"}},
		{"bad algorithm", pol + "    anonymous: [{rate: 1/s, burst: 1}]\n    algorithm: sliding_door\n", []string{"bad.yaml:5: policies[0].algorithm:", "want one of token_bucket, fixed_window"}},
		{"pacing a window", pol + "    anonymous: [{rate: 1/s, burst: 1}]\n    algorithm: fixed_window\n    max_delay: 1s\n", []string{"bad.yaml:6: policies[0].max_delay:", "does not pace"}},
		{"negative max_delay", pol + "    anonymous: [{rate: 1/s, burst: 1}]\n    max_delay: -1s\n", []string{"bad.yaml:5: policies[0].max_delay: -1s: want 0s"}},
		{"bad duration", pol + "    anonymous: [{rate: 1/s, burst: 1}]\n    max_delay: soon\n", []string{"bad.yaml:5: policies[0].max_delay: \"soon\": want a duration"}},
		{"bad headers", "headers: all\n", []string{"bad.yaml:1: headers: \"all\": want one of legacy, draft, both, none"}},
		{"bad store type", "store:\n  type: etcd\n", []string{"bad.yaml:2: store.type: \"etcd\": want one of memory, redis"}},
		{"bad on_error", "store:\n  on_error: maybe\n", []string{"bad.yaml:2: store.on_error: \"maybe\": want one of open, closed, local"}},
		{"negative timeout", "store:\n  redis: {timeout: -5ms}\n", []string{"bad.yaml:2: store.redis.timeout: -5ms"}},
		{"redis without address", "store:\n  type: redis\n", []string{"bad.yaml:2: store.redis:", "want e.g. url: redis://"}},
		{"bad redis url", "store:\n  type: redis\n  redis:\n    url: http://x\n", []string{"bad.yaml:4: store.redis.url:", "redis://"}},
		{"half a sentinel", "store:\n  type: redis\n  redis:\n    sentinel: {master: mymaster}\n", []string{"bad.yaml:4: store.redis.sentinel: want both master and addrs"}},
		{"bad cidr", "trusted_proxies: [10.0.0.0/8, 10.0.0/33]\n", []string{"bad.yaml:1: trusted_proxies[1]: \"10.0.0/33\": want a CIDR"}},
		{"bad listen", "listen: 8080\n", []string{"bad.yaml:1: listen: \"8080\": want HOST:PORT"}},
		{"bad upstream", "upstream: 127.0.0.1:3000\n", []string{"bad.yaml:1: upstream:", "http://"}},
		{"bad ipv6 prefix", "ipv6_prefix: 200\n", []string{"bad.yaml:1: ipv6_prefix: 200"}},
		{"unreadable keys file", "identity:\n  api_keys_file: /nonexistent/keys.txt\n", []string{"bad.yaml:2: identity.api_keys_file: cannot read", "no such file"}},
		{"bad key digest", "identity:\n  api_keys_file: keys.txt\n", []string{"bad.yaml:2: identity.api_keys_file:", "keys.txt:2: want a SHA-256 hex digest"}},
		{"duplicate key", "identity:\n  api_keys_file: dupkeys.txt\n", []string{"bad.yaml:2: identity.api_keys_file:", "dupkeys.txt:5: the same key (SHA-256 digest) as line 1"}},
		{"key line too long", "identity:\n  api_keys_file: longkeys.txt\n", []string{"bad.yaml:2: identity.api_keys_file:", "longkeys.txt: bufio.Scanner: token too long"}},
		{"unreadable secret", "identity:\n  jwt: {hs256_secret_file: missing.secret}\n", []string{"bad.yaml:2: identity.jwt.hs256_secret_file: cannot read"}},
		{"short secret", "identity:\n  jwt:\n    hs256_secret_file: short.secret\n", []string{"bad.yaml:3: identity.jwt.hs256_secret_file:", "want at least 32"}},
		{"private key as public", "identity:\n  jwt:\n    public_key_file: private.pem\n", []string{"bad.yaml:3: identity.jwt.public_key_file:", "never a private key"}},
		{"override without identity", pol + "    anonymous: [{rate: 1/s, burst: 1}]\n    overrides: [{authenticated: [{rate: 1/s, burst: 1}]}]\n", []string{"bad.yaml:5: policies[0].overrides[0].identity: missing"}},
		{"list where mapping", "store: [memory]\n", []string{"bad.yaml:1: store: want a mapping"}},
		{"mapping where list", "policies: {name: a}\n", []string{"bad.yaml:1: policies: want a list"}},
		{"field twice", "listen: 127.0.0.1:1\nlisten: 127.0.0.1:2\n", []string{"bad.yaml:2: listen: set twice"}},
		{"not yaml", "policies: [\n", []string{"bad.yaml", "not valid YAML"}},
		{"two documents", "listen: 127.0.0.1:1\n---\nlisten: 127.0.0.1:2\n", []string{"bad.yaml:", "second YAML document"}},
		{"admin on the traffic listener", "listen: 127.0.0.1:8080\nadmin_listen: 127.0.0.1:8080\n", []string{"bad.yaml:2: admin_listen: \"127.0.0.1:8080\" is also the traffic listener"}},
		{"a second document of garbage", "listen: 127.0.0.1:1\n---\ngarbage: [[[\n", []string{"bad.yaml:", "a second YAML document, and not valid YAML"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("bad.yaml", dir, []byte(tc.data))
			if err == nil {
				t.Fatalf("accepted:\n%s", tc.data)
			}
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("error %T is no FieldError: %v", err, err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("message\n  %s\nlacks %q", err, w)
				}
			}
		})
	}
}

func TestAllErrorsReported(t *testing.T) {
	_, err := Parse("bad.yaml", ".", []byte("headers: all\nstore: {type: etcd}\npolicies:\n  - {name: a, match: /, anonymous: [{rate: 1/q, burst: 0}]}\n"))
	var es Errors
	if !errors.As(err, &es) || len(es) != 4 {
		t.Fatalf("want 4 errors, got %v", err)
	}
	for i := 1; i < len(es); i++ {
		if es[i].Line < es[i-1].Line {
			t.Fatalf("errors not in line order: %v", err)
		}
	}
}

func TestKeyFiles(t *testing.T) {
	dir := t.TempDir()
	sum := sha256.Sum256([]byte("secret-key-1"))
	sum2 := sha256.Sum256([]byte("secret-key-2"))
	keys := "# digests of our keys\n" + hex.EncodeToString(sum[:]) + " tenant-acme\n\n" + strings.ToUpper(hex.EncodeToString(sum2[:])) + "\n"
	if err := os.WriteFile(filepath.Join(dir, "keys.txt"), []byte(keys), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "hs.secret"), []byte(strings.Repeat("s", 40)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	edPub, _, _ := ed25519.GenerateKey(rand.Reader)
	for name, pub := range map[string]any{"ec.pem": &ec.PublicKey, "ed.pem": edPub} {
		der, err := x509.MarshalPKIXPublicKey(pub)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, jwt := range []string{"hs256_secret_file: hs.secret", "public_key_file: ec.pem", "public_key_file: ed.pem"} {
		data := "identity:\n  api_keys_file: keys.txt\n  jwt: {" + jwt + "}\n"
		if err := os.WriteFile(filepath.Join(dir, "sluice.yaml"), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		c, err := Load(filepath.Join(dir, "sluice.yaml"))
		if err != nil {
			t.Fatalf("%s: %v", jwt, err)
		}
		if c.keys.apiKeys[sum].ID != "tenant-acme" || !strings.HasPrefix(c.keys.apiKeys[sum2].ID, "key:") {
			t.Fatalf("keys %v", c.keys.apiKeys)
		}
		opts, err := c.LimiterOptions()
		if err != nil || len(opts.Authenticators) != 2 {
			t.Fatalf("%s: %d authenticators, %v", jwt, len(opts.Authenticators), err)
		}
	}
}

func FuzzParse(f *testing.F) {
	example, err := os.ReadFile("../examples/sluice.yaml")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(string(example))
	f.Add("policies:\n  - {name: a, match: \"GET /{x}/\", anonymous: [{rate: 1/s, burst: 1}]}\n")
	f.Add("store: &a {type: memory}\nidentity: *a\n")
	f.Add("policies: [{name: a, match: /, cost: 99999999999999999999, anonymous: [{rate: 1e308/s, burst: 1}]}]")
	f.Add("listen: [\n")
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data string) {
		c, err := Parse("fuzz.yaml", dir, []byte(data))
		if err == nil {
			if _, err := c.LimiterOptions(); err != nil {
				t.Fatalf("valid config but no limiter options: %v", err)
			}
		}
	})
}

// TestExposureWarnings: valid files that open the gateway to every
// client are accepted with a warning that says how: the decision API on
// the traffic listener without a token, and a trusted proxy of /0.
func TestExposureWarnings(t *testing.T) {
	for _, tc := range []struct{ data, want string }{
		{"decision_api: {on_traffic_listener: true}\n", "bad.yaml:1: decision_api.on_traffic_listener: true without decision_api.token_file"},
		{"forwarded_header: x-forwarded-for\ntrusted_proxies: [10.0.0.0/8, 0.0.0.0/0]\n", `bad.yaml:2: trusted_proxies[1]: "0.0.0.0/0" trusts every address`},
		{"forwarded_header: forwarded\ntrusted_proxies:\n  - ::/0\n", `bad.yaml:3: trusted_proxies[0]: "::/0" trusts every address`},
	} {
		c, err := Parse("bad.yaml", t.TempDir(), []byte(tc.data+"policies: [{name: all, match: /, anonymous: [{rate: 1/s, burst: 1}]}]\n"))
		if err != nil {
			t.Fatalf("%q: %v", tc.data, err)
		}
		if got := strings.Join(c.Warnings, "\n"); !strings.Contains(got, tc.want) {
			t.Errorf("%q: warnings %q, want %q", tc.data, got, tc.want)
		}
	}
	c, err := Parse("ok.yaml", t.TempDir(), []byte("forwarded_header: forwarded\ntrusted_proxies: [10.0.0.0/8]\npolicies: [{name: all, match: /, anonymous: [{rate: 1/s, burst: 1}]}]\n"))
	if err != nil || len(c.Warnings) != 0 {
		t.Fatalf("a proxy of /8: %v %q", err, c.Warnings)
	}
}

// TestLoadRefusesHugeFiles: a file of many MB is refused before it is
// decoded (100 MB took 5 s and a GB of memory to reach its error).
func TestLoadRefusesHugeFiles(t *testing.T) {
	path := filepath.Join(t.TempDir(), "huge.yaml")
	data := "policies: []\n# " + strings.Repeat("x", maxFileBytes) + "\n"
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(path); err == nil || !strings.Contains(err.Error(), "larger than 8 MiB") {
		t.Fatalf("Load = %v", err)
	}
	if err := os.WriteFile(path, []byte("policies: []\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(path); err != nil {
		t.Fatalf("a small file: %v", err)
	}
}
