package advise

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/loggen"
)

// TestLegitimateShareShown stands for the scientific data API of issue #27
// (item 4): 1,000 browsers of GET /api/data at 1 to 4 requests a minute, six
// scripted data clients at 30 a minute all the time (below the outlier
// rule: legitimate), and a scanner answered 404 (set apart). The proposal
// follows the browsers and denies much of the scripts' traffic: the share
// of callers affected is small, the share of legitimate requests is not.
// The report gives that share, counted without the scanner's requests, in
// the JSON, the table, the HTML report and the configuration's comments,
// and flags the class.
func TestLegitimateShareShown(t *testing.T) {
	t.Parallel()
	var browsers []loggen.Event
	for i := range 1000 {
		ip := fmt.Sprintf("10.5.%d.%d", i/250, i%250)
		for m := range 5 {
			for j := range 1 + i%4 {
				browsers = append(browsers, ev(t0+int64(m*60+j*9+i%7), "GET", "/api/data", ip, ""))
			}
		}
	}
	evs := slices.Clone(browsers)
	for i := range 6 {
		ip := fmt.Sprintf("192.0.2.%d", 100+i)
		for s := range 5 * 60 / 2 {
			evs = append(evs, ev(t0+int64(2*s), "GET", "/api/data", ip, ""))
		}
	}
	scanner := 0
	for s := range 5 * 60 {
		e := ev(t0+int64(s), "GET", "/api/data", "198.51.100.9", "")
		e.Status = 404
		evs = append(evs, e)
		scanner++
	}
	dir := t.TempDir()
	cfg, html := filepath.Join(dir, "sluice.yaml"), filepath.Join(dir, "report.html")
	rep, err := Run(Options{Inputs: []string{writeEvents(t, "data-api.log", evs)}, MaxClasses: 10, Top: 200, OutConfig: cfg, HTML: html})
	if err != nil {
		t.Fatal(err)
	}
	c := classWith(t, rep, "/api/data")
	if c.Keys.SetApart != 1 || c.Replay == nil {
		t.Fatalf("keys %+v, replay %+v: want the scanner alone set apart, and a replay", c.Keys, c.Replay)
	}
	var legitRejected, scannerRejected int64
	for _, k := range c.Replay.Top {
		if k.Key == "198.51.100.9" {
			scannerRejected = k.Rejected
		} else {
			legitRejected += k.Rejected
		}
	}
	if scannerRejected == 0 {
		t.Errorf("the scanner was not limited: %+v", c.Replay.Top)
	}
	if c.Replay.Legitimate != int64(len(evs)-scanner) || c.Replay.LegitimateRejected != legitRejected {
		t.Errorf("legitimate %d, %d rejected; want %d, %d (the keys' rejections less the scanner's)", c.Replay.Legitimate, c.Replay.LegitimateRejected, len(evs)-scanner, legitRejected)
	}
	share := 100 * float64(legitRejected) / float64(len(evs)-scanner)
	if c.Replay.LegitimateShare != share || share < 2 || !c.Replay.TooStrict {
		t.Errorf("legitimate share %v%% (too strict %v), want %v%%, above 2%% and flagged", c.Replay.LegitimateShare, c.Replay.TooStrict, share)
	}
	if keyShare := 100 * float64(c.Replay.RejectedKeys) / float64(c.Keys.Keys); keyShare > 10 {
		t.Errorf("%.1f%% of the callers limited: the case is one where few callers are hit", keyShare)
	}
	want := fmt.Sprintf("%.1f%%", share)
	var table bytes.Buffer
	if err := writeTable(&table, rep); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(table.String(), want+"!") {
		t.Errorf("the table does not show %s! for the class:\n%s", want, table.String())
	}
	noted := false
	for _, n := range rep.Notes {
		noted = noted || strings.Contains(n, want) && strings.Contains(n, "not set apart")
	}
	if !noted {
		t.Errorf("no note of the legitimate requests refused in %q", rep.Notes)
	}
	for path, text := range map[string]string{html: want + " !", cfg: want + " of the legitimate requests"} {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), text) {
			t.Errorf("%s does not say %q", filepath.Base(path), text)
		}
	}

	// the browsers alone: within the bound
	clean, err := Run(Options{Inputs: []string{writeEvents(t, "browsers.log", browsers)}, MaxClasses: 10})
	if err != nil {
		t.Fatal(err)
	}
	if cc := classWith(t, clean, "/api/data"); cc.Replay == nil || cc.Replay.TooStrict || cc.Replay.LegitimateShare > maxLegitDenied {
		t.Errorf("the browsers alone: replay %+v, want within %v%%", cc.Replay, maxLegitDenied)
	}
}
