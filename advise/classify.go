package advise

import (
	"bytes"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"strconv"
	"unsafe"

	"go.yaml.in/yaml/v3"
)

// appendPattern appends the endpoint class of a request to dst: a
// net/http ServeMux pattern that matches exactly the paths of its class.
// Empty segments are dropped; a segment that looks like an identifier (see
// isID), or that holds characters a pattern cannot carry literally,
// becomes a wildcard {id}, {id2}, ...; a trailing slash and the root end
// in {$} so that the pattern is exact rather than a prefix.
//
//	GET /products/123        → GET /products/{id}
//	GET /users/5f0c…/orders  → GET /users/{id}/orders
//	GET /static/             → GET /static/{$}
func appendPattern(dst, method, path []byte) []byte {
	dst = append(dst, method...)
	dst = append(dst, ' ')
	ids := 0
	segs := 0
	for i := 0; i < len(path); {
		for i < len(path) && path[i] == '/' {
			i++
		}
		j := i
		for j < len(path) && path[j] != '/' {
			j++
		}
		if j == i {
			break
		}
		seg := path[i:j]
		dst = append(dst, '/')
		if isID(seg) || !literal(seg) {
			ids++
			dst = append(dst, "{id"...)
			if ids > 1 {
				dst = strconv.AppendInt(dst, int64(ids), 10)
			}
			dst = append(dst, '}')
		} else {
			dst = append(dst, seg...)
		}
		segs++
		if segs >= 16 { // deeper paths are one class per prefix
			return append(dst, '/')
		}
		i = j
	}
	if segs == 0 || path[len(path)-1] == '/' {
		dst = append(dst, "/{$}"...)
	}
	return dst
}

// foldPattern is the coarser class of a pattern when there are too many
// classes: the prefix pattern of its method and first segment
// ("GET /products/"), or of its method alone ("GET /") at depth 2.
func foldPattern(p string, depth int) string {
	sp := bytes.IndexByte([]byte(p), ' ')
	method, path := p[:sp], p[sp+1:]
	if depth >= 2 {
		return method + " /"
	}
	if j := bytes.IndexByte([]byte(path[1:]), '/'); j >= 0 {
		seg := path[1 : 1+j]
		if seg != "" && seg[0] != '{' {
			return method + " /" + seg + "/"
		}
	} else if path != "/{$}" && len(path) > 1 && path[1] != '{' {
		return method + " " + path + "/"
	}
	return method + " /"
}

// literal reports whether seg can appear literally in a ServeMux pattern
// and in YAML without quoting trouble.
func literal(seg []byte) bool {
	if len(seg) == 0 || len(seg) > 64 || string(seg) == "." || string(seg) == ".." {
		return false
	}
	for _, c := range seg {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.' || c == '~') {
			return false
		}
	}
	return true
}

// isID reports whether a path segment (or the part of it before a dot,
// as in 123.json) looks like an identifier rather than a route: all
// digits; a UUID; eight or more hex digits with at least one decimal
// digit; or sixteen or more characters with letters and digits (tokens,
// slugs with numbers, base64 ids).
func isID(seg []byte) bool {
	if i := bytes.IndexByte(seg, '.'); i > 0 {
		seg = seg[:i]
	}
	if len(seg) == 0 {
		return false
	}
	var nDigit, nHex, nAlpha int
	for _, c := range seg {
		switch {
		case c >= '0' && c <= '9':
			nDigit++
			nHex++
		case c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F':
			nHex++
			nAlpha++
		case c >= 'g' && c <= 'z' || c >= 'G' && c <= 'Z':
			nAlpha++
		}
	}
	switch {
	case nDigit == len(seg):
		return true
	case len(seg) == 36 && seg[8] == '-' && seg[13] == '-' && seg[18] == '-' && seg[23] == '-' && nHex == 32:
		return true
	case len(seg) >= 8 && nHex == len(seg) && nDigit > 0:
		return true
	case len(seg) >= 16 && nDigit > 0 && nAlpha > 0:
		return true
	}
	return false
}

// appendKey appends the caller key of e to dst: the user when there is
// one (authenticated), else the client address, IPv6 addresses grouped by
// their /64 prefix as the gateway groups them.
func appendKey(dst []byte, e *entry) (out []byte, authenticated bool) {
	if len(e.user) > 0 {
		return append(dst, e.user...), true
	}
	ip := e.ip
	if bytes.IndexByte(ip, ':') < 0 {
		return append(dst, ip...), false
	}
	// an address with its port, 203.0.113.7:51234 or [2001:db8::1]:443,
	// is keyed by the address: the port changes with every connection
	if ip[0] == '[' {
		if j := bytes.IndexByte(ip, ']'); j > 0 {
			ip = ip[1:j]
		}
	} else if c := bytes.IndexByte(ip, ':'); bytes.LastIndexByte(ip, ':') == c {
		ip = ip[:c] // host:port
	}
	if z := bytes.IndexByte(ip, '%'); z >= 0 {
		ip = ip[:z]
	}
	// The string view of ip does not outlive this call: ParseAddr keeps
	// only a zone, which was cut off above.
	a, err := netip.ParseAddr(unsafe.String(unsafe.SliceData(ip), len(ip)))
	if err != nil {
		return append(dst, ip...), false // a host name
	}
	if a.Is4() || a.Is4In6() {
		return a.Unmap().AppendTo(dst), false
	}
	p, _ := a.Prefix(64)
	return p.AppendTo(dst), false
}

// configPolicy is what the advisor reads of a sluice configuration: the
// policies' names and patterns. The configuration package owns the full
// shape; reading only these two fields keeps the advisor working on any
// valid file.
type configPolicy struct {
	Name  string `yaml:"name"`
	Match string `yaml:"match"`
}

// policyMatcher classifies requests by the policies of a configuration,
// with the ServeMux rules the gateway uses: most specific pattern first.
type policyMatcher struct {
	policies []configPolicy
	mux      *http.ServeMux
	index    map[string]int32 // pattern → policy
	cache    map[string]int32 // "METHOD path" → policy, or -1 for none
	req      http.Request
	u        url.URL
}

// readPolicies reads the policies of the configuration file at path.
func readPolicies(path string) ([]configPolicy, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var doc struct {
		Policies []configPolicy `yaml:"policies"`
	}
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(doc.Policies) == 0 {
		return nil, fmt.Errorf("%s: no policies: want a list under policies: with name and match", path)
	}
	return doc.Policies, nil
}

func newPolicyMatcher(policies []configPolicy) (*policyMatcher, error) {
	m := &policyMatcher{
		policies: policies,
		mux:      http.NewServeMux(),
		index:    make(map[string]int32),
		cache:    make(map[string]int32),
	}
	names := make(map[string]bool)
	for i, p := range policies {
		if p.Name == "" {
			return nil, fmt.Errorf("policy %d has no name", i+1)
		}
		if names[p.Name] {
			return nil, fmt.Errorf("policy name %q is used twice: want one name per policy", p.Name)
		}
		names[p.Name] = true
		if err := registerPattern(m.mux, p.Match); err != nil {
			return nil, fmt.Errorf("policy %q: match %q: %w", p.Name, p.Match, err)
		}
		m.index[p.Match] = int32(i)
	}
	m.req.URL = &m.u
	return m, nil
}

// registerPattern adds pattern to mux, turning ServeMux's panic on an
// invalid or conflicting pattern into an error.
func registerPattern(mux *http.ServeMux, pattern string) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
	}()
	mux.Handle(pattern, http.NotFoundHandler())
	return nil
}

// match returns the index of the policy for method and path, or -1.
func (m *policyMatcher) match(method, path []byte) int32 {
	var buf [256]byte
	k := append(append(append(buf[:0], method...), ' '), path...)
	if p, ok := m.cache[string(k)]; ok {
		return p
	}
	m.req.Method = string(method)
	m.u.Path = string(path)
	_, pattern := m.mux.Handler(&m.req)
	p, ok := m.index[pattern]
	if !ok {
		p = -1
	}
	if len(m.cache) >= 1<<16 {
		clear(m.cache)
	}
	m.cache[string(k)] = p
	return p
}
