// Package config reads the YAML file that configures the sluice gateway
// (docs/http.md is its guide): listeners, upstream, store, trusted
// proxies, identity, allowlist and policies.
//
// Load reads and validates a file once, and reports every problem of the
// file in that one pass, each with the file, the line and the path of the
// field, saying what would be valid:
//
//	sluice.yaml:14: policies[0].anonymous[0].rate: rate "10/x": unknown unit "x"; want COUNT/UNIT such as 10/s …
//
// Unknown fields are errors (a typo never silently turns a limit off), and
// so are rates that do not parse, a burst below 1, a cost above a burst,
// match patterns that net/http's ServeMux would refuse or that conflict,
// duplicate policy names, key files that cannot be read, bad CIDRs,
// negative durations and unknown enum values. Every field has a default,
// so an empty file is a valid configuration: an in-memory store, the decision
// API only, and no policies.
//
// Beside the fields every gateway sets, the file may set:
//   - ipv6_prefix: how many leading bits of an IPv6 client key it (64);
//   - store.max_keys: the bound of the in-memory store (a million keys);
//   - identity.jwt.issuer and audience: claims a token must carry;
//   - identity.jwt.require_exp and max_age: refuse tokens without exp, or
//     issued (iat) longer ago than max_age;
//   - x_ratelimit_headers, retry_after_jitter and deny_body: what 429s and
//     the headers look like beside headers: (see headers.go);
//   - per policy on_error (overrides store.on_error), cost_header (a
//     response header in which the upstream reports the real cost, charged
//     after the fact) and algorithm (token_bucket, the default, or one of
//     package algo's: fixed_window, sliding_log, sliding_window,
//     leaky_bucket);
//   - store.redis.username, password_file and password_env: the Redis
//     password kept out of the file;
//   - allowlist: client CIDRs and identities that no policy limits.
//   - per policy plans, with identity.jwt.plan_claim and
//     identity.default_plan: authenticated rules by the plan a verified
//     credential names (plans.go).
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/redisstore"
)

// Config is one gateway configuration. Load fills it from a file and
// validates it; its zero value (after Defaults) is a valid configuration.
type Config struct {
	Listen          string   `yaml:"listen"`       // traffic listener; default 127.0.0.1:8080
	AdminListen     string   `yaml:"admin_listen"` // /metrics /healthz /readyz; default 127.0.0.1:9090
	Upstream        string   `yaml:"upstream"`     // reverse proxy target; empty: decision API only
	Store           Store    `yaml:"store"`
	TrustedProxies  []string `yaml:"trusted_proxies"`  // CIDRs (or single addresses)
	ForwardedHeader string   `yaml:"forwarded_header"` // what they write: x-forwarded-for | forwarded (required with them)
	Paths           Paths    `yaml:"paths"`            // how paths are normalised (paths.go)
	Headers         string   `yaml:"headers"`          // legacy | draft | both | none; default both
	IPv6Prefix      int      `yaml:"ipv6_prefix"`      // bits that key an IPv6 client; default 64
	Identity        Identity `yaml:"identity"`
	Policies        []Policy `yaml:"policies"`
	QuotaTimeZone   string   `yaml:"quota_time_zone"` // IANA zone where quotas' days begin; default UTC (quota.go)

	// Allowlist names callers never limited, such as health checkers.
	Allowlist   Allowlist   `yaml:"allowlist"`
	DecisionAPI DecisionAPI `yaml:"decision_api"` // POST /v1/check: its listener and token (decisionapi.go)
	Admin       Admin       `yaml:"admin"`        // the admin API's token and overrides file (admin.go)
	Server      Server      `yaml:"server"`       // timeouts and bounds of the listeners (server.go)
	AccessLog   AccessLog   `yaml:"access_log"`   // one line per request on the traffic listener (accesslog.go)
	EnvoyRLS    EnvoyRLS    `yaml:"envoy_rls"`    // Envoy's rate limit service, gRPC (envoyrls.go)
	Reload      Reload      `yaml:"reload"`       // watch the files and reload on change (reload.go)
	TLS         *TLS        `yaml:"tls"`          // TLS on every listener; a listener's own tls replaces it (tls.go)
	// What 429s and the headers look like beside headers: (see headers.go).
	XRateLimitHeaders bool          `yaml:"x_ratelimit_headers"` // also X-RateLimit-Limit, -Remaining, -Reset
	RetryAfterJitter  time.Duration `yaml:"retry_after_jitter"`  // up to this much added to a 429's Retry-After
	DenyBody          DenyBody      `yaml:"deny_body"`           // a 429 body of your own

	// File is the path the configuration was read from, for messages.
	File string `yaml:"-"`
	// Warnings are what is valid but probably not meant, as FILE:LINE:
	// FIELD: message lines (paths.go); check-config prints them.
	Warnings []string `yaml:"-"`

	keys keyMaterial
	// identityFiles are the files of identity read at load, as paths
	// resolved against the file's directory (IdentityFiles).
	identityFiles []string
	// empty: the file holds no YAML value at all (nothing, or only
	// comments); policiesSet: it has a policies key, even an empty one.
	empty, policiesSet bool
	policiesLine       int
	env                *envValues // what came from the environment (env.go)
}

// Store says where the buckets live and what happens when that fails.
type Store struct {
	Type      string `yaml:"type"` // memory | redis; default memory
	Redis     Redis  `yaml:"redis"`
	OnError   string `yaml:"on_error"`  // local | open | closed; default local
	Instances int    `yaml:"instances"` // expected gateways, for on_error: local; default 1
	MaxKeys   int    `yaml:"max_keys"`  // cap of the in-memory store (and the local fallback); default 1000000

	onError sluice.OnError // OnError, parsed by Load
}

// FailurePolicy returns store.on_error as Load parsed it, the one parse of
// it: the default failure policy of every policy and Envoy limit.
func (s *Store) FailurePolicy() sluice.OnError { return s.onError }

// Redis reaches a standalone server, a Cluster or a Sentinel setup.
type Redis struct {
	URL          string        `yaml:"url"`
	ClusterAddrs []string      `yaml:"cluster_addrs"`
	Sentinel     Sentinel      `yaml:"sentinel"`
	Timeout      time.Duration `yaml:"timeout"` // default 50ms
	// PoolSize is the connections kept per Redis node; 0: sluice's own,
	// sized to the calls it sends at once.
	PoolSize int      `yaml:"pool_size"`
	TLS      RedisTLS `yaml:"tls"`
	// Username of an ACL user, and where its password is: a file
	// (password_file, relative to the configuration file; a trailing
	// newline is dropped) or an environment variable (password_env), so
	// that the YAML holds no secret. They win over a user and password in
	// the url; the password is never printed.
	Username     string `yaml:"username"`
	PasswordFile string `yaml:"password_file"`
	PasswordEnv  string `yaml:"password_env"`
	Password     Secret `yaml:"-"` // read from PasswordFile or PasswordEnv by Load
	// Coalesce sends concurrent checks to Redis together, one script call
	// a batch (see redisstore.Coalesce): fewer round trips and less Redis
	// CPU under load, the same answers. Unset means on (CoalesceOn).
	Coalesce *bool `yaml:"coalesce"`
}

// RedisTLS holds the files of a TLS connection to Redis (rediss:// turns
// TLS on; a managed service's public certificate needs none of them).
// Relative paths are relative to the configuration file.
type RedisTLS struct {
	CAFile   string `yaml:"ca_file"`   // PEM CA that signed the server's certificate
	CertFile string `yaml:"cert_file"` // client certificate, when the server asks for one
	KeyFile  string `yaml:"key_file"`
}

// Sentinel names the master and the sentinels that know it.
type Sentinel struct {
	Master string   `yaml:"master"`
	Addrs  []string `yaml:"addrs"`
	// Username and Password authenticate to the sentinels themselves
	// (`sluice ratelimit`'s REDIS_SENTINEL_AUTH); the master's are
	// Redis.Username and Password.
	Username string `yaml:"-"`
	Password Secret `yaml:"-"`
}

// Identity says how authenticated callers are recognised. A credential
// that does not verify is ignored: its caller gets the anonymous limit.
type Identity struct {
	APIKeyHeader string `yaml:"api_key_header"` // default X-API-Key
	APIKeysFile  string `yaml:"api_keys_file"`  // lines of "SHA256HEX [identity [plan]]"
	JWT          JWT    `yaml:"jwt"`
	DefaultPlan  string `yaml:"default_plan"` // the plan of a verified caller whose plan a policy lacks (plans.go)
}

// JWT verifies bearer tokens; the subject (sub) is the identity.
type JWT struct {
	Header          string `yaml:"header"`            // default Authorization ("Bearer " is optional)
	HS256SecretFile string `yaml:"hs256_secret_file"` // shared secret for HS256
	PublicKeyFile   string `yaml:"public_key_file"`   // PEM RSA, ECDSA or Ed25519 public key
	Issuer          string `yaml:"issuer"`            // when set, iss must equal it
	Audience        string `yaml:"audience"`          // when set, aud must contain it

	RequireExp bool          `yaml:"require_exp"` // refuse tokens without exp
	MaxAge     time.Duration `yaml:"max_age"`     // > 0: refuse tokens issued (iat) longer ago, or without iat
	PlanClaim  string        `yaml:"plan_claim"`  // the string claim naming the caller's plan (plans.go)
}

// Policy limits the requests that its match pattern selects.
type Policy struct {
	Name          string        `yaml:"name"`
	Match         string        `yaml:"match"` // net/http ServeMux pattern, e.g. "POST /payments/"
	Cost          *int64        `yaml:"cost"`  // tokens per request; default 1
	CostHeader    string        `yaml:"cost_header"`
	Anonymous     []Rule        `yaml:"anonymous"`
	Authenticated []Rule        `yaml:"authenticated"`
	MaxDelay      time.Duration `yaml:"max_delay"`
	Mode          string        `yaml:"mode"`     // enforce | shadow; default enforce
	OnError       string        `yaml:"on_error"` // default: store.on_error
	Algorithm     string        `yaml:"algorithm"`
	Overrides     []Override    `yaml:"overrides"`
	Key           Key           `yaml:"key"`   // global, or attributes such as [{header: X-Tenant}] (key.go)
	Plans         Plans         `yaml:"plans"` // authenticated rules by plan (plans.go)
	Lease         *Lease        `yaml:"lease"` // leases of a key's tokens from Redis (store.type redis, token_bucket)

	parsed parsedPolicy // its rules and on_error, parsed by Load (validate.go)
}

// Lease is a policy's opt-in to leases (redisstore.Lease): each instance
// takes Tokens of a key at once from the Redis bucket and decides locally
// until they are spent or TTL has passed.
type Lease struct {
	Tokens int64         `yaml:"tokens"`
	TTL    time.Duration `yaml:"ttl"`
}

// RedisLease is l as the Redis store takes it.
func (l Lease) RedisLease() redisstore.Lease { return redisstore.Lease{Tokens: l.Tokens, TTL: l.TTL} }

// Rule is one token bucket as written: a rate such as 10/s and a burst;
// or a calendar quota such as 100000/month (quota.go).
type Rule struct {
	Rate  string `yaml:"rate"`
	Burst int64  `yaml:"burst"`
	Quota string `yaml:"quota"` // COUNT/day, /week or /month, in quota_time_zone; without rate and burst
}

// Override gives one authenticated identity rules of its own.
type Override struct {
	Identity      string `yaml:"identity"`
	Authenticated []Rule `yaml:"authenticated"`

	parsed []sluice.Rule // Authenticated, parsed by Load (validate.go)
}

// Load reads, defaults and validates the file at path. Relative key file
// paths are read relative to the file's directory. The error, when the
// file is invalid, is an Errors listing every problem.
func Load(path string) (*Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	defer f.Close()
	// A configuration is kilobytes: a file of 100 MB took 5 s and a GB of
	// memory to decode before its error.
	data, err := io.ReadAll(io.LimitReader(f, maxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	if len(data) > maxFileBytes {
		return nil, Errors{{File: path, Msg: fmt.Sprintf("larger than %d MiB: want a configuration, not data (keys and plans of many callers belong in api_keys_file or the admin API)", maxFileBytes>>20)}}
	}
	return Parse(path, filepath.Dir(path), data)
}

// maxFileBytes bounds a configuration file that Load reads.
const maxFileBytes = 8 << 20

// Parse is Load for data already in memory: name is used in messages and
// dir is where relative key file paths are read from.
func Parse(name, dir string, data []byte) (*Config, error) {
	c := &Config{File: name}
	d := &decoder{file: name, errs: new(Errors), lines: make(map[string]int), bad: make(map[string]bool)}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var root yaml.Node
	if err := dec.Decode(&root); err != nil && !errors.Is(err, io.EOF) {
		var te *yaml.TypeError
		if errors.As(err, &te) {
			return nil, Errors{{File: name, Msg: te.Error()}}
		}
		return nil, Errors{{File: name, Line: yamlErrorLine(err), Msg: "not valid YAML: " + err.Error()}}
	}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case err == nil:
		return nil, Errors{{File: name, Line: extra.Line, Msg: "a second YAML document; keep one configuration per file"}}
	case !errors.Is(err, io.EOF): // what follows a "---" is read too: it must not hide anything
		return nil, Errors{{File: name, Line: yamlErrorLine(err), Msg: "a second YAML document, and not valid YAML: " + err.Error() + "; keep one configuration per file"}}
	}
	if root.Kind != 0 {
		d.env = expandEnv(name, &root, d.errs, func(path string) { d.bad[path] = true })
		d.fromEnv = make(map[string][]envUse)
		d.decode(&root, reflect.ValueOf(c).Elem(), "")
	}
	c.empty = root.Kind == 0 || len(root.Content) == 0 || root.Content[0].Tag == "!!null"
	c.policiesSet, c.policiesLine = hasPolicies(&root), d.lines["policies"]
	if d.nodes > maxNodes {
		newEnvValues(d.fromEnv).redact(*d.errs, nil)
		return nil, d.errs.sorted()
	}
	// Validate even when decoding found mistakes, so that one pass reports
	// every mistake of the file; what decoding reported is not reported again.
	c.Defaults()
	v := &validator{c: c, file: name, dir: dir, lines: d.lines, errs: d.errs, skip: d.reported}
	v.validate()
	c.env = newEnvValues(d.fromEnv)
	c.env.redact(*d.errs, c.Warnings)
	if len(*d.errs) > 0 {
		return nil, d.errs.sorted()
	}
	return c, nil
}

// Defaults fills every unset field with its default.
func (c *Config) Defaults() {
	def := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	def(&c.Listen, "127.0.0.1:8080")
	def(&c.AdminListen, "127.0.0.1:9090")
	def(&c.Store.Type, "memory")
	def(&c.Store.OnError, "local")
	def(&c.Headers, "both")
	def(&c.ForwardedHeader, "auto")
	c.Paths.defaults()
	def(&c.Identity.APIKeyHeader, "X-API-Key")
	def(&c.Identity.JWT.Header, "Authorization")
	if c.Store.MaxKeys == 0 {
		c.Store.MaxKeys = 1_000_000
	}
	if c.Store.Instances == 0 {
		c.Store.Instances = 1
	}
	if c.Store.Redis.Timeout == 0 {
		c.Store.Redis.Timeout = 50 * time.Millisecond
	}
	if c.IPv6Prefix == 0 {
		c.IPv6Prefix = 64
	}
	c.DecisionAPI.defaults()
	c.AccessLog.defaults()
	c.Server.defaults()
	c.EnvoyRLS.defaults(c.Server)
	for i := range c.Policies {
		p := &c.Policies[i]
		if p.Cost == nil {
			one := int64(1)
			p.Cost = &one
		}
		def(&p.Mode, "enforce")
		def(&p.OnError, c.Store.OnError)
		def(&p.Algorithm, "token_bucket")
	}
}

func yamlErrorLine(err error) int {
	var line int
	if _, e := fmt.Sscanf(err.Error(), "yaml: line %d:", &line); e == nil {
		return line
	}
	return 0
}
