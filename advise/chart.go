package advise

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// writeCharts writes one chart per class into dir: the distribution the
// proposal was read from (chartOf) on a log scale, with the p99 the rule
// reads and the proposed rate as vertical lines.
func writeCharts(dir, format string, rep *Report) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, c := range rep.Classes {
		name := filepath.Join(dir, c.Policy+"-"+c.Caller+"."+format)
		write := writeChart
		if format == "svg" {
			write = writeSVGChart
		}
		if err := write(name, c); err != nil {
			return fmt.Errorf("chart %s: %w", name, err)
		}
	}
	return nil
}

// writeSVGChart writes the chart of the HTML report as a file of its own:
// generic font families and text sized to fit (svgchart.go).
func writeSVGChart(path string, c ClassReport) error {
	return os.WriteFile(path, []byte(`<?xml version="1.0" encoding="UTF-8"?>`+"\n"+svgChart(c, true)), 0o644)
}

// writeChart writes the PNG chart of c: the same data as its SVG chart
// (chartOf), one bar per count.
func writeChart(path string, c ClassReport) error {
	d := chartOf(c)
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s, %s callers: %s", c.Match, c.Caller, c.Policy)
	p.Y.Label.Text = "share of " + d.noun + "s"
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	limit := float64(chartScale(d)) // the data's extent, not the proposal's
	p.X.Label.Text = d.axis
	var total float64
	maxCount := uint32(0)
	for _, b := range d.bins {
		total += float64(b.Freq)
		maxCount = max(maxCount, b.Count)
	}
	if float64(maxCount) > limit {
		p.X.Label.Text += fmt.Sprintf(" (cut at %.0f; max %d)", limit, maxCount)
	}
	if d.rate > limit {
		p.X.Label.Text += fmt.Sprintf(" (proposed rate %s off the scale)", c.Rate)
	}
	h := &plotter.Histogram{Width: 1, FillColor: color.RGBA{R: 80, G: 120, B: 200, A: 255}, LogY: true}
	h.LineStyle.Width = vg.Points(0.5)
	minShare := 1.0
	for _, b := range d.bins {
		if float64(b.Count) > limit {
			break
		}
		share := float64(b.Freq) / total
		minShare = math.Min(minShare, share)
		h.Bins = append(h.Bins, plotter.HistogramBin{Min: float64(b.Count) - 0.5, Max: float64(b.Count) + 0.5, Weight: share})
	}
	if len(h.Bins) == 0 {
		h.Bins = append(h.Bins, plotter.HistogramBin{Min: 0.5, Max: 1.5, Weight: 1})
	}
	p.Add(h)
	p.Legend.Add(d.noun+"s", h)
	lo := minShare / 2
	// a line at v sits between the bars of the counts up to v and above
	vline := func(v float64, label string, col color.Color, dashed bool) error {
		x := math.Floor(v) + 0.5
		l, err := plotter.NewLine(plotter.XYs{{X: x, Y: lo}, {X: x, Y: 1}})
		if err != nil {
			return err
		}
		l.Color = col
		l.Width = vg.Points(2)
		if dashed {
			l.Dashes = []vg.Length{vg.Points(6), vg.Points(3)}
		}
		p.Add(l)
		p.Legend.Add(label, l)
		return nil
	}
	if err := vline(float64(d.p99), d.p99Label, color.RGBA{R: 230, G: 150, A: 255}, true); err != nil {
		return err
	}
	if err := vline(d.rate, d.rateLabel, color.RGBA{R: 200, A: 255}, false); err != nil {
		return err
	}
	p.Legend.Top = true
	p.X.Min = 0
	p.X.Max = limit + 1
	p.Y.Min = lo
	p.Y.Max = 1.5
	return p.Save(20*vg.Centimeter, 12*vg.Centimeter, path)
}
