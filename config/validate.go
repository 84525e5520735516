package config

import (
	"bufio"
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/algo"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/decide"
	"github.com/sluicehq/sluice/redisstore"
)

// keyMaterial is what Load read from the key files and parsed.
type keyMaterial struct {
	proxies   []netip.Prefix
	apiKeys   map[[32]byte]decide.Caller // SHA-256 of a key -> the caller it stands for
	jwtSecret []byte
	jwtPublic crypto.PublicKey
	quotaZone *time.Location // quota_time_zone, loaded
}

// parsedPolicy is what Load parsed of a policy, held on the policy itself
// so that nothing looks it up again by its YAML path, nor parses it twice.
// A list of rules is nil when it is invalid (Load failed then), empty when
// none is written.
type parsedPolicy struct {
	anonymous     []sluice.Rule
	authenticated []sluice.Rule
	plans         map[string][]sluice.Rule // by plan name
	onError       sluice.OnError
}

type validator struct {
	c     *Config
	file  string
	dir   string
	lines map[string]int
	errs  *Errors
	skip  func(path string) bool // already reported while decoding
}

// fail reports a problem with the field at path, on the line where it is
// written (or the nearest enclosing field that is written).
func (v *validator) fail(path, format string, args ...any) {
	if v.skip != nil && v.skip(path) {
		return
	}
	v.errs.add(v.file, v.line(path), path, fmt.Sprintf(format, args...))
}

func (v *validator) line(path string) int {
	for p := path; p != ""; {
		if l, ok := v.lines[p]; ok {
			return l
		}
		i := strings.LastIndexAny(p, ".[")
		if i < 0 {
			break
		}
		p = p[:i]
	}
	return 0
}

func (v *validator) has(path string) bool {
	_, ok := v.lines[path]
	return ok
}

func (v *validator) validate() {
	c := v.c
	v.hostPort("listen", c.Listen)
	v.hostPort("admin_listen", c.AdminListen)
	if c.AdminListen == c.Listen && !strings.HasSuffix(c.Listen, ":0") {
		v.fail("admin_listen", "%q is also the traffic listener (listen); want an address of its own, such as 127.0.0.1:9090", c.AdminListen)
	}
	if c.Upstream != "" {
		u, err := url.Parse(c.Upstream)
		switch {
		case err != nil:
			v.fail("upstream", "%q: %v; want a URL such as http://127.0.0.1:3000", c.Upstream, err)
		case u.Scheme != "http" && u.Scheme != "https", u.Host == "":
			v.fail("upstream", "%q: want an http:// or https:// URL with a host, such as http://127.0.0.1:3000", c.Upstream)
		}
	}
	v.oneOf("headers", c.Headers, "legacy", "draft", "both", "none")
	if c.IPv6Prefix < 1 || c.IPv6Prefix > 128 {
		v.fail("ipv6_prefix", "%d: want a prefix length from 1 to 128 (64 groups a household or a server's /64)", c.IPv6Prefix)
	}
	for i, s := range c.TrustedProxies {
		path := fmt.Sprintf("trusted_proxies[%d]", i)
		p, err := parsePrefix(s)
		if err != nil {
			v.fail(path, "%q: want a CIDR such as 10.0.0.0/8 or fd00::/8, or a single address", s)
			continue
		}
		if p.Bits() == 0 {
			v.warn(path, "%q trusts every address: any client can name itself by X-Forwarded-For (or Forwarded) and take any key's limit, or a fresh one per request; list the proxies' own addresses", s)
		}
		c.keys.proxies = append(c.keys.proxies, p)
	}
	v.paths()
	v.store()
	v.identity()
	v.quotaTimeZone()
	v.policies()
	v.plans()
	v.allowlist()
	v.decisionAPI()
	v.envoyRLS()
	v.envoyRLSLimits()
	v.admin()
	v.accessLog()
	v.server()
	v.tls()
	v.responses()
}

func (v *validator) hostPort(path, s string) {
	if _, port, err := net.SplitHostPort(s); err != nil || port == "" {
		v.fail(path, "%q: want HOST:PORT such as 127.0.0.1:8080 (port 0 picks a free one)", s)
	} else if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		v.fail(path, "%q: port %q is not a number from 0 to 65535", s, port)
	}
}

func (v *validator) oneOf(path, got string, valid ...string) bool {
	for _, s := range valid {
		if got == s {
			return true
		}
	}
	v.fail(path, "%q: want one of %s", got, strings.Join(valid, ", "))
	return false
}

// onError checks and returns the on_error value at path; the defaults have
// filled in an empty one already.
func (v *validator) onError(path, got string) sluice.OnError {
	mode, ok := parseOnError(got)
	if !ok {
		v.fail(path, "%q: want one of open, closed, local", got)
	}
	return mode
}

// parseOnError reads an on_error value with sluice.ParseOnError, the one
// parser of failure policies, written exactly as its name ("local", "open",
// "closed").
func parseOnError(s string) (sluice.OnError, bool) {
	mode, err := sluice.ParseOnError(s)
	return mode, err == nil && mode.String() == s
}

func parsePrefix(s string) (netip.Prefix, error) {
	s = strings.TrimSpace(s)
	if !strings.Contains(s, "/") {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return netip.Prefix{}, err
		}
		a = a.Unmap()
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	if p.Addr().Is4In6() {
		p = netip.PrefixFrom(p.Addr().Unmap(), max(0, p.Bits()-96))
	}
	return p.Masked(), nil
}

func (v *validator) store() {
	s := &v.c.Store
	s.onError = v.onError("store.on_error", s.OnError)
	if s.Instances < 1 {
		v.fail("store.instances", "%d: want the number of gateways sharing the store, at least 1", s.Instances)
	}
	if s.MaxKeys < 0 {
		v.fail("store.max_keys", "%d: want the most keys the in-memory store holds, such as 1000000", s.MaxKeys)
	}
	if s.Redis.PoolSize < 0 {
		v.fail("store.redis.pool_size", "%d: want the connections per Redis node, such as 10, or 0 for sluice's own", s.Redis.PoolSize)
	}
	if s.Redis.Timeout < 0 {
		v.fail("store.redis.timeout", "%v: want a positive duration such as 50ms", s.Redis.Timeout)
	}
	if !v.oneOf("store.type", s.Type, "memory", "redis") || s.Type != "redis" {
		return
	}
	r := s.Redis
	if r.URL == "" && len(r.ClusterAddrs) == 0 && len(r.Sentinel.Addrs) == 0 && r.Sentinel.Master == "" {
		v.fail("store.redis", "store.type is redis but no url, cluster_addrs or sentinel addrs are set; want e.g. url: redis://127.0.0.1:6379/0")
		return
	}
	if r.URL != "" {
		u, err := url.Parse(r.URL)
		if err != nil || (u.Scheme != "redis" && u.Scheme != "rediss" && u.Scheme != "unix") || (u.Scheme != "unix" && u.Host == "") {
			v.fail("store.redis.url", "%q: want redis://[user:password@]host:port[/db], rediss://… for TLS, or unix:///path/to/redis.sock[?db=N]", redisstore.RedactURL(r.URL))
		} else if u.Scheme == "unix" {
			if u.Path == "" {
				v.fail("store.redis.url", "%q: want the socket's path, such as unix:///var/run/redis/redis.sock", redisstore.RedactURL(r.URL))
			} else if len(r.ClusterAddrs) > 0 || r.Sentinel.Master != "" {
				v.fail("store.redis.url", "%q: a unix socket reaches one server; drop cluster_addrs or sentinel, or use redis://", redisstore.RedactURL(r.URL))
			}
		} else if db := strings.Trim(u.Path, "/"); db != "" {
			if _, err := strconv.ParseUint(db, 10, 8); err != nil {
				v.fail("store.redis.url", "%q: database %q is not a number; want e.g. /0", redisstore.RedactURL(r.URL), db)
			} else if db != "0" && len(r.ClusterAddrs) > 0 {
				v.fail("store.redis.url", "%q: a Redis Cluster has only database 0; drop the /%s", redisstore.RedactURL(r.URL), db)
			}
		}
	}
	if (r.Sentinel.Master == "") != (len(r.Sentinel.Addrs) == 0) {
		v.fail("store.redis.sentinel", "want both master and addrs (the sentinels' HOST:PORT), or neither")
	}
	if r.Sentinel.Master != "" && len(r.ClusterAddrs) > 0 {
		v.fail("store.redis.sentinel", "set with cluster_addrs; choose Cluster or Sentinel, not both")
	}
	for i, a := range r.ClusterAddrs {
		v.hostPort(fmt.Sprintf("store.redis.cluster_addrs[%d]", i), a)
	}
	tls := &v.c.Store.Redis.TLS
	for _, f := range []struct {
		field string
		path  *string
	}{{"ca_file", &tls.CAFile}, {"cert_file", &tls.CertFile}, {"key_file", &tls.KeyFile}} {
		if *f.path == "" {
			continue
		}
		*f.path = v.path(*f.path)
		if _, err := os.ReadFile(*f.path); err != nil {
			v.fail("store.redis.tls."+f.field, "%v; want a readable PEM file", err)
		}
	}
	if (tls.CertFile == "") != (tls.KeyFile == "") {
		v.fail("store.redis.tls", "want both cert_file and key_file for a client certificate, or neither")
	}
	for i, a := range r.Sentinel.Addrs {
		v.hostPort(fmt.Sprintf("store.redis.sentinel.addrs[%d]", i), a)
	}
	v.redisPassword()
}

func (v *validator) path(p string) string {
	if p == "" || filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(v.dir, p)
}

func (v *validator) identity() {
	id := &v.c.Identity
	if !validHeaderName(id.APIKeyHeader) {
		v.fail("identity.api_key_header", "%q: want a header name such as X-API-Key", id.APIKeyHeader)
	}
	if !validHeaderName(id.JWT.Header) {
		v.fail("identity.jwt.header", "%q: want a header name such as Authorization", id.JWT.Header)
	}
	for _, f := range []string{id.APIKeysFile, id.JWT.HS256SecretFile, id.JWT.PublicKeyFile} {
		if f != "" {
			v.c.identityFiles = append(v.c.identityFiles, v.path(f))
		}
	}
	if id.APIKeysFile != "" {
		v.apiKeys("identity.api_keys_file", v.path(id.APIKeysFile))
	}
	j := id.JWT
	if j.HS256SecretFile != "" && j.PublicKeyFile != "" {
		v.fail("identity.jwt", "both hs256_secret_file and public_key_file are set; want one of them")
		return
	}
	if j.HS256SecretFile != "" {
		data, err := os.ReadFile(v.path(j.HS256SecretFile))
		if err != nil {
			v.fail("identity.jwt.hs256_secret_file", "cannot read the secret: %v", err)
		} else if secret := bytes.TrimRight(data, "\r\n"); len(secret) < 32 {
			v.fail("identity.jwt.hs256_secret_file", "the secret is %d bytes; want at least 32 (HS256 needs 256 bits)", len(secret))
		} else {
			v.c.keys.jwtSecret = secret
		}
	}
	if j.PublicKeyFile != "" {
		key, err := readPublicKey(v.path(j.PublicKeyFile))
		if err != nil {
			v.fail("identity.jwt.public_key_file", "%v", err)
		} else {
			v.c.keys.jwtPublic = key
		}
	}
}

func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r > 127 || !(r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			return false
		}
	}
	return true
}

func (v *validator) apiKeys(field, path string) {
	data, err := os.ReadFile(path)
	if err != nil {
		v.fail(field, "cannot read the API key list: %v", err)
		return
	}
	keys := make(map[[32]byte]decide.Caller)
	lines := make(map[[32]byte]int) // the line of each digest, to name both of a duplicate
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		words := strings.Fields(line)
		digest, err := hex.DecodeString(words[0])
		if err != nil || len(digest) != 32 || len(words) > 3 {
			v.fail(field, "%s:%d: want a SHA-256 hex digest (64 hex digits), optionally followed by the identity it stands for and its plan; make one with: printf %%s KEY | sha256sum", path, n)
			continue
		}
		caller := decide.Caller{ID: "key:" + strings.ToLower(words[0][:16])}
		if len(words) >= 2 {
			caller.ID = words[1]
		}
		if len(words) == 3 {
			if caller.Plan = words[2]; !validPlanName(caller.Plan) {
				v.fail(field, "%s:%d: plan %q: %s", path, n, caller.Plan, planNameWant)
				continue
			}
		}
		// A key listed twice would silently take the identity and plan
		// of its last line: which one the operator meant is theirs to say.
		if first, ok := lines[[32]byte(digest)]; ok {
			v.fail(field, "%s:%d: the same key (SHA-256 digest) as line %d; list each key once, with the identity and plan it stands for", path, n, first)
			continue
		}
		lines[[32]byte(digest)] = n
		keys[[32]byte(digest)] = caller
	}
	if err := sc.Err(); err != nil {
		v.fail(field, "%s: %v; want one key a line", path, err)
	}
	v.c.keys.apiKeys = keys
}

func readPublicKey(path string) (crypto.PublicKey, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cannot read the public key: %v", err)
	}
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, fmt.Errorf("%s: no PEM block; want a PEM public key (-----BEGIN PUBLIC KEY-----) of RSA, ECDSA or Ed25519", path)
	}
	var key any
	switch block.Type {
	case "PUBLIC KEY":
		key, err = x509.ParsePKIXPublicKey(block.Bytes)
	case "RSA PUBLIC KEY":
		key, err = x509.ParsePKCS1PublicKey(block.Bytes)
	case "CERTIFICATE":
		var cert *x509.Certificate
		if cert, err = x509.ParseCertificate(block.Bytes); err == nil {
			key = cert.PublicKey
		}
	default:
		return nil, fmt.Errorf("%s: PEM block %q; want PUBLIC KEY, RSA PUBLIC KEY or CERTIFICATE (never a private key)", path, block.Type)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	switch key.(type) {
	case *rsa.PublicKey, *ecdsa.PublicKey, ed25519.PublicKey:
		return key, nil
	}
	return nil, fmt.Errorf("%s: a %T key; want RSA, ECDSA or Ed25519", path, key)
}

func (v *validator) policies() {
	names := make(map[string]int)
	mux := http.NewServeMux()
	patternOf := make(map[string]int)
	for i := range v.c.Policies {
		p := &v.c.Policies[i]
		at := fmt.Sprintf("policies[%d]", i)
		if p.Name == "" {
			v.fail(at+".name", "missing; want a short name such as payments, used in headers, metrics and keys")
		} else if j, dup := names[p.Name]; dup {
			v.fail(at+".name", "%q is also the name of policies[%d] (line %d); want unique names", p.Name, j, v.line(fmt.Sprintf("policies[%d].name", j)))
		} else if strings.HasPrefix(p.Name, "rls:") {
			v.fail(at+".name", "%q: names beginning rls: are those of the Envoy service's limits (envoy_rls); want another, such as %s", p.Name, strings.TrimPrefix(p.Name, "rls:"))
		} else if !decide.ValidPolicyName(p.Name) {
			v.fail(at+".name", "%q: want printable ASCII without quotes or backslashes (it goes into the RateLimit headers)", p.Name)
		} else {
			names[p.Name] = i
		}
		v.pattern(mux, patternOf, at+".match", p.Match, i)
		cost := *p.Cost
		if cost < 0 {
			v.fail(at+".cost", "%d: want 0 or more tokens per request", cost)
		}
		if p.CostHeader != "" && !validHeaderName(p.CostHeader) {
			v.fail(at+".cost_header", "%q: want a header name such as X-Sluice-Cost", p.CostHeader)
		}
		if len(p.Anonymous) == 0 && len(p.Authenticated) == 0 {
			v.fail(at, "no rules; want anonymous: and/or authenticated: lists such as [{rate: 10/s, burst: 20}] (plans: apply only to callers whose plan they name)")
		}
		p.parsed.anonymous = v.rules(at+".anonymous", p.Anonymous, cost)
		p.parsed.authenticated = v.rules(at+".authenticated", p.Authenticated, cost)
		v.maxDelay(at+".max_delay", p.MaxDelay)
		v.oneOf(at+".mode", p.Mode, "enforce", "shadow")
		p.parsed.onError = v.onError(at+".on_error", p.OnError)
		if !slices.Contains(algo.Names(), p.Algorithm) {
			v.fail(at+".algorithm", "%q: want one of %s", p.Algorithm, strings.Join(algo.Names(), ", "))
		} else if p.MaxDelay > 0 && !algo.Paces(p.Algorithm) {
			v.fail(at+".max_delay", "%v: %s does not pace requests; want max_delay: 0s, or algorithm: token_bucket or leaky_bucket", p.MaxDelay, p.Algorithm)
		}
		v.logBounds(at, p)
		v.key(at, p)
		v.quotaAlgorithm(at, p)
		v.lease(at+".lease", p)
		seen := make(map[string]int)
		for j := range p.Overrides {
			o := &p.Overrides[j]
			op := fmt.Sprintf("%s.overrides[%d]", at, j)
			if o.Identity == "" {
				v.fail(op+".identity", "missing; want the authenticated identity (JWT sub, or the name of an API key) it applies to")
			} else if k, dup := seen[o.Identity]; dup {
				v.fail(op+".identity", "%q is also overridden by overrides[%d]; want one override per identity", o.Identity, k)
			}
			seen[o.Identity] = j
			if len(o.Authenticated) == 0 {
				v.fail(op+".authenticated", "missing; want the rules for this identity, such as [{rate: 100/s, burst: 500}]")
			}
			o.parsed = v.rules(op+".authenticated", o.Authenticated, cost)
		}
	}
}

func isPrintable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < ' ' || s[i] > '~' {
			return false
		}
	}
	return true
}

// pattern checks a match pattern the way net/http.ServeMux will see it:
// it is registered on a throwaway mux, which panics on a bad or
// conflicting pattern.
func (v *validator) pattern(mux *http.ServeMux, seen map[string]int, field, pattern string, i int) {
	if pattern == "" {
		v.fail(field, "missing; want a net/http ServeMux pattern such as \"POST /payments/\" or \"GET /products/{id}\"")
		return
	}
	var msg string
	func() {
		defer func() {
			if r := recover(); r != nil {
				msg = fmt.Sprint(r)
			}
		}()
		mux.Handle(pattern, http.NotFoundHandler())
	}()
	if msg == "" {
		seen[pattern] = i
		return
	}
	// Name the other policy when the mux says the patterns conflict; its
	// explanation is the last line of the message.
	for other, j := range seen {
		if strings.Contains(msg, strconv.Quote(other)) {
			_, why, _ := strings.Cut(msg, ":\n")
			why = strings.TrimSuffix(strings.ReplaceAll(why, "\n", " "), ".")
			v.fail(field, "%q conflicts with policies[%d].match %q: %s; make one of them more specific", pattern, j, other, why)
			return
		}
	}
	v.fail(field, "%q: %s; want a net/http ServeMux pattern such as \"POST /payments/\" or \"GET /products/{id}\"", pattern, strings.TrimPrefix(msg, "http: "))
}

// rules checks the rules written at field and returns them parsed, or nil
// when any is invalid.
func (v *validator) rules(field string, rules []Rule, cost int64) []sluice.Rule {
	if len(rules) > sluice.MaxRules {
		v.fail(field, "%d rules; want at most %d", len(rules), sluice.MaxRules)
		return nil
	}
	parsed := make([]sluice.Rule, 0, len(rules))
	ok := true
	for i, r := range rules {
		at := fmt.Sprintf("%s[%d]", field, i)
		if r.Quota != "" {
			q, good := v.quota(at, r, cost)
			ok = ok && good
			parsed = append(parsed, q)
			continue
		}
		rate, err := sluice.ParseRate(r.Rate)
		if r.Rate == "" {
			v.fail(at+".rate", "missing; want COUNT/UNIT such as 10/s, 600/m, 1000/h, 10000/d or 0.5/s")
			ok = false
		} else if err != nil {
			v.fail(at+".rate", "%s%s", strings.TrimPrefix(err.Error(), sluice.ErrInvalid.Error()+": "), calendarHint(r.Rate))
			ok = false
		}
		switch {
		case !v.has(at + ".burst"):
			v.fail(at+".burst", "missing; want the bucket's capacity, an integer of at least 1")
			ok = false
		case r.Burst < 1:
			v.fail(at+".burst", "%d: want an integer of at least 1 (the bucket's capacity)", r.Burst)
			ok = false
		case cost > r.Burst:
			v.fail(at+".burst", "%d is below the policy's cost %d: such a request could never pass; raise the burst or lower the cost", r.Burst, cost)
			ok = false
		}
		if rate > 0 && r.Burst >= 1 && !v.ruleBounds(at, sluice.Rule{Rate: rate, Burst: r.Burst}, cost) {
			ok = false
		}
		parsed = append(parsed, sluice.Rule{Rate: rate, Burst: r.Burst})
	}
	if !ok {
		return nil
	}
	return parsed
}

// lease checks a policy's lease: the Redis store's bounds, and what a
// lease can decide (token bucket checks, never a reservation).
func (v *validator) lease(at string, p *Policy) {
	l := p.Lease
	if l == nil {
		return
	}
	switch {
	case v.c.Store.Type != "redis":
		v.fail(at, "needs store.type: redis; the memory store decides in process already")
	case p.Algorithm != "token_bucket":
		v.fail(at, "needs algorithm: token_bucket, not %s", p.Algorithm)
	case p.MaxDelay > 0:
		v.fail(at, "a reservation (max_delay: %v) is never decided from a lease; want max_delay: 0s, or no lease", p.MaxDelay)
	}
	if l.Tokens < 1 || l.Tokens > redisstore.MaxLeaseTokens {
		v.fail(at+".tokens", "%d: want 1 to %d tokens taken at once", l.Tokens, redisstore.MaxLeaseTokens)
	}
	if l.TTL < redisstore.MinLeaseTTL || l.TTL > redisstore.MaxLeaseTTL {
		v.fail(at+".ttl", "%v: want %v to %v", l.TTL, redisstore.MinLeaseTTL, redisstore.MaxLeaseTTL)
	}
}
