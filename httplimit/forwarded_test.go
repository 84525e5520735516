package httplimit

import (
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"testing"
)

// TestForwardedChosen: behind a proxy that writes one header, whatever a
// client puts in the other (or in X-Real-IP) is never read, and New
// refuses trusted proxies whose header is not named.
func TestForwardedChosen(t *testing.T) {
	proxies := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	pol := []Policy{{Name: "api", Pattern: "/", Cost: 1, Anonymous: rule(1, 3)}}
	if _, err := New(Options{Store: newTestStore(t), Policies: pol, TrustedProxies: proxies}); err == nil || !strings.Contains(err.Error(), "ForwardedFrom") {
		t.Fatalf("New with TrustedProxies and no ForwardedFrom: %v; want an error naming ForwardedFrom", err)
	}
	for _, tc := range []struct {
		name string
		from ForwardedFrom
	}{{"x-forwarded-for", FromXForwardedFor}, {"forwarded", FromForwarded}} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, Options{Policies: pol, TrustedProxies: proxies, ForwardedFrom: tc.from}, nil)
			for i := range 10 {
				forged := fmt.Sprintf("198.51.100.%d", i)
				xff, fwd := forged, "for="+forged
				if tc.from == FromXForwardedFor {
					xff += ", 203.0.113.5" // what the proxy appended
				} else {
					fwd += ", for=203.0.113.5"
				}
				want := http.StatusOK
				if i >= 3 {
					want = http.StatusTooManyRequests
				}
				if r := e.do("GET", "/", "X-Forwarded-For", xff, "Forwarded", fwd, "X-Real-IP", forged); r.status != want {
					t.Fatalf("request %d: %d, want %d", i, r.status, want)
				}
			}
		})
	}
}

// FuzzClientIPChosen: with the header named, the other one never changes
// the client.
func FuzzClientIPChosen(f *testing.F) {
	f.Add("10.0.0.1:80", "203.0.113.9, 10.1.1.1", `for="[2001:db8::1]:4711";proto=http`)
	f.Add("10.0.0.1:80", "", `for=unknown, for=192.0.2.1;by=x`)
	f.Add("192.0.2.1:80", "1.1.1.1", "for=2.2.2.2")
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	f.Fuzz(func(t *testing.T, remote, xff, fwd string) {
		both := &http.Request{RemoteAddr: remote, Header: http.Header{"X-Forwarded-For": {xff}, "Forwarded": {fwd}}}
		onlyXFF := &http.Request{RemoteAddr: remote, Header: http.Header{"X-Forwarded-For": {xff}}}
		onlyFwd := &http.Request{RemoteAddr: remote, Header: http.Header{"Forwarded": {fwd}}}
		if a, b := ClientIP(both, trusted, FromXForwardedFor), ClientIP(onlyXFF, trusted, FromXForwardedFor); a != b {
			t.Fatalf("reading X-Forwarded-For, Forwarded %q changed the client from %v to %v", fwd, b, a)
		}
		if a, b := ClientIP(both, trusted, FromForwarded), ClientIP(onlyFwd, trusted, FromForwarded); a != b {
			t.Fatalf("reading Forwarded, X-Forwarded-For %q changed the client from %v to %v", xff, b, a)
		}
	})
}
