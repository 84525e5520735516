package advise

import (
	"bytes"
	"fmt"
	"html"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

// The charts of the HTML report and of --chart-format svg are written here
// as SVG markup, not through a plotting library: the text names generic
// font families (so any renderer has a font for it) and is sized from a
// conservative estimate of its width, so that no renderer clips it; the
// axes are scaled to the data, and a proposal off the scale is marked by
// an arrow at the edge instead of stretching the axis.

// chartFont is the font stack of every text of a chart: common sans-serif
// faces, then the generic family every renderer has.
const chartFont = `system-ui, -apple-system, "Segoe UI", Roboto, "Liberation Sans", "DejaVu Sans", Arial, sans-serif`

// Chart geometry, in SVG user units.
const (
	chartW, chartH                  = 720, 320
	marginL, marginR                = 64, 24
	marginT, marginB                = 64, 52
	titleSize, labelSize, tickSize  = 15, 12, 11
	charWidth                       = 0.62 // estimated advance of a character, in ems: wide for sans-serif faces
	maxChartBars                    = 80   // counts are grouped into this many bars at most
	colorBars, colorRate, colorP99s = "#4a78c8", "#c81e1e", "#e09000"
)

// textWidth is the estimated width of s at size: generous, so that text
// placed by it stays inside the chart in any sans-serif face.
func textWidth(s string, size float64) float64 {
	return float64(len([]rune(s))) * size * charWidth
}

// fitText shortens s (an ellipsis in the middle) to fit width at size.
func fitText(s string, size, width float64) string {
	n := int(width / (size * charWidth))
	if n < 4 {
		n = 4
	}
	return clip(s, n)
}

// chartData is what a chart of a class draws: the distribution the
// proposal was read from, on the unit of the proposed rate's line.
//
// With the keys reading (the default) that is each caller's busiest
// minute, per minute: one count per caller that sizes the proposal, the
// rule's p99 across them, and the proposed rate × 60. With the samples
// reading (--statistic samples) it is the (key, second) samples, per
// second, their p99 and the rate. Either way the line sits where the
// rule puts it: the points right of it are the ones the subtitle says
// exceed it.
type chartData struct {
	bins      []Bin   // by increasing count
	unit      string  // "/m" or "/s"
	noun      string  // what one point is: "caller" or "(key, second) sample"
	axis      string  // the x axis's label
	p99       uint32  // the percentile the rule reads, on the same unit
	p99Label  string  // its name in the legend
	rate      float64 // the proposed rate, on the same unit
	rateLabel string
	summary   string // the subtitle, before what the axis leaves out
	points    uint64 // the points drawn and beyond the axis
	above     uint64 // of them, those above the rate
}

// chartOf is the data of the chart of c.
func chartOf(c ClassReport) chartData {
	rateLabel := fmt.Sprintf("proposed rate %s, burst %d", c.Rate, c.Proposal.Burst)
	if c.Proposal.Basis == "keys" && len(c.PeakMinutes) > 0 {
		d := chartData{bins: c.PeakMinutes, unit: "/m", noun: "caller",
			axis:      "busiest minute of one caller, in requests; bars: how many callers, log scale",
			p99:       c.Keys.PeakMinuteP99,
			p99Label:  fmt.Sprintf("p99 of callers' busiest minute %d/m", c.Keys.PeakMinuteP99),
			rate:      perMinuteOf(c.Proposal.Rate),
			rateLabel: rateLabel,
			above:     uint64(c.Keys.AboveRate),
		}
		for _, b := range d.bins {
			d.points += b.Freq
		}
		d.summary = fmt.Sprintf("%d callers sizing the proposal (%d set apart, not drawn); %d above the proposed rate (%.1f%%)",
			d.points, c.Keys.SetApart, d.above, pct(int64(d.above), int64(d.points)))
		return d
	}
	d := chartData{bins: c.Histogram, unit: "/s", noun: "(key, second) sample",
		axis:      "requests in one second by one key; bars: how many (key, second) samples, log scale",
		p99:       c.PerSecond.P99,
		p99Label:  fmt.Sprintf("p99 of samples %d/s", c.PerSecond.P99),
		rate:      c.Proposal.Rate,
		rateLabel: rateLabel,
	}
	for _, b := range d.bins {
		d.points += b.Freq
		if float64(b.Count) > d.rate {
			d.above += b.Freq
		}
	}
	d.summary = fmt.Sprintf("%d (key, second) samples, %d requests; p99 %d/s, max %d/s", d.points, c.PerSecond.Requests, c.PerSecond.P99, c.PerSecond.Max)
	return d
}

// chartScale is the extent of the x axis: the counts up to the 99.9th
// percentile of the points (at least the p99 and a few counts), and the
// proposed rate when it is within twice that, so the data fills the chart.
func chartScale(d chartData) (xmax int) {
	var total uint64
	for _, b := range d.bins {
		total += b.Freq
	}
	var cum uint64
	q := 0
	for _, b := range d.bins {
		cum += b.Freq
		q = int(b.Count)
		if float64(cum) >= 0.999*float64(total) {
			break
		}
	}
	xmax = max(q, int(d.p99)+1, 4)
	if r := d.rate; r > float64(xmax) && r <= 2*float64(xmax) {
		xmax = int(math.Ceil(r))
	}
	return xmax + max(1, xmax/10)
}

// barGroups groups the counts 0..xmax into at most about maxChartBars
// bars of w counts each, aligned so that no bar holds counts on both
// sides of rate: every count up to rate is in a bar left of the line,
// every count above it in a bar right of it. off is the first count of
// bar 1 (bar 0 holds the counts below it).
func barGroups(xmax int, rate float64) (w, off int) {
	w = max(1, (xmax+maxChartBars-1)/maxChartBars)
	if rate >= 0 && rate < float64(xmax) {
		off = int(math.Floor(rate)+1) % w
	}
	return w, off
}

// svgChart returns the chart of class c (chartOf): the distribution the
// proposal was read from, on a log scale, with the proposed rate and the
// p99 the rule reads as vertical lines, and the number of points and of
// those above the rate in the subtitle. standalone adds the XML
// namespace, for a file of its own.
func svgChart(c ClassReport, standalone bool) string {
	d := chartOf(c)
	var b bytes.Buffer
	ns := ""
	if standalone {
		ns = ` xmlns="http://www.w3.org/2000/svg"`
	}
	fmt.Fprintf(&b, `<svg%s viewBox="0 0 %d %d" width="%d" height="%d" role="img" font-family="%s">`, ns, chartW, chartH, chartW, chartH, html.EscapeString(chartFont))
	b.WriteString("\n")
	fmt.Fprintf(&b, `<rect x="0" y="0" width="%d" height="%d" fill="#ffffff"/>`+"\n", chartW, chartH)
	text := func(x, y float64, size int, anchor, fill, weight, s string) {
		fmt.Fprintf(&b, `<text x="%s" y="%s" font-size="%d" text-anchor="%s" fill="%s"`, num(x), num(y), size, anchor, fill)
		if weight != "" {
			fmt.Fprintf(&b, ` font-weight="%s"`, weight)
		}
		fmt.Fprintf(&b, ">%s</text>\n", html.EscapeString(xmlText(s)))
	}
	inner := float64(chartW - 16)
	title := fmt.Sprintf("%s, %s callers", c.Match, c.Caller)
	text(8, 20, titleSize, "start", "#111111", "bold", fitText(title, titleSize*1.1, inner))

	xmax := chartScale(d)
	var beyond uint64
	for _, b := range d.bins {
		if int(b.Count) > xmax {
			beyond += b.Freq
		}
	}
	sub := d.summary
	if beyond > 0 {
		sub += fmt.Sprintf("; %d %ss beyond the axis", beyond, d.noun)
	}
	text(8, 38, labelSize, "start", "#333333", "", fitText(sub, labelSize, inner))

	x0, x1 := float64(marginL), float64(chartW-marginR)
	y0, y1 := float64(chartH-marginB), float64(marginT)
	// bars: counts grouped into bars of w counts, bar i from off+(i-1)·w
	w, off := barGroups(xmax, d.rate)
	first := func(i int) int { return max(0, off+(i-1)*w) }
	nbars := (xmax-off)/w + 2
	grouped := make([]uint64, nbars)
	var peak uint64
	for _, bin := range d.bins {
		if int(bin.Count) > xmax {
			continue
		}
		i := (int(bin.Count)-off)/w + 1
		if int(bin.Count) < off {
			i = 0
		}
		grouped[i] += bin.Freq
		peak = max(peak, grouped[i])
	}
	decades := 1
	if peak > 0 {
		decades = max(1, int(math.Ceil(math.Log10(float64(peak))+1e-9)))
	}
	lo := math.Log10(0.5) // a single point still shows as a bar
	ypos := func(f float64) float64 {
		return y0 - (math.Log10(f)-lo)/(float64(decades)-lo)*(y0-y1)
	}
	xpos := func(v float64) float64 { return x0 + (v+0.5)/float64(xmax+1)*(x1-x0) } // count v at the middle of its bar
	// grid and y ticks at powers of ten
	for dec := 0; dec <= decades; dec++ {
		y := ypos(math.Pow(10, float64(dec)))
		fmt.Fprintf(&b, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#dddddd" stroke-width="1"/>`+"\n", num(x0), num(y), num(x1), num(y))
		text(x0-6, y+4, tickSize, "end", "#333333", "", powerOfTen(dec))
	}
	for i, f := range grouped {
		if f == 0 {
			continue
		}
		from, to := first(i), min(off+i*w-1, xmax)
		left, right := xpos(float64(from)-0.5), xpos(float64(to)+0.5)
		y := ypos(float64(f))
		fmt.Fprintf(&b, `<rect x="%s" y="%s" width="%s" height="%s" fill="%s"><title>%s</title></rect>`+"\n",
			num(left+0.5), num(y), num(math.Max(right-left-1, 0.8)), num(y0-y), colorBars, html.EscapeString(barLabel(from, to, f, d)))
	}
	// axes
	fmt.Fprintf(&b, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#333333" stroke-width="1"/>`+"\n", num(x0), num(y0), num(x1), num(y0))
	fmt.Fprintf(&b, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#333333" stroke-width="1"/>`+"\n", num(x0), num(y0), num(x0), num(y1))
	step := niceStep(float64(xmax+1) / 8)
	for v := 0.0; v <= float64(xmax); v += step {
		x := xpos(v)
		fmt.Fprintf(&b, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#333333" stroke-width="1"/>`+"\n", num(x), num(y0), num(x), num(y0+4))
		text(x, y0+17, tickSize, "middle", "#333333", "", strconv.FormatFloat(v, 'f', -1, 64))
	}
	text((x0+x1)/2, float64(chartH-10), labelSize, "middle", "#333333", "", d.axis)
	// the lines: the p99 the rule reads and the proposed rate, between
	// the bars of the counts up to them and those above (x of a count c
	// is its bar's middle; the line at a rate r is at r + 0.5, right of
	// the bar of ⌊r⌋)
	legendY := 54.0
	legendX := x0
	mark := func(v float64, label, color, dash, class string) {
		if v <= float64(xmax) {
			x := xpos(math.Floor(v) + 0.5)
			fmt.Fprintf(&b, `<line class="%s" x1="%s" y1="%s" x2="%s" y2="%s" stroke="%s" stroke-width="2"%s/>`+"\n", class, num(x), num(y0), num(x), num(y1), color, dash)
		} else {
			// off the scale: an arrow at the right edge, the value in the legend
			fmt.Fprintf(&b, `<path class="%s" d="M%s %s l-10 -6 v12 z" fill="%s"/>`+"\n", class, num(x1), num(y1+10), color)
			label += " (off the scale →)"
		}
		fmt.Fprintf(&b, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="%s" stroke-width="2"%s/>`+"\n", num(legendX), num(legendY-4), num(legendX+18), num(legendY-4), color, dash)
		text(legendX+22, legendY, labelSize, "start", "#111111", "", label)
		legendX += 22 + textWidth(label, labelSize) + 16
	}
	mark(float64(d.p99), d.p99Label, colorP99s, ` stroke-dasharray="6 3"`, "p99")
	if d.rate > 0 {
		mark(d.rate, d.rateLabel, colorRate, "", "rate")
	}
	b.WriteString("</svg>\n")
	return b.String()
}

func barLabel(from, to int, f uint64, d chartData) string {
	noun := d.noun + "s"
	if f == 1 {
		noun = d.noun
	}
	if from == to {
		return fmt.Sprintf("%d%s: %d %s", from, d.unit, f, noun)
	}
	return fmt.Sprintf("%d-%d%s: %d %s", from, to, d.unit, f, noun)
}

// powerOfTen writes 10^d shortly: 1, 10, 100, 1000, 10k, 100k, 1M...
func powerOfTen(d int) string {
	switch {
	case d < 4:
		return strconv.Itoa(int(math.Pow(10, float64(d))))
	case d < 6:
		return strconv.Itoa(int(math.Pow(10, float64(d-3)))) + "k"
	case d < 9:
		return strconv.Itoa(int(math.Pow(10, float64(d-6)))) + "M"
	}
	return "1e" + strconv.Itoa(d)
}

// xmlText replaces what XML 1.0 cannot hold (invalid UTF-8, control
// characters) with U+FFFD, so a renderer's parser takes any log's text.
func xmlText(s string) string {
	return strings.Map(func(r rune) rune {
		if r == utf8.RuneError || r < 0x20 && r != '\t' && r != '\n' || r >= 0x7f && r < 0xa0 || r == 0xfffe || r == 0xffff {
			return utf8.RuneError
		}
		return r
	}, strings.ToValidUTF8(s, "\uFFFD"))
}

// niceStep rounds s up to 1, 2 or 5 times a power of ten.
func niceStep(s float64) float64 {
	if s <= 1 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(s)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= s {
			return m * p
		}
	}
	return 10 * p
}

// num formats a coordinate with at most two decimals, the same on every
// platform.
func num(v float64) string { return strconv.FormatFloat(math.Round(v*100)/100, 'f', -1, 64) }
