package advise

import (
	"context"
	"fmt"
	"image"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// The HTML report of a real log, rendered by the programs a reader and
// CI have: headless Chromium for the page, rsvg-convert for the charts
// alone. scripts/ensure-renderers.sh installs both; these tests are never
// skipped. SLUICE_SCREENSHOT_DIR keeps the report and the screenshot.

// needBinary fails the test when name is not on the PATH.
func needBinary(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s is not on the PATH: run scripts/ensure-renderers.sh (as root it installs chromium and librsvg2-bin), or apt-get install chromium librsvg2-bin", name)
	}
	return p
}

func decodePNG(t *testing.T, path string) image.Image {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return img
}

// near reports whether the pixel at (x, y) is within tol of r, g, b.
func near(img image.Image, x, y int, r, g, b, tol int) bool {
	pr, pg, pb, _ := img.At(x, y).RGBA()
	d := func(a uint32, b int) bool { v := int(a>>8) - b; return v >= -tol && v <= tol }
	return d(pr, r) && d(pg, g) && d(pb, b)
}

func dark(img image.Image, x, y int) bool {
	r, g, b, _ := img.At(x, y).RGBA()
	return (r>>8)+(g>>8)+(b>>8) < 3*90
}

// count is the number of pixels of img in rect for which f holds.
func count(img image.Image, rect image.Rectangle, f func(x, y int) bool) int {
	n := 0
	for y := rect.Min.Y; y < rect.Max.Y; y++ {
		for x := rect.Min.X; x < rect.Max.X; x++ {
			if f(x, y) {
				n++
			}
		}
	}
	return n
}

func realReport(t *testing.T) (string, *Report) {
	t.Helper()
	dir := os.Getenv("SLUICE_SCREENSHOT_DIR")
	if dir == "" {
		dir = t.TempDir()
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "apache_combined_2015.html")
	rep, err := Run(Options{Inputs: []string{filepath.Join(realLogs(t), "apache_combined_2015.log")}, HTML: out, WhatIf: DefaultWhatIf, MaxClasses: 200, Top: 5, MinSamples: 100})
	if err != nil {
		t.Fatal(err)
	}
	return out, rep
}

// TestHTMLRendersInChromium takes a screenshot of the report of a real
// log in headless Chromium and checks that its first screen shows the
// summary table and a chart: text at the top, the table's header cells,
// the chart's bars.
func TestHTMLRendersInChromium(t *testing.T) {
	chromium := needBinary(t, "chromium")
	report, _ := realReport(t)
	shot := filepath.Join(filepath.Dir(report), "apache_combined_2015.png")
	var out []byte
	var err error
	for attempt := range 3 { // a loaded machine can starve a browser: retry the rendering, not the checks
		os.Remove(shot)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		cmd := exec.CommandContext(ctx, chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
			"--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
			"--user-data-dir="+t.TempDir(), "--screenshot="+shot, "--window-size=1280,2000", "file://"+report)
		cmd.Dir = t.TempDir()
		out, err = cmd.CombinedOutput()
		cancel()
		if _, serr := os.Stat(shot); err == nil && serr == nil {
			break
		}
		t.Logf("chromium, attempt %d: %v", attempt+1, err)
	}
	if err != nil {
		t.Fatalf("chromium: %v\n%s", err, out)
	}
	img := decodePNG(t, shot)
	b := img.Bounds()
	t.Logf("screenshot %s: %dx%d", shot, b.Dx(), b.Dy())
	if b.Dx() != 1280 || b.Dy() != 2000 {
		t.Fatalf("screenshot is %v, want 1280x2000", b)
	}
	if n := count(img, image.Rect(0, 0, b.Dx(), 120), func(x, y int) bool { return dark(img, x, y) }); n < 500 {
		t.Errorf("%d dark pixels in the top 120 rows: want the title and the first lines of text", n)
	}
	header := count(img, b, func(x, y int) bool { return near(img, x, y, 0xee, 0xf2, 0xf8, 2) })
	if header < 5000 {
		t.Errorf("%d pixels of the summary's header colour: the summary table is not on the first screen", header)
	}
	bars := count(img, b, func(x, y int) bool { return near(img, x, y, 0x4a, 0x78, 0xc8, 6) })
	if bars < 2000 {
		t.Errorf("%d pixels of the bars' colour: no chart on the first screen", bars)
	}
	if n := count(img, b, func(x, y int) bool { return near(img, x, y, 0xc8, 0x1e, 0x1e, 20) }); n < 50 {
		t.Errorf("%d pixels of the proposed rate's colour: no rate line on the first screen", n)
	}
}

var svgRe = regexp.MustCompile(`(?s)<svg .*?</svg>`)

// TestChartsRenderWithRsvg renders charts of the real log's report with
// rsvg-convert, a renderer other than a browser, and checks each is the
// chart's size and no text touches its edges (clipped text would); every
// chart's texts are checked inside the view box by their estimated width.
func TestChartsRenderWithRsvg(t *testing.T) {
	rsvg := needBinary(t, "rsvg-convert")
	report, rep := realReport(t)
	data, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	svgs := svgRe.FindAllString(string(data), -1)
	if len(svgs) != len(rep.Classes) {
		t.Fatalf("%d charts in the report for %d classes", len(svgs), len(rep.Classes))
	}
	for i, c := range rep.Classes {
		checkSVG(t, c.Match, svgChart(c, true))
		if !strings.Contains(svgs[i], ">"+escapeText(c.Match)+", "+c.Caller+" callers<") && !strings.Contains(svgs[i], "…") {
			t.Errorf("chart %d is not that of %s %s", i, c.Match, c.Caller)
		}
	}
	// Render the busiest dozen, the puppet class and the one with the
	// longest title; all 235 take too long on a loaded machine.
	pick := map[int]bool{}
	longest := 0
	for i, c := range rep.Classes {
		if i < 12 || c.Match == "GET /blog/tags/puppet" {
			pick[i] = true
		}
		if len(c.Match) > len(rep.Classes[longest].Match) {
			longest = i
		}
	}
	pick[longest] = true
	dir := t.TempDir()
	for i := range pick {
		svg := strings.Replace(svgs[i], "<svg ", `<svg xmlns="http://www.w3.org/2000/svg" `, 1)
		in, out := filepath.Join(dir, fmt.Sprintf("c%d.svg", i)), filepath.Join(dir, fmt.Sprintf("c%d.png", i))
		if err := os.WriteFile(in, []byte(svg), 0o644); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		o, err := exec.CommandContext(ctx, rsvg, "-o", out, in).CombinedOutput()
		cancel()
		if err != nil || len(o) > 0 {
			t.Fatalf("rsvg-convert %s (%s): %v\n%s", in, rep.Classes[i].Match, err, o)
		}
		img := decodePNG(t, out)
		b := img.Bounds()
		if b.Dx() != chartW || b.Dy() != chartH {
			t.Errorf("%s: rendered %v, want %dx%d", rep.Classes[i].Match, b, chartW, chartH)
		}
		edge := func(x, y int) bool {
			return (x < 2 || y < 2 || x >= b.Dx()-2 || y >= b.Dy()-2) && dark(img, x, y)
		}
		if n := count(img, b, edge); n > 0 {
			t.Errorf("%s: %d dark pixels on the edges of the chart: clipped text", rep.Classes[i].Match, n)
		}
		if n := count(img, b, func(x, y int) bool { return dark(img, x, y) }); n < 300 {
			t.Errorf("%s: %d dark pixels: the text did not render", rep.Classes[i].Match, n)
		}
		if n := count(img, b, func(x, y int) bool { return near(img, x, y, 0x4a, 0x78, 0xc8, 6) }); n < 100 {
			t.Errorf("%s: %d pixels of bars", rep.Classes[i].Match, n)
		}
	}
}

// escapeText is s as the charts write text.
func escapeText(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&#34;", "'", "&#39;").Replace(s)
}
