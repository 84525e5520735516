package gateway

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

const keyPolicies = `trusted_proxies: [127.0.0.0/8]
forwarded_header: x-forwarded-for
policies:
  - name: tenants
    match: "/tenants/{tenant}/"
    anonymous: [{rate: 1/h, burst: 3}]
    key: [{header: X-Plan}, {path: tenant}]
  - name: global
    match: "/global/"
    anonymous: [{rate: 1/h, burst: 2}]
    key: global
`

// A key: policy decides alike through the proxy and /v1/check: the
// attributes of a check name the bucket of the proxied requests that carry
// them.
func TestKeyThroughProxyAndCheck(t *testing.T) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer upstream.Close()
	s := serve(t, "", "upstream: "+upstream.URL+"\n"+keyPolicies)
	get := func(path string, header ...string) int {
		t.Helper()
		req, _ := http.NewRequest("GET", s.traffic+path, nil)
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	// Two clients, one tenant and plan: one bucket.
	if a, b := get("/tenants/acme/x", "X-Plan", "gold", "X-Forwarded-For", "192.0.2.1"), get("/tenants/acme/y", "X-Plan", "gold", "X-Forwarded-For", "192.0.2.2"); a != 200 || b != 200 {
		t.Fatalf("proxied: %d %d", a, b)
	}
	check := func(body string) (int, string) {
		t.Helper()
		resp, b := post(t, s.decision+"/v1/check", body, "Content-Type", jsonType)
		return resp.StatusCode, b
	}
	code, b := check(`{"policy":"tenants","attributes":{"header:x-plan":"gold","path:tenant":"acme"}}`)
	if code != 200 || !strings.Contains(b, `"allowed":true`) || !strings.Contains(b, `"remaining":0`) {
		t.Fatalf("check with the same attributes: %d %s; want the last token of the proxied bucket", code, b)
	}
	if code := get("/tenants/acme/z", "X-Plan", "gold", "X-Forwarded-For", "192.0.2.3"); code != 429 {
		t.Fatalf("proxied after the check: %d; want 429", code)
	}
	// A missing attribute: the identity (key) or client_ip stands in.
	for i, body := range []string{
		`{"policy":"tenants","key":"user-1","attributes":{"path:tenant":"acme"}}`,
		`{"policy":"tenants","attributes":{"path:tenant":"acme","client_ip":"192.0.2.7"}}`,
		`{"policy":"tenants","key":"user-1"}`,
	} {
		if code, b := check(body); code != 200 || !strings.Contains(b, `"allowed":true`) {
			t.Fatalf("check %d %s: %d %s", i, body, code, b)
		}
	}
	for _, tc := range []struct{ body, want string }{
		{`{"policy":"tenants","attributes":{"path:tenant":"acme"}}`, "attribute header:X-Plan is missing"},
		{`{"policy":"tenants","key":"u","attributes":{"header:X-Plna":"gold"}}`, `attribute \"header:X-Plna\" is not in the key of policy \"tenants\"; it reads header:X-Plan, path:tenant`},
		{`{"policy":"tenants","attributes":{"client_ip":"nope"}}`, `attributes.client_ip \"nope\": want an IPv4 or IPv6 address`},
		{`{"policy":"tenants","attributes":{"plan":"gold"}}`, "want names such as header:X-Tenant"},
		{`{"policy":"tenants","attributes":{"header:X-Plan":1}}`, `attributes: \"header:X-Plan\": want a string`},
		{`{"policy":"tenants","attributes":{"header:X-Plan":"a","header:x-plan":"b"}}`, "is given twice"},
		{`{"policy":"tenants","attributes":{"header:X-Plan":"a","header:X-Plan":"b"}}`, "is given twice"},
		{`{"policy":"tenants","attributes":[]}`, "want an object of strings"},
		{`{"policy":"tenants","attributes":{}}`, "key is missing"},
		{`{"policy":"global","key":"u","attributes":{"header:X-Plan":"gold"}}`, `policy \"global\" keys by no attributes`},
	} {
		if code, b := check(tc.body); code != 400 || !strings.Contains(b, tc.want) {
			t.Errorf("%s: %d %s; want 400 containing %s", tc.body, code, b, tc.want)
		}
	}
	// key: global: one bucket for every client and for the check.
	for i := range 2 {
		if code := get(fmt.Sprintf("/global/%d", i), "X-Forwarded-For", fmt.Sprintf("198.51.100.%d", i)); code != 200 {
			t.Fatalf("global %d: %d", i, code)
		}
	}
	if code, b := check(`{"policy":"global","key":"anyone"}`); code != 200 || !strings.Contains(b, `"allowed":false`) {
		t.Fatalf("check of the spent global bucket: %d %s", code, b)
	}
}
