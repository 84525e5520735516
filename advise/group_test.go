package advise

import (
	"fmt"
	"math"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// clfRequest reads the client, user, time, method and path (without the
// query) of a CLF line, for the tests' own computations.
var clfRequest = regexp.MustCompile(`^(\S+) \S+ (\S+) \[([^\]]+)\] "(\S+) ([^ "?]*)[^"]*" (\d{3})`)

// routeByConfig routes every line of a CLF log with a ServeMux of the
// policies of a configuration the advisor wrote, as the gateway does, and
// returns each policy's requests and callers (the client field).
func routeByConfig(t *testing.T, logPath, cfgPath string) (requests map[string]int, keys map[string]map[string]bool) {
	t.Helper()
	cf, err := os.ReadFile(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	parsed, err := readConfig(cf)
	if err != nil {
		t.Fatal(err)
	}
	mux, byPattern := http.NewServeMux(), map[string]string{}
	for _, p := range parsed.Policies {
		mux.Handle(p.Match, http.NotFoundHandler())
		byPattern[p.Match] = p.Name
	}
	requests, keys = map[string]int{}, map[string]map[string]bool{}
	for _, l := range readLines(t, logPath) {
		m := clfRequest.FindStringSubmatch(l)
		if m == nil {
			t.Fatalf("unreadable line %q", l)
		}
		_, pattern := mux.Handler(&http.Request{Method: m[4], URL: &url.URL{Path: m[5]}})
		name, ok := byPattern[pattern]
		if !ok {
			name = "(none)"
		}
		requests[name]++
		if keys[name] == nil {
			keys[name] = map[string]bool{}
		}
		keys[name][m[1]] = true
	}
	return requests, keys
}

// TestGroupedPolicies: on the real logs, the classes are grouped into a
// handful of policies with a deliberate default (match /), and every
// policy, the default included, is sized on exactly the requests and
// callers a ServeMux of the written configuration routes to it.
func TestGroupedPolicies(t *testing.T) {
	dir := realLogs(t)
	for _, name := range realLogNames {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(dir, name)
			cfg := filepath.Join(t.TempDir(), "sluice.yaml")
			rep, err := Run(Options{Inputs: []string{path}, MaxClasses: 200, MaxPolicies: 10, MinShare: 0.01, MinBurst: 2, OutConfig: cfg})
			if err != nil {
				t.Fatal(err)
			}
			requests, keys := routeByConfig(t, path, cfg)
			if len(requests) < 4 || len(requests) > 10 || requests[defaultPolicy] == 0 || requests["(none)"] != 0 {
				t.Errorf("routed %v: want 4 to 10 policies, the default among them, and nothing unmatched", requests)
			}
			got, gotKeys := map[string]int{}, map[string]int{}
			for _, c := range rep.Classes {
				got[c.Policy] += int(c.PerSecond.Requests)
				gotKeys[c.Policy] += c.Keys.Keys
				if c.Policy == defaultPolicy && c.Match != defaultMatch {
					t.Errorf("the default policy matches %q, want %q", c.Match, defaultMatch)
				}
			}
			for p, n := range requests {
				if got[p] != n || gotKeys[p] != len(keys[p]) {
					t.Errorf("policy %s: sized on %d requests of %d callers; the configuration routes %d requests of %d callers to it", p, got[p], gotKeys[p], n, len(keys[p]))
				}
			}
			if len(got) != len(requests) {
				t.Errorf("the report has policies %v, the configuration routes to %v", got, requests)
			}
			t.Logf("%d policies: %v", len(requests), requests)
		})
	}
}

// TestStaticPattern: a static asset's request groups into its static
// directory's prefix, or its method's catch-all; anything else is no
// static asset.
func TestStaticPattern(t *testing.T) {
	for _, c := range []struct{ method, path, want string }{
		{"GET", "/images/web/2009/banner.png", "GET /images/"},
		{"GET", "/static/app.JS", "GET /static/"},
		{"HEAD", "/favicon.ico", "HEAD /"},
		{"GET", "/presentations/x/images/a.gif", "GET /"},
		{"GET", "/blog/post.html", ""},
		{"GET", "/robots.txt", ""},
		{"GET", "/images/", ""},
		{"GET", "/a.", ""},
		{"GET", "/.png", ""},
	} {
		got, ok := appendStaticPattern(nil, []byte(c.method), []byte(c.path))
		if string(got) != c.want || ok != (c.want != "") {
			t.Errorf("%s %s: %q %v, want %q", c.method, c.path, got, ok, c.want)
		}
	}
}

// keyNeed is the smallest bucket that passes every request at times (Unix
// µs, sorted) at rate per second: the most a bucket draining at the rate
// holds.
func keyNeed(times []int64, rate float64) uint32 {
	fill, most := 0.0, 0.0
	for i, tm := range times {
		if i > 0 {
			fill = max(0, fill-rate*float64(tm-times[i-1])/1e6)
		}
		fill++
		most = max(most, fill)
	}
	return uint32(math.Ceil(most - 1e-6))
}

// rankOf is the documented rank of the caller whose value the proposal
// reads among n: the p99's, but never one of the busiest three, and never
// one of the busiest quarter of fewer than 12.
func rankOf(n int) int {
	return max(1, min(int(math.Ceil(0.99*float64(n))), n-min(3, n/4)))
}

// proposalByDefinition is the proposal docs/advise.md defines, computed
// from each caller's request times (Unix µs) in a class where no caller
// is set apart.
func proposalByDefinition(byKey map[string][]int64, minBurst int64) (rate float64, burst int64, window string) {
	var peaks []uint32
	for _, times := range byKey {
		perMin := map[int64]uint32{}
		for _, tm := range times {
			perMin[tm/60e6]++
		}
		var top uint32
		for _, n := range perMin {
			top = max(top, n)
		}
		peaks = append(peaks, top)
	}
	slices.Sort(peaks)
	p99 := peaks[rankOf(len(peaks))-1]
	rate = 2 * float64(p99) / 60
	var needs []uint32
	for _, times := range byKey {
		slices.Sort(times)
		needs = append(needs, keyNeed(times, rate))
	}
	slices.Sort(needs)
	need := int64(needs[rankOf(len(needs))-1])
	lo, hi := max(1, int64(math.Ceil(5*rate-1e-9))), int64(10*rate+1e-9)
	window = "10s"
	if need > hi {
		hi, window = int64(60*rate+1e-9), "1m"
	}
	return rate, max(minBurst, min(max(need, lo), max(lo, hi))), window
}

// TestPuppetProposalByDefinition: the proposal for GET /blog/tags/puppet
// on the real, shuffled log is the one computed here from the documented
// definition, whether the classes are grouped or not.
func TestPuppetProposalByDefinition(t *testing.T) {
	path := filepath.Join(realLogs(t), "apache_combined_2015.log")
	byKey := map[string][]int64{}
	for _, l := range readLines(t, path) {
		m := clfRequest.FindStringSubmatch(l)
		if m[2] != "-" || m[4] != "GET" || m[5] != "/blog/tags/puppet" {
			continue
		}
		tm, err := time.Parse("02/Jan/2006:15:04:05 -0700", m[3])
		if err != nil {
			t.Fatal(err)
		}
		byKey[m[1]] = append(byKey[m[1]], tm.UnixMicro())
	}
	rate, burst, window := proposalByDefinition(byKey, 2)
	for _, maxPolicies := range []int{0, 10} {
		rep, err := Run(Options{Inputs: []string{path}, MaxClasses: 200, MaxPolicies: maxPolicies, MinShare: 0.01, MinBurst: 2, NoReplay: true})
		if err != nil {
			t.Fatal(err)
		}
		c := findClass(t, rep, "GET /blog/tags/puppet", "anonymous")
		if c.Proposal.Rate != rate || c.Proposal.Burst != burst || c.Proposal.BurstWindow != window || c.Keys.Keys != len(byKey) || c.Keys.SetApart != 0 {
			t.Errorf("max policies %d: proposed %s (%v/s) burst %d (%s) from %d keys; by the definition %v/s burst %d (%s) from %d keys",
				maxPolicies, c.Rate, c.Proposal.Rate, c.Proposal.Burst, c.Proposal.BurstWindow, c.Keys.Keys, rate, burst, window, len(byKey))
		}
		if maxPolicies == 0 {
			t.Logf("GET /blog/tags/puppet: %s burst %d (%s window), %s", c.Rate, c.Proposal.Burst, window, fmt.Sprint(c.Keys.NeedP99))
		}
	}
	if strings.TrimSpace(fmt.Sprint(rate*60)) != "2" || burst != 2 {
		t.Errorf("by the definition %v/m burst %d; measured before: 2/m burst 2 (13 callers: the busiest three do not set it)", rate*60, burst)
	}
}

// TestBurstDiscriminates: on the real logs, grouped into policies as the
// command does by default, the burst is not a fixed multiple of the rate,
// and the replay of each proposal rejects at most 2% of the callers that
// sized it (the rate admits the p99 of their busiest minutes, the burst
// the p99 of their needs; in a small class, all but the three busiest
// each), the callers set apart aside.
func TestBurstDiscriminates(t *testing.T) {
	dir := realLogs(t)
	for _, name := range realLogNames {
		t.Run(name, func(t *testing.T) {
			rep, err := Run(Options{Inputs: []string{filepath.Join(dir, name)}, MaxClasses: 200, MaxPolicies: 10, MinShare: 0.01, MinBurst: 2, Top: 1 << 20})
			if err != nil {
				t.Fatal(err)
			}
			multipliers := map[int64]int{}
			for _, c := range rep.Classes {
				multipliers[c.Proposal.Multiplier]++
				apart := map[string]bool{}
				for _, k := range c.Keys.WouldLimit {
					apart[k.Key] = true
				}
				normal := 0
				for _, k := range c.Replay.Top {
					if !apart[k.Key] {
						normal++
					}
				}
				// the rate and the burst each leave out the callers above
				// the caller rank: 1% of them, the busiest three at most
				// in a small class
				if limit := max((2*c.Keys.Normal+99)/100, 2*(c.Keys.Normal-rankOf(c.Keys.Normal))); normal > limit {
					t.Errorf("%s %s: %s burst %d: the replay rejected %d of the %d callers that sized it, want at most %d", c.Match, c.Caller, c.Rate, c.Proposal.Burst, normal, c.Keys.Normal, limit)
				}
			}
			if len(multipliers) < 3 {
				t.Errorf("burst / rate over %d classes: %v, want at least 3 different multipliers", len(rep.Classes), multipliers)
			}
			t.Logf("multipliers (burst / rate per second) and how many classes have each: %v", multipliers)
		})
	}
}
