package advise

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestChartScaledToData: an outlier far out and a proposal far above the
// data do not stretch the axis; the proposal is marked off the scale and
// the samples beyond the axis are counted.
func TestChartScaledToData(t *testing.T) {
	c := ClassReport{Match: "GET /x", Caller: "anonymous", Policy: "get-x", Rate: "500/s",
		Proposal:  Proposal{Rate: 500, Burst: 2500},
		PerSecond: Dist{Samples: 10003, Requests: 20000, P99: 4, Max: 9000},
		Histogram: []Bin{{1, 6000}, {2, 3000}, {3, 900}, {4, 90}, {5, 10}, {7, 2}, {9000, 1}}}
	if x := chartScale(chartOf(c)); x < 5 || x > 10 { // the 99.9th percentile is 5
		t.Errorf("x axis to %d: want the data's extent, about 5", x)
	}
	svg := svgChart(c, true)
	checkSVG(t, c.Match, svg)
	for _, want := range []string{"off the scale", "3 (key, second) samples beyond the axis", "10003 (key, second) samples"} {
		if !strings.Contains(svg, want) {
			t.Errorf("chart lacks %q", want)
		}
	}
	// a proposal just above the data widens the axis to show it
	c.Proposal.Rate, c.Rate = 9, "9/s"
	if x := chartScale(chartOf(c)); x < 9 {
		t.Errorf("x axis to %d: the rate 9/s, within twice the data, should be on it", x)
	}
	if svg := svgChart(c, true); strings.Contains(svg, "off the scale") {
		t.Error("a rate on the scale is marked off it")
	}
	// a very long pattern is shortened, not clipped
	c.Match = "GET /" + strings.Repeat("verylongsegment/", 40) + "{id}"
	checkSVG(t, "long", svgChart(c, true))
	// bytes XML cannot hold, from a log, still make a chart XML parsers take
	c.Match = "GET /a\x01b\xff\xfe/\u0085c"
	svg = svgChart(c, true)
	checkSVG(t, "control characters", svg)
	if !utf8.ValidString(svg) || strings.ContainsAny(svg, "\x01\u0085") {
		t.Error("the chart holds invalid UTF-8 or control characters")
	}
	// many counts: bars are grouped, the chart stays small
	c.Histogram = nil
	for i := 1; i <= 3000; i++ {
		c.Histogram = append(c.Histogram, Bin{uint32(i), 5})
	}
	c.PerSecond.P99 = 2970
	svg = svgChart(c, true)
	checkSVG(t, "wide", svg)
	if n := strings.Count(svg, "<rect"); n > maxChartBars+3 {
		t.Errorf("%d rects: bars are not grouped", n)
	}
}

// TestHTMLCommand runs the command with --html and bad --what-if values.
func TestHTMLCommand(t *testing.T) {
	path := writeEvents(t, "abuse.log", abuseEvents(true))
	out := filepath.Join(t.TempDir(), "r.html")
	var stdout, stderr strings.Builder
	if code := Command([]string{"--html", out, "--no-replay", path}, nil, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	checkTags(t, doc)
	if !strings.Contains(doc, "GET /products/{id}") || !strings.Contains(doc, "not replayed") || strings.Contains(doc, "what if") {
		t.Error("--no-replay report: want the class, 'not replayed', and no what-if table")
	}
	if !strings.Contains(doc, "203.0.113.66") {
		t.Error("the flood key is neither in the tail nor set apart")
	}
	if code := Command([]string{"--html", out, "--what-if", "-1", path}, nil, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), "--what-if") {
		t.Errorf("--what-if -1: exit %d, %s", code, stderr.String())
	}
	if code := Command([]string{"--html", filepath.Join(t.TempDir(), "no", "such", "dir.html"), path}, nil, &stdout, &stderr); code != 1 || !strings.Contains(stderr.String(), "html report") {
		t.Errorf("--html into a missing directory: exit %d, %s", code, stderr.String())
	}
}
