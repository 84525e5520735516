package config

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/sluicehq/sluice/decide"
)

// Paths says how request paths are normalised before they are matched and
// forwarded (see httplimit.Paths, which package httpopts builds from it).
type Paths struct {
	// Case is sensitive (the default) or insensitive, for upstreams that
	// route without case, such as Express and ASP.NET.
	Case string `yaml:"case"`
	// EscapedSlashes says what %2F, %5C and a raw backslash do: reject
	// (400, the default), keep (inside their segment) or decode (into
	// separators).
	EscapedSlashes string `yaml:"escaped_slashes"`
}

func (p *Paths) defaults() {
	if p.Case == "" {
		p.Case = "sensitive"
	}
	if p.EscapedSlashes == "" {
		p.EscapedSlashes = "reject"
	}
}

// paths validates the paths section and forwarded_header, and, when
// matching ignores case, that no two patterns differ only in case.
func (v *validator) paths() {
	c := v.c
	v.oneOf("paths.case", c.Paths.Case, "sensitive", "insensitive")
	v.oneOf("paths.escaped_slashes", c.Paths.EscapedSlashes, "reject", "keep", "decode")
	v.forwardedHeader()
	v.catchAll()
	for i, p := range c.Policies {
		if why := decide.AbnormalPattern(p.Match); why != "" {
			v.fail(fmt.Sprintf("policies[%d].match", i), "%q holds %s, which no request does once normalised (dot segments removed, repeated slashes merged, path parameters refused); write the path as it is served", p.Match, why)
		}
	}
	if c.Paths.Case != "insensitive" {
		return
	}
	mux := http.NewServeMux()
	for i, p := range c.Policies {
		if registers(http.NewServeMux(), p.Match) != "" {
			continue // policies() says what is wrong with it
		}
		if msg := registers(mux, strings.ToLower(p.Match)); msg != "" {
			v.fail(fmt.Sprintf("policies[%d].match", i), "%q conflicts with another pattern once case is ignored (paths.case is insensitive): %s; make one of them more specific", p.Match, strings.ReplaceAll(msg, "\n", " "))
		}
	}
}

// registers registers pattern on mux, and says why the mux refused it.
func registers(mux *http.ServeMux, pattern string) (msg string) {
	defer func() {
		if r := recover(); r != nil {
			msg = fmt.Sprint(r)
		}
	}()
	mux.Handle(pattern, http.NotFoundHandler())
	return ""
}

// forwardedHeader: with trusted_proxies the header they write must be
// named, so that a client cannot slip in the other one.
func (v *validator) forwardedHeader() {
	c := v.c
	if len(c.TrustedProxies) == 0 {
		v.oneOf("forwarded_header", c.ForwardedHeader, "auto", "x-forwarded-for", "forwarded")
		return
	}
	switch {
	case !v.has("forwarded_header"):
		v.fail("trusted_proxies", "forwarded_header is required with trusted_proxies; want forwarded_header: x-forwarded-for or forwarded, the header your proxies write (a client could forge the other)")
	case c.ForwardedHeader == "auto":
		v.fail("forwarded_header", "\"auto\" is not accepted with trusted_proxies: a client could forge the header your proxies do not write; want x-forwarded-for or forwarded")
	default:
		v.oneOf("forwarded_header", c.ForwardedHeader, "x-forwarded-for", "forwarded")
	}
}

// catchAll warns when a gateway with an upstream has no policy that
// catches every path: a request to a path that no pattern names reaches the
// upstream unlimited.
func (v *validator) catchAll() {
	c := v.c
	if c.Upstream == "" {
		return
	}
	for _, p := range c.Policies {
		if path := strings.TrimSpace(p.Match); path == "/" || strings.HasPrefix(path, "/{") && strings.HasSuffix(path, "...}") && !strings.Contains(path[1:], "/") {
			return
		}
	}
	field := "policies"
	if !v.has(field) {
		field = "upstream"
	}
	e := FieldError{File: v.file, Line: v.line(field), Field: field,
		Msg: `no policy matches "/" (every method, every path), so a request to a path that no pattern names reaches the upstream unlimited; add a catch-all such as {name: default, match: "/", anonymous: [{rate: 100/s, burst: 200}]}`}
	c.Warnings = append(c.Warnings, e.Error())
}
