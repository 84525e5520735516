package advise

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/loggen"
)

// checkAccounts holds rep to its own sums: every line read is in exactly
// one account of its file, the files sum to the run, and the requests in
// the window are the classes' requests. The table, the JSON and
// the HTML report are checked to state every file's accounts.
func checkAccounts(t *testing.T, rep *Report, htmlPath string) {
	t.Helper()
	if len(rep.Files) != len(rep.Inputs) {
		t.Fatalf("%d file accounts for %d inputs", len(rep.Files), len(rep.Inputs))
	}
	var lines, malformed, outside, late, inWindow int64
	for _, f := range rep.Files {
		if f.Parsed+f.Malformed != f.Lines || f.OutsideWindow < 0 || f.OutsideWindow > f.Parsed || f.Late < 0 {
			t.Errorf("%s: accounts do not add up: %+v", f.File, f)
		}
		lines += f.Lines
		malformed += f.Malformed
		outside += f.OutsideWindow
		late += f.Late
		inWindow += f.Parsed - f.OutsideWindow
	}
	if lines != rep.Lines || malformed != rep.Malformed || outside != rep.OutsideWindow || late != rep.Order.Late {
		t.Errorf("files sum to %d lines, %d malformed, %d outside, %d late; the run says %d, %d, %d, %d",
			lines, malformed, outside, late, rep.Lines, rep.Malformed, rep.OutsideWindow, rep.Order.Late)
	}
	var classes int64
	for _, c := range rep.Classes {
		classes += int64(c.PerSecond.Requests)
	}
	// Unmatched counts lines of every time, in the window or not.
	if classes+rep.Refused > inWindow || classes+rep.Refused+rep.Unmatched < inWindow {
		t.Errorf("the classes hold %d requests (%d unmatched, %d refused); the files have %d in the window", classes, rep.Unmatched, rep.Refused, inWindow)
	}
	var table, js bytes.Buffer
	if err := writeTable(&table, rep); err != nil {
		t.Fatal(err)
	}
	if err := writeJSON(&js, rep); err != nil {
		t.Fatal(err)
	}
	var back struct {
		Files []map[string]any `json:"files"`
	}
	if err := json.Unmarshal(js.Bytes(), &back); err != nil || len(back.Files) != len(rep.Files) {
		t.Fatalf("JSON files: %v, %v", back.Files, err)
	}
	html, err := os.ReadFile(htmlPath)
	if err != nil {
		t.Fatal(err)
	}
	for i, f := range rep.Files {
		for _, k := range []string{"file", "lines", "parsed", "malformed", "outside_window", "late"} {
			if _, ok := back.Files[i][k]; !ok {
				t.Errorf("JSON file %d has no %q: %v", i, k, back.Files[i])
			}
		}
		if !strings.Contains(strings.Join(strings.Fields(table.String()), " "), f.String()) {
			t.Errorf("the table does not account for %s (%q):\n%s", f.File, f.String(), table.String())
		}
		row := fmt.Sprintf(`<tr><td><code>%s</code></td><td class="n">%d</td><td class="n">%d</td><td class="n">%d</td><td class="n">%d</td><td class="n">%d</td><td class="n">%d</td></tr>`,
			f.File, f.Lines, f.Parsed, f.Malformed, f.OutsideWindow, f.Parsed-f.OutsideWindow, f.Late)
		if !bytes.Contains(html, []byte(row)) {
			t.Errorf("the HTML report has no row %s", row)
		}
	}
}

// TestAccountsRealLogs: the two real logs with the default 7-day window,
// the NASA one 20 years older than the Apache one: its 4,000 lines are
// all outside the window, and the run says so, per file, instead of
// reading 14,000 lines into classes of 10,000 (issue #27, item 7).
func TestAccountsRealLogs(t *testing.T) {
	t.Parallel()
	dir := realLogs(t)
	apache, nasa := filepath.Join(dir, "apache_combined_2015.log"), filepath.Join(dir, "nasa_jul95_first_hour.log")
	html := filepath.Join(t.TempDir(), "report.html")
	cfg := filepath.Join(t.TempDir(), "sluice.yaml")
	rep, err := Run(Options{Inputs: []string{apache, nasa}, Window: 7 * 24 * time.Hour, MaxClasses: 200, Top: 5, NoReplay: true, HTML: html, OutConfig: cfg})
	if err != nil {
		t.Fatal(err)
	}
	checkAccounts(t, rep, html)
	want := map[string]FileLines{
		apache: {File: apache, Lines: 10000, Parsed: 10000},
		nasa:   {File: nasa, Lines: 4000, Parsed: 4000, OutsideWindow: 4000},
	}
	for _, f := range rep.Files {
		w := want[f.File]
		if f.File != w.File || f.Lines != w.Lines || f.Parsed != w.Parsed || f.Malformed != w.Malformed || f.OutsideWindow != w.OutsideWindow || f.Late != w.Late {
			t.Errorf("%s: %+v, want %+v", f.File, f, w)
		}
	}
	var classes uint64
	for _, c := range rep.Classes {
		classes += c.PerSecond.Requests
	}
	if classes != 10000 {
		t.Errorf("the classes hold %d requests, want the 10000 of the window", classes)
	}
	if rep.Lines != 14000 || rep.OutsideWindow != 4000 {
		t.Errorf("%d lines, %d outside the window; want 14000 and 4000", rep.Lines, rep.OutsideWindow)
	}
	written, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(written), "(14000 lines, 4000 outside the window)") || !strings.Contains(string(written), "#   "+rep.Files[1].String()) {
		t.Errorf("the written configuration does not account for the lines:\n%s", written)
	}
}

// TestAccountsGenerated: files partly, wholly and not at all outside a
// 48-hour window, with malformed lines among them, against a count made
// from the events themselves.
func TestAccountsGenerated(t *testing.T) {
	t.Parallel()
	day := int64(86400)
	var recent, old, mixed []loggen.Event
	for i := range 300 {
		ip := fmt.Sprintf("10.9.0.%d", i%23)
		recent = append(recent, ev(t0+int64(i*397)%(2*day), "GET", "/a", ip, ""))
		old = append(old, ev(t0-10*day+int64(i*31), "GET", "/b", ip, ""))
		mixed = append(mixed, ev(t0-3*day+int64(i*1201), "GET", "/c", ip, ""))
	}
	dir := t.TempDir()
	paths := []string{writeEvents(t, "recent.log", recent), writeEvents(t, "old.log", old), writeEvents(t, "mixed.log", mixed)}
	// garbage among the mixed file's lines, and one binary line
	lines := readLines(t, paths[2])
	var withBad []string
	for i, l := range lines {
		withBad = append(withBad, l)
		if i%50 == 7 {
			withBad = append(withBad, "garbage line", "\x00\xff\x01 not a log")
		}
	}
	paths[2] = writeLines(t, dir, "mixed-bad.log", withBad)
	badLines := int64(len(withBad) - len(lines))

	html := filepath.Join(dir, "report.html")
	rep, err := Run(Options{Inputs: paths, Window: 48 * time.Hour, MaxClasses: 20, Top: 5, NoReplay: true, HTML: html})
	if err != nil {
		t.Fatal(err)
	}
	checkAccounts(t, rep, html)
	start := rep.WindowStart.Unix()
	for i, evs := range [][]loggen.Event{recent, old, mixed} {
		var outside int64
		for _, e := range evs {
			if e.Time/1e6 < start {
				outside++
			}
		}
		var f FileLines
		for _, g := range rep.Files {
			if g.File == paths[i] {
				f = g
			}
		}
		wantBad := int64(0)
		if i == 2 {
			wantBad = badLines
		}
		if (i == 1 && outside != 300) || (i == 2 && (outside == 0 || outside == 300)) {
			t.Fatalf("the test lost its point: %d of %s outside the window", outside, paths[i])
		}
		if f.File != paths[i] || f.Parsed != int64(len(evs)) || f.Malformed != wantBad || f.OutsideWindow != outside {
			t.Errorf("%s: %+v; want %d parsed, %d malformed, %d outside the window (from %v)", paths[i], f, len(evs), wantBad, outside, rep.WindowStart)
		}
	}

}
