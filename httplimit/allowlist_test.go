package httplimit

import (
	"crypto/sha256"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"

	"github.com/sluicehq/sluice/memstore"
)

// TestAllowlist: allowlisted addresses and identities are never limited
// and get no RateLimit headers; a forged X-Forwarded-For or an unverified
// key does not buy a place on the list, while a trusted proxy's header
// does.
func TestAllowlist(t *testing.T) {
	store := memstore.New(memstore.Options{})
	defer store.Close()
	lim, err := New(Options{
		Store:          store,
		Policies:       []Policy{{Name: "api", Pattern: "/", Cost: 1, Anonymous: rule(0.001, 1), Authenticated: rule(0.001, 1)}},
		TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.9.9.9/32")},
		ForwardedFrom:  FromXForwardedFor,
		Authenticators: []Authenticator{APIKeys("X-API-Key", map[[32]byte]Caller{
			sha256.Sum256([]byte("monitor-key")): {ID: "monitor"},
			sha256.Sum256([]byte("user-key")):    {ID: "user"},
		})},
		Allowlist: Allowlist{
			CIDRs:      []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24"), netip.MustParsePrefix("2001:db8::1/128")},
			Identities: []string{"monitor"},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	h := lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	statuses := func(remote string, header ...string) (codes []int, limited bool) {
		for range 3 {
			r := httptest.NewRequest("GET", "/x", nil)
			r.RemoteAddr = remote
			for i := 0; i+1 < len(header); i += 2 {
				r.Header.Set(header[i], header[i+1])
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			codes = append(codes, w.Code)
			limited = limited || w.Header().Get("RateLimit-Limit") != ""
		}
		return codes, limited
	}
	for _, tc := range []struct {
		name      string
		remote    string
		header    []string
		allowlist bool
	}{
		{"address in a listed CIDR", "192.0.2.7:4000", nil, true},
		{"listed IPv6 address", "[2001:db8::1]:4000", nil, true},
		{"IPv4-mapped IPv6 of a listed address", "[::ffff:192.0.2.8]:4000", nil, true},
		{"listed identity", "203.0.113.1:4000", []string{"X-API-Key", "monitor-key"}, true},
		{"trusted proxy forwarding a listed address", "10.9.9.9:4000", []string{"X-Forwarded-For", "192.0.2.9"}, true},
		{"address outside the list", "203.0.113.2:4000", nil, false},
		{"other IPv6 of the same /64", "[2001:db8::2]:4000", nil, false},
		{"forged X-Forwarded-For from an untrusted peer", "203.0.113.3:4000", []string{"X-Forwarded-For", "192.0.2.7"}, false},
		{"forged Forwarded from an untrusted peer", "203.0.113.6:4000", []string{"Forwarded", "for=192.0.2.7"}, false},
		{"trusted proxy, listed address only in the header it does not write", "10.9.9.9:4000", []string{"Forwarded", "for=192.0.2.7", "X-Forwarded-For", "203.0.113.7"}, false},
		{"trusted proxy, listed address left of the one it appended", "10.9.9.9:4000", []string{"X-Forwarded-For", "192.0.2.7, 203.0.113.8"}, false},
		{"identity that is not listed", "203.0.113.4:4000", []string{"X-API-Key", "user-key"}, false},
		{"key that does not verify", "203.0.113.5:4000", []string{"X-API-Key", "monitor"}, false},
	} {
		codes, limited := statuses(tc.remote, tc.header...)
		if tc.allowlist && (codes[2] != 200 || limited) {
			t.Errorf("%s: %v, headers %v; want 200s without RateLimit headers", tc.name, codes, limited)
		}
		if !tc.allowlist && (codes[0] != 200 || codes[1] != 429 || !limited) {
			t.Errorf("%s: %v; want 200 then 429, with headers", tc.name, codes)
		}
	}
}
