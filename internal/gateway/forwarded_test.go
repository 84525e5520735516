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

// sendForwarded sends GET url with one line of the header name per value
// (none for no values) and the other headers given as name, value pairs.
func sendForwarded(t *testing.T, url, name string, values []string, header ...string) (int, string) {
	t.Helper()
	for _, v := range values {
		header = append(header, name, v)
	}
	return status(t, url, header...)
}

func sendXFF(t *testing.T, url string, xff []string, header ...string) (int, string) {
	t.Helper()
	return sendForwarded(t, url, "X-Forwarded-For", xff, header...)
}

// xffCase is a spelling of X-Forwarded-For: the value of each of its lines.
type xffCase struct {
	name string
	xff  []string
}

// TestForwardedForThatNamesNoClient: behind a trusted proxy, an
// X-Forwarded-For that cannot be read, or that holds only trusted
// addresses, is refused with 400 on the traffic listener and at forward
// auth (as a missing one is there), and never charged to the proxy's own
// bucket, which every client behind it shares. Every readable spelling
// keys its client.
func TestForwardedForThatNamesNoClient(t *testing.T) {
	s := serve(t, "", "trusted_proxies: [127.0.0.1/32, 10.0.0.0/8]\nforwarded_header: x-forwarded-for\n"+
		"policies:\n  - {name: api, match: /, anonymous: [{rate: 1/h, burst: 2}]}\n")
	long := strings.Repeat("x", 40<<10)
	many := make([]string, 100)
	for i := range many {
		many[i] = fmt.Sprintf("10.0.%d.1", i)
	}
	for _, tc := range []xffCase{
		{"garbage", []string{"garbage"}},
		{"unknown", []string{"unknown"}},
		{"trusted only", []string{"10.1.2.3"}},
		{"trusted chain", []string{"10.1.2.3, 127.0.0.1"}},
		{"empty", []string{""}},
		{"only empty elements", []string{" , ,, "}},
		{"garbage to believe", []string{"203.0.113.7, not-an-ip"}},
		{"garbage between", []string{"203.0.113.7, not-an-ip, 10.0.0.1"}},
		{"half a bracket", []string{"[2001:db8::1"}},
		{"port out of range", []string{"203.0.113.7:99999"}},
		{"zone on IPv4", []string{"203.0.113.7%eth0"}},
		{"a very long entry", []string{long}},
		{"many headers, all trusted", many},
	} {
		for _, url := range []string{s.traffic + "/x", s.decision + "/v1/authz"} {
			code, body := sendXFF(t, url, tc.xff, "X-Forwarded-Uri", "/x")
			if code != http.StatusBadRequest || !strings.Contains(body, "names no client") || len(body) > 1024 {
				t.Errorf("%s at %s: %d %.300q; want 400 naming why, briefly", tc.name, url, code, body)
			}
		}
	}
	// Nothing was charged to the proxy: its own requests still have
	// their burst of 2.
	for i := range 2 {
		if code, body := sendXFF(t, s.traffic+"/x", nil); code != http.StatusNotFound {
			t.Fatalf("the proxy's own request %d after the refusals: %d %s; want its bucket untouched", i+1, code, body)
		}
	}
	if code, _ := sendXFF(t, s.traffic+"/x", nil); code != http.StatusTooManyRequests {
		t.Fatalf("the proxy's third request: %d, want 429 (the test keys it)", code)
	}
	// Each readable spelling keys its own client: two pass, the third is
	// denied, whatever the proxy's own bucket says.
	for _, tc := range []xffCase{
		{"spaces", []string{"  203.0.113.1  "}},
		{"port", []string{"203.0.113.2:4711"}},
		{"IPv6 in brackets with a port", []string{"[2001:db8:1::1]:80"}},
		{"IPv6 in brackets", []string{"[2001:db8:2::1]"}},
		{"IPv6", []string{"2001:db8:3::1"}},
		{"IPv4-mapped IPv6", []string{"::ffff:203.0.113.3"}},
		{"empty elements around", []string{", 203.0.113.4 , ,"}},
		{"garbage left of the client", []string{"garbage, unknown, 203.0.113.5, 10.9.9.9"}},
		{"two headers", []string{"203.0.113.6", "10.0.0.9"}},
		{"a very long chain", []string{strings.Repeat("198.51.100.1, ", 2000) + "203.0.113.7"}},
	} {
		for i, want := range []int{http.StatusNotFound, http.StatusNotFound, http.StatusTooManyRequests} {
			if code, body := sendXFF(t, s.traffic+"/x", tc.xff); code != want {
				t.Fatalf("%s, request %d: %d %.200s; want %d", tc.name, i+1, code, body, want)
			}
		}
	}
}

// TestForwardedThatNamesNoClient: the same behind proxies that write
// Forwarded (RFC 7239): an element without an address to believe is
// refused, a quoted IPv6 address with a port keys its client.
func TestForwardedThatNamesNoClient(t *testing.T) {
	s := serve(t, "", "trusted_proxies: [127.0.0.1/32, 10.0.0.0/8]\nforwarded_header: forwarded\n"+
		"policies:\n  - {name: api, match: /, anonymous: [{rate: 1/h, burst: 1}]}\n")
	for _, v := range []string{"for=unknown", "for=_hidden", "proto=http", "for=10.0.0.1", "for=192.0.2.1, for=unknown;proto=http", `for="[2001:db8::1"`, ",  ,"} {
		if code, body := sendForwarded(t, s.traffic+"/x", "Forwarded", []string{v}); code != http.StatusBadRequest || !strings.Contains(body, "the Forwarded a trusted proxy sent names no client") {
			t.Errorf("Forwarded: %s: %d %s; want 400", v, code, body)
		}
	}
	for _, want := range []int{http.StatusNotFound, http.StatusTooManyRequests} {
		if code, _ := sendForwarded(t, s.traffic+"/x", "Forwarded", []string{`for=unknown, for="[2001:db8:4::1]:4711";proto=http, for=10.0.0.2`}); code != want {
			t.Fatalf("a quoted IPv6 client: %d, want %d", code, want)
		}
	}
	if code, _ := sendForwarded(t, s.traffic+"/x", "Forwarded", nil); code != http.StatusNotFound {
		t.Fatalf("the proxy's own request after the refusals: %d, want its bucket untouched", code)
	}
}
