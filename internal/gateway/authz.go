package gateway

import (
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/httplimit"
)

// Forward auth: any method on /v1/authz of the decision listener, for
// NGINX auth_request, Traefik ForwardAuth, Caddy forward_auth and Envoy's
// HTTP ext_authz. The proxy asks before it forwards a request; sluice
// rebuilds that original request from the proxy's headers and runs it
// through the same httplimit.Limiter as its own reverse proxy, with a next
// handler that answers 200. Nothing is decided here: matching, path
// normalisation, identity, allowlist, headers, pacing, shadow and on_error
// are the Limiter's, so an allowed request gets 200 with the RateLimit
// headers, a denied one 429 with Retry-After and the JSON body, an
// unmatched one 200 without headers, and a path the normaliser refuses the
// proxy's 400. For NGINX, whose auth_request passes on only 2xx, 401 and
// 403, X-Sluice-Deny-Status: 403 turns every refusal into a 403 that says
// its own status in X-Sluice-Status (docs/forward-auth.md maps it back).
//
// The original request comes in one of two forms:
//   - /v1/authz exactly (NGINX, Traefik, Caddy): the method, URI and host
//     are in X-Forwarded-Method, X-Forwarded-Uri and X-Forwarded-Host, or
//     NGINX's X-Original-Method and X-Original-URI. A request that carries
//     both spellings with different values is refused: one of them was
//     written by the client. Without a method header the check request's
//     own method is the original; without a host header, its Host.
//   - /v1/authz/PATH (Envoy's ext_authz with path_prefix /v1/authz): the
//     check request is the original, with its method, Host and PATH; the
//     header spellings are ignored.
//
// Either way the client is the address the Limiter finds in the header of
// forwarded_header, so the peer must be a trusted proxy and must send that
// header: a request from any other peer is refused (403) before any header
// that describes the original request is read, and one without the
// forwarding header (400) would key the proxy itself.

// authzPath is the forward-auth endpoint.
const authzPath = "/v1/authz"

// The headers a proxy describes the original request in (canonical).
const (
	hForwardedMethod = "X-Forwarded-Method"
	hForwardedURI    = "X-Forwarded-Uri"
	hForwardedHost   = "X-Forwarded-Host"
	hOriginalMethod  = "X-Original-Method"
	hOriginalURI     = "X-Original-Uri"
	// hAuthzToken carries the decision API's bearer token on /v1/authz:
	// Authorization is the client's, passed on for its identity.
	hAuthzToken = "X-Sluice-Authorization"
	// hDenyStatus asks for every refusal (429, and the 400, 501 or 503
	// the proxy would answer) in one status, 401 or 403: the only ones
	// NGINX's auth_request passes on. hStatus then says which it was.
	hDenyStatus = "X-Sluice-Deny-Status"
	hStatus     = "X-Sluice-Status"
)

// isAuthz reports whether path is the forward-auth endpoint or its path
// form.
func isAuthz(path string) bool {
	return path == authzPath || strings.HasPrefix(path, authzPath+"/")
}

// allowAuthz is the Limiter's next handler on /v1/authz: the request may go on.
var allowAuthz = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
	w.WriteHeader(http.StatusOK)
})

// serveAuthz answers a forward-auth request. logged says that the caller
// already writes the access log line (the traffic listener does); otherwise
// the line is written here, of the original request.
func (g *Gateway) serveAuthz(w http.ResponseWriter, r *http.Request, st *state, logged bool) {
	if token := st.cfg.DecisionAPI.Token(); token != nil && !bearerMatches(r.Header.Get(hAuthzToken), token) {
		g.rejected("decision", "unauthorized")
		writeError(w, http.StatusUnauthorized, "unauthorized", "this API needs "+hAuthzToken+": Bearer TOKEN (Authorization is left to the client)")
		return
	}
	if peer, ok := trustedPeer(r.RemoteAddr, st.trusted); !ok {
		writeError(w, http.StatusForbidden, "untrusted_proxy", fmt.Sprintf("forward auth believes the forwarding headers of trusted_proxies only, and %s is not in them; add the proxy's address to trusted_proxies", peer))
		return
	}
	fwd := "X-Forwarded-For"
	if st.forwardedFrom == httplimit.FromForwarded {
		fwd = "Forwarded"
	}
	if len(r.Header.Values(fwd)) == 0 {
		writeError(w, http.StatusBadRequest, "invalid_request", fmt.Sprintf("the proxy sent no %s; want the client's address in it (forwarded_header names it)", fwd))
		return
	}
	var refusal *refusalWriter
	if v := r.Header.Values(hDenyStatus); len(v) > 0 {
		if len(v) != 1 || (v[0] != "401" && v[0] != "403") {
			writeError(w, http.StatusBadRequest, "invalid_request", hDenyStatus+": want 401 or 403, once")
			return
		}
		refusal = &refusalWriter{ResponseWriter: w, status: map[string]int{"401": 401, "403": 403}[v[0]]}
	}
	// A request the proxy describes wrongly is the proxy's error (NGINX
	// logs it and answers 500); only the Limiter's answers are mapped.
	orig, err := originalRequest(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request", err.Error())
		return
	}
	if refusal != nil {
		w = refusal
	}
	decide := st.limiter.Handler(allowAuthz)
	if g.accessLog != nil && !logged {
		g.serveLogged(w, orig, decide.ServeHTTP)
		return
	}
	decide.ServeHTTP(w, orig)
}

// originalRequest rebuilds the request the proxy asks about from r: its
// method, URI and host as described above, r's headers (the client's
// credentials among them, and the forwarding header the Limiter reads the
// client from) without those that describe the request, r's peer, and no
// body.
func originalRequest(r *http.Request) (*http.Request, error) {
	method, uri, host := r.Method, "", r.Host
	if r.URL.Path == authzPath {
		var err error
		if uri, err = oneOf(r.Header, hForwardedURI, hOriginalURI); err != nil {
			return nil, err
		}
		if uri == "" {
			return nil, fmt.Errorf("the proxy sent neither %s nor X-Original-URI; want the original request's URI in one (or ask %s/PATH with the original method)", hForwardedURI, authzPath)
		}
		m, err := oneOf(r.Header, hForwardedMethod, hOriginalMethod)
		if err != nil {
			return nil, err
		}
		if m != "" {
			method = m
		}
		h, err := oneOf(r.Header, hForwardedHost)
		if err != nil {
			return nil, err
		}
		if h != "" {
			host = h
		}
	} else {
		raw := r.RequestURI
		if !strings.HasPrefix(raw, "/") {
			raw = r.URL.RequestURI() // absolute-form
		}
		var ok bool
		if uri, ok = strings.CutPrefix(raw, authzPath); !ok || !strings.HasPrefix(uri, "/") {
			return nil, fmt.Errorf("the path %q is not %s followed by the original path", truncate(raw), authzPath)
		}
	}
	if !strings.HasPrefix(uri, "/") {
		return nil, fmt.Errorf("the original URI %q does not begin with /; want its path and query, as the client sent them", truncate(uri))
	}
	u, err := url.ParseRequestURI(uri)
	if err != nil {
		return nil, fmt.Errorf("the original URI %q is not a request URI: %v", truncate(uri), err)
	}
	// r is spent on this decision: its header map is the original's,
	// without what described the request or was meant for sluice.
	header := r.Header
	for _, h := range [...]string{hForwardedMethod, hForwardedURI, hForwardedHost, hOriginalMethod, hOriginalURI, hAuthzToken, hDenyStatus, hStatus} {
		delete(header, h)
	}
	orig := &http.Request{
		Method:     method,
		URL:        u,
		Proto:      r.Proto,
		ProtoMajor: r.ProtoMajor,
		ProtoMinor: r.ProtoMinor,
		Header:     header,
		Body:       http.NoBody,
		Host:       host,
		RemoteAddr: r.RemoteAddr,
		RequestURI: uri,
	}
	return orig.WithContext(r.Context()), nil
}

// oneOf returns the value of the headers names, which may each be given
// once: with several of them, all must agree, since a proxy writes one and
// the client may have written the other.
func oneOf(h http.Header, names ...string) (string, error) {
	val, from := "", ""
	for _, n := range names {
		v := h[n]
		switch {
		case len(v) == 0:
			continue
		case len(v) > 1:
			return "", fmt.Errorf("%s is given %d times; the proxy writes it once", n, len(v))
		case from != "" && v[0] != val:
			return "", fmt.Errorf("%s and %s disagree; one was written by the client (make the proxy set or remove both)", from, n)
		}
		val, from = v[0], n
	}
	return val, nil
}

// trustedPeer returns the address of the peer remote (host:port) and
// whether it is in trusted.
func trustedPeer(remote string, trusted []netip.Prefix) (netip.Addr, bool) {
	ap, err := netip.ParseAddrPort(remote)
	if err != nil {
		return netip.Addr{}, false
	}
	a := ap.Addr().Unmap()
	for _, p := range trusted {
		if p.Contains(a) {
			return a, true
		}
	}
	return a, false
}

// refusalWriter answers a refusal (any status from 400 on) in status,
// keeping its headers and body, and names the refusal's own status in
// X-Sluice-Status, for a proxy that passes on no other.
type refusalWriter struct {
	http.ResponseWriter
	status int
}

func (d *refusalWriter) WriteHeader(code int) {
	if code >= 400 {
		d.Header().Set(hStatus, strconv.Itoa(code))
		code = d.status
	}
	d.ResponseWriter.WriteHeader(code)
}

// Unwrap lets http.ResponseController reach the connection.
func (d *refusalWriter) Unwrap() http.ResponseWriter { return d.ResponseWriter }
