package gateway

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/advise"
	"github.com/sluicehq/sluice/internal/testkit/gatewaytest"
)

// accessGateway starts a gateway whose configuration file, written to a
// temporary directory, is extra followed by an access_log section, with an
// upstream and two API keys (alice and bob). It returns the gateway, its
// traffic server and the paths of the configuration and the log.
func accessGateway(t *testing.T, format, extra string) (*Gateway, *httptest.Server, string, string) {
	t.Helper()
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "ok")
	}))
	t.Cleanup(upstream.Close)
	var keys strings.Builder
	for _, k := range []string{"alice", "bob"} {
		sum := sha256.Sum256([]byte("key-of-" + k))
		fmt.Fprintf(&keys, "%s %s\n", hex.EncodeToString(sum[:]), k)
	}
	yaml := "upstream: " + upstream.URL + "\nidentity: {api_keys_file: keys.txt}\n" + extra +
		"access_log: {path: access.log, format: " + format + "}\n"
	gw := gatewaytest.Start(t, New, gatewaytest.Write(t, yaml, map[string]string{"keys.txt": keys.String()}), io.Discard).Handle(t)
	return gw.G, gw.Traffic, gw.Path, filepath.Join(gw.Dir, "access.log")
}

const roundTripPolicies = `policies:
  - name: search
    match: GET /search
    anonymous: [{rate: 1/h, burst: 5}]
    authenticated: [{rate: 1/h, burst: 30}]
  - name: items
    match: GET /items/{id}
    anonymous: [{rate: 1000/s, burst: 1000}]
`

// get sends n GETs of path (with an API key unless key is empty) and
// returns how many were answered 429.
func get(t *testing.T, base, path, key string, n int) (denied int) {
	t.Helper()
	for i := 0; i < n; i++ {
		req, _ := http.NewRequest("GET", base+path, nil)
		if key != "" {
			req.Header.Set("X-API-Key", key)
		}
		req.Header.Set("User-Agent", `test "agent"`)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusTooManyRequests {
			denied++
		}
	}
	return denied
}

func readLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := strings.TrimSuffix(string(b), "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

var combinedLine = regexp.MustCompile(`^(\S+) - (\S+) \[[^\]]+\] "(\S+) (\S+) HTTP/1\.1" (\d{3}) (\d+) "([^"]*)" "([^"]*)" "([^"]*)" "([^"]*)" "([^"]*)" "([^"]*)" \d+\.\d{3}$`)

// TestAccessLogRoundTripsThroughAdvise: a gateway writes its access log,
// in each format, for anonymous and authenticated traffic, some of it
// denied; `sluice advise` with the gateway's configuration reads it back
// without flags: its classes are the gateway's policies and callers, with
// the requests served, and the denials it counts are the ones the gateway
// made.
func TestAccessLogRoundTripsThroughAdvise(t *testing.T) {
	for _, format := range []string{"combined", "json"} {
		t.Run(format, func(t *testing.T) {
			g, traffic, cfgPath, logPath := accessGateway(t, format, roundTripPolicies)
			anonDenied := get(t, traffic.URL, "/search", "", 40)
			aliceDenied := get(t, traffic.URL, "/search", "key-of-alice", 40)
			bobDenied := get(t, traffic.URL, "/search", "key-of-bob", 5)
			get(t, traffic.URL, "/items/7", "", 20)
			get(t, traffic.URL, "/unlimited", "", 3)
			get(t, traffic.URL, "/search", "forged-key", 1) // an unknown key is anonymous
			if anonDenied != 35 || aliceDenied != 10 || bobDenied != 0 {
				t.Fatalf("denied anonymous %d, alice %d, bob %d; want 35, 10, 0", anonDenied, aliceDenied, bobDenied)
			}
			traffic.Close() // waits for the handlers, so every line is queued
			g.Close()

			lines := readLines(t, logPath)
			if len(lines) != 109 {
				t.Fatalf("%d lines in the access log, want 109 (one per request)", len(lines))
			}
			decisions := map[string]int{}
			for _, l := range lines {
				if strings.Contains(l, "key-of-") || strings.Contains(l, "forged-key") {
					t.Fatalf("a credential reached the access log: %s", l)
				}
				var policy, class, decision, user, status string
				if format == "json" {
					var m map[string]any
					if err := json.Unmarshal([]byte(l), &m); err != nil {
						t.Fatalf("not a JSON line: %v: %s", err, l)
					}
					policy, _ = m["sluice_policy"].(string)
					class, _ = m["sluice_class"].(string)
					decision, _ = m["sluice_decision"].(string)
					user, _ = m["user"].(string)
					status = fmt.Sprint(m["status"])
					if m["user_agent"] != `test "agent"` || m["remote_addr"] != "127.0.0.1" {
						t.Fatalf("user_agent or remote_addr wrong: %s", l)
					}
				} else {
					f := combinedLine.FindStringSubmatch(l)
					if f == nil {
						t.Fatalf("not a combined line with sluice's fields: %s", l)
					}
					if f[1] != "127.0.0.1" || f[8] != `test \x22agent\x22` {
						t.Fatalf("client or user agent wrong: %s", l)
					}
					user, status, policy, class, decision = f[2], f[5], f[9], f[10], f[11]
					if user == "-" {
						user = ""
					}
				}
				decisions[fmt.Sprintf("%s/%s/%s/%s/%s", policy, class, user, decision, status)]++
			}
			want := map[string]int{
				"search/anonymous//allowed/200": 5, "search/anonymous//denied/429": 36,
				"search/authenticated/alice/allowed/200": 30, "search/authenticated/alice/denied/429": 10,
				"search/authenticated/bob/allowed/200": 5,
				"items/anonymous//allowed/200":         20,
			}
			if format == "json" {
				want["////200"] = 3
			} else {
				want["-/-//-/200"] = 3
			}
			if fmt.Sprint(decisions) != fmt.Sprint(want) {
				t.Errorf("policy/class/user/decision/status counts:\n got %v\nwant %v", decisions, want)
			}

			rep, err := advise.Run(advise.Options{Inputs: []string{logPath}, Config: cfgPath, Top: 10, MaxClasses: 200, NoReplay: true, Progress: "never"})
			if err != nil {
				t.Fatal(err)
			}
			if rep.Lines != 109 || rep.Malformed != 0 || rep.Unmatched != 3 {
				t.Errorf("advise read %d lines, %d malformed, %d unmatched; want 109, 0, 3", rep.Lines, rep.Malformed, rep.Unmatched)
			}
			got := map[string]uint64{}
			denied := map[string]uint32{}
			for _, c := range rep.Classes {
				got[c.Policy+"/"+c.Caller] = c.PerSecond.Requests
				for _, k := range c.Keys.WouldLimit {
					denied[c.Policy+"/"+c.Caller+"/"+k.Key] = k.Denied
				}
			}
			// the requests the gateway denied (its decision says so) are no
			// traffic served: advise counts them apart, toward their callers'
			// denials only
			wantReq := map[string]uint64{"search/anonymous": 5, "search/authenticated": 35, "items/anonymous": 20}
			if fmt.Sprint(got) != fmt.Sprint(wantReq) || rep.Refused != 46 {
				t.Errorf("advise's classes and requests served: got %v, want %v; refused %d, want 46", got, wantReq, rep.Refused)
			}
			wantDenied := map[string]uint32{"search/anonymous/127.0.0.1": 36, "search/authenticated/alice": 10}
			if fmt.Sprint(denied) != fmt.Sprint(wantDenied) {
				t.Errorf("advise's keys set apart for their 429s: got %v, want %v", denied, wantDenied)
			}
		})
	}
}
