package httplimit

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/decide"
)

// Key says what a policy's buckets are keyed by, in place of the identity
// rules (an anonymous caller by its client address, an authenticated one
// by its identity). The zero Key keeps the identity rules.
//
// Which rules apply does not change: the caller's class still picks them
// (anonymous or authenticated, an override by verified identity), and a
// bucket is always checked against one rule set, so callers with the same
// key but different rules count apart: anonymous and authenticated callers
// of a policy with both lists, and each identity with an override. A
// policy that gives one list has one bucket per key for every caller.
//
// A part whose attribute is absent or empty (no such header, no such claim
// or no verified token, an empty wildcard) is keyed as the identity rules
// would key the caller, marked as absent: the caller's identity when it is
// authenticated, else its client address. Leaving out an attribute thus
// never buys a fresh bucket per request nor an unlimited one, and two
// callers who lack it do not starve each other.
//
// Values are compared as bytes, exactly (case and inner white space
// count; net/http has already trimmed the outer); a header sent on several
// lines, or with several values, is keyed by all of them joined with ", ",
// as a proxy would join them, so no value can be picked over another.
// Values are hashed with the rest of the key (SHA-256): a value longer than
// 1024 bytes is keyed by its length and its first 1024 bytes, so a huge
// header costs one bounded hash. Nothing the caller chose reaches the
// store, a log line or a header.
//
// A caller can send any header value and so pick its own bucket: key by a
// header only where something in front has vouched for it, or combine it
// with {ClientIP: true}, so that rotating the value gives no more than the
// limit per client address.
type Key struct {
	// Global keys every caller of the policy to one bucket (per rule set:
	// see above).
	Global bool

	// Parts are the attributes, combined in order: callers that agree on
	// every part share a bucket.
	Parts []KeyPart
}

// KeyPart is one attribute of a Key; exactly one field is set.
type KeyPart struct {
	// Header is the name of a request header.
	Header string

	// Path is the name of a wildcard of the policy's Pattern
	// ("/tenants/{tenant}/"), valued as Request.PathValue would be after
	// matching; with Paths.CaseInsensitive, in lowercase as it was matched.
	Path string

	// Claim is the name of a claim of the caller's verified token
	// (Caller.Claims): strings, numbers and booleans key; anything else
	// counts as absent.
	Claim string

	// ClientIP keys by the client address (after TrustedProxies, IPv6
	// grouped by Options.IPv6Prefix).
	ClientIP bool
}

// Name is the part's name in Attributes.Values (and in errors):
// "header:X-Tenant" (the canonical header name), "path:tenant",
// "claim:org" or "client_ip".
func (k KeyPart) Name() string {
	switch {
	case k.Header != "":
		return "header:" + http.CanonicalHeaderKey(k.Header)
	case k.Path != "":
		return "path:" + k.Path
	case k.Claim != "":
		return "claim:" + k.Claim
	case k.ClientIP:
		return "client_ip"
	}
	return ""
}

// maxKeyParts bounds the parts of a Key.
const maxKeyParts = 8

// Bounds of one attribute value in a key: up to inlineValue bytes are
// hashed as they are, longer ones by their length and the SHA-256 of their
// first hashedValue bytes.
const (
	inlineValue = 64
	hashedValue = 1024
)

// keySpec is a Key compiled for the hot path.
type keySpec struct {
	global bool
	parts  []keyPart
	// shared: the policy has one rule list, so its anonymous and
	// authenticated callers share buckets.
	shared bool
}

// partKind is what a key part reads. Its value is the byte that stands for
// it in store keys, so it never changes: buckets survive an upgrade.
type partKind byte

const (
	partHeader   partKind = 'h' // a request header
	partPath     partKind = 'p' // a wildcard of the pattern
	partClaim    partKind = 'c' // a claim of the verified token
	partClientIP partKind = 'i' // the client address
)

type keyPart struct {
	kind  partKind
	name  string // canonical header name, wildcard or claim name
	attr  string // KeyPart.Name
	seg   int    // path: the wildcard's segment
	multi bool   // path: {name...}, the rest of the path
}

// compileKey checks in.Key against in and compiles it; nil for the zero
// Key.
func compileKey(in *Policy) (*keySpec, error) {
	k := in.Key
	if !k.Global && len(k.Parts) == 0 {
		return nil, nil
	}
	fail := func(format string, args ...any) error {
		return fmt.Errorf("httplimit: policy %q: key: %s", in.Name, fmt.Sprintf(format, args...))
	}
	if k.Global && len(k.Parts) > 0 {
		return nil, fail("global and parts both set; global is one bucket for every caller, parts key by attributes: choose one")
	}
	if len(k.Parts) > maxKeyParts {
		return nil, fail("%d parts; at most %d", len(k.Parts), maxKeyParts)
	}
	spec := &keySpec{global: k.Global, shared: len(in.Anonymous) == 0 || len(in.Authenticated) == 0}
	seen := make(map[string]bool, len(k.Parts))
	for i, kp := range k.Parts {
		set := 0
		for _, b := range []bool{kp.Header != "", kp.Path != "", kp.Claim != "", kp.ClientIP} {
			if b {
				set++
			}
		}
		if set != 1 {
			return nil, fail("part %d sets %d of Header, Path, Claim and ClientIP; want exactly one", i, set)
		}
		p := keyPart{attr: kp.Name()}
		if seen[p.attr] {
			return nil, fail("part %d: %s twice; keep one", i, p.attr)
		}
		seen[p.attr] = true
		switch {
		case kp.Header != "":
			if !validHeaderName(kp.Header) {
				return nil, fail("part %d: %q is not a header name", i, kp.Header)
			}
			p.kind, p.name = partHeader, http.CanonicalHeaderKey(kp.Header)
		case kp.Path != "":
			seg, multi, err := PatternWildcard(in.Pattern, kp.Path)
			if err != nil {
				return nil, fail("part %d: %v", i, err)
			}
			p.kind, p.name, p.seg, p.multi = partPath, kp.Path, seg, multi
		case kp.Claim != "":
			p.kind, p.name = partClaim, kp.Claim
		default:
			p.kind = partClientIP
		}
		spec.parts = append(spec.parts, p)
	}
	return spec, nil
}

// PatternWildcard finds the wildcard {name} (or {name...}) in a ServeMux
// pattern: its path segment, counted from 0 after the leading slash, and
// whether it takes the rest of the path. The error says which wildcards
// the pattern has.
func PatternWildcard(pattern, name string) (seg int, multi bool, err error) {
	if pattern == "" {
		return 0, false, fmt.Errorf("path wildcard {%s}: the policy has no pattern, so no wildcards", name)
	}
	path := pattern
	if i := strings.IndexAny(path, " \t"); i >= 0 {
		path = strings.TrimLeft(path[i:], " \t")
	}
	if i := strings.IndexByte(path, '/'); i >= 0 {
		path = path[i+1:] // the host, if any, and the leading slash
	}
	var names []string
	for i, s := range strings.Split(path, "/") {
		if len(s) < 3 || s[0] != '{' || s[len(s)-1] != '}' || s == "{$}" {
			continue
		}
		w, rest := strings.CutSuffix(s[1:len(s)-1], "...")
		if w == name {
			return i, rest, nil
		}
		names = append(names, "{"+w+"}")
	}
	if len(names) == 0 {
		return 0, false, fmt.Errorf("path wildcard {%s}: the pattern %q has no wildcards; write one such as /tenants/{%s}/", name, pattern, name)
	}
	return 0, false, fmt.Errorf("path wildcard {%s}: the pattern %q has none of that name; it has %s", name, pattern, strings.Join(names, ", "))
}

// validHeaderName reports whether s is an HTTP token (RFC 9110).
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x80 || c <= ' ' || strings.IndexByte("\"(),/:;<=>?@[\\]{}", c) >= 0 || c == 0x7f {
			return false
		}
	}
	return true
}

// checkValues refuses attributes of a by-name decision that the policy's
// key does not read: a misspelt name would otherwise key the caller
// silently by its identity.
func (p *policy) checkValues(values map[string]string) error {
	for name := range values {
		if p.key != nil && slices.ContainsFunc(p.key.parts, func(kp keyPart) bool { return kp.attr == name && kp.kind != partClientIP }) {
			continue
		}
		var reads []string
		if p.key != nil {
			for _, kp := range p.key.parts {
				if kp.kind != partClientIP {
					reads = append(reads, kp.attr)
				}
			}
		}
		if len(reads) == 0 {
			return fmt.Errorf("%w: attribute %q: policy %q keys by no attributes", sluice.ErrInvalid, name, p.Name)
		}
		return fmt.Errorf("%w: attribute %q is not in the key of policy %q; it reads %s", sluice.ErrInvalid, name, p.Name, strings.Join(reads, ", "))
	}
	return nil
}

// errNoKey: a by-name decision named neither an identity nor a client
// address to key the caller by.
var errNoKey = fmt.Errorf("%w: the caller has no key: give its identity or its client address", sluice.ErrInvalid)

// buildKey writes the store key of the subject's bucket under p and rs
// into kb: by p's Key, or else by the identity rules (an authenticated
// caller by its identity, an anonymous one by its client address).
func (l *Limiter) buildKey(kb *keyBuf, p *policy, rs *ruleSet, s *subject) error {
	if p.key != nil {
		return l.buildAttrKey(kb, p, rs, s)
	}
	if s.authenticated {
		kb.buildFor(p.Name, rs, s.caller.ID)
		return nil
	}
	a, ok := s.clientAddr(l)
	if !ok && s.r == nil {
		return errNoKey
	}
	kb.buildAddr(p.Name, rs.Class.KeyByte(), a)
	return nil
}

// buildAttrKey keys by p's Key: the policy, the rule set (see Key), then
// each part as a tagged, length-prefixed value, or as absent with the
// caller's identity key.
func (l *Limiter) buildAttrKey(kb *keyBuf, p *policy, rs *ruleSet, s *subject) error {
	b := append(kb.scratch[:0], p.Name...)
	b = append(b, 0, 'k')
	switch {
	case (rs.Class == decide.Anonymous || rs.Class == decide.Authenticated) && p.key.shared:
		b = append(b, 's')
	case rs.Class == decide.Anonymous || rs.Class == decide.Authenticated:
		b = append(b, rs.Class.KeyByte())
	case rs.Class == decide.Override:
		b = append(b, rs.Class.KeyByte())
		b = appendString(b, s.caller.ID)
	default: // a rule set picked by something else: by plan
		b = append(b, rs.Class.KeyByte())
		b = appendString(b, rs.Plan)
	}
	if p.key.global {
		kb.sum(append(b, 'g'))
		return nil
	}
	for i := range p.key.parts {
		kp := &p.key.parts[i]
		b = append(b, byte(kp.kind))
		var v valueBuf
		l.value(kp, s, &v)
		if v.total > 0 {
			b = v.appendTo(append(b, 'v'))
			continue
		}
		b = append(b, 'm') // absent: keyed as the identity rules key the caller
		if s.authenticated {
			b = appendString(append(b, 'u'), s.caller.ID)
			continue
		}
		a, ok := s.clientAddr(l)
		if !ok && s.r == nil {
			return fmt.Errorf("%w: attribute %s is missing and there is no identity or client address to key the caller by instead", sluice.ErrInvalid, kp.attr)
		}
		b = a.AppendTo(append(b, 'a'))
	}
	kb.sum(b)
	return nil
}

// value reads the attribute of kp from s into v (nothing when absent).
func (l *Limiter) value(kp *keyPart, s *subject, v *valueBuf) {
	if s.r == nil {
		if kp.kind == partClientIP {
			if a, ok := s.clientAddr(l); ok {
				v.addAddr(a)
			}
			return
		}
		v.add(s.values[kp.attr])
		return
	}
	switch kp.kind {
	case partHeader:
		for i, hv := range s.r.Header[kp.name] {
			if i > 0 {
				v.add(", ")
			}
			v.add(hv)
		}
	case partPath:
		pathValue(s.path, kp.seg, kp.multi, v)
	case partClaim:
		if s.authenticated {
			claimValue(s.caller.Claims[kp.name], v)
		}
	case partClientIP:
		a, _ := s.clientAddr(l)
		v.addAddr(a)
	}
}

// pathValue reads the segment seg of the escaped path (and, when multi,
// the rest of it) into v, unescaped as Request.PathValue has it.
func pathValue(path string, seg int, multi bool, v *valueBuf) {
	path = strings.TrimPrefix(path, "/")
	for range seg {
		i := strings.IndexByte(path, '/')
		if i < 0 {
			return
		}
		path = path[i+1:]
	}
	if !multi {
		if i := strings.IndexByte(path, '/'); i >= 0 {
			path = path[:i]
		}
	}
	for i := 0; i < len(path); i++ {
		c := path[i]
		if c == '%' && i+2 < len(path) && isHex(path[i+1]) && isHex(path[i+2]) {
			v.addByte(unhex(path[i+1])<<4 | unhex(path[i+2]))
			i += 2
			continue
		}
		v.addByte(c)
	}
}

// claimValue reads a claim that is a string, a number or a boolean into
// v; anything else (a list, an object) is absent, so that no element can
// be picked over another.
func claimValue(c any, v *valueBuf) {
	switch c := c.(type) {
	case string:
		v.add(c)
	case json.Number:
		v.add(string(c))
	case float64:
		v.n = len(strconv.AppendFloat(v.b[:0], c, 'f', -1, 64))
		v.total = v.n
	case int64:
		v.n = len(strconv.AppendInt(v.b[:0], c, 10))
		v.total = v.n
	case int:
		v.n = len(strconv.AppendInt(v.b[:0], int64(c), 10))
		v.total = v.n
	case bool:
		v.add(strconv.FormatBool(c))
	}
}

// valueBuf collects one attribute value: its length, and its first
// hashedValue bytes.
type valueBuf struct {
	b     [hashedValue]byte
	n     int // bytes in b
	total int // bytes added
}

func (v *valueBuf) add(s string) {
	v.n += copy(v.b[v.n:], s)
	v.total += len(s)
}

func (v *valueBuf) addByte(c byte) {
	if v.n < len(v.b) {
		v.b[v.n] = c
		v.n++
	}
	v.total++
}

func (v *valueBuf) addAddr(a netip.Addr) {
	v.n = len(a.AppendTo(v.b[:0]))
	v.total = v.n
}

// appendTo appends the value: as it is when short, else its length and
// the SHA-256 of its first bytes.
func (v *valueBuf) appendTo(b []byte) []byte {
	if v.total <= inlineValue {
		return append(append(b, 's', byte(v.total)), v.b[:v.n]...)
	}
	b = binary.AppendUvarint(append(b, 'x'), uint64(v.total))
	sum := sha256.Sum256(v.b[:v.n])
	return append(b, sum[:]...)
}

// appendString appends s with its length first, so that no two sequences
// of strings run together into one.
func appendString(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}
