package advise

import (
	"bytes"
	"fmt"
	"html/template"
	"os"
	"strconv"
	"strings"
)

// The HTML report (--html) is one file a person reads: a summary table,
// then per class the chart of the distribution its rate was read from
// with the proposed rate (chartOf), the busiest keys, the keys set apart, and the replay with
// its what-ifs. It needs nothing else: the charts are inline SVG, the
// style is inline, there is no script. Everything read from the log goes
// through html/template, which escapes it for where it lands; the charts
// escape their text themselves. The timings of the run are left out, so
// the same input gives the same bytes.

type htmlReport struct {
	Rep     *Report
	Classes []htmlClass
	Top     []htmlClass // the busiest classes, in the summary table
	Rest    []htmlClass // the others, in a second table folded away
}

// summaryRows is how many classes the summary shows before folding the
// rest away, so the first chart follows on the first screen.
const summaryRows = 12

type htmlClass struct {
	ClassReport
	ID       string
	Chart    template.HTML
	Rejected string // the replay's rejections and their share, or why there is none
	Legit    string // the share of legitimate requests rejected, "–" without a replay
	WhatIf   []htmlWhatIf
}

type htmlWhatIf struct {
	Label, Rate  string
	Burst        int64
	Rejected     string
	RejectedKeys string // "≈" before an estimate
	Proposal     bool
}

func buildHTML(rep *Report, o Options) htmlReport {
	h := htmlReport{Rep: rep}
	seen := make(map[string]int)
	for _, c := range rep.Classes {
		id := "class-" + c.Policy + "-" + c.Caller
		seen[id]++
		if n := seen[id]; n > 1 {
			id += "-" + strconv.Itoa(n)
		}
		hc := htmlClass{ClassReport: c, ID: id, Chart: template.HTML(svgChart(c, false)), Legit: "–"}
		switch {
		case c.Replay != nil:
			hc.Rejected = fmt.Sprintf("%d (%.1f%%)", c.Replay.Rejected, pct(c.Replay.Rejected, c.Replay.Requests))
			hc.Legit = fmt.Sprintf("%.1f%%", c.Replay.LegitimateShare)
			if c.Replay.TooStrict {
				hc.Legit += " !"
			}
			rows := []WhatIf{{Factor: 1, Rate: c.Rate, Burst: c.Proposal.Burst, Rejected: c.Replay.Rejected, RejectedKeys: c.Replay.RejectedKeys}}
			for _, w := range c.Replay.WhatIf {
				if w.Factor != 1 { // the proposal itself is the first row
					rows = append(rows, w)
				}
			}
			slicesSortWhatIf(rows)
			for _, w := range rows {
				hc.WhatIf = append(hc.WhatIf, htmlWhatIf{
					Label: "×" + strconv.FormatFloat(w.Factor, 'f', -1, 64), Rate: w.Rate, Burst: w.Burst,
					Rejected:     fmt.Sprintf("%d (%.1f%%)", w.Rejected, pct(w.Rejected, c.Replay.Requests)),
					RejectedKeys: approx(w.Estimated) + strconv.Itoa(w.RejectedKeys), Proposal: w.Factor == 1,
				})
			}
		case !c.InConfig:
			hc.Rejected = "not in the configuration"
		default:
			hc.Rejected = "not replayed"
		}
		h.Classes = append(h.Classes, hc)
	}
	h.Top, h.Rest = h.Classes[:min(summaryRows, len(h.Classes))], h.Classes[min(summaryRows, len(h.Classes)):]
	return h
}

func approx(estimated bool) string {
	if estimated {
		return "≈"
	}
	return ""
}

// slicesSortWhatIf sorts by factor, stricter first (insertion sort: a
// handful of rows).
func slicesSortWhatIf(w []WhatIf) {
	for i := 1; i < len(w); i++ {
		for j := i; j > 0 && w[j].Factor < w[j-1].Factor; j-- {
			w[j], w[j-1] = w[j-1], w[j]
		}
	}
}

var htmlTmpl = template.Must(template.New("report").Funcs(template.FuncMap{
	"utc":      func(t interface{ Format(string) string }) string { return t.Format("2006-01-02 15:04:05 MST") },
	"join":     strings.Join,
	"inWindow": func(f FileLines) int64 { return f.Parsed - f.OutsideWindow },
	"pct":      func(a, b int64) string { return fmt.Sprintf("%.1f%%", pct(a, b)) },
	"clipk":    func(s string) string { return clip(s, 80) },
}).Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>sluice advise report</title>
<style>
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, "Liberation Sans", "DejaVu Sans", Arial, sans-serif; color: #111; background: #fff; margin: 24px; max-width: 1200px; line-height: 1.4; }
h1 { font-size: 24px; margin: 0 0 8px; }
h2 { font-size: 19px; margin: 28px 0 6px; border-top: 1px solid #ccc; padding-top: 14px; overflow-wrap: anywhere; }
h3 { font-size: 15px; margin: 14px 0 4px; }
table { border-collapse: collapse; font-size: 13px; margin: 6px 0; }
th, td { border: 1px solid #ccc; padding: 3px 7px; text-align: left; vertical-align: top; }
td.n, th.n { text-align: right; font-variant-numeric: tabular-nums; }
th { background: #eef2f8; }
tr.proposal td { font-weight: bold; }
code, .key { font-family: ui-monospace, "SFMono-Regular", Menlo, Consolas, "Liberation Mono", "DejaVu Sans Mono", monospace; overflow-wrap: anywhere; }
.meta { font-size: 14px; color: #333; }
.note { font-size: 13px; color: #6a4a00; }
svg { max-width: 100%; height: auto; display: block; margin: 8px 0; }
</style>
</head>
<body>
<h1>sluice advise report</h1>
<div class="meta">
<p>Read {{join .Rep.Inputs ", "}}: {{.Rep.Lines}} lines, {{.Rep.Malformed}} malformed{{if .Rep.OutsideWindow}}, {{.Rep.OutsideWindow}} outside the window{{end}}{{if .Rep.Unmatched}}, {{.Rep.Unmatched}} matching no policy{{end}}.
Window {{.Rep.Window}}: {{utc .Rep.WindowStart}} to {{utc .Rep.WindowEnd}}.
</p>
<table>
<thead><tr><th>file</th><th class="n">lines read</th><th class="n">parsed</th><th class="n">malformed</th><th class="n">outside the window</th><th class="n">in the window</th><th class="n">late</th></tr></thead>
<tbody>
{{range .Rep.Files}}<tr><td><code>{{.File}}</code></td><td class="n">{{.Lines}}</td><td class="n">{{.Parsed}}</td><td class="n">{{.Malformed}}</td><td class="n">{{.OutsideWindow}}</td><td class="n">{{inWindow .}}</td><td class="n">{{.Late}}</td></tr>
{{end}}</tbody>
</table>
<p>Lines read = parsed + malformed; parsed = outside the window (older than its start, in no class) + in the window; late lines are counted in the oldest second still open.
Lines counted in time order within {{.Rep.Order.ReorderSeconds}} s (the input came up to {{.Rep.Order.MaxLagSeconds}} s out of order{{if .Rep.Order.Reread}}, read again in time order{{end}}; {{.Rep.Order.Late}} lines later than that).</p>
<p>Per class (endpoint and caller kind), the proposal is rate = 2 × the p99 across keys of each key's busiest minute / 60 (never one of the busiest three keys'), and a burst from the bucket each key needs at that rate (the p99 of the keys), within 5–10 × rate or up to a minute of it, after setting apart the keys it would limit (mostly errors, already denied, or outliers). The replay runs the proposal on the log with its own timestamps on sluice's in-memory store; the what-ifs replay it with rate and burst scaled, in the same pass.</p>
</div>
<h2 id="summary">Summary</h2>
<p class="meta">{{len .Classes}} classes, busiest first{{if .Rest}}: the {{len .Top}} busiest here, all of them below the table{{end}}. {{if .Rep.Notes}}{{len .Rep.Notes}} <a href="#notes">notes</a> at the end.{{end}}</p>
{{template "summary" .Top}}
{{if .Rest}}<details><summary>the other {{len .Rest}} classes</summary>
{{template "summary" .Rest}}
</details>{{end}}
<p class="meta">* few samples: fewer (key, second) samples than --min-samples. ! few callers: sized on fewer than 12 callers, so that its busiest callers may still set it. Legitimate requests are those of the callers not set apart; ! after their share: more than 1% of them would be limited.</p>
{{range .Classes}}
<section id="{{.ID}}">
<h2><code>{{.Match}}</code>, {{.Caller}} callers (policy <code>{{.Policy}}</code>)</h2>
<p class="meta">{{.PerSecond.Requests}} requests from {{.Keys.Keys}} keys ({{.Keys.Normal}} sizing the proposal, {{.Keys.SetApart}} set apart); {{.PerSecond.Samples}} (key, second) samples: p50 {{.PerSecond.P50}}, p90 {{.PerSecond.P90}}, p99 {{.PerSecond.P99}}, max {{.PerSecond.Max}} per second; {{.PerMinute.Samples}} (key, minute) samples, p99 {{.PerMinute.P99}}, max {{.PerMinute.Max}} per minute.
{{if .InConfig}}Proposed: rate <strong>{{.Rate}}</strong>, burst <strong>{{.Proposal.Burst}}</strong> (from the p99 busiest minute {{.Keys.PeakMinuteP99}} of the keys, and the p99 {{.Keys.NeedP99}} of the bucket each key within the rate needs at it; their busiest second: p99 {{.Keys.PeakSecondP99}}).{{else}}Not in the configuration.{{end}}</p>
{{.Chart}}
{{if .Replay}}<h3>Replay</h3>
<p class="meta">{{.Replay.Requests}} requests from about {{.Replay.Keys}} keys replayed; the proposal would have limited {{.Rejected}} requests of {{.Replay.RejectedKeys}} distinct keys, and {{.Replay.LegitimateRejected}} of the {{.Replay.Legitimate}} requests of the callers not set apart ({{.Legit}} of the legitimate requests).</p>
<table>
<thead><tr><th>what if</th><th class="n">rate</th><th class="n">burst</th><th class="n">requests limited</th><th class="n">distinct keys limited</th></tr></thead>
<tbody>
{{range .WhatIf}}<tr{{if .Proposal}} class="proposal"{{end}}><td>{{.Label}}{{if .Proposal}} (the proposal){{end}}</td><td class="n">{{.Rate}}</td><td class="n">{{.Burst}}</td><td class="n">{{.Rejected}}</td><td class="n">{{.RejectedKeys}}</td></tr>
{{end}}</tbody>
</table>
{{if .Replay.Top}}<h3>Keys the replay limited most</h3>
<table><thead><tr><th>key</th><th class="n">requests limited</th></tr></thead><tbody>
{{range .Replay.Top}}<tr><td class="key">{{clipk .Key}}</td><td class="n">{{.Rejected}}</td></tr>
{{end}}</tbody></table>{{end}}{{end}}
{{if .Tail}}<h3>Keys in the tail (busiest minute first)</h3>
<table><thead><tr><th>key</th><th class="n">requests</th><th class="n">errors</th><th class="n">of them excused</th><th class="n">429s</th><th class="n">busiest minute</th><th class="n">busiest second</th><th>set apart</th></tr></thead><tbody>
{{range .Tail}}<tr><td class="key">{{clipk .Key}}</td><td class="n">{{.Requests}}</td><td class="n">{{.Errors}}</td><td class="n">{{.Excused}}</td><td class="n">{{.Denied}}</td><td class="n">{{.PeakMinute}}</td><td class="n">{{.PeakSecond}}</td><td>{{.SetApart}}</td></tr>
{{end}}</tbody></table>{{end}}
{{if .Keys.WouldLimit}}<h3>Keys set apart as ones the proposal would limit ({{.Keys.SetApart}})</h3>
<table><thead><tr><th>key</th><th>reason</th><th class="n">requests</th><th class="n">errors</th><th class="n">429s</th><th class="n">busiest minute</th></tr></thead><tbody>
{{range .Keys.WouldLimit}}<tr><td class="key">{{clipk .Key}}</td><td>{{.Reason}}</td><td class="n">{{.Requests}}</td><td class="n">{{.Errors}}</td><td class="n">{{.Denied}}</td><td class="n">{{.PeakMinute}}</td></tr>
{{end}}</tbody></table>{{end}}
</section>
{{end}}
{{if .Rep.Notes}}<h2 id="notes">Notes</h2>
<ul>{{range .Rep.Notes}}<li class="note">{{.}}</li>{{end}}</ul>{{end}}
</body>
</html>
{{define "summary"}}<table>
<thead><tr><th>class</th><th>callers</th><th class="n">requests</th><th class="n">keys</th><th class="n">set apart</th><th class="n">p99 per second</th><th class="n">p99 busiest minute per key</th><th class="n">rate</th><th class="n">burst</th><th class="n">replay: requests limited</th><th class="n">keys limited</th><th class="n">legitimate requests limited</th></tr></thead>
<tbody>
{{range .}}<tr><td><a href="#{{.ID}}"><code>{{.Match}}</code></a>{{if .LowData}} *{{end}}{{if .Keys.FewCallers}} !{{end}}</td><td>{{.Caller}}</td><td class="n">{{.PerSecond.Requests}}</td><td class="n">{{.Keys.Keys}}</td><td class="n">{{.Keys.SetApart}}</td><td class="n">{{.PerSecond.P99}}</td><td class="n">{{.Keys.PeakMinuteP99}}</td><td class="n">{{if .InConfig}}{{.Rate}}{{else}}–{{end}}</td><td class="n">{{if .InConfig}}{{.Proposal.Burst}}{{else}}–{{end}}</td><td class="n">{{.Rejected}}</td><td class="n">{{if .Replay}}{{.Replay.RejectedKeys}}{{else}}–{{end}}</td><td class="n">{{.Legit}}</td></tr>
{{end}}</tbody>
</table>{{end}}
`))

// writeHTML writes the HTML report of rep.
func writeHTML(w *bytes.Buffer, rep *Report, o Options) error {
	return htmlTmpl.Execute(w, buildHTML(rep, o))
}

func writeHTMLFile(path string, rep *Report, o Options) error {
	var b bytes.Buffer
	if err := writeHTML(&b, rep, o); err != nil {
		return fmt.Errorf("html report: %w", err)
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		return fmt.Errorf("html report: %w", err)
	}
	return nil
}
