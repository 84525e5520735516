package decide

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"net/textproto"
	"slices"
	"strings"

	"github.com/sluicehq/sluice"
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
	// grouped by Config.IPv6Prefix).
	ClientIP bool
}

// Name is the part's name in Attributes.Values (and in errors):
// "header:X-Tenant" (the canonical header name), "path:tenant",
// "claim:org" or "client_ip".
func (k KeyPart) Name() string {
	switch {
	case k.Header != "":
		return "header:" + textproto.CanonicalMIMEHeaderKey(k.Header)
	case k.Path != "":
		return "path:" + k.Path
	case k.Claim != "":
		return "claim:" + k.Claim
	case k.ClientIP:
		return "client_ip"
	}
	return ""
}

// MaxKeyParts bounds the parts of a Key.
const MaxKeyParts = 8

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
	parts  []Part
	// shared: the policy has one rule list, so its anonymous and
	// authenticated callers share buckets.
	shared bool
}

// PartKind is what a key part reads. Its value is the byte that stands for
// it in store keys, so it never changes: buckets survive an upgrade.
type PartKind byte

const (
	PartHeader   PartKind = 'h' // a request header
	PartPath     PartKind = 'p' // a wildcard of the pattern
	PartClaim    PartKind = 'c' // a claim of the verified token
	PartClientIP PartKind = 'i' // the client address
)

// Part is a KeyPart compiled: what a front door reads from a request into
// Subject.Values, at the part's index.
type Part struct {
	Kind  PartKind
	Name  string // canonical header name, wildcard or claim name
	Attr  string // KeyPart.Name: the name in Attributes.Values
	Seg   int    // path: the wildcard's segment
	Multi bool   // path: {name...}, the rest of the path
}

// KeyParts are the attributes the policy's key reads, in order; nil for
// the identity rules. A front door that reads requests puts the value of
// part i into Subject.Values[i] (nothing for PartClientIP, which the core
// reads from Subject.ClientIP).
func (p *Compiled) KeyParts() []Part {
	if p.key == nil {
		return nil
	}
	return p.key.parts
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
	if len(k.Parts) > MaxKeyParts {
		return nil, fail("%d parts; at most %d", len(k.Parts), MaxKeyParts)
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
		p := Part{Attr: kp.Name()}
		if seen[p.Attr] {
			return nil, fail("part %d: %s twice; keep one", i, p.Attr)
		}
		seen[p.Attr] = true
		switch {
		case kp.Header != "":
			if !validHeaderName(kp.Header) {
				return nil, fail("part %d: %q is not a header name", i, kp.Header)
			}
			p.Kind, p.Name = PartHeader, textproto.CanonicalMIMEHeaderKey(kp.Header)
		case kp.Path != "":
			seg, multi, err := PatternWildcard(in.Pattern, kp.Path)
			if err != nil {
				return nil, fail("part %d: %v", i, err)
			}
			p.Kind, p.Name, p.Seg, p.Multi = PartPath, kp.Path, seg, multi
		case kp.Claim != "":
			p.Kind, p.Name = PartClaim, kp.Claim
		default:
			p.Kind = PartClientIP
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
func (p *Compiled) checkValues(values map[string]string) error {
	for name := range values {
		if p.key != nil && slices.ContainsFunc(p.key.parts, func(kp Part) bool { return kp.Attr == name && kp.Kind != PartClientIP }) {
			continue
		}
		var reads []string
		if p.key != nil {
			for _, kp := range p.key.parts {
				if kp.Kind != PartClientIP {
					reads = append(reads, kp.Attr)
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
func (c *Core) buildKey(kb *keyBuf, p *Compiled, rs *Rules, s *Subject) error {
	if p.key != nil {
		return c.buildAttrKey(kb, p, rs, s)
	}
	if s.Authenticated {
		kb.buildFor(p.Name, rs, s.ID)
		return nil
	}
	a, ok := c.clientAddr(s)
	if !ok && !s.Verified {
		return errNoKey
	}
	kb.buildAddr(p.Name, rs.Class.KeyByte(), a)
	return nil
}

// buildAttrKey keys by p's Key: the policy, the rule set (see Key), then
// each part as a tagged, length-prefixed value, or as absent with the
// caller's identity key.
func (c *Core) buildAttrKey(kb *keyBuf, p *Compiled, rs *Rules, s *Subject) error {
	b := append(kb.scratch[:0], p.Name...)
	b = append(b, 0, 'k')
	switch {
	case (rs.Class == Anonymous || rs.Class == Authenticated) && p.key.shared:
		b = append(b, 's')
	case rs.Class == Anonymous || rs.Class == Authenticated:
		b = append(b, rs.Class.KeyByte())
	case rs.Class == Override:
		b = append(b, rs.Class.KeyByte())
		b = appendString(b, s.ID)
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
		b = append(b, byte(kp.Kind))
		if kp.Kind == PartClientIP {
			if a, ok := c.clientAddr(s); ok {
				var ab [64]byte // an address needs at most 45
				t := a.AppendTo(ab[:0])
				b = append(append(b, 'v', 's', byte(len(t))), t...)
				continue
			}
		} else if v := s.value(i, kp); v != "" {
			b = appendValue(append(b, 'v'), v)
			continue
		}
		b = append(b, 'm') // absent: keyed as the identity rules key the caller
		if s.Authenticated {
			b = appendString(append(b, 'u'), s.ID)
			continue
		}
		a, ok := c.clientAddr(s)
		if !ok && !s.Verified {
			return fmt.Errorf("%w: attribute %s is missing and there is no identity or client address to key the caller by instead", sluice.ErrInvalid, kp.Attr)
		}
		b = a.AppendTo(append(b, 'a'))
	}
	kb.sum(b)
	return nil
}

// value is the subject's value of its policy's key part i: what the front
// door read from the request, or the attribute a by-name decision gave.
func (s *Subject) value(i int, kp *Part) string {
	if s.Verified {
		return s.Values[i]
	}
	return s.Attrs[kp.Attr]
}

// appendValue appends a present value: as it is when short, else its
// length and the SHA-256 of its first hashedValue bytes, so that a huge
// header costs one bounded hash.
func appendValue(b []byte, v string) []byte {
	if len(v) <= inlineValue {
		return append(append(b, 's', byte(len(v))), v...)
	}
	b = binary.AppendUvarint(append(b, 'x'), uint64(len(v)))
	var first [hashedValue]byte
	sum := sha256.Sum256(first[:copy(first[:], v)])
	return append(b, sum[:]...)
}

// appendString appends s with its length first, so that no two sequences
// of strings run together into one.
func appendString(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

// AbnormalPattern says what in the path of pattern (a net/http.ServeMux
// pattern) no request holds once normalised, or "": an empty segment
// (//), a path parameter (;), a backslash, or a dot segment, written as
// it is or encoded (%2e). Requests are matched in their normal form
// (httplimit's Paths: dot segments removed, slashes merged, path
// parameters and backslashes refused), so a policy of such a pattern
// would never limit anything; the configuration file and httplimit.New
// refuse it.
func AbnormalPattern(pattern string) string {
	path := pattern
	if i := strings.IndexAny(path, " \t"); i >= 0 {
		path = strings.TrimLeft(path[i+1:], " \t")
	}
	if i := strings.IndexByte(path, '/'); i > 0 {
		path = path[i:]
	}
	if !strings.HasPrefix(path, "/") {
		return "" // the ServeMux says what is wrong with it
	}
	switch {
	case strings.Contains(path, "//"):
		return "an empty segment (//)"
	case strings.Contains(path, ";"):
		return "a path parameter (;)"
	case strings.Contains(path, "\\"):
		return "a backslash"
	}
	for seg := range strings.SplitSeq(path[1:], "/") {
		if dots := strings.ReplaceAll(strings.ToLower(seg), "%2e", "."); dots == "." || dots == ".." {
			return "a dot segment (" + seg + ")"
		}
	}
	return ""
}
