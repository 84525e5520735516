package advise

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/loggen"
)

// allowedTags are the elements the HTML report writes itself: anything
// else in the file came from the log, unescaped.
var allowedTags = map[string]bool{
	"!doctype": true, "html": true, "head": true, "meta": true, "title": true, "style": true, "body": true,
	"h1": true, "h2": true, "h3": true, "div": true, "p": true, "a": true, "table": true, "thead": true,
	"tbody": true, "tr": true, "th": true, "td": true, "code": true, "strong": true, "ul": true, "li": true,
	"section": true, "details": true, "summary": true,
	"svg": true, "rect": true, "line": true, "text": true, "path": true,
}

var tagRe = regexp.MustCompile(`<(/?)([!A-Za-z][A-Za-z0-9-]*)`)

// checkTags fails on an element of the report that is not one of its own.
func checkTags(t *testing.T, doc string) {
	t.Helper()
	for _, m := range tagRe.FindAllStringSubmatch(doc, -1) {
		if !allowedTags[strings.ToLower(m[2])] {
			t.Errorf("element <%s> in the report: injected from the log?", m[2])
		}
	}
}

// TestHTMLEscapesTheLog puts markup in paths, user names and a key, and
// checks the report carries it as text only.
func TestHTMLEscapesTheLog(t *testing.T) {
	t.Parallel()
	var evs []loggen.Event
	evil := []string{`/<script>alert(1)</script>`, `/a"onmouseover="alert(2)`, `/x<img/src=x/onerror=alert(3)>`, `/</style><script>alert(4)</script>`, `/</svg><iframe/src=javascript:alert(5)>`}
	for i := range 200 {
		for j, p := range evil {
			e := ev(t0+int64(i), "GET", p, fmt.Sprintf("10.0.%d.%d", j, i%7), "")
			evs = append(evs, e)
		}
		evs = append(evs, ev(t0+int64(i), "POST", "/login", "10.9.9.9", `<b>bob</b>`))
		evs = append(evs, ev(t0+int64(i), "POST", "/login", "10.9.9.7", `<script>alert(1)</script>`))
		e := ev(t0+int64(i), "GET", "/ok", "10.9.9.8", "")
		e.Status = 404
		evs = append(evs, e)
	}
	path := writeEvents(t, "evil<i>x.log", evs)
	out := filepath.Join(t.TempDir(), "r.html")
	rep, err := Run(Options{Inputs: []string{path}, HTML: out, WhatIf: DefaultWhatIf, MaxClasses: 20, Top: 5})
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	checkTags(t, doc)
	for _, bad := range []string{"<script", "<img", "<iframe", "<b>", "<i>", `"onmouseover=`, "onerror=alert(3)>"} {
		if strings.Contains(strings.ToLower(doc), strings.ToLower(bad)) {
			t.Errorf("the report holds %q unescaped", bad)
		}
	}
	// and the text is there, escaped, so the reader sees what the log said
	var matches []string
	for _, c := range rep.Classes {
		matches = append(matches, c.Match)
	}
	if !strings.Contains(doc, "&lt;script&gt;alert(1)&lt;/script&gt;") {
		t.Errorf("the script key is not in the report as text; classes %q", matches)
	}
	if !strings.Contains(doc, "evil&lt;i&gt;x.log") {
		t.Error("the input's name is not in the report as text")
	}
	if !strings.Contains(doc, "&lt;b&gt;bob&lt;/b&gt;") {
		t.Error("the user key is not in the report as text")
	}
	if strings.Count(doc, "<svg") != len(rep.Classes) {
		t.Errorf("%d charts for %d classes", strings.Count(doc, "<svg"), len(rep.Classes))
	}
	for _, c := range rep.Classes {
		checkSVG(t, c.Match, svgChart(c, true))
	}
}

// TestHTMLDeterministic: the same input gives the same bytes, twice run.
func TestHTMLDeterministic(t *testing.T) {
	t.Parallel()
	log := filepath.Join(realLogs(t), "apache_combined_2015.log")
	var docs [2][]byte
	for i := range docs {
		out := filepath.Join(t.TempDir(), "r.html")
		if _, err := Run(Options{Inputs: []string{log}, HTML: out, WhatIf: DefaultWhatIf, Window: 0, MaxClasses: 200, Top: 5, MinSamples: 100}); err != nil {
			t.Fatal(err)
		}
		var err error
		if docs[i], err = os.ReadFile(out); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(docs[0], docs[1]) {
		t.Fatal("two runs on the same log wrote different reports")
	}
	for _, bad := range []string{"http://", "https://", "<script", "<link", "src=", "@import", "url("} {
		if bytes.Contains(docs[0], []byte(bad)) {
			t.Errorf("the report refers to something outside it: %q", bad)
		}
	}
	checkTags(t, string(docs[0]))
}

// TestWhatIfReplays: a what-if at ×1 is the replay of the proposal itself,
// request for request, and a stricter rate limits at least some more on a
// log where the proposal already limits.
func TestWhatIfReplays(t *testing.T) {
	t.Parallel()
	path := writeEvents(t, "abuse.log", abuseEvents(true))
	rep, err := Run(Options{Inputs: []string{path}, WhatIf: []float64{1, 0.25, 4}, MaxClasses: 20, Top: 5})
	if err != nil {
		t.Fatal(err)
	}
	c := findClass(t, rep, "GET /products/{id}", "anonymous")
	if c.Replay == nil || len(c.Replay.WhatIf) != 3 {
		t.Fatalf("replay %+v: want three what-ifs", c.Replay)
	}
	w1, strict, loose := c.Replay.WhatIf[0], c.Replay.WhatIf[1], c.Replay.WhatIf[2]
	if w1.Rejected != c.Replay.Rejected || w1.RejectedKeys != c.Replay.RejectedKeys || w1.Rate != c.Rate || w1.Burst != c.Proposal.Burst {
		t.Errorf("×1 %+v differs from the replay %+v (rate %s burst %d)", w1, c.Replay, c.Rate, c.Proposal.Burst)
	}
	if strict.Rejected <= c.Replay.Rejected || strict.RejectedKeys < c.Replay.RejectedKeys {
		t.Errorf("×0.25 %+v limits no more than the proposal %+v", strict, c.Replay)
	}
	if loose.Rejected >= c.Replay.Rejected {
		t.Errorf("×4 %+v limits no less than the proposal %+v", loose, c.Replay)
	}
	if _, err := parseWhatIf("0.5,x", false); err == nil {
		t.Error("--what-if 0.5,x accepted")
	}
	if _, err := parseWhatIf("0", false); err == nil {
		t.Error("--what-if 0 accepted")
	}
	if f, _ := parseWhatIf("", true); len(f) != len(DefaultWhatIf) {
		t.Errorf("--html without --what-if replays %v", f)
	}
}

// svgText is a text element of a chart, as an XML decoder reads it.
type svgText struct {
	X      float64 `xml:"x,attr"`
	Y      float64 `xml:"y,attr"`
	Size   float64 `xml:"font-size,attr"`
	Anchor string  `xml:"text-anchor,attr"`
	Weight string  `xml:"font-weight,attr"`
	Body   string  `xml:",chardata"`
}

// checkSVG parses a chart as XML and checks that every text, at a width
// estimate generous for sans-serif faces (0.6 em a character, bold 10%
// more), stays inside the view box, and that the fonts end in a generic
// family.
func checkSVG(t *testing.T, name, svg string) {
	t.Helper()
	var doc struct {
		ViewBox string    `xml:"viewBox,attr"`
		Font    string    `xml:"font-family,attr"`
		Texts   []svgText `xml:"text"`
	}
	if err := xml.Unmarshal([]byte(svg), &doc); err != nil {
		t.Fatalf("%s: the chart is not well-formed XML: %v", name, err)
	}
	if !strings.HasSuffix(doc.Font, ", sans-serif") || strings.Contains(svg, "Liberation Serif") {
		t.Errorf("%s: font-family %q does not end in a generic family", name, doc.Font)
	}
	var vb [4]float64
	for i, f := range strings.Fields(doc.ViewBox) {
		vb[i], _ = strconv.ParseFloat(f, 64)
	}
	if len(doc.Texts) < 5 {
		t.Errorf("%s: %d texts: want a title, a subtitle, ticks and a legend", name, len(doc.Texts))
	}
	for _, tx := range doc.Texts {
		w := float64(len([]rune(tx.Body))) * tx.Size * 0.6
		if tx.Weight == "bold" {
			w *= 1.1
		}
		left := tx.X
		switch tx.Anchor {
		case "middle":
			left -= w / 2
		case "end":
			left -= w
		}
		if left < vb[0] || left+w > vb[0]+vb[2] || tx.Y-tx.Size < vb[1] || tx.Y+tx.Size*0.3 > vb[1]+vb[3] {
			t.Errorf("%s: text %q at x %.0f..%.0f, y %.0f is clipped by the view box %v", name, tx.Body, left, left+w, tx.Y, vb)
		}
	}
}

// TestWhatIfKeysBounded: past maxWhatIfKeys rejected keys, a what-if
// stops holding hashes and estimates the distinct keys, marked so.
func TestWhatIfKeysBounded(t *testing.T) {
	defer func(n int) { maxWhatIfKeys = n }(maxWhatIfKeys)
	path := writeEvents(t, "abuse.log", abuseEvents(true))
	exact, err := Run(Options{Inputs: []string{path}, WhatIf: []float64{0.1}, MaxClasses: 20})
	if err != nil {
		t.Fatal(err)
	}
	maxWhatIfKeys = 10
	out := filepath.Join(t.TempDir(), "r.html")
	est, err := Run(Options{Inputs: []string{path}, WhatIf: []float64{0.1}, MaxClasses: 20, HTML: out})
	if err != nil {
		t.Fatal(err)
	}
	e := findClass(t, exact, "GET /products/{id}", "anonymous").Replay.WhatIf[0]
	a := findClass(t, est, "GET /products/{id}", "anonymous").Replay.WhatIf[0]
	if e.Estimated || !a.Estimated || e.RejectedKeys <= 10 {
		t.Fatalf("exact %+v, bounded %+v: want the second estimated, the first exact and above the bound", e, a)
	}
	if d := float64(a.RejectedKeys-e.RejectedKeys) / float64(e.RejectedKeys); d < -0.05 || d > 0.05 {
		t.Errorf("estimate %d against exact %d", a.RejectedKeys, e.RejectedKeys)
	}
	if a.Rejected != e.Rejected {
		t.Errorf("rejected requests %d against %d: the bound changed the replay", a.Rejected, e.Rejected)
	}
	doc, _ := os.ReadFile(out)
	if !bytes.Contains(doc, []byte("≈"+strconv.Itoa(a.RejectedKeys))) {
		t.Error("the report does not mark the estimate")
	}
}
