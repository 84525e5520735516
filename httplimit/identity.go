package httplimit

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strings"

	"github.com/sluicehq/sluice/decide"
)

// Caller is what an Authenticator verified about the caller of a request:
// decide.Caller (ID, Plan, Claims). Everything in it comes from a
// credential that was checked, never from a header the client could write.
type Caller = decide.Caller

// Authenticator verifies the credential a request carries and returns the
// caller, or ok false when there is none or it does not verify. It must
// not trust anything it cannot check.
type Authenticator func(r *http.Request) (c Caller, ok bool)

type callerKey struct{}

// WithIdentity returns a context in which the caller is the authenticated
// identity id. Put it on the request in your own authentication middleware,
// in front of the limiter, once you have verified the caller.
func WithIdentity(ctx context.Context, id string) context.Context {
	return WithCaller(ctx, Caller{ID: id})
}

// WithCaller is WithIdentity for a caller whose plan or claims you
// verified too.
func WithCaller(ctx context.Context, c Caller) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

// IdentityFrom returns the identity WithIdentity or WithCaller put in ctx.
func IdentityFrom(ctx context.Context) (string, bool) {
	c, ok := CallerFrom(ctx)
	return c.ID, ok
}

// CallerFrom returns the caller WithIdentity or WithCaller put in ctx.
func CallerFrom(ctx context.Context) (Caller, bool) {
	c, ok := ctx.Value(callerKey{}).(Caller)
	return c, ok && c.ID != ""
}

// identify returns the caller's verified identity, if any.
func (l *Limiter) identify(r *http.Request) (Caller, bool) {
	if c, ok := CallerFrom(r.Context()); ok {
		return c, true
	}
	for _, a := range l.opts.Authenticators {
		if c, ok := a(r); ok && c.ID != "" {
			return c, true
		}
	}
	return Caller{}, false
}

// APIKeys returns an Authenticator that reads a key from header and looks
// its SHA-256 up in keys, which maps digests to callers (with the plan of
// each key, if it has one). Only digests are kept, so the list of keys is
// no secret.
func APIKeys(header string, keys map[[32]byte]Caller) Authenticator {
	header = http.CanonicalHeaderKey(header)
	return func(r *http.Request) (Caller, bool) {
		v := r.Header[header]
		if len(v) != 1 || v[0] == "" {
			return Caller{}, false
		}
		sum := sha256.Sum256([]byte(v[0]))
		c, ok := keys[sum]
		return c, ok
	}
}

// ClientIP returns the address of the client that sent r. It is the
// connection's address unless that is in trusted; then it is the rightmost
// address in the header from names (X-Forwarded-For or Forwarded) that is
// not in trusted: the last hop that a trusted proxy saw. Anything to the
// left of it was written by the client and is never believed. Empty
// elements of the list are skipped. When the header names no such client
// (every hop is trusted, or the hop to believe is not an address:
// "unknown", a garbled entry) ClientIP returns the nearest trusted hop, but
// the Limiter refuses the request (400) rather than charge that hop's
// bucket, which every client behind the proxy shares. IPv4-mapped IPv6
// addresses are unmapped; zones are dropped. An unparseable RemoteAddr
// gives the zero Addr.
func ClientIP(r *http.Request, trusted []netip.Prefix, from ForwardedFrom) netip.Addr {
	return clientIP(r, trusted, from)
}

// ForwardedFrom names the header that trusted proxies write.
type ForwardedFrom int

const (
	// FromEither reads X-Forwarded-For, or Forwarded when there is none.
	//
	// Deprecated: behind a proxy that writes one header a client can forge
	// the other and be a new client with each request. New refuses it with
	// TrustedProxies; name the header your proxies write.
	FromEither ForwardedFrom = iota
	// FromXForwardedFor reads only X-Forwarded-For.
	FromXForwardedFor
	// FromForwarded reads only Forwarded (RFC 7239).
	FromForwarded
)

// checkForwarded refuses trusted proxies whose header is not named.
func checkForwarded(opts Options) error {
	if len(opts.TrustedProxies) > 0 && opts.ForwardedFrom != FromXForwardedFor && opts.ForwardedFrom != FromForwarded {
		return errors.New("httplimit: Options.TrustedProxies is set but ForwardedFrom does not name the header they write; want FromXForwardedFor or FromForwarded (a client could forge the other)")
	}
	return nil
}

func clientIP(r *http.Request, trusted []netip.Prefix, from ForwardedFrom) netip.Addr {
	a, _ := forwardedClient(r, trusted, from)
	return a
}

// forwardedClient is clientIP, and an error when the peer is trusted and
// sent the forwarding header, but the header names no client: charging the
// nearest trusted hop instead would let one client drain the bucket of
// every client behind that proxy.
func forwardedClient(r *http.Request, trusted []netip.Prefix, from ForwardedFrom) (netip.Addr, error) {
	peer := parseHost(r.RemoteAddr)
	if !peer.IsValid() || !inAny(peer, trusted) {
		return peer, nil
	}
	name, next := "X-Forwarded-For", nextXFF
	v := r.Header[name]
	if len(v) == 0 || from == FromForwarded {
		name, next = "Forwarded", nextForwarded
		if v = r.Header[name]; from == FromXForwardedFor {
			v = nil
		}
	}
	if len(v) == 0 {
		return peer, nil
	}
	a, bad, ok := walkHops(peer, trusted, v, next)
	switch {
	case ok:
		return a, nil
	case bad != "":
		if len(bad) > 64 {
			bad = bad[:64] + "..."
		}
		return a, fmt.Errorf("the %s a trusted proxy sent names no client: %q is not an address; want the client's address as its last entry that is not in trusted_proxies", name, bad)
	}
	return a, fmt.Errorf("the %s a trusted proxy sent names no client: every entry in it is in trusted_proxies (or it is empty); want the client's address as its last entry that is not in trusted_proxies", name)
}

// walkHops walks the hops of the header values from the right to the
// first one not in trusted, and returns it with ok. Without one it returns
// the nearest trusted hop (peer when there is none) and, when the walk
// stopped at a hop that is not an address, that hop.
func walkHops(peer netip.Addr, trusted []netip.Prefix, values []string, next func(string) (string, string)) (a netip.Addr, bad string, ok bool) {
	last := peer
	for i := len(values) - 1; i >= 0; i-- {
		rest := values[i]
		for rest != "" {
			var hop string
			rest, hop = next(rest)
			if hop = strings.TrimSpace(hop); hop == "" {
				continue // an empty list element (RFC 9110 5.6.1: ignored)
			}
			a := parseHost(hop)
			if !a.IsValid() {
				return last, hop, false
			}
			if !inAny(a, trusted) {
				return a, "", true
			}
			last = a
		}
	}
	return last, "", false
}

// nextXFF splits the rightmost entry off a X-Forwarded-For value.
func nextXFF(v string) (rest, hop string) {
	i := strings.LastIndexByte(v, ',')
	if i < 0 {
		return "", v
	}
	return v[:i], v[i+1:]
}

// nextForwarded splits the rightmost element off a Forwarded value
// (RFC 7239) and returns its for= parameter, unquoted.
func nextForwarded(v string) (rest, hop string) {
	elem := v
	if i := lastUnquoted(v, ','); i >= 0 {
		rest, elem = v[:i], v[i+1:]
	}
	if strings.TrimSpace(elem) == "" {
		return rest, "" // an empty list element
	}
	for elem != "" {
		var pair string
		pair, elem, _ = strings.Cut(elem, ";")
		k, val, ok := strings.Cut(strings.TrimSpace(pair), "=")
		if ok && strings.EqualFold(k, "for") {
			return rest, strings.Trim(strings.TrimSpace(val), `"`)
		}
	}
	return rest, "-" // an element without for= is no address
}

func lastUnquoted(s string, c byte) int {
	quoted := false
	at := -1
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '"':
			quoted = !quoted
		case c:
			if !quoted {
				at = i
			}
		}
	}
	return at
}

// parseHost reads an address with or without a port: 192.0.2.1,
// 192.0.2.1:80, 2001:db8::1, [2001:db8::1]:80, [2001:db8::1].
func parseHost(s string) netip.Addr {
	// Try the form that fits first: a failed parse allocates its error.
	if hasPort(s) {
		if ap, err := netip.ParseAddrPort(s); err == nil {
			return ap.Addr().Unmap().WithZone("")
		}
	}
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap().WithZone("")
	}
	if len(s) > 2 && s[0] == '[' && s[len(s)-1] == ']' {
		if a, err := netip.ParseAddr(s[1 : len(s)-1]); err == nil {
			return a.Unmap().WithZone("")
		}
	}
	return netip.Addr{}
}

// hasPort reports whether s looks like HOST:PORT: [v6]:port, or v4:port
// (one colon).
func hasPort(s string) bool {
	i := strings.LastIndexByte(s, ':')
	if i < 0 {
		return false
	}
	if s[0] == '[' {
		return i > 0 && s[i-1] == ']'
	}
	return strings.IndexByte(s, ':') == i
}

func inAny(a netip.Addr, prefixes []netip.Prefix) bool {
	for _, p := range prefixes {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
