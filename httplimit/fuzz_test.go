package httplimit

import (
	"net/http"
	"net/netip"
	"testing"
)

func FuzzClientIP(f *testing.F) {
	f.Add("10.0.0.1:80", "203.0.113.9, 10.1.1.1", `for="[2001:db8::1]:4711";proto=http`)
	f.Add("[fd00::1]:1", "", `for=unknown, for=192.0.2.1;by=x`)
	f.Add("garbage", ",,,", `for="`)
	f.Add("10.0.0.1:80", "[::1]:80,::ffff:1.2.3.4", "for=_hidden;for=1.1.1.1")
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")}
	f.Fuzz(func(t *testing.T, remote, xff, fwd string) {
		r := &http.Request{RemoteAddr: remote, Header: http.Header{}}
		if xff != "" {
			r.Header["X-Forwarded-For"] = []string{xff}
		}
		if fwd != "" {
			r.Header["Forwarded"] = []string{fwd}
		}
		a := ClientIP(r, trusted, FromEither)
		// Never a trusted hop when an untrusted one is named, and never an
		// address the peer did not vouch for when the peer is untrusted.
		if peer := parseHost(remote); peer.IsValid() && !inAny(peer, trusted) && a != peer {
			t.Fatalf("untrusted peer %v, but client %v", peer, a)
		}
	})
}

func FuzzAcceptsProblem(f *testing.F) {
	f.Add("application/problem+json")
	f.Add("application/json;q=0.9, application/problem+json;q=0")
	f.Add(";;;,=,q=")
	f.Fuzz(func(t *testing.T, accept string) {
		acceptsProblem([]string{accept})
	})
}

func FuzzForwardedElement(f *testing.F) {
	f.Add(`for=192.0.2.43, for="[2001:db8:cafe::17]"`)
	f.Add(`"a,b";for=1.1.1.1`)
	f.Fuzz(func(t *testing.T, v string) {
		rest := v
		for i := 0; rest != "" && i < 1000; i++ {
			next, _ := nextForwarded(rest)
			if len(next) >= len(rest) {
				t.Fatalf("no progress on %q", rest)
			}
			rest = next
		}
	})
}
