package httplimit

import (
	"errors"
	"net/http"
	"strings"
)

// What is matched is what is served: before a request is
// matched, the limiter rewrites it into one normal form and passes that
// form on to the next handler (the gateway forwards it to the upstream), so
// no spelling of a path can be matched as one thing and served as another.
//
// The normal form of a path, modelled on Envoy's normalize_path,
// merge_slashes and path_with_escaped_slashes_action:
//   - percent-encoded unreserved characters are decoded (%41 → A, %7E → ~,
//     %2E → .), every other escape is written in uppercase hex (%c3 → %C3),
//     and a byte that may not appear raw in a path is encoded;
//   - %2F, %5C and a raw backslash are refused, kept inside their segment
//     (as %2F and %5C) or decoded into separators, as Paths.EscapedSlashes
//     says; a raw backslash is never left raw, because browsers and some
//     servers read it as a slash and others do not;
//   - dot segments are removed (RFC 3986 remove_dot_segments; ".." at the
//     root stays at the root) and repeated slashes merged; a trailing slash
//     stays;
//   - a path parameter (a raw ";" in a segment, as in /login;jsessionid=1)
//     is refused: servlet containers cut it off before routing and most
//     other servers do not, so no single form is what every upstream serves.
//
// The Host is written in lowercase without a trailing dot, and matched
// without its port. A method with a lowercase letter is refused with 501:
// methods are case-sensitive, every registered one is uppercase, and an
// upstream that uppercases methods would serve "get" as GET.

// EscapedSlashes says what the limiter does with an encoded slash or
// backslash (%2F, %5C, and a raw backslash) in a path.
type EscapedSlashes int

const (
	// EscapedSlashesReject answers 400 (the default).
	EscapedSlashesReject EscapedSlashes = iota
	// EscapedSlashesKeep keeps them inside their segment, written %2F and
	// %5C: right for upstreams that decode a path segment by segment, as
	// Go's ServeMux does; wrong for one that decodes first and routes after.
	EscapedSlashesKeep
	// EscapedSlashesDecode turns them into separators, like "/".
	EscapedSlashesDecode
)

// Paths says how the limiter normalises request paths. The zero value is
// case-sensitive matching with encoded slashes refused.
type Paths struct {
	// CaseInsensitive matches paths without (ASCII) case, for upstreams that
	// route without it, such as Express and ASP.NET. Only the matching
	// ignores case: the request passed on keeps the case it came with, and
	// such an upstream routes it to the route that was matched.
	CaseInsensitive bool

	EscapedSlashes EscapedSlashes
}

// Errors of a request that has no normal form; the limiter answers them
// with 400 (or 501 for the method) and never passes the request on.
var (
	errEscapedSlash = errors.New("the path holds an encoded slash or a backslash (%2F, %5C or \\), which this server refuses")
	errPathParam    = errors.New("the path holds a path parameter (;), which this server refuses")
	errBadEscape    = errors.New("the path holds a malformed percent-encoding")
	errMethod       = errors.New("the method is not implemented: methods are case-sensitive, write it in uppercase")
	errAsterisk     = errors.New("the request target * is only OPTIONS's, about the server itself; this server does not pass it on")
)

// normalizeRequest returns r in its normal form: r itself when it is
// already normal (the common case, which allocates nothing), or a shallow
// copy with a new URL, RequestURI and Host.
func normalizeRequest(r *http.Request, paths Paths) (*http.Request, error) {
	if !validMethod(r.Method) {
		return nil, errMethod
	}
	if r.URL == nil {
		return nil, errBadEscape
	}
	if r.RequestURI == "*" { // net/http answers OPTIONS * itself
		return nil, errAsterisk
	}
	raw := rawPath(r)
	path, err := normalizePath(raw, paths.EscapedSlashes)
	if err != nil {
		return nil, err
	}
	host := normalizeHost(r.Host)
	if path == raw && host == r.Host && (r.URL.RawPath == "" || r.URL.RawPath == path) {
		return r, nil
	}
	r2 := new(http.Request)
	*r2 = *r
	u := *r.URL
	// RawPath is kept even where it looks like Path: Go's own encoding of
	// Path would escape !'()* and so forward another spelling.
	u.Path, u.RawPath = unescapePath(path), path
	r2.URL = &u
	if r.RequestURI != "" {
		r2.RequestURI = u.RequestURI()
	}
	r2.Host = host
	return r2, nil
}

// rawPath is the path of r as the client wrote it: RawPath when it is the
// encoding of Path (a server request sets it whenever the client's spelling
// is not Go's default one), else Go's encoding of Path.
func rawPath(r *http.Request) string {
	u := r.URL
	if u.RawPath != "" && unescapePath(u.RawPath) == u.Path {
		return u.RawPath
	}
	if u.Path == "" {
		return ""
	}
	return u.EscapedPath()
}

// validMethod reports whether m is a token without lowercase letters.
func validMethod(m string) bool {
	if m == "" {
		return true // a client request: net/http reads "" as GET
	}
	for i := 0; i < len(m); i++ {
		c := m[i]
		if c >= 'a' && c <= 'z' || !isTokenChar(c) {
			return false
		}
	}
	return true
}

func isTokenChar(c byte) bool {
	return c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' ||
		strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// normalizeHost lowercases h and drops the trailing dots of its name; the
// port stays (the ServeMux ignores it when matching).
func normalizeHost(h string) string {
	name, port := h, ""
	if i := strings.LastIndexByte(h, ':'); i >= 0 && !strings.Contains(h[i:], "]") {
		name, port = h[:i], h[i:]
	}
	if !strings.HasSuffix(name, ".") && !hasUpper(name) {
		return h
	}
	return asciiLower(strings.TrimRight(name, ".")) + port
}

// normalizePath returns the normal form of the escaped path p, or why it
// has none. A path in normal form is returned as it is, without allocating.
func normalizePath(p string, slashes EscapedSlashes) (string, error) {
	if isNormalPath(p) {
		return p, nil
	}
	// Each segment is written to b after the previous one; starts holds
	// where each written segment begins, so that ".." can take one back.
	b := make([]byte, 0, len(p)+8)
	var starts []int
	seg := make([]byte, 0, 32)
	trailing := false
	end := func() {
		s := string(seg)
		trailing = s == "" || s == "." || s == ".."
		switch s {
		case "", ".":
		case "..":
			if n := len(starts); n > 0 {
				b = b[:starts[n-1]]
				starts = starts[:n-1]
			}
		default:
			starts = append(starts, len(b))
			b = append(b, '/')
			b = append(b, seg...)
		}
		seg = seg[:0]
	}
	i := 0
	if strings.HasPrefix(p, "/") {
		i = 1
	}
	for ; i < len(p); i++ {
		c := p[i]
		escaped := false
		if c == '%' {
			if i+2 >= len(p) || !isHex(p[i+1]) || !isHex(p[i+2]) {
				return "", errBadEscape
			}
			c = unhex(p[i+1])<<4 | unhex(p[i+2])
			i += 2
			escaped = true
		}
		switch {
		case c == '/' && !escaped:
			end()
		case c == '/' || c == '\\':
			switch slashes {
			case EscapedSlashesDecode:
				end()
			case EscapedSlashesKeep:
				seg = appendEscape(seg, c)
			default:
				return "", errEscapedSlash
			}
		case c == ';' && !escaped:
			return "", errPathParam
		case isUnreserved(c) || !escaped && isPathChar(c):
			seg = append(seg, c)
		default:
			seg = appendEscape(seg, c)
		}
	}
	end()
	if len(b) == 0 || trailing {
		b = append(b, '/')
	}
	return string(b), nil
}

// isNormalPath reports whether p is already in normal form: rooted, only
// unreserved and other path characters, no escapes, no ";", and no empty or
// dot segments but a trailing empty one.
func isNormalPath(p string) bool {
	if p == "" || p[0] != '/' {
		return false
	}
	start := 1
	for i := 1; i <= len(p); i++ {
		if i < len(p) {
			c := p[i]
			if c == '/' {
				// fall through to the segment check
			} else if c == ';' || !isUnreserved(c) && !isPathChar(c) {
				return false
			} else {
				continue
			}
		}
		seg := p[start:i]
		if seg == "." || seg == ".." || seg == "" && i < len(p) {
			return false
		}
		start = i + 1
	}
	return true
}

// isUnreserved: RFC 3986 unreserved, which an escape never needs to hide.
func isUnreserved(c byte) bool { return charClass[c] == unreserved }

// isPathChar: the other characters RFC 3986 allows raw in a segment
// (sub-delims, ":" and "@"; ";" is refused before this is asked).
func isPathChar(c byte) bool { return charClass[c] == pathChar }

const (
	unreserved = 1 + iota
	pathChar
)

// charClass classifies bytes for the normaliser, which asks per byte.
var charClass = func() (t [256]byte) {
	for c := range 256 {
		switch {
		case c >= 'A' && c <= 'Z', c >= 'a' && c <= 'z', c >= '0' && c <= '9', strings.IndexByte("-._~", byte(c)) >= 0:
			t[c] = unreserved
		case strings.IndexByte("!$&'()*+,;=:@", byte(c)) >= 0:
			t[c] = pathChar
		}
	}
	return t
}()

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c >= 'a':
		return c - 'a' + 10
	case c >= 'A':
		return c - 'A' + 10
	}
	return c - '0'
}

func appendEscape(b []byte, c byte) []byte {
	const hex = "0123456789ABCDEF"
	return append(b, '%', hex[c>>4], hex[c&15])
}

// unescapePath decodes the escapes of a path whose escapes are valid.
func unescapePath(p string) string {
	if strings.IndexByte(p, '%') < 0 {
		return p
	}
	b := make([]byte, 0, len(p))
	for i := 0; i < len(p); i++ {
		if p[i] == '%' && i+2 < len(p) && isHex(p[i+1]) && isHex(p[i+2]) {
			b = append(b, unhex(p[i+1])<<4|unhex(p[i+2]))
			i += 2
			continue
		}
		b = append(b, p[i])
	}
	return string(b)
}

func hasUpper(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 'A' && s[i] <= 'Z' {
			return true
		}
	}
	return false
}

// asciiLower lowercases ASCII letters only: a path in normal form is ASCII,
// and the percent-encoded bytes of other letters are not folded.
func asciiLower(s string) string {
	if !hasUpper(s) {
		return s
	}
	b := []byte(s)
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// matchPattern is the form in which a policy's pattern is registered: its
// host lowercased without a trailing dot, and, when matching ignores case,
// its path lowercased (wildcard names included, which only name).
func matchPattern(pattern string, insensitive bool) string {
	method, rest := "", pattern
	if i := strings.IndexAny(pattern, " \t"); i >= 0 {
		method, rest = pattern[:i+1], strings.TrimLeft(pattern[i+1:], " \t")
	}
	slash := strings.IndexByte(rest, '/')
	if slash < 0 {
		return pattern // the ServeMux will say what is wrong with it
	}
	host, path := rest[:slash], rest[slash:]
	host = asciiLower(strings.TrimSuffix(host, "."))
	if insensitive {
		path = asciiLower(path)
	}
	return method + host + path
}

// patternPath is the path of a pattern: without method and host.
func patternPath(pattern string) string {
	if i := strings.IndexAny(pattern, " \t"); i >= 0 {
		pattern = strings.TrimLeft(pattern[i+1:], " \t")
	}
	if i := strings.IndexByte(pattern, '/'); i > 0 {
		pattern = pattern[i:]
	}
	return pattern
}

// subtree reports whether pattern matches a whole subtree (/products/ or
// /files/{rest...}) rather than one path.
func subtree(pattern string) bool {
	p := patternPath(pattern)
	return strings.HasSuffix(p, "/") || strings.HasSuffix(p, "...}")
}

// descendant reports whether pattern matched path only as a path below
// the root of a subtree pattern ("/" for /products/1/, "/products/" for
// /products/1/x), not as the path it names.
func descendant(pattern, path string) bool {
	return subtree(pattern) && strings.Count(path, "/") > strings.Count(patternPath(pattern), "/")
}

// refuse answers a request that has no normal form.
func refuse(w http.ResponseWriter, err error) {
	if errors.Is(err, errMethod) {
		writeJSONError(w, http.StatusNotImplemented, "not_implemented", err.Error(), 0)
		return
	}
	writeJSONError(w, http.StatusBadRequest, "invalid_path", err.Error(), 0)
}
