package gateway

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/testkit/gatewaytest"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
	"github.com/sluicehq/sluice/internal/testkit/stall"
	"github.com/sluicehq/sluice/internal/testkit/syncbuf"
)

const adminToken = "0123456789abcdef0123456789abcdef"

// adminPolicies: payments at one rule, search at two, both slow enough
// that nothing refills while a test runs.
const adminPolicies = `policies:
  - name: payments
    match: "POST /payments/"
    authenticated: [{rate: 1/h, burst: 3}]
  - name: search
    match: "GET /search/"
    authenticated: [{rate: 1/m, burst: 20}, {rate: 1000/d, burst: 1000}]
`

// The Redis deployments of these tests give a store call a second
// (timeout: 1s), not the default 50 ms: on a loaded test machine a call
// that misses its deadline is decided by the failure policy, and a reset
// the store did not take is rightly a 503.

// adminGW is one running gateway of a deployment whose files are in dir.
type adminGW struct {
	g               *Gateway
	admin, decision string
	stop            func()
	log             *syncbuf.Buffer
}

// writeDeployment writes the configuration (with listen fields on free
// ports and the admin token file) to dir and returns its path.
func writeDeployment(t *testing.T, dir, yaml string) string {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "admin.token"), []byte(adminToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	yaml = "listen: 127.0.0.1:0\nadmin_listen: 127.0.0.1:0\ndecision_api: {listen: 127.0.0.1:0}\n" + yaml
	path := filepath.Join(dir, "sluice.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// startAdminGW runs the configuration at path until stop or the test's end.
func startAdminGW(t *testing.T, path string) *adminGW {
	t.Helper()
	running := gatewaytest.Start(t, New, path, nil).Serve(t, 5*time.Second)
	g := running.G
	_, admin := g.Addrs()
	return &adminGW{g: g, admin: "http://" + admin.String(), decision: "http://" + g.DecisionAddr().String(), log: running.Log,
		stop: func() { running.Stop() }}
}

// call sends an admin request with the token (unless auth is given) and
// returns the status and body.
func (gw *adminGW) call(t *testing.T, method, path, body string, header ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, gw.admin+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+adminToken)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
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
	return resp.StatusCode, string(b)
}

// check asks the gateway's decision API.
func (gw *adminGW) check(t *testing.T, policy, key string, cost int64) checkResponse {
	t.Helper()
	body := fmt.Sprintf(`{"policy":%q,"key":%q,"cost":%d}`, policy, key, cost)
	resp, b := post(t, gw.decision+"/v1/check", body, "Content-Type", jsonType)
	if resp.StatusCode != 200 {
		t.Fatalf("check %s/%s: %d %s", policy, key, resp.StatusCode, b)
	}
	var r checkResponse
	if err := json.Unmarshal([]byte(b), &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// limit is the burst of the identity's payments rule, as a cost-0 check
// reports it.
func (gw *adminGW) limit(t *testing.T, key string) int64 {
	return gw.check(t, "payments", key, 0).Limit
}

// TestAdminOverrideAcrossGateways: three gateways share one real Redis. An
// override set through the admin API of one is applied by all three
// within a second (measured, with slack for a loaded machine), survives a
// restart of all three, and is gone everywhere after a delete on another.
func TestAdminOverrideAcrossGateways(t *testing.T) {
	srv := redistest.Start(t)
	dir := t.TempDir()
	path := writeDeployment(t, dir, fmt.Sprintf("store: {type: redis, redis: {url: %q, timeout: 1s}}\nadmin: {token_file: admin.token}\n", srv.URL())+adminPolicies)
	start := func() []*adminGW {
		return []*adminGW{startAdminGW(t, path), startAdminGW(t, path), startAdminGW(t, path)}
	}
	gws := start()
	for i, gw := range gws {
		if got := gw.limit(t, "acme"); got != 3 {
			t.Fatalf("gateway %d: acme's payments limit is %d before any override, want 3", i, got)
		}
	}
	// waitAll measures how long each gateway takes to show want, from
	// since, the moment the change was sent; took is how long the change
	// itself took to answer. A gateway's time is the start of its last
	// check that still showed the old limit (it took at least that long;
	// the check's own round trip, slow on a loaded machine, is not the
	// gateway's lag), measured against the bound: the second the design
	// promises, plus twenty times took and twice the longest the machine
	// kept a goroutine that only sleeps from running meanwhile (a gateway
	// that polls every 250 ms is late by what its ticker and its reads were
	// kept waiting, which a starved machine stretches).
	waitAll := func(what string, want int64, since time.Time, took time.Duration) {
		t.Helper()
		stalls := stall.Start()
		defer stalls.Stop()
		var slowest time.Duration
		for i, gw := range gws {
			var lag time.Duration
			for {
				at := time.Now()
				if gw.limit(t, "acme") == want {
					break
				}
				lag = at.Sub(since)
				if time.Since(since) > 30*time.Second {
					t.Fatalf("%s: gateway %d still shows another limit than %d after %v", what, i, want, time.Since(since))
				}
				time.Sleep(5 * time.Millisecond)
			}
			slowest = max(slowest, lag)
		}
		bound := time.Second + 20*took + 2*stalls.Longest()
		t.Logf("%s: applied by all %d gateways within %v of the change (bound %v: the change answered in %v, the longest stall was %v)",
			what, len(gws), slowest, bound, took, stalls.Longest())
		if slowest > bound {
			t.Errorf("%s: the slowest gateway took %v, above the bound %v", what, slowest, bound)
		}
	}
	put := func(gw *adminGW, body string) (time.Time, time.Duration) {
		t0 := time.Now()
		code, b := gw.call(t, "PUT", "/v1/admin/overrides/acme", body, "X-Sluice-Actor", "sales-bot")
		if code != 200 {
			t.Fatalf("PUT: %d %s", code, b)
		}
		return t0, time.Since(t0)
	}
	t0, took := put(gws[0], `{"policies":{"payments":[{"rate":"100/h","burst":50}]}}`)
	waitAll("set on gateway 0", 50, t0, took)

	for _, gw := range gws {
		gw.stop()
	}
	gws = start()
	for i, gw := range gws {
		if got := gw.limit(t, "acme"); got != 50 {
			t.Errorf("after a restart of all three, gateway %d shows acme's limit %d, want 50", i, got)
		}
	}
	code, body := gws[2].call(t, "GET", "/v1/admin/overrides/acme", "")
	if code != 200 || !strings.Contains(body, `"burst":50`) {
		t.Errorf("GET after restart: %d %s", code, body)
	}

	t0 = time.Now()
	code, body = gws[1].call(t, "DELETE", "/v1/admin/overrides/acme", "")
	if code != 200 {
		t.Fatalf("DELETE: %d %s", code, body)
	}
	waitAll("delete on gateway 1", 3, t0, time.Since(t0))
	if code, body := gws[0].call(t, "GET", "/v1/admin/overrides", ""); code != 200 || body != "{\"overrides\":[]}\n" {
		t.Errorf("list after delete: %d %s", code, body)
	}
	if code, _ := gws[0].call(t, "GET", "/v1/admin/overrides/acme", ""); code != 404 {
		t.Errorf("GET of a deleted override: %d, want 404", code)
	}
}

// TestAdminOverrideRedisDown: while Redis is down a gateway keeps the
// overrides it read, a change is refused with 503 (and changes nothing),
// and once Redis is back the gateway follows changes again.
func TestAdminOverrideRedisDown(t *testing.T) {
	srv := redistest.Start(t)
	dir := t.TempDir()
	path := writeDeployment(t, dir, fmt.Sprintf("store: {type: redis, on_error: open, redis: {url: %q}}\nadmin: {token_file: admin.token}\n", srv.URL())+adminPolicies)
	a, b := startAdminGW(t, path), startAdminGW(t, path)
	if code, body := a.call(t, "PUT", "/v1/admin/overrides/acme", `{"policies":{"payments":[{"rate":"1/h","burst":7}]}}`); code != 200 {
		t.Fatalf("PUT: %d %s", code, body)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, ok := b.g.overrides.Rules("payments", "acme"); ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("gateway b never read the override")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Wait for gateway b to have tried a read with Redis down (it logs the
	// first failure of a run of them), however long a starved machine
	// delays its poll: what it holds is checked after that read, not
	// after a fixed sleep.
	const failedRead = "cannot read the runtime overrides"
	failedBefore := strings.Count(b.log.String(), failedRead)
	srv.Stop()
	for deadline := time.Now().Add(20 * time.Second); strings.Count(b.log.String(), failedRead) == failedBefore; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("gateway b did not log a failed read within 20s of Redis stopping:\n%s", b.log.String())
		}
	}
	if rs, ok := b.g.overrides.Rules("payments", "acme"); !ok || rs[0].Burst != 7 {
		t.Errorf("with Redis down gateway b holds %v %v, want the override it read (burst 7)", rs, ok)
	}
	if code, _ := a.call(t, "PUT", "/v1/admin/overrides/acme", `{"policies":{"payments":[{"rate":"1/h","burst":9}]}}`); code != http.StatusServiceUnavailable {
		t.Errorf("PUT with Redis down: %d, want 503", code)
	}
	if code, body := a.call(t, "POST", "/v1/admin/reset/acme", ""); code != http.StatusServiceUnavailable {
		t.Errorf("reset with Redis down (on_error: open): %d %s, want 503", code, body)
	}
	if rs, _ := a.g.overrides.Rules("payments", "acme"); len(rs) != 1 || rs[0].Burst != 7 {
		t.Errorf("a refused PUT changed gateway a's override to %v", rs)
	}
	srv.Restart()
	deadline = time.Now().Add(20 * time.Second)
	for {
		code, _ := a.call(t, "PUT", "/v1/admin/overrides/acme", `{"policies":{"payments":[{"rate":"1/h","burst":11}]}}`)
		if code == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("PUT never succeeded after Redis came back: %d", code)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for {
		if rs, _ := b.g.overrides.Rules("payments", "acme"); len(rs) == 1 && rs[0].Burst == 11 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("gateway b never followed the change after Redis came back")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestAdminUnauthorized: without the token, or with a wrong one, every
// admin call is 401 and changes nothing; without admin.token_file the
// API is off and says so.
func TestAdminUnauthorized(t *testing.T) {
	gw := startAdminGW(t, writeDeployment(t, t.TempDir(), "admin: {token_file: admin.token}\n"+adminPolicies))
	for _, auth := range []string{"", "Bearer", "Bearer " + adminToken + "x", "Bearer " + adminToken[1:], "Basic " + adminToken, "bearer  wrong-token-wrong-token"} {
		for _, c := range []struct{ method, path, body string }{
			{"PUT", "/v1/admin/overrides/acme", `{"policies":{"payments":[{"rate":"1/s","burst":100}]}}`},
			{"DELETE", "/v1/admin/overrides/acme", ""},
			{"POST", "/v1/admin/reset/acme", ""},
			{"GET", "/v1/admin/overrides", ""},
			{"GET", "/v1/admin/usage/acme", ""},
		} {
			code, body := gw.call(t, c.method, c.path, c.body, "Authorization", auth)
			if code != http.StatusUnauthorized || strings.Contains(body, "payments") {
				t.Errorf("%s %s with Authorization %q: %d %s, want 401 telling nothing", c.method, c.path, auth, code, body)
			}
		}
	}
	if got := gw.limit(t, "acme"); got != 3 {
		t.Errorf("acme's limit is %d after unauthorized calls, want 3", got)
	}
	if code, body := gw.call(t, "GET", "/v1/admin/overrides", ""); body != "{\"overrides\":[]}\n" {
		t.Errorf("overrides after unauthorized calls: %d %s", code, body)
	}
	if !strings.Contains(scrape(t, gw.admin), `sluice_admin_changes_total{op="set"} 0`) {
		t.Error("unauthorized calls were counted as changes")
	}

	off := startAdminGW(t, writeDeployment(t, t.TempDir(), adminPolicies))
	code, body := off.call(t, "PUT", "/v1/admin/overrides/acme", `{"policies":{"payments":[{"rate":"1/s","burst":100}]}}`)
	if code != http.StatusNotFound || !strings.Contains(body, "admin.token_file") {
		t.Errorf("PUT with the admin API off: %d %s, want 404 naming admin.token_file", code, body)
	}
	if got := off.limit(t, "acme"); got != 3 {
		t.Errorf("the admin API off changed acme's limit to %d", got)
	}
}

// TestAdminOverridesFile: with the memory store, overrides persist in
// admin.overrides_file across a restart, a delete persists too, and a
// corrupt file is a clear error at start.
func TestAdminOverridesFile(t *testing.T) {
	dir := t.TempDir()
	path := writeDeployment(t, dir, "admin: {token_file: admin.token, overrides_file: overrides.json}\n"+adminPolicies)
	gw := startAdminGW(t, path)
	for _, id := range []string{"acme", "ünïcode/with slash"} {
		p := "/v1/admin/overrides/" + url.PathEscape(id)
		if code, body := gw.call(t, "PUT", p, `{"policies":{"payments":[{"rate":"100/h","burst":40}],"search":[{"rate":"5/m","burst":30},{"rate":"1000/d","burst":1000}]}}`); code != 200 {
			t.Fatalf("PUT %s: %d %s", id, code, body)
		}
	}
	if got := gw.limit(t, "acme"); got != 40 {
		t.Fatalf("acme's limit is %d after the PUT, want 40", got)
	}
	gw.stop()
	gw = startAdminGW(t, path)
	if got := gw.limit(t, "acme"); got != 40 {
		t.Errorf("after a restart acme's limit is %d, want 40 from the file", got)
	}
	if got := gw.check(t, "payments", "ünïcode/with slash", 0).Limit; got != 40 {
		t.Errorf("after a restart the unicode identity's limit is %d, want 40", got)
	}
	if err := gw.g.Reload(); err != nil {
		t.Fatal(err)
	}
	if got := gw.limit(t, "acme"); got != 40 {
		t.Errorf("after a reload acme's limit is %d, want 40", got)
	}
	if code, body := gw.call(t, "DELETE", "/v1/admin/overrides/acme", ""); code != 200 || !strings.Contains(body, `"before":{`) {
		t.Fatalf("DELETE: %d %s", code, body)
	}
	gw.stop()
	gw = startAdminGW(t, path)
	if got := gw.limit(t, "acme"); got != 3 {
		t.Errorf("after a delete and a restart acme's limit is %d, want 3", got)
	}
	gw.stop()
	matches, _ := filepath.Glob(filepath.Join(dir, ".overrides.json.*"))
	if len(matches) != 0 {
		t.Errorf("temporary files left behind: %v", matches)
	}

	if err := os.WriteFile(filepath.Join(dir, "overrides.json"), []byte(`{"version":1,"overrides":{"acme":`), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if g, err := New(cfg, path, slog.New(slog.NewTextHandler(io.Discard, nil))); err == nil {
		g.Close()
		t.Error("a corrupt overrides file: the gateway started")
	} else if !strings.Contains(err.Error(), "not a valid overrides file") || !strings.Contains(err.Error(), "overrides.json") {
		t.Errorf("a corrupt overrides file: %v, want an error naming the file", err)
	}
}

// TestAdminBodies: a PUT body is read strictly; every mistake is a 400
// (or 413, 415) that says what is wrong, and changes nothing.
func TestAdminBodies(t *testing.T) {
	gw := startAdminGW(t, writeDeployment(t, t.TempDir(), "admin: {token_file: admin.token}\n"+adminPolicies))
	rules17 := strings.Repeat(`{"rate":"1/s","burst":10},`, 17)
	for _, c := range []struct{ body, want string }{
		{`{"Policies":{"payments":[{"rate":"1/s","burst":10}]}}`, "unknown field"},
		{`{"policies":{"payments":[{"rate":"1/s","burst":10}]},"policies":{}}`, "twice"},
		{`{"policies":{"payments":[{"rate":"1/s","burst":10}],"payments":[{"rate":"1/s","burst":10}]}}`, "twice"},
		{`{"policies":{"payments":[{"rate":"1/s"}]}}`, "both rate and burst"},
		{`{"policies":{"payments":[{"rate":"1/s","burst":"10"}]}}`, "burst"},
		{`{"policies":{"payments":[{"rate":"1/s","burst":0}]}}`, "burst"},
		{`{"policies":{"payments":[{"rate":"1/s","burst":1.5}]}}`, "burst"},
		{`{"policies":{"payments":[{"rate":"10/x","burst":10}]}}`, "unknown unit"},
		{`{"policies":{"payments":[{"rate":"1/8785h","burst":1}]}}`, "366 days"},
		{`{"policies":{"payments":[{"rate":"1/s","burst":10,"cost":1}]}}`, "unknown field"},
		{`{"policies":{"nope":[{"rate":"1/s","burst":10}]}}`, "no policy is named"},
		{`{"policies":{"payments":[]}}`, "no rules"},
		{`{"policies":{}}`, "no policies"},
		{`{"policies":{"payments":[` + rules17[:len(rules17)-1] + `]}}`, "more than 16"},
		{`{"policies":{"payments":[{"rate":"1/s","burst":10}]}} {}`, "more than one"},
		{`{"policies":{"payments":[{"rate":"1/s","burst":10}]}`, "ends before"},
		{`[]`, "object"},
	} {
		code, body := gw.call(t, "PUT", "/v1/admin/overrides/acme", c.body)
		if code != 400 || !strings.Contains(body, c.want) {
			t.Errorf("PUT %s: %d %s, want 400 saying %q", c.body, code, body, c.want)
		}
	}
	if code, _ := gw.call(t, "PUT", "/v1/admin/overrides/acme", `{"policies":{"payments":[{"rate":"1/s","burst":10}]}}`, "Content-Type", "text/plain"); code != 415 {
		t.Errorf("PUT as text/plain: %d, want 415", code)
	}
	big := `{"policies":{"payments":[{"rate":"1/s","burst":10}]},"x":"` + strings.Repeat("a", maxAdminBody) + `"}`
	if code, _ := gw.call(t, "PUT", "/v1/admin/overrides/acme", big); code != 413 {
		t.Errorf("PUT of %d bytes: %d, want 413", len(big), code)
	}
	if code, _ := gw.call(t, "PUT", "/v1/admin/overrides/"+strings.Repeat("a", maxCheckKey+1), `{"policies":{"payments":[{"rate":"1/s","burst":10}]}}`); code != 400 {
		t.Errorf("PUT of a long identity: %d, want 400", code)
	}
	if code, body := gw.call(t, "GET", "/v1/admin/overrides", ""); body != "{\"overrides\":[]}\n" {
		t.Errorf("after refused PUTs: %d %s", code, body)
	}
}

// TestAdminChangeLogged: a change is logged with who (peer and actor),
// what, before and after, and counted.
func TestAdminChangeLogged(t *testing.T) {
	gw := startAdminGW(t, writeDeployment(t, t.TempDir(), "admin: {token_file: admin.token}\n"+adminPolicies))
	gw.call(t, "PUT", "/v1/admin/overrides/acme", `{"policies":{"payments":[{"rate":"1/s","burst":10}]}}`, "X-Sluice-Actor", "alice@example.com")
	gw.call(t, "PUT", "/v1/admin/overrides/acme", `{"policies":{"payments":[{"rate":"2/s","burst":20}]}}`, "X-Sluice-Actor", "bob")
	gw.call(t, "DELETE", "/v1/admin/overrides/acme", "")
	gw.call(t, "POST", "/v1/admin/reset/acme", "")
	logs := gw.log.String()
	for _, want := range []string{
		`op=set identity=acme peer=127.0.0.1:`,
		`actor=alice@example.com before=null after="{\"payments\":[{\"rate\":\"1/s\",\"burst\":10}]}"`,
		`actor=bob before="{\"payments\":[{\"rate\":\"1/s\",\"burst\":10}]}" after="{\"payments\":[{\"rate\":\"2/s\",\"burst\":20}]}"`,
		`op=delete identity=acme`,
		`op=reset identity=acme`,
	} {
		if !strings.Contains(logs, want) {
			t.Errorf("the log lacks %s:\n%s", want, logs)
		}
	}
	m := scrape(t, gw.admin)
	for _, want := range []string{`sluice_admin_changes_total{op="set"} 2`, `sluice_admin_changes_total{op="delete"} 1`, `sluice_admin_changes_total{op="reset"} 1`} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// TestAdminResetAndUsage: usage reports every rule without consuming
// (read many times, the whole burst still passes), equals what the next
// check sees and what /v1/check with cost 0 reports; a reset makes the
// next check see a full bucket.
func TestAdminResetAndUsage(t *testing.T) {
	srv := redistest.Start(t)
	for _, store := range []string{"memory", "redis"} {
		t.Run(store, func(t *testing.T) {
			yaml := "admin: {token_file: admin.token}\n" + adminPolicies
			if store == "redis" {
				yaml = fmt.Sprintf("store: {type: redis, redis: {url: %q, timeout: 1s}}\n", srv.URL()) + yaml
			}
			gw := startAdminGW(t, writeDeployment(t, t.TempDir(), yaml))
			id := "user-" + store
			for range 2 {
				gw.check(t, "search", id, 1)
			}
			type usage struct {
				Policies map[string]policyUsage
			}
			var u usage
			for range 50 {
				code, body := gw.call(t, "GET", "/v1/admin/usage/"+id, "")
				if code != 200 {
					t.Fatalf("usage: %d %s", code, body)
				}
				u = usage{}
				if err := json.Unmarshal([]byte(body), &u); err != nil {
					t.Fatal(err)
				}
			}
			search := u.Policies["search"].Rules
			if len(search) != 2 || search[0].Remaining != 18 || search[1].Remaining != 998 || search[0].Burst != 20 || search[1].Rate != "1000/d" {
				t.Fatalf("usage of search: %+v, want 18 of 20 and 998 of 1000", u.Policies["search"])
			}
			if pay := u.Policies["payments"]; len(pay.Rules) != 1 || pay.Rules[0].Remaining != 3 || pay.Source != "authenticated" {
				t.Errorf("usage of payments: %+v, want a full 3", pay)
			}
			zero := gw.check(t, "search", id, 0)
			for i := range search {
				// Only time passed: the reset is nearer, by less than a
				// token's refill.
				if len(zero.Rules) != 2 || zero.Rules[i].Remaining != search[i].Remaining || zero.Rules[i].Rate != search[i].Rate ||
					zero.Rules[i].ResetAfterMs > search[i].ResetAfterMs || zero.Rules[i].ResetAfterMs < search[i].ResetAfterMs-60_000 {
					t.Errorf("/v1/check cost 0 rules %+v, want the usage endpoint's %+v", zero.Rules, search)
				}
			}
			next := gw.check(t, "search", id, 1)
			if next.Remaining != search[0].Remaining-1 || next.Limit != 20 {
				t.Errorf("the next check: %d of %d remaining, usage said %d", next.Remaining, next.Limit, search[0].Remaining)
			}
			// Nothing was consumed by reading: the rest of the burst passes.
			for i := int64(1); i < search[0].Remaining; i++ {
				if r := gw.check(t, "search", id, 1); !r.Allowed {
					t.Fatalf("check %d denied after %d reads: usage said %d remaining", i, 50, search[0].Remaining)
				}
			}
			if r := gw.check(t, "search", id, 1); r.Allowed {
				t.Error("a check beyond the burst passed")
			}
			code, body := gw.call(t, "POST", "/v1/admin/reset/"+id+"?policy=search", "")
			if code != 200 {
				t.Fatalf("reset: %d %s", code, body)
			}
			if r := gw.check(t, "search", id, 1); !r.Allowed || r.Remaining != 19 {
				t.Errorf("after a reset the next check: %+v, want allowed with 19 of 20 left", r)
			}
			if code, _ := gw.call(t, "POST", "/v1/admin/reset/"+id+"?policy=nope", ""); code != 400 {
				t.Errorf("reset of an unknown policy: %d, want 400", code)
			}
		})
	}
}

// TestAdminOverrideOnCluster: on a Redis Cluster the overrides (one hash
// tag, one slot) are shared the same way, and usage and reset work on
// keys spread over the masters.
func TestAdminOverrideOnCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis Cluster")
	}
	cluster := redistest.StartCluster(t, 3, 0)
	addrs, _ := json.Marshal(cluster.Addrs())
	path := writeDeployment(t, t.TempDir(), fmt.Sprintf("store: {type: redis, redis: {cluster_addrs: %s, timeout: 1s}}\nadmin: {token_file: admin.token}\n", addrs)+adminPolicies)
	a, b := startAdminGW(t, path), startAdminGW(t, path)
	if code, body := a.call(t, "PUT", "/v1/admin/overrides/acme", `{"policies":{"payments":[{"rate":"1/h","burst":6}]}}`); code != 200 {
		t.Fatalf("PUT on a Cluster: %d %s", code, body)
	}
	deadline := time.Now().Add(10 * time.Second)
	for b.limit(t, "acme") != 6 {
		if time.Now().After(deadline) {
			t.Fatal("the second gateway never applied the override")
		}
		time.Sleep(10 * time.Millisecond)
	}
	for i := range 20 {
		id := fmt.Sprintf("user-%d", i)
		b.check(t, "search", id, 1)
		code, body := a.call(t, "GET", "/v1/admin/usage/"+id+"?policy=search", "")
		if code != 200 || !strings.Contains(body, `"remaining":19`) {
			t.Fatalf("usage of %s on a Cluster: %d %s", id, code, body)
		}
		if code, body := a.call(t, "POST", "/v1/admin/reset/"+id, ""); code != 200 {
			t.Fatalf("reset of %s on a Cluster: %d %s", id, code, body)
		}
		if r := b.check(t, "search", id, 0); r.Remaining != 20 {
			t.Fatalf("%s after a reset on a Cluster: %d remaining, want 20", id, r.Remaining)
		}
	}
}

// TestAdminQuotaOverride: a runtime override may hold a calendar quota
// (a contract of 5 a month, beside a per-hour bucket): it is decided all
// or nothing with the bucket, shown as a quota, and refused when mixed
// with a rate or a burst in one rule.
func TestAdminQuotaOverride(t *testing.T) {
	gw := startAdminGW(t, writeDeployment(t, t.TempDir(), "admin: {token_file: admin.token}\nquota_time_zone: Europe/Berlin\n"+adminPolicies))
	for _, c := range []struct{ body, want string }{
		{`{"policies":{"payments":[{"quota":"5/month","burst":5}]}}`, "takes no rate or burst"},
		{`{"policies":{"payments":[{"quota":"5/fortnight"}]}}`, "fortnight"},
		{`{"policies":{"payments":[{"quota":5}]}}`, "quota: want a string"},
	} {
		if code, body := gw.call(t, "PUT", "/v1/admin/overrides/acme", c.body); code != 400 || !strings.Contains(body, c.want) {
			t.Errorf("PUT %s: %d %s, want 400 saying %q", c.body, code, body, c.want)
		}
	}
	code, body := gw.call(t, "PUT", "/v1/admin/overrides/acme", `{"policies":{"payments":[{"rate":"1/h","burst":10},{"quota":"5/month"}]}}`)
	if code != 200 || !strings.Contains(body, `{"quota":"5/month"}`) {
		t.Fatalf("PUT of a quota: %d %s", code, body)
	}
	passed := 0
	for range 8 {
		if gw.check(t, "payments", "acme", 1).Allowed {
			passed++
		}
	}
	if passed != 5 {
		t.Errorf("acme passed %d checks against a quota of 5 a month, want 5", passed)
	}
	_, body = gw.call(t, "GET", "/v1/admin/usage/acme?policy=payments", "")
	if !strings.Contains(body, `"quota":"5/month","remaining":0`) || !strings.Contains(body, `"rate":"1/h","burst":10,"remaining":5`) {
		t.Errorf("usage of acme: %s; want the quota spent and the bucket at 5 of 10", body)
	}
}
