package gateway

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit/gatewaytest"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
)

// served is a gateway serving on real loopback listeners, in process.
type served struct {
	g                        *Gateway
	traffic, decision, admin string // http://host:port
}

// serve runs the configuration (its listen fields are set to free ports
// here) until the test ends. dir holds files the configuration names.
func serve(t testing.TB, dir, yaml string) *served {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	yaml = "listen: 127.0.0.1:0\nadmin_listen: 127.0.0.1:0\n" + yaml
	if !strings.Contains(yaml, "decision_api:") {
		yaml += "decision_api: {listen: 127.0.0.1:0}\n"
	}
	path := filepath.Join(dir, "sluice.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	g := gatewaytest.Start(t, New, path, io.Discard).Serve(t, 5*time.Second).G
	traffic, admin := g.Addrs()
	s := &served{g: g, traffic: "http://" + traffic.String(), admin: "http://" + admin.String()}
	if a := g.DecisionAddr(); a != nil {
		s.decision = "http://" + a.String()
	}
	return s
}

// post sends body to url with the headers given as name, value pairs.
func post(t testing.TB, url, body string, header ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest("POST", url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

const jsonType = "application/json"

// remaining reads a key's bucket with cost 0 (authorized by header).
func remaining(t *testing.T, url, policy, key string, header ...string) int64 {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"policy": policy, "key": key, "cost": 0})
	resp, b := post(t, url+"/v1/check", string(body), append([]string{"Content-Type", jsonType}, header...)...)
	if resp.StatusCode != 200 {
		t.Fatalf("read %s/%s: %d %s", policy, key, resp.StatusCode, b)
	}
	var r checkResponse
	if err := json.Unmarshal([]byte(b), &r); err != nil {
		t.Fatal(err)
	}
	return r.Remaining
}

const tokenPolicies = `policies:
  - name: products
    match: "GET /products/"
    anonymous: [{rate: 1/h, burst: 3}]
  - name: secret-internal-policy
    match: "POST /internal/"
    anonymous: [{rate: 1/h, burst: 3}]
`

// TestDecisionAPINeedsItsToken: with a token configured, a caller without
// it (none, wrong, another scheme, the token with a suffix) can neither
// read a bucket (cost 0), drain one (cost 2) nor learn a policy's name,
// on the decision listener or on the traffic listener where the
// configuration put it too; the bucket is untouched afterwards. With the
// token it works as it did.
func TestDecisionAPINeedsItsToken(t *testing.T) {
	dir := t.TempDir()
	const token = "s3cr3t-0123456789abcdef"
	if err := os.WriteFile(filepath.Join(dir, "token"), []byte("  "+token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := serve(t, dir, "decision_api: {listen: 127.0.0.1:0, token_file: token, on_traffic_listener: true}\n"+tokenPolicies)
	bearer := []string{"Authorization", "Bearer " + token}
	for _, url := range []string{s.decision, s.traffic} {
		for _, auth := range [][]string{
			nil,
			{"Authorization", "Bearer wrong-token-0123456789"},
			{"Authorization", "Basic " + token},
			{"Authorization", token},
			{"Authorization", "Bearer " + token + "x"},
			{"Authorization", "Bearer " + token[:len(token)-1]},
			{"X-API-Key", token},
		} {
			for _, body := range []string{
				`{"policy":"products","key":"alice","cost":0}`,
				`{"policy":"products","key":"alice","cost":2}`,
				`{"policy":"nope","key":"alice"}`,
				`{"policy":"products","key":"alice","cost":-1}`,
			} {
				resp, b := post(t, url+"/v1/check", body, append([]string{"Content-Type", jsonType}, auth...)...)
				if resp.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") {
					t.Errorf("%s %v %s: %d %q; want 401 with WWW-Authenticate: Bearer", url, auth, body, resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
				}
				if strings.Contains(b, "products") || strings.Contains(b, "secret-internal") || strings.Contains(b, "remaining") {
					t.Errorf("401 body tells the configuration: %s", b)
				}
			}
		}
		// Another method or content type without the token: still 401.
		req, _ := http.NewRequest("GET", url+"/v1/check", nil)
		if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 401 {
			t.Errorf("GET without token: %v %v", resp, err)
		} else {
			resp.Body.Close()
		}
	}
	if got := remaining(t, s.decision, "products", "alice", bearer...); got != 3 {
		t.Fatalf("alice's bucket after the unauthorized calls: %d left, want 3 (untouched)", got)
	}
	// With the token: it decides, drains, and names the policies.
	resp, b := post(t, s.decision+"/v1/check", `{"policy":"products","key":"alice","cost":2}`, "Content-Type", jsonType, bearer[0], bearer[1])
	if resp.StatusCode != 200 || !strings.Contains(b, `"allowed":true`) || !strings.Contains(b, `"remaining":1`) {
		t.Fatalf("with the token: %d %s", resp.StatusCode, b)
	}
	resp, b = post(t, s.traffic+"/v1/check", `{"policy":"nope","key":"alice"}`, "Content-Type", jsonType, "authorization", "bearer "+token)
	if resp.StatusCode != 400 || !strings.Contains(b, "unknown_policy") || !strings.Contains(b, "secret-internal-policy") {
		t.Fatalf("unknown policy with the token: %d %s; want 400 naming the configured policies", resp.StatusCode, b)
	}
}

// TestTokenRotatesOnReload: SIGHUP (Reload) reads the token file again;
// the old token stops working, the new one works.
func TestTokenRotatesOnReload(t *testing.T) {
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("old-token-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := serve(t, dir, "decision_api: {listen: 127.0.0.1:0, token_file: token}\n"+tokenPolicies)
	call := func(token string) int {
		resp, _ := post(t, s.decision+"/v1/check", `{"policy":"products","key":"k","cost":0}`, "Content-Type", jsonType, "Authorization", "Bearer "+token)
		return resp.StatusCode
	}
	if call("old-token-0123456789") != 200 || call("new-token-0123456789") != 401 {
		t.Fatal("before the reload: want the old token only")
	}
	if err := os.WriteFile(tokenFile, []byte("new-token-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s.g.Reload(); err != nil {
		t.Fatal(err)
	}
	if call("old-token-0123456789") != 401 || call("new-token-0123456789") != 200 {
		t.Fatal("after the reload: want the new token only")
	}
}

// TestDecisionAPIWithoutToken: without a token configured the API works
// as before on its listener, but an unknown policy is not answered with
// the list of configured ones.
func TestDecisionAPIWithoutToken(t *testing.T) {
	s := serve(t, "", tokenPolicies)
	resp, b := post(t, s.decision+"/v1/check", `{"policy":"nope","key":"alice"}`, "Content-Type", jsonType)
	if resp.StatusCode != 400 || !strings.Contains(b, "unknown_policy") || strings.Contains(b, "products") || strings.Contains(b, "secret") {
		t.Fatalf("unknown policy: %d %s; want 400 that names no configured policy", resp.StatusCode, b)
	}
	resp, b = post(t, s.decision+"/v1/check", `{"policy":"products","key":"alice","cost":1}`, "Content-Type", jsonType)
	if resp.StatusCode != 200 || !strings.Contains(b, `"allowed":true,"policy":"products","limit":3,"remaining":2`) || !strings.Contains(b, `"decided_by":"store"`) || strings.Contains(b, "store_error") {
		t.Fatalf("check: %d %s", resp.StatusCode, b)
	}
	if resp, b := post(t, s.decision+"/elsewhere", `{}`, "Content-Type", jsonType); resp.StatusCode != 404 || !strings.Contains(b, "not_found") {
		t.Fatalf("another path on the decision listener: %d %s", resp.StatusCode, b)
	}
}

// TestCheckOnTrafficListenerIsProxied: by default /v1/check on the traffic
// listener is the upstream's own path: the upstream answers it, and no
// bucket changes.
func TestCheckOnTrafficListenerIsProxied(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		seen = append(seen, r.Method+" "+r.URL.Path+" "+string(b))
		mu.Unlock()
		fmt.Fprint(w, "the upstream's own check")
	}))
	defer upstream.Close()
	s := serve(t, "", "upstream: "+upstream.URL+"\n"+tokenPolicies)
	for range 3 {
		resp, b := post(t, s.traffic+"/v1/check", `{"policy":"products","key":"alice","cost":3}`, "Content-Type", jsonType)
		if resp.StatusCode != 200 || b != "the upstream's own check" {
			t.Fatalf("traffic /v1/check: %d %s; want the upstream's answer", resp.StatusCode, b)
		}
	}
	mu.Lock()
	n := len(seen)
	mu.Unlock()
	if n != 3 || !strings.HasPrefix(seen[0], `POST /v1/check {"policy"`) {
		t.Fatalf("the upstream saw %q", seen)
	}
	if got := remaining(t, s.decision, "products", "alice"); got != 3 {
		t.Fatalf("alice's bucket: %d, want 3", got)
	}
}

// TestDecisionAPIRefusesWhatItCannotReadStrictly: content types, sizes,
// duplicate and case-variant names, and keys that are not UTF-8.
func TestDecisionAPIRefusesWhatItCannotReadStrictly(t *testing.T) {
	s := serve(t, "", "policies:\n  - {name: api, match: /, anonymous: [{rate: 1/h, burst: 100}]}\n")
	url := s.decision + "/v1/check"
	ok := `{"policy":"api","key":"k","cost":1}`
	for _, tc := range []struct {
		name, ctype, body string
		status            int
		want              string
	}{
		{"no content type", "", ok, 415, "unsupported_media_type"},
		{"form", "application/x-www-form-urlencoded", ok, 415, "unsupported_media_type"},
		{"text", "text/plain", ok, 415, "unsupported_media_type"},
		{"multipart", "multipart/form-data; boundary=x", ok, 415, "unsupported_media_type"},
		{"json in latin1", "application/json; charset=iso-8859-1", ok, 415, "unsupported_media_type"},
		{"json+suffix", "application/vnd.api+json", ok, 415, "unsupported_media_type"},
		{"json", "application/json", ok, 200, `"allowed":true`},
		{"json utf-8", "Application/JSON; charset=UTF-8", ok, 200, `"allowed":true`},
		{"whitespace past 64 KiB", jsonType, ok + strings.Repeat(" ", 64<<10), 413, "body_too_large"},
		{"key past 64 KiB", jsonType, `{"policy":"api","key":"` + strings.Repeat("k", 64<<10) + `"}`, 413, "body_too_large"},
		{"64 KiB exactly", jsonType, ok + strings.Repeat(" ", 64<<10-len(ok)), 200, `"allowed":true`},
		{"duplicate key", jsonType, `{"policy":"api","key":"k","key":"other"}`, 400, "twice"},
		{"case-variant key", jsonType, `{"policy":"api","key":"k","KEY":"other"}`, 400, "unknown field"},
		{"case-variant only", jsonType, `{"Policy":"api","Key":"k"}`, 400, "unknown field"},
		{"duplicate cost", jsonType, `{"policy":"api","key":"k","cost":1,"cost":0}`, 400, "twice"},
		{"duplicate policy", jsonType, `{"policy":"api","policy":"x","key":"k"}`, 400, "twice"},
		{"escaped name", jsonType, `{"policy":"api","k\u0065y":"k"}`, 200, `"allowed":true`},
		{"lone high surrogate", jsonType, `{"policy":"api","key":"\ud800"}`, 400, "UTF-8"},
		{"lone low surrogate", jsonType, `{"policy":"api","key":"\udfff"}`, 400, "UTF-8"},
		{"reversed pair", jsonType, `{"policy":"api","key":"\udc00\ud800"}`, 400, "UTF-8"},
		{"high then letter", jsonType, `{"policy":"api","key":"\ud800x"}`, 400, "UTF-8"},
		{"raw 0xFF", jsonType, "{\"policy\":\"api\",\"key\":\"\xff\"}", 400, "UTF-8"},
		{"raw 0xFF in a name", jsonType, "{\"policy\":\"api\",\"key\":\"k\",\"\xff\":1}", 400, "UTF-8"},
		{"surrogate in policy", jsonType, `{"policy":"\ud800","key":"k"}`, 400, "UTF-8"},
		{"two values", jsonType, ok + ok, 400, "more than one"},
		{"array", jsonType, `[1,2]`, 400, "not a JSON object"},
		{"cost float", jsonType, `{"policy":"api","key":"k","cost":1.5}`, 400, "integer"},
		{"cost string", jsonType, `{"policy":"api","key":"k","cost":"1"}`, 400, "integer"},
		{"cost huge", jsonType, `{"policy":"api","key":"k","cost":99999999999999999999}`, 400, "integer"},
		{"cost null", jsonType, `{"policy":"api","key":"k","cost":null}`, 200, `"allowed":true`},
		{"key object", jsonType, `{"policy":"api","key":{"a":1}}`, 400, "want a string"},
		{"truncated", jsonType, `{"policy":"api","key":"k"`, 400, "invalid_request"},
		{"empty", jsonType, ``, 400, "invalid_request"},
	} {
		var header []string
		if tc.ctype != "" {
			header = []string{"Content-Type", tc.ctype}
		}
		resp, b := post(t, url, tc.body, header...)
		if resp.StatusCode != tc.status || !strings.Contains(b, tc.want) {
			t.Errorf("%s: %d %.200s; want %d with %q", tc.name, resp.StatusCode, b, tc.status, tc.want)
		}
		if resp.Header.Get("Content-Type") != jsonType {
			t.Errorf("%s: Content-Type %q", tc.name, resp.Header.Get("Content-Type"))
		}
	}
}

// TestCheckBodyBoundWithoutLength: a chunked body (no Content-Length) past
// 64 KiB is refused with 413 as it is read, white space or not.
func TestCheckBodyBoundWithoutLength(t *testing.T) {
	s := serve(t, "", "policies:\n  - {name: api, match: /, anonymous: [{rate: 1/h, burst: 100}]}\n")
	for _, body := range []string{
		`{"policy":"api","key":"k"}` + strings.Repeat("\n", 64<<10),
		`{"policy":"api","key":"` + strings.Repeat("k", 64<<10) + `"}`,
	} {
		req, _ := http.NewRequest("POST", s.decision+"/v1/check", struct{ io.Reader }{strings.NewReader(body)})
		req.Header.Set("Content-Type", jsonType)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 413 || !strings.Contains(string(b), "body_too_large") {
			t.Errorf("chunked body of %d bytes: %d %s; want 413", len(body), resp.StatusCode, b)
		}
	}
	if got := remaining(t, s.decision, "api", "k"); got != 100 {
		t.Errorf("the refused bodies charged the bucket: %d left, want 100", got)
	}
}

// TestInvalidUTF8KeysDoNotShareABucket: "\ud800", "\udfff" and a raw 0xFF
// byte, which encoding/json would all read as U+FFFD, are refused and
// charge nothing; U+FFFD itself, escaped or not, is a key of its own.
func TestInvalidUTF8KeysDoNotShareABucket(t *testing.T) {
	s := serve(t, "", "policies:\n  - {name: api, match: /, anonymous: [{rate: 1/h, burst: 10}]}\n")
	url := s.decision + "/v1/check"
	check := func(key string) (int, string) {
		resp, b := post(t, url, `{"policy":"api","key":"`+key+`","cost":1}`, "Content-Type", jsonType)
		return resp.StatusCode, b
	}
	if code, b := check(`\ufffd`); code != 200 || !strings.Contains(b, `"remaining":9`) {
		t.Fatalf(`"\ufffd": %d %s`, code, b)
	}
	for _, bad := range []string{`\ud800`, `\udfff`, "\xff", `\ud800\ud800`, "\xed\xa0\x80"} {
		if code, b := check(bad); code != 400 {
			t.Errorf("%q: %d %s; want 400", bad, code, b)
		}
	}
	if code, b := check("\xef\xbf\xbd"); code != 200 || !strings.Contains(b, `"remaining":8`) {
		t.Fatalf("raw U+FFFD: %d %s; want the same bucket as \\ufffd, one more token spent", code, b)
	}
	if code, b := check(`\ud83d\ude00`); code != 200 || !strings.Contains(b, `"remaining":9`) {
		t.Fatalf("a surrogate pair: %d %s; want a bucket of its own", code, b)
	}
	if code, b := check("😀"); code != 200 || !strings.Contains(b, `"remaining":8`) {
		t.Fatalf("the same emoji in UTF-8: %d %s; want the pair's bucket", code, b)
	}
}

// FuzzCheckBody: whatever the body, the decision API never panics and
// never answers 500; a body it accepts reads the same with encoding/json.
func FuzzCheckBody(f *testing.F) {
	for _, seed := range []string{
		`{"policy":"api","key":"k","cost":1}`,
		`{"policy":"api","key":"k","KEY":"other"}`,
		`{"policy":"api","key":"\ud800"}`,
		`{"policy":"api","key":"\ud83d\ude00","cost":0}`,
		"{\"policy\":\"api\",\"key\":\"\xff\"}",
		`{"policy":"api","key":"k","cost":null}`,
		`{"policy":"api","key":"k"} {}`,
		`{"policy":"api","key":"\"\\\/\b\f\n\r\t\u0000"}`,
		`{"policy":"nope","key":"k","cost":99999999999999999999}`,
		`[]`, `"x"`, `{`, ``, `{"policy":"api","key":"k","cost":-1e3}`,
	} {
		f.Add(seed)
	}
	h := gatewaytest.Start(f, New, gatewaytest.Write(f, "policies:\n  - {name: api, match: /, anonymous: [{rate: 1000/s, burst: 1000}]}\n", nil), io.Discard).G.DecisionAPI()
	f.Fuzz(func(t *testing.T, body string) {
		req := httptest.NewRequest("POST", "/v1/check", strings.NewReader(body))
		req.Header.Set("Content-Type", jsonType)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code >= 500 {
			t.Fatalf("%q: %d %s", body, w.Code, w.Body)
		}
		parsed, err := parseCheck([]byte(body))
		if err != nil {
			return
		}
		var std struct {
			Policy string `json:"policy"`
			Key    string `json:"key"`
			Cost   *int64 `json:"cost"`
		}
		if err := json.Unmarshal([]byte(body), &std); err != nil {
			t.Fatalf("%q: accepted here, refused by encoding/json: %v", body, err)
		}
		if std.Policy != parsed.Policy || std.Key != parsed.Key || (std.Cost == nil) != (parsed.Cost == nil) || std.Cost != nil && *std.Cost != *parsed.Cost {
			t.Fatalf("%q: read as %+v here, %+v by encoding/json", body, parsed, std)
		}
	})
}

// TestCheckSaysWhatDecided: on Redis, answers the store made say
// "decided_by":"store"; with Redis dead, on_error local and open answer
// with "store_error":true and what decided instead, and a remembered
// denial says "denial_cache" (a real decision: no store_error).
func TestCheckSaysWhatDecided(t *testing.T) {
	srv := redistest.Start(t)
	s := serve(t, "", fmt.Sprintf(`store:
  type: redis
  redis: {url: "redis://%s/0", timeout: 200ms}
  on_error: local
policies:
  - {name: local, match: /l, anonymous: [{rate: 1/h, burst: 3}]}
  - {name: open, match: /o, on_error: open, anonymous: [{rate: 1/h, burst: 3}]}
`, srv.Addr()))
	check := func(policy, key string, cost int) checkResponse {
		t.Helper()
		resp, b := post(t, s.decision+"/v1/check", fmt.Sprintf(`{"policy":%q,"key":%q,"cost":%d}`, policy, key, cost), "Content-Type", jsonType)
		if resp.StatusCode != 200 {
			t.Fatalf("%s/%s: %d %s", policy, key, resp.StatusCode, b)
		}
		var r checkResponse
		if err := json.Unmarshal([]byte(b), &r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := check("local", "a", 1); !r.Allowed || r.StoreError || r.DecidedBy != "store" {
		t.Fatalf("Redis up: %+v", r)
	}
	if r := check("local", "spent", 3); !r.Allowed || r.DecidedBy != "store" {
		t.Fatalf("Redis up, spending: %+v", r)
	}
	if r := check("local", "spent", 1); r.Allowed || r.DecidedBy != "store" {
		t.Fatalf("Redis up, spent: %+v", r)
	}
	if r := check("local", "spent", 1); r.Allowed || r.StoreError || r.DecidedBy != "denial_cache" {
		t.Fatalf("a remembered denial: %+v; want decided_by denial_cache, no store_error", r)
	}
	srv.Kill()
	if r := check("local", "b", 1); !r.Allowed || !r.StoreError || r.DecidedBy != "local" {
		t.Errorf("Redis down, on_error local: %+v; want store_error and decided_by local", r)
	}
	if r := check("open", "b", 1); !r.Allowed || !r.StoreError || r.DecidedBy != "open" {
		t.Errorf("Redis down, on_error open: %+v; want store_error and decided_by open", r)
	}
}

// TestDecisionAPIPlacement: listen: off opens no decision listener; with
// on_traffic_listener the traffic listener answers /v1/check itself, and
// every other path still reaches the upstream.
func TestDecisionAPIPlacement(t *testing.T) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "upstream "+r.URL.Path)
	}))
	defer upstream.Close()
	off := serve(t, "", "upstream: "+upstream.URL+"\ndecision_api: {listen: \"off\"}\n"+tokenPolicies)
	if off.g.DecisionAddr() != nil || off.decision != "" {
		t.Fatalf("listen: off opened %v", off.g.DecisionAddr())
	}
	if resp, b := post(t, off.traffic+"/v1/check", `{"policy":"products","key":"k"}`, "Content-Type", jsonType); resp.StatusCode != 200 || b != "upstream /v1/check" {
		t.Fatalf("listen off, traffic /v1/check: %d %s", resp.StatusCode, b)
	}
	both := serve(t, "", "upstream: "+upstream.URL+"\ndecision_api: {listen: \"off\", on_traffic_listener: true}\n"+tokenPolicies)
	if resp, b := post(t, both.traffic+"/v1/check", `{"policy":"products","key":"k"}`, "Content-Type", jsonType); resp.StatusCode != 200 || !strings.Contains(b, `"allowed":true`) {
		t.Fatalf("on the traffic listener: %d %s", resp.StatusCode, b)
	}
	if resp, b := post(t, both.traffic+"/v1/checks", `{}`); resp.StatusCode != 200 || b != "upstream /v1/checks" {
		t.Fatalf("another path on the traffic listener: %d %s", resp.StatusCode, b)
	}
}

// TestEvictionPolicyCheckedWhenRedisComesUp: a Redis that did not answer
// at start has its maxmemory-policy read once it does, by /readyz's
// probe: one that comes up with allkeys-lru is reported as one that was up
// at start is.
func TestEvictionPolicyCheckedWhenRedisComesUp(t *testing.T) {
	srv := redistest.Start(t, redistest.WithArgs("--maxmemory-policy", "allkeys-lru"))
	srv.Kill()
	s := serve(t, "", "store: {type: redis, on_error: local, redis: {url: \""+srv.URL()+"\", timeout: 100ms}}\npolicies: []\n")
	if _, body := status(t, s.admin+"/readyz"); !strings.Contains(body, "store failing") || strings.Contains(body, "maxmemory-policy") {
		t.Fatalf("/readyz with Redis down: %q", body)
	}
	srv.Restart()
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, body := status(t, s.admin+"/readyz")
		if strings.Contains(body, "maxmemory-policy allkeys-lru") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz 30s after Redis came up: %q; want its maxmemory-policy reported", body)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
