package gateway

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/sluicehq/sluice/internal/testkit/gatewaytest"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
)

// planGateway is a gateway whose callers name their plan in a JWT claim or
// the API keys file, with an upstream that answers 200.
type planGateway struct {
	t      *testing.T
	url    string
	secret []byte
	client int // the last client address handed out
}

// Every rule refills at most one token an hour, so that what passes is the
// burst, however slow the machine.
const planPolicies = `trusted_proxies: [127.0.0.1]
forwarded_header: x-forwarded-for
policies:
  - name: api
    match: /
    anonymous:     [{rate: 1/h, burst: 2}]
    authenticated: [{rate: 1/h, burst: 3}]
    plans:
      free:       [{rate: 1/h, burst: 4}, {rate: 2/h, burst: 50}]
      pro:        [{rate: 1/h, burst: 7}]
      enterprise: [{rate: 1/h, burst: 9}]
`

// newPlanGateway starts it with store (a store: section or "") and
// identity.default_plan set to defaultPlan.
func newPlanGateway(t *testing.T, store, defaultPlan string) *planGateway {
	t.Helper()
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	t.Cleanup(upstream.Close)
	dir := t.TempDir()
	secret := []byte("0123456789abcdef0123456789abcdef")
	var keys strings.Builder
	for _, k := range [][]string{{"key-pro", "acme", "pro"}, {"key-free", "hobby", "free"}, {"key-plain", "plain"}} {
		sum := sha256.Sum256([]byte(k[0]))
		fmt.Fprintln(&keys, hex.EncodeToString(sum[:]), strings.Join(k[1:], " "))
	}
	for name, data := range map[string][]byte{"jwt.secret": secret, "keys.txt": []byte(keys.String())} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	conf := fmt.Sprintf(`upstream: %s
identity:
  api_keys_file: %s
  jwt: {hs256_secret_file: %s, plan_claim: plan}
  default_plan: "%s"
%s%s`, upstream.URL, filepath.Join(dir, "keys.txt"), filepath.Join(dir, "jwt.secret"), defaultPlan, store, planPolicies)
	_, traffic, _ := newGateway(t, conf)
	return &planGateway{t: t, url: traffic.URL, secret: secret}
}

// token signs a JWT for sub with the gateway's secret (or another), with
// the plan claim when plan is not nil.
func (g *planGateway) token(sub string, plan any, secret []byte) string {
	g.t.Helper()
	claims := jwt.MapClaims{"sub": sub, "exp": time.Now().Add(time.Hour).Unix()}
	if plan != nil {
		claims["plan"] = plan
	}
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString(secret)
	if err != nil {
		g.t.Fatal(err)
	}
	return s
}

// burst sends n requests with header from a client address of their own
// and counts the 200s and 429s; it returns the RateLimit-Policy of the
// first response.
func (g *planGateway) burst(n int, header ...string) (passed, denied int, policy string) {
	g.t.Helper()
	g.client++
	for i := range n {
		req, _ := http.NewRequest("GET", g.url+"/v1/items", nil)
		req.Header.Set("X-Forwarded-For", fmt.Sprintf("192.0.2.%d", g.client))
		for j := 0; j+1 < len(header); j += 2 {
			req.Header.Set(header[j], header[j+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			g.t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if i == 0 {
			policy = resp.Header.Get("RateLimit-Policy")
		}
		switch resp.StatusCode {
		case http.StatusOK:
			passed++
		case http.StatusTooManyRequests:
			denied++
		default:
			g.t.Fatalf("status %d", resp.StatusCode)
		}
	}
	return passed, denied, policy
}

// planCase is one caller and the burst it must get.
type planCase struct {
	name   string
	header []string
	want   int
}

func (g *planGateway) check(cases []planCase) map[string]string {
	g.t.Helper()
	policies := make(map[string]string)
	for _, c := range cases {
		const n = 12
		passed, denied, policy := g.burst(n, c.header...)
		if passed != c.want || denied != n-c.want {
			g.t.Errorf("%s: %d passed and %d were denied of %d; want %d to pass", c.name, passed, denied, n, c.want)
		}
		policies[c.name] = policy
	}
	return policies
}

func bearer(tok string) string { return "Bearer " + tok }

// TestPlansThroughGateway: through the gateway, on the memory store and on
// Redis, JWTs of plan free, pro and enterprise get their plan's burst; a
// forged token claiming pro, an unsigned one and no token get the
// anonymous burst; a token of a plan no policy has and one without the
// claim get the authenticated burst, or default_plan's when it is set; a
// plan header the client wrote changes nothing; API keys get the plan of
// their line in the keys file.
func TestPlansThroughGateway(t *testing.T) {
	srv := redistest.Start(t)
	db := 0
	for _, storeName := range []string{"memory", "redis"} {
		for _, defaultPlan := range []string{"", "free"} {
			t.Run(storeName+"/default_plan="+defaultPlan, func(t *testing.T) {
				store := ""
				if storeName == "redis" {
					// A database of its own: the same callers come again.
					db++
					store = fmt.Sprintf("store: {type: redis, redis: {url: \"redis://%s/%d\", timeout: 2s}}\n", srv.Addr(), db)
				}
				g := newPlanGateway(t, store, defaultPlan)
				other := []byte("another-secret-another-secret-xx")
				unsigned := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none","typ":"JWT"}`)) + "." +
					base64.RawURLEncoding.EncodeToString([]byte(fmt.Sprintf(`{"sub":"mallory","plan":"enterprise","exp":%d}`, time.Now().Add(time.Hour).Unix()))) + "."
				fallback := 3 // the authenticated rules
				if defaultPlan == "free" {
					fallback = 4
				}
				policies := g.check([]planCase{
					{"free", []string{"Authorization", bearer(g.token("u-free", "free", g.secret))}, 4},
					{"pro", []string{"Authorization", bearer(g.token("u-pro", "pro", g.secret))}, 7},
					{"enterprise", []string{"Authorization", bearer(g.token("u-ent", "enterprise", g.secret))}, 9},
					{"free with plan headers", []string{"Authorization", bearer(g.token("u-free2", "free", g.secret)), "X-Plan", "enterprise", "Plan", "enterprise"}, 4},
					{"forged pro", []string{"Authorization", bearer(g.token("u-pro", "pro", other))}, 2},
					{"unsigned enterprise", []string{"Authorization", bearer(unsigned)}, 2},
					{"anonymous with a plan header", []string{"X-Plan", "enterprise"}, 2},
					{"unknown plan", []string{"Authorization", bearer(g.token("u-plat", "platinum", g.secret))}, fallback},
					{"plan not a string", []string{"Authorization", bearer(g.token("u-num", 7, g.secret))}, fallback},
					{"no plan claim", []string{"Authorization", bearer(g.token("u-none", nil, g.secret))}, fallback},
					{"api key pro", []string{"X-API-Key", "key-pro", "X-Plan", "free"}, 7},
					{"api key free", []string{"X-API-Key", "key-free"}, 4},
					{"api key without plan", []string{"X-API-Key", "key-plain"}, fallback},
					{"unknown api key", []string{"X-API-Key", "key-guess", "X-Plan", "pro"}, 2},
				})
				if policies["free"] == policies["pro"] || !strings.Contains(policies["free"], `"api";q=4;`) || !strings.Contains(policies["pro"], `"api";q=7;`) {
					t.Errorf("RateLimit-Policy free %q, pro %q: want each plan's rules", policies["free"], policies["pro"])
				}
				if !strings.Contains(policies["free"], `"api-1"`) {
					t.Errorf("RateLimit-Policy of free %q lacks its second rule", policies["free"])
				}
			})
		}
	}
}

// TestPlanSwitchThroughGateway: one identity with valid tokens of two
// plans has each plan's buckets, each bound by its plan's rules: using up
// free leaves pro whole, and switching back to free finds free still
// empty. Holding two plans buys the sum of the two, which the issuer
// granted; it never resets a bucket.
func TestPlanSwitchThroughGateway(t *testing.T) {
	g := newPlanGateway(t, "", "")
	free := []string{"Authorization", bearer(g.token("switcher", "free", g.secret))}
	pro := []string{"Authorization", bearer(g.token("switcher", "pro", g.secret))}
	for i, c := range []struct {
		header []string
		want   int
	}{{free, 4}, {pro, 7}, {free, 0}, {pro, 0}} {
		if passed, _, _ := g.burst(10, c.header...); passed != c.want {
			t.Errorf("step %d: %d passed, want %d", i, passed, c.want)
		}
	}
}

// TestPlansDocExample runs the worked example of docs/plans.md: its
// configuration, its keys file and its callers get the rules its table
// says, and the headers it shows are the ones the gateway sends.
func TestPlansDocExample(t *testing.T) {
	doc, err := os.ReadFile("../../docs/plans.md")
	if err != nil {
		t.Fatal(err)
	}
	var conf string
	for _, block := range strings.Split(string(doc), "```yaml\n")[1:] {
		if block, _, _ = strings.Cut(block, "```"); strings.Contains(block, "bigcorp") {
			conf = block
		}
	}
	if conf == "" {
		t.Fatal("docs/plans.md has no YAML block with the bigcorp override")
	}
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer upstream.Close()
	conf = strings.Replace(conf, "http://127.0.0.1:3000", upstream.URL, 1)
	secret := []byte("0123456789abcdef0123456789abcdef")
	var keys strings.Builder
	for _, line := range strings.Split(string(doc), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && len(f[0]) == 64 && !strings.Contains(line, "echo") {
			keys.WriteString(line + "\n")
		}
	}
	const adminToken = "plans-doc-admin-token-0123456789"
	files := map[string]string{"jwt.secret": string(secret), "keys.txt": keys.String(), "admin.token": adminToken + "\n"}
	gw := gatewaytest.Start(t, New, gatewaytest.Write(t, conf, files), io.Discard).Handle(t)
	g, traffic := gw.G, gw.Traffic
	pg := &planGateway{t: t, url: traffic.URL, secret: secret}
	const (
		free       = `"api";q=10;w=1, "api-1";q=1000;w=86400`
		pro        = `"api";q=100;w=1, "api-1";q=100000;w=2592000`
		contract   = `"api";q=5000;w=2`
		anonymous  = `"api";q=5;w=5`
		otherToken = "another-secret-another-secret-xx"
	)
	for _, c := range []struct {
		name   string
		header []string
		want   string
	}{
		{"free JWT", []string{"Authorization", bearer(pg.token("user-1", "free", secret))}, free},
		{"pro JWT", []string{"Authorization", bearer(pg.token("user-2", "pro", secret))}, pro},
		{"acme's key", []string{"X-API-Key", "sk_live_acme"}, pro},
		{"bigcorp", []string{"Authorization", bearer(pg.token("bigcorp", "enterprise", secret))}, contract},
		{"platinum", []string{"Authorization", bearer(pg.token("user-3", "platinum", secret))}, free},
		{"plan 3", []string{"Authorization", bearer(pg.token("user-4", 3, secret))}, free},
		{"no claim", []string{"Authorization", bearer(pg.token("user-5", nil, secret))}, free},
		{"hobby's key", []string{"X-API-Key", "sk_live_hobby"}, free},
		{"forged enterprise", []string{"Authorization", bearer(pg.token("user-6", "enterprise", []byte(otherToken)))}, anonymous},
		{"X-Plan", []string{"X-Plan", "enterprise"}, anonymous},
	} {
		if _, _, got := pg.burst(1, c.header...); got != c.want {
			t.Errorf("%s: RateLimit-Policy %q, want %q", c.name, got, c.want)
		}
	}
	for _, h := range []string{free, pro} {
		if !strings.Contains(string(doc), "RateLimit-Policy: "+h+"\n") {
			t.Errorf("docs/plans.md does not show RateLimit-Policy: %s", h)
		}
	}

	// The contract changed at runtime, with the doc's own PUT body.
	_, body, ok := strings.Cut(string(doc), "-d '")
	body, _, _ = strings.Cut(body, "'")
	if !ok || !strings.Contains(body, `"api"`) {
		t.Fatalf("docs/plans.md has no PUT body for bigcorp: %q", body)
	}
	admin := httptest.NewServer(g.Admin())
	defer admin.Close()
	req, _ := http.NewRequest(http.MethodPut, admin.URL+"/v1/admin/overrides/bigcorp", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+adminToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("PUT of the doc's contract: %s", resp.Status)
	}
	const changed = `"api";q=10000;w=2`
	if _, _, got := pg.burst(1, "Authorization", bearer(pg.token("bigcorp", "enterprise", secret))); got != changed {
		t.Errorf("bigcorp after the runtime change: RateLimit-Policy %q, want %q", got, changed)
	}
	if !strings.Contains(string(doc), changed) {
		t.Errorf("docs/plans.md does not show %s", changed)
	}
}
