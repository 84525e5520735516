package simulate

import (
	"fmt"
	"image/color"
	"io"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"

	"github.com/sluicehq/sluice"
)

// writeChart draws a scenario's admitted requests over time, one line per
// algorithm (in-memory runs; Redis decides the same), as a PNG.
func writeChart(w io.Writer, sc *Scenario, rule sluice.Rule, binSeconds float64) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("sluice simulate: %s, %s (window %v)", sc.Name, sc.Rule, sc.Window)
	p.X.Label.Text = "time (s)"
	p.Y.Label.Text = fmt.Sprintf("admitted per %gs", binSeconds)
	p.Legend.Top = true
	p.Add(plotter.NewGrid())
	i := 0
	for _, res := range sc.Results {
		if res.Backend != "memory" {
			continue
		}
		xys := make(plotter.XYs, len(res.perBin))
		for b, n := range res.perBin {
			xys[b].X = float64(b) * binSeconds
			xys[b].Y = float64(n)
		}
		line, err := plotter.NewLine(xys)
		if err != nil {
			return err
		}
		line.Color = plotutil.Color(i)
		line.Width = vg.Points(1.2)
		if i > 0 {
			line.Dashes = plotutil.Dashes(i)
		}
		p.Add(line)
		p.Legend.Add(res.Algorithm, line)
		i++
	}
	limit := plotter.NewFunction(func(float64) float64 { return rule.Rate * binSeconds })
	limit.Color = color.Gray{Y: 120}
	limit.Dashes = []vg.Length{vg.Points(2), vg.Points(2)}
	p.Add(limit)
	p.Legend.Add("rate × bin", limit)
	p.Legend.TextStyle.Font.Size = vg.Points(9)
	p.Legend.ThumbnailWidth = vg.Points(20)
	wt, err := p.WriterTo(9*vg.Inch, 4.5*vg.Inch, "png")
	if err != nil {
		return err
	}
	_, err = wt.WriteTo(w)
	return err
}
