package gateway

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/testkit/redistest"
)

// The alert rules and the dashboard in deploy/ are tested here: promtool
// checks and unit-tests the rules (deploy/prometheus/*_test.yaml), and
// every metric either names is one a running gateway exports, so that a
// renamed metric breaks this test and not an operator's alert.

const deployDir = "../../deploy"

func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool is not on the PATH: run scripts/ensure-promtool.sh (as root it installs Debian's prometheus package)")
	}
	return p
}

// TestAlertRules runs promtool check rules and promtool test rules on
// deploy/prometheus.
func TestAlertRules(t *testing.T) {
	bin := promtool(t)
	rules, _ := filepath.Glob(filepath.Join(deployDir, "prometheus", "*.yaml"))
	var tests, ruleFiles []string
	for _, f := range rules {
		if strings.HasSuffix(f, "_test.yaml") {
			tests = append(tests, f)
		} else {
			ruleFiles = append(ruleFiles, f)
		}
	}
	if len(ruleFiles) == 0 || len(tests) == 0 {
		t.Fatalf("deploy/prometheus has rule files %v and tests %v; want both", ruleFiles, tests)
	}
	for _, args := range [][]string{append([]string{"check", "rules"}, ruleFiles...), append([]string{"test", "rules"}, tests...)} {
		out, err := exec.Command(bin, args...).CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	// Each alert the issue asks for is there (and so tested above).
	text := readAll(t, ruleFiles)
	for _, alert := range []string{"SluiceStoreFailing", "SluiceStoreBreakerOpen", "SluiceLocalFallback", "SluiceConfigReloadRefused"} {
		if !strings.Contains(text, "alert: "+alert+"\n") {
			t.Errorf("the rules lack %s", alert)
		}
	}
	testText := readAll(t, tests)
	for _, alert := range regexp.MustCompile(`alert: (\w+)`).FindAllStringSubmatch(text, -1) {
		if !strings.Contains(testText, "alertname: "+alert[1]+"\n") {
			t.Errorf("no promtool test for %s", alert[1])
		}
	}
}

// TestDeployMetricsExist scrapes a gateway with a Redis store and an
// upstream, and checks that each sluice_* name in the rules and the
// dashboard is one it exports (a family, or a histogram's _bucket, _sum,
// _count series).
func TestDeployMetricsExist(t *testing.T) {
	srv := redistest.Start(t)
	_, gw, admin := newGateway(t, fmt.Sprintf("upstream: %s\nserver: {max_body_bytes: 4}\nstore: {type: redis, redis: {url: %q}}\npolicies:\n  - {name: api, match: /, anonymous: [{rate: 100/s, burst: 100}]}\n",
		"http://127.0.0.1:1", srv.URL()))
	status(t, gw.URL+"/a")
	post(t, gw.URL+"/a", "a body longer than four bytes") // a rejection, so that its counter has a series
	exported := map[string]bool{}
	for _, line := range strings.Split(scrape(t, admin.URL), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name := line[:strings.IndexAny(line, "{ ")]
		exported[name] = true
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(name, suffix); ok {
				exported[base] = true
			}
		}
	}
	files, _ := filepath.Glob(filepath.Join(deployDir, "prometheus", "*.yaml"))
	dashboards, _ := filepath.Glob(filepath.Join(deployDir, "grafana", "*.json"))
	if len(files) == 0 || len(dashboards) == 0 {
		t.Fatalf("deploy/ has rules %v and dashboards %v; want both", files, dashboards)
	}
	for _, f := range dashboards {
		var d struct {
			Panels []struct {
				Targets []struct{ Expr string }
			}
		}
		if err := json.Unmarshal([]byte(readAll(t, []string{f})), &d); err != nil || len(d.Panels) == 0 {
			t.Errorf("%s: not a dashboard with panels: %v", f, err)
		}
	}
	used := map[string][]string{}
	name := regexp.MustCompile(`\bsluice_[a-z0-9_]*[a-z0-9]`)
	for _, f := range append(files, dashboards...) {
		for _, n := range name.FindAllString(readAll(t, []string{f}), -1) {
			used[n] = append(used[n], filepath.Base(f))
		}
	}
	var missing []string
	for n, in := range used {
		if !exported[n] {
			missing = append(missing, fmt.Sprintf("%s (in %s)", n, strings.Join(dedupe(in), ", ")))
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("names no gateway exports:\n  %s", strings.Join(missing, "\n  "))
	}
	if len(used) < 10 {
		t.Errorf("only %d metric names found in deploy/: %v", len(used), used)
	}
}

func readAll(t *testing.T, files []string) string {
	t.Helper()
	var b strings.Builder
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(data)
	}
	return b.String()
}

func dedupe(s []string) []string {
	sort.Strings(s)
	out := s[:0]
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}
