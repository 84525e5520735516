package advise

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/loggen"
	"github.com/sluicehq/sluice/memstore"
)

const googlebot = "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)"

// realUserEvents stands for the WordPress site of issue #27 (item 5):
// 200 visitors each load a page (GET /page/N) with its three scripts and
// two stylesheets a few times; an office address with five browsers
// loads pages of 20 scripts, its developer tools asking for each
// script's source map (404) and the favicon (404); Googlebot crawls old
// links that are gone (404). Two callers are abusers all the same: a
// scanner probing paths (404), and one that calls itself Googlebot but
// tries passwords (401).
func realUserEvents() []loggen.Event {
	var evs []loggen.Event
	page := func(sec int64, ip, agent string, scripts int, maps bool) {
		e := ev(sec, "GET", fmt.Sprintf("/page/%d", sec%50), ip, "")
		e.Agent = agent
		evs = append(evs, e)
		for j := range scripts {
			e := ev(sec, "GET", fmt.Sprintf("/js/s%d.js", j), ip, "")
			e.Agent = agent
			evs = append(evs, e)
			if maps {
				e.Path, e.Status = fmt.Sprintf("/js/s%d.js.map", j), 404
				evs = append(evs, e)
			}
		}
		for j := range 2 {
			e := ev(sec, "GET", fmt.Sprintf("/css/c%d.css", j), ip, "")
			e.Agent = agent
			evs = append(evs, e)
		}
		if maps {
			e := ev(sec, "GET", "/favicon.ico", ip, "")
			e.Agent, e.Status = agent, 404
			evs = append(evs, e)
		}
	}
	for i := range 200 {
		for k := range 3 + i%3 {
			page(t0+int64(i*13+k*97), fmt.Sprintf("10.6.%d.%d", i/100, i%100), "Mozilla/5.0 Firefox/120.0", 3, false)
		}
	}
	for b := range 5 {
		for k := range 6 {
			// one page load a minute from the office, so that it is
			// not an outlier (its busiest minute is 40 in GET /js/)
			page(t0+int64((b*6+k)*60+b), "203.0.113.10", fmt.Sprintf("Mozilla/5.0 Chrome/12%d.0", b), 20, true)
		}
	}
	for k := range 60 {
		e := ev(t0+int64(k*10), "GET", fmt.Sprintf("/page/old-%d", k), "66.249.66.1", "")
		e.Agent, e.Status = googlebot, 404
		evs = append(evs, e)
	}
	for k := range 60 {
		e := ev(t0+int64(k*10+3), "GET", fmt.Sprintf("/page/%s", []string{"wp-admin", ".env", "phpinfo"}[k%3]), "198.51.100.20", "")
		e.Agent, e.Status = "curl/8.0", 404
		evs = append(evs, e)
		e = ev(t0+int64(k*10+5), "GET", "/page/login", "198.51.100.21", "")
		e.Agent, e.Status = googlebot, 401
		evs = append(evs, e)
	}
	return evs
}

// writeCombined writes events in time order as Combined Log Format lines,
// which carry the user agent.
func writeCombined(t *testing.T, name string, evs []loggen.Event) string {
	t.Helper()
	slices.SortStableFunc(evs, func(a, b loggen.Event) int { return int(a.Time - b.Time) })
	var buf []byte
	for i := range evs {
		buf = loggen.AppendLine(buf, &evs[i], loggen.Combined)
	}
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, buf, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestRealUsersNotSetApart: the office address and Googlebot are not set
// apart for their 404s; the scanner and the forged Googlebot's 401s are;
// the scripts' class gets a limit that passes a page load of 20 scripts
// from one address (issue #27, item 5).
func TestRealUsersNotSetApart(t *testing.T) {
	t.Parallel()
	rep, err := Run(Options{Inputs: []string{writeCombined(t, "site.log", realUserEvents())}, MaxClasses: 100, MaxPolicies: 10, MinShare: 0.01, Top: 50, NoReplay: true})
	if err != nil {
		t.Fatal(err)
	}
	apart := map[string]string{}
	for _, c := range rep.Classes {
		for _, k := range c.Keys.WouldLimit {
			apart[k.Key] = c.Match + ": " + k.Reason
		}
	}
	for _, k := range []string{"203.0.113.10", "66.249.66.1"} {
		if r, ok := apart[k]; ok {
			t.Errorf("%s set apart (%s): a real user, or a crawler, for 404s alone", k, r)
		}
	}
	for _, k := range []string{"198.51.100.20", "198.51.100.21"} {
		if _, ok := apart[k]; !ok {
			t.Errorf("%s not set apart: its errors are a scanner's (set apart: %v)", k, apart)
		}
	}
	js := findClass(t, rep, "GET /js/", "anonymous")
	// the evidence: the office's 404s on source maps are shown, as excused
	office := slices.IndexFunc(js.Tail, func(k TailKey) bool { return k.Key == "203.0.113.10" })
	if office < 0 || js.Tail[office].Errors != 600 || js.Tail[office].Excused != 600 {
		t.Errorf("GET /js/ tail %+v: want the office with its 600 source-map 404s, all excused", js.Tail)
	}
	if !js.InConfig || js.Proposal.Floor != "static" {
		t.Fatalf("GET /js/: %+v, want a static class in the configuration", js.Proposal)
	}
	// a page load: twenty scripts from one address in the same instant
	st := memstore.New(memstore.Options{SweepInterval: -1})
	defer st.Close()
	rules := []sluice.Rule{{Rate: js.Proposal.Rate, Burst: js.Proposal.Burst}}
	for i := range 20 {
		if res := st.CheckAt(sluice.Request{Key: "203.0.113.10", Cost: 1, Rules: rules}, t0*1e6); !res.Allowed {
			t.Fatalf("GET /js/ at %s burst %d denies script %d of a page load of 20", js.Rate, js.Proposal.Burst, i+1)
		}
	}
}

// The icon and robots files browsers ask for on their own are told by
// name: favicon.ico and favicon-32x32.png are, /api/favicons and
// /x/manifest.json.bak are not (a prefix match gave any path whose last
// segment began so the static floor of 2/s and a burst of 100, and
// excused its 404s).
func TestIconFilesByName(t *testing.T) {
	for path, want := range map[string]bool{
		"/favicon.ico": true, "/FAVICON.ICO": true, "/img/favicon-32x32.png": true, "/favicon_io/x": false,
		"/apple-touch-icon.png": true, "/apple-touch-icon-180x180-precomposed.png": true, "/mstile-150x150.png": true,
		"/manifest.json": true, "/site.webmanifest": true, "/robots.txt": true, "/browserconfig.xml": true,
		"/api/favicons": false, "/faviconsearch": false, "/x/manifest.json.bak": false, "/robots.txt2": false,
		"/mstiles": false, "/app.js": true, "/api/users": false,
	} {
		if got := isStaticAsset([]byte(path)); got != want {
			t.Errorf("isStaticAsset(%q) = %v, want %v", path, got, want)
		}
	}
}
