package gateway

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestSpoofedForwardingHeaders: whatever a client writes in
// X-Forwarded-For, Forwarded, X-Real-IP and their kin never changes its
// key, for every forwarded_header setting, with and without trusted
// proxies; and the upstream sees only the chain of the chosen header, never
// a client's X-Real-IP. The test client stands in for the trusted proxy
// (127.0.0.1) where there is one: it appends the real client, 203.0.113.5,
// to the header it writes, after whatever the client forged there.
func TestSpoofedForwardingHeaders(t *testing.T) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(r.Header)
	}))
	defer upstream.Close()
	for _, tc := range []struct {
		name, conf string
		proxy      string // the header the proxy writes: "", xff, forwarded
	}{
		{"no proxies, header unset", "", ""},
		{"no proxies, auto", "forwarded_header: auto\n", ""},
		{"no proxies, x-forwarded-for", "forwarded_header: x-forwarded-for\n", ""},
		{"no proxies, forwarded", "forwarded_header: forwarded\n", ""},
		{"proxy writes x-forwarded-for", "trusted_proxies: [127.0.0.1]\nforwarded_header: x-forwarded-for\n", "xff"},
		{"proxy writes forwarded", "trusted_proxies: [127.0.0.1]\nforwarded_header: forwarded\n", "forwarded"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conf := "upstream: " + upstream.URL + "\n" + tc.conf +
				"policies:\n  - {name: all, match: /, anonymous: [{rate: 1/h, burst: 3}]}\n"
			_, gw, _ := newGateway(t, conf)
			addr := strings.TrimPrefix(gw.URL, "http://")
			send := func(i int, client string) *http.Response {
				forged := fmt.Sprintf("198.51.100.%d", i)
				forged6 := fmt.Sprintf("2001:db8:%x::1", i+1)
				xff := forged + ", " + forged6
				fwd := fmt.Sprintf(`for=%s, for="[%s]"`, forged, forged6)
				switch tc.proxy {
				case "xff":
					xff += ", " + client
				case "forwarded":
					fwd += ", for=" + client
				}
				return rawRequest(t, addr, "GET", "/x", "localhost",
					"X-Forwarded-For", forged6, "Forwarded", "for="+forged, // first lines the client wrote
					"X-Forwarded-For", xff, "Forwarded", fwd, "X-Real-IP", forged,
					"True-Client-IP", forged, "CF-Connecting-IP", forged, "X-Client-IP", forged)
			}
			for i := range 10 {
				resp := send(i, "203.0.113.5")
				want := http.StatusOK
				if i >= 3 {
					want = http.StatusTooManyRequests
				}
				if resp.StatusCode != want {
					t.Fatalf("request %d with forged forwarding headers: status %d, want %d (a forged header bought a new bucket)", i, resp.StatusCode, want)
				}
			}
			// The header the proxy writes is read: another client behind it
			// has its own bucket.
			other := http.StatusTooManyRequests
			if tc.proxy != "" {
				other = http.StatusOK
			}
			if resp := send(99, "203.0.113.6"); resp.StatusCode != other {
				t.Fatalf("another client: status %d, want %d", resp.StatusCode, other)
			}
		})
	}
}

// TestUpstreamForwardingHeaders: the upstream sees the chain of the chosen
// header only, from a trusted proxy only, with this hop appended, and none
// of the other forwarding headers a client sent.
func TestUpstreamForwardingHeaders(t *testing.T) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(r.Header)
	}))
	defer upstream.Close()
	for _, tc := range []struct {
		name, conf     string
		xff, forwarded string // what the upstream must see ("" absent)
	}{
		{"untrusted", "", "127.0.0.1", ""},
		{"untrusted, forwarded", "forwarded_header: forwarded\n", "", `for=127.0.0.1;host="localhost";proto=http`},
		{"trusted x-forwarded-for", "trusted_proxies: [127.0.0.1]\nforwarded_header: x-forwarded-for\n", "6.6.6.6, 203.0.113.5, 127.0.0.1", ""},
		{"trusted forwarded", "trusted_proxies: [127.0.0.1]\nforwarded_header: forwarded\n", "", `for=6.6.6.6, for=203.0.113.5, for=127.0.0.1;host="localhost";proto=http`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, gw, _ := newGateway(t, "upstream: "+upstream.URL+"\n"+tc.conf)
			req, _ := http.NewRequest("GET", gw.URL+"/", nil)
			req.Host = "localhost"
			for _, h := range []string{"X-Real-IP", "True-Client-IP", "CF-Connecting-IP", "X-Client-IP", "X-Forwarded-Port", "X-Original-URL"} {
				req.Header.Set(h, "6.6.6.6")
			}
			req.Header.Set("X-Forwarded-For", "6.6.6.6, 203.0.113.5")
			req.Header.Set("Forwarded", "for=6.6.6.6, for=203.0.113.5")
			req.Header.Set("X-Forwarded-Host", "evil.example")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var h http.Header
			if err := json.NewDecoder(resp.Body).Decode(&h); err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(h["X-Forwarded-For"], ", "); got != tc.xff {
				t.Errorf("X-Forwarded-For %q, want %q", got, tc.xff)
			}
			if got := strings.Join(h["Forwarded"], ", "); got != tc.forwarded {
				t.Errorf("Forwarded %q, want %q", got, tc.forwarded)
			}
			for _, k := range []string{"X-Real-Ip", "True-Client-Ip", "Cf-Connecting-Ip", "X-Client-Ip", "X-Forwarded-Port", "X-Original-Url"} {
				if v, ok := h[k]; ok {
					t.Errorf("upstream saw %s: %q", k, v)
				}
			}
			if tc.xff != "" && h.Get("X-Forwarded-Host") != "localhost" {
				t.Errorf("X-Forwarded-Host %q, want localhost", h.Get("X-Forwarded-Host"))
			}
		})
	}
}
