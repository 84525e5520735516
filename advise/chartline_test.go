package advise

import (
	"encoding/xml"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
)

// svgBars reads a chart back: each bar's left and right edge and its
// number of points (from its title), and the x of the line of the given
// class ("rate" or "p99"); ok is false when that line is off the scale.
func svgBars(t *testing.T, svg, line string) (bars [][3]float64, x float64, ok bool) {
	t.Helper()
	var doc struct {
		Rects []struct {
			X     float64 `xml:"x,attr"`
			W     float64 `xml:"width,attr"`
			Title string  `xml:"title"`
		} `xml:"rect"`
		Lines []struct {
			Class string  `xml:"class,attr"`
			X1    float64 `xml:"x1,attr"`
		} `xml:"line"`
	}
	if err := xml.Unmarshal([]byte(svg), &doc); err != nil {
		t.Fatal(err)
	}
	count := regexp.MustCompile(`: (\d+) `)
	for _, r := range doc.Rects {
		if r.Title == "" {
			continue // the background
		}
		m := count.FindStringSubmatch(r.Title)
		if m == nil {
			t.Fatalf("bar title %q has no count", r.Title)
		}
		n, _ := strconv.ParseFloat(m[1], 64)
		bars = append(bars, [3]float64{r.X, r.X + r.W, n})
	}
	for _, l := range doc.Lines {
		if l.Class == line {
			return bars, l.X1, true
		}
	}
	return bars, 0, false
}

// rightOf is how many points the bars right of x hold; it fails the test
// when a bar straddles x.
func rightOf(t *testing.T, bars [][3]float64, x float64) (right, total float64) {
	t.Helper()
	for _, b := range bars {
		total += b[2]
		switch {
		case b[0] >= x:
			right += b[2]
		case b[1] > x:
			t.Errorf("a bar from %.2f to %.2f straddles the line at %.2f", b[0], b[1], x)
		}
	}
	return right, total
}

// TestChartLineWhereTheRuleIs: the chart draws the distribution the rate
// is read from, on the rate's unit, so that its line sits where the rule
// puts it (issue #27, item 9: class / was drawn as per-second samples
// with its 14/m rate at 0.23/s, left of nearly all of them). On the real
// logs, for every class read across keys, the share of the drawn points
// right of the proposed rate's line is the share of callers the report
// says are above the rate (within one point), and right of the p99 line
// lie no more callers than the rule's rank leaves above it. On a made-up
// class with the rate in the middle of wide, grouped data, the same holds
// exactly, and no bar straddles a line.
func TestChartLineWhereTheRuleIs(t *testing.T) {
	t.Parallel()
	dir := realLogs(t)
	checked := 0
	for _, name := range realLogNames {
		rep, err := Run(Options{Inputs: []string{filepath.Join(dir, name)}, MaxClasses: 200, MaxPolicies: 10, MinShare: 0.01, Top: 5, NoReplay: true})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range rep.Classes {
			if c.Proposal.Basis != "keys" || c.Keys.Normal == 0 {
				continue
			}
			svg := svgChart(c, true)
			bars, x, ok := svgBars(t, svg, "rate")
			if !ok {
				continue // off the scale: no caller above it is drawn
			}
			right, total := rightOf(t, bars, x)
			if total != float64(c.Keys.Normal) {
				t.Errorf("%s %s: %v callers drawn, %d size the proposal", name, c.Match, total, c.Keys.Normal)
			}
			stated := float64(c.Keys.AboveRate) / float64(c.Keys.Normal)
			if d := right/total - stated; d > 0.01 || d < -0.01 {
				t.Errorf("%s %s (rate %s): %.1f%% of the callers drawn right of the rate's line, the report says %.1f%% are above it",
					name, c.Match, c.Rate, 100*right/total, 100*stated)
			}
			if bars, x, ok := svgBars(t, svg, "p99"); ok {
				right, total := rightOf(t, bars, x)
				if n := c.Keys.Normal; right > float64(n-callerRank(n)) {
					t.Errorf("%s %s: %v of %v callers drawn right of the p99 line at %d/m: the rule's rank leaves %d above it",
						name, c.Match, right, total, c.Keys.PeakMinuteP99, n-callerRank(n))
				}
			}
			checked++
		}
	}
	if checked < 5 {
		t.Errorf("%d classes checked: want most of the real logs' classes", checked)
	}

	// wide data, grouped into bars, with the rate inside it
	c := ClassReport{Match: "GET /wide", Caller: "anonymous", Rate: "139/m",
		Proposal: Proposal{Basis: "keys", Rate: 139.0 / 60, Burst: 20}}
	for i := uint32(1); i <= 400; i++ {
		c.PeakMinutes = append(c.PeakMinutes, Bin{i, uint64(1 + i%3)})
		c.Keys.Normal += 1 + int(i%3)
	}
	c.Keys.PeakMinuteP99 = 396
	_, c.Keys.AboveRate = peakMinutesOfBins(c.PeakMinutes, c.Proposal.Rate)
	svg := svgChart(c, true)
	checkSVG(t, c.Match, svg)
	bars, x, ok := svgBars(t, svg, "rate")
	if !ok || len(bars) > maxChartBars+3 || len(bars) < 10 {
		t.Fatalf("the rate's line is off the scale (%v) or %d bars", !ok, len(bars))
	}
	right, total := rightOf(t, bars, x)
	if right != float64(c.Keys.AboveRate) || total != float64(c.Keys.Normal) {
		t.Errorf("%v of %v callers drawn right of 139/m; %d of %d are above it", right, total, c.Keys.AboveRate, c.Keys.Normal)
	}
}

// peakMinutesOfBins counts the callers of bins above rate (per second).
func peakMinutesOfBins(bins []Bin, rate float64) (total, above int) {
	for _, b := range bins {
		total += int(b.Freq)
		if float64(b.Count) > rate*60 {
			above += int(b.Freq)
		}
	}
	return total, above
}
