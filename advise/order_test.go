package advise

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// realLogs is the directory of the real access logs the tests read, kept in
// the repository (testdata/reallogs, with their source and licence in its
// README) so that a fresh clone needs nothing beside it.
func realLogs(t *testing.T) string {
	t.Helper()
	dir := filepath.Join("testdata", "reallogs")
	if _, err := os.Stat(filepath.Join(dir, "apache_combined_2015.log")); err != nil {
		t.Fatalf("the real logs are missing from the repository: %v", err)
	}
	return dir
}

var realLogNames = []string{"apache_combined_2015.log", "nasa_jul95_first_hour.log"}

// clfTime reads the timestamp of a CLF line, for sorting the test inputs.
var clfTime = regexp.MustCompile(`\[(\d\d/\w\w\w/\d{4}:\d\d:\d\d:\d\d [-+]\d{4})\]`)

func lineTime(t *testing.T, line string) time.Time {
	t.Helper()
	m := clfTime.FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("no CLF time in %q", line)
	}
	tm, err := time.Parse("02/Jan/2006:15:04:05 -0700", m[1])
	if err != nil {
		t.Fatal(err)
	}
	return tm
}

func readLines(t *testing.T, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.SplitAfter(strings.TrimSuffix(string(data), "\n"), "\n")
}

func writeLines(t *testing.T, dir, name string, lines []string) string {
	t.Helper()
	var b strings.Builder
	for _, l := range lines {
		b.WriteString(strings.TrimSuffix(l, "\n"))
		b.WriteByte('\n')
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// withoutInputs is a written configuration without what names its inputs:
// the first line, and the lines read per file.
func withoutInputs(cfg []byte) []byte {
	_, cfg, _ = bytes.Cut(cfg, []byte("\n"))
	var out []byte
	for _, l := range bytes.SplitAfter(cfg, []byte("\n")) {
		if !bytes.HasPrefix(l, []byte("#   ")) {
			out = append(out, l...)
		}
	}
	return out
}

// reportOf runs the advisor on path and returns its report as JSON
// without what describes the run rather than the traffic: the inputs,
// the timings and how out of order the input was.
func reportOf(t *testing.T, path string, o Options) []byte {
	t.Helper()
	return reportJSON(t, path, o, false)
}

// reportJSON is reportOf, without the notes as well when dropNotes is set.
func reportJSON(t *testing.T, path string, o Options, dropNotes bool) []byte {
	t.Helper()
	o.Inputs = []string{path}
	if o.MaxClasses == 0 {
		o.MaxClasses = 200
	}
	if o.Top == 0 {
		o.Top = 5
	}
	rep, err := Run(o)
	if err != nil {
		t.Fatal(err)
	}
	rep.Inputs, rep.Files, rep.MeasureSeconds, rep.MBPerSecond, rep.ReplaySeconds, rep.Order = nil, nil, 0, 0, 0, Order{}
	if dropNotes {
		rep.Notes = nil
	}
	var b bytes.Buffer
	if err := writeJSON(&b, rep); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestOrderDoesNotMatter: each real log as shipped (shuffled within a
// minute, or nearly in order), sorted by time, and cut into rotated chunks
// concatenated newest first (as `zcat access.log*` reads them) gives the
// same report, replay and written configuration included.
func TestOrderDoesNotMatter(t *testing.T) {
	dir := realLogs(t)
	for _, name := range realLogNames {
		t.Run(name, func(t *testing.T) {
			tmp := t.TempDir()
			lines := readLines(t, filepath.Join(dir, name))
			sorted := slices.Clone(lines)
			slices.SortStableFunc(sorted, func(a, b string) int { return lineTime(t, a).Compare(lineTime(t, b)) })
			variants := map[string]string{"sorted": writeLines(t, tmp, "sorted.log", sorted)}
			chunks := []int{2, 5, 13}
			if raceEnabled {
				chunks = []int{5} // ten times slower: one rotation
			}
			for _, n := range chunks {
				var rotated []string
				size := (len(lines) + n - 1) / n
				for i := n - 1; i >= 0; i-- {
					rotated = append(rotated, lines[i*size:min(len(lines), (i+1)*size)]...)
				}
				label := fmt.Sprintf("rotated-%02d", n)
				variants[label] = writeLines(t, tmp, label+".log", rotated)
			}
			// a policy per class, and grouped into a handful as the command
			// does; under the race detector (ten times slower) only the latter
			modes := []int{0, 10}
			if raceEnabled {
				modes = modes[1:]
			}
			for _, maxPolicies := range modes {
				o := Options{Window: 0, OutConfig: filepath.Join(tmp, "shipped.yaml"), MaxPolicies: maxPolicies, MinShare: 0.01, MinBurst: 2}
				want := reportOf(t, filepath.Join(dir, name), o)
				for label, path := range variants {
					o.OutConfig = filepath.Join(tmp, label+".yaml")
					got := reportOf(t, path, o)
					if !bytes.Equal(got, want) {
						t.Errorf("%s, max policies %d: the report differs from the shipped file's:\n%s", label, maxPolicies, firstDiff(want, got))
					}
					shippedCfg, _ := os.ReadFile(filepath.Join(tmp, "shipped.yaml"))
					cfg, _ := os.ReadFile(o.OutConfig)
					// the first line and the lines read per file name the input
					shippedCfg, cfg = withoutInputs(shippedCfg), withoutInputs(cfg)
					if !bytes.Equal(cfg, shippedCfg) || len(cfg) == 0 {
						t.Errorf("%s: the configuration differs from the shipped file's", label)
					}
				}
			}
			// the order the advisor saw, as it reports it
			rep, err := Run(Options{Inputs: []string{variants["rotated-05"]}, MaxClasses: 200, NoReplay: true})
			if err != nil {
				t.Fatal(err)
			}
			if !rep.Order.Reread || rep.Order.Late != 0 || rep.Order.Segments < 5 {
				t.Errorf("rotated in 5 chunks: order %+v, want read again in time order, no line late, 5 segments at least", rep.Order)
			}
		})
	}
}

// firstDiff shows where two reports first differ.
func firstDiff(a, b []byte) string {
	al, bl := strings.Split(string(a), "\n"), strings.Split(string(b), "\n")
	for i := range min(len(al), len(bl)) {
		if al[i] != bl[i] {
			lo := max(0, i-3)
			return fmt.Sprintf("line %d:\nwant %s\ngot  %s", i+1, strings.Join(al[lo:i+1], "\n     "), strings.Join(bl[lo:i+1], "\n     "))
		}
	}
	return fmt.Sprintf("%d and %d lines", len(al), len(bl))
}

// TestPuppetClassByDefinition holds the figures of one class of a real,
// shuffled log against a computation written here from docs/advise.md: a
// sample is one key's requests of the class in one whole UTC second (or
// minute), and the pN is the sample of rank ⌈N/100 · samples⌉ in
// increasing order.
func TestPuppetClassByDefinition(t *testing.T) {
	path := filepath.Join(realLogs(t), "apache_combined_2015.log")
	line := regexp.MustCompile(`^(\S+) \S+ (\S+) \[([^\]]+)\] "(\S+) ([^ "?]*)[^"]*"`)
	perSec, perMin := map[string]uint32{}, map[string]uint32{}
	for _, l := range readLines(t, path) {
		m := line.FindStringSubmatch(l)
		if m == nil {
			t.Fatalf("unreadable line %q", l)
		}
		if m[2] != "-" || m[4] != "GET" || m[5] != "/blog/tags/puppet" {
			continue
		}
		tm, err := time.Parse("02/Jan/2006:15:04:05 -0700", m[3])
		if err != nil {
			t.Fatal(err)
		}
		perSec[fmt.Sprint(m[1], tm.Unix())]++
		perMin[fmt.Sprint(m[1], tm.Unix()/60)]++
	}
	nearestRank := func(counts map[string]uint32, pct int) uint32 {
		var v []uint32
		for _, c := range counts {
			v = append(v, c)
		}
		slices.Sort(v)
		return v[(pct*len(v)+99)/100-1]
	}
	rep, err := Run(Options{Inputs: []string{path}, MaxClasses: 200, NoReplay: true})
	if err != nil {
		t.Fatal(err)
	}
	c := findClass(t, rep, "GET /blog/tags/puppet", "anonymous")
	if c.PerSecond.Samples != uint64(len(perSec)) || c.PerSecond.P99 != nearestRank(perSec, 99) ||
		c.PerSecond.P50 != nearestRank(perSec, 50) || c.PerSecond.P90 != nearestRank(perSec, 90) || c.PerSecond.Max != nearestRank(perSec, 100) {
		t.Errorf("per second: advisor %+v; by the definition %d samples, p50/p90/p99/max %d/%d/%d/%d", c.PerSecond, len(perSec),
			nearestRank(perSec, 50), nearestRank(perSec, 90), nearestRank(perSec, 99), nearestRank(perSec, 100))
	}
	if c.PerMinute.Samples != uint64(len(perMin)) || c.PerMinute.P99 != nearestRank(perMin, 99) {
		t.Errorf("per minute: advisor %+v; by the definition %d samples, p99 %d", c.PerMinute, len(perMin), nearestRank(perMin, 99))
	}
	// the figures the README of the logs states, measured by another script
	if len(perSec) != 475 || nearestRank(perSec, 99) != 2 {
		t.Errorf("by the definition: %d samples, p99 %d; the logs' README says 475 and 2", len(perSec), nearestRank(perSec, 99))
	}
}

// TestStdinOutOfOrder stands for `zcat old/*.gz | sluice advise -` with
// rotated files arriving newest first (issue #27, item 6): each real log
// cut into four rotated pieces, given as file arguments newest first, and
// joined newest first on standard input, plain (and gzip, for the first
// log), gives the same report, replay included: standard input is read
// again from its spool, in time order, and no line is late.
func TestStdinOutOfOrder(t *testing.T) {
	for _, name := range realLogNames {
		lines := readLines(t, filepath.Join(realLogs(t), name))
		tmp := t.TempDir()
		const n = 4
		size := (len(lines) + n - 1) / n
		var files []string
		var newestFirst, gz bytes.Buffer
		zw := gzip.NewWriter(&gz)
		for i := n - 1; i >= 0; i-- {
			chunk := lines[i*size : min(len(lines), (i+1)*size)]
			files = append(files, writeLines(t, tmp, fmt.Sprintf("access.log.%d", i), chunk))
			for _, l := range chunk {
				l = strings.TrimSuffix(l, "\n") + "\n"
				newestFirst.WriteString(l)
				io.WriteString(zw, l)
			}
		}
		zw.Close()
		run := func(label string, inputs []string, stdin io.Reader) []byte {
			t.Helper()
			rep, err := Run(Options{Inputs: inputs, stdin: stdin, MaxClasses: 200, Top: 5, MaxPolicies: 10, MinShare: 0.01})
			if err != nil {
				t.Fatal(err)
			}
			if rep.Lines != int64(len(lines)) || rep.Order.Late != 0 {
				t.Errorf("%s %s: %d lines of %d, order %+v", name, label, rep.Lines, len(lines), rep.Order)
			}
			if stdin != nil && !rep.Order.Reread {
				t.Errorf("%s %s: order %+v, want standard input read again in time order", name, label, rep.Order)
			}
			rep.Inputs, rep.Files, rep.MeasureSeconds, rep.MBPerSecond, rep.ReplaySeconds, rep.Order, rep.Bytes = nil, nil, 0, 0, 0, Order{}, 0
			var b bytes.Buffer
			if err := writeJSON(&b, rep); err != nil {
				t.Fatal(err)
			}
			return b.Bytes()
		}
		want := run("files", files, nil)
		inputs := map[string]io.Reader{"stdin": &newestFirst, "gzip stdin": &gz}
		if name != realLogNames[0] {
			delete(inputs, "gzip stdin") // once is enough
		}
		for label, in := range inputs {
			if got := run(label, []string{"-"}, in); !bytes.Equal(got, want) {
				t.Errorf("%s %s: the report differs from the files':\n%s", name, label, firstDiff(want, got))
			}
		}
	}
	if code := Command([]string{"--reorder-window", "1h", "-"}, strings.NewReader(""), io.Discard, io.Discard); code != 2 {
		t.Errorf("--reorder-window 1h: exit %d, want 2 (at most 15m)", code)
	}
}

// TestOrderAcrossFilesAndGzip: the rotated chunks of a real log as
// separate files given in any order, and as one gzip stream of the
// chunks newest first, give the report of the shipped file.
func TestOrderAcrossFilesAndGzip(t *testing.T) {
	path := filepath.Join(realLogs(t), "apache_combined_2015.log")
	lines := readLines(t, path)
	tmp := t.TempDir()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	want := reportOf(t, path, Options{Window: 0})
	const n = 4
	size := (len(lines) + n - 1) / n
	var files []string
	var newestFirst bytes.Buffer
	zw := gzip.NewWriter(&newestFirst)
	for i := n - 1; i >= 0; i-- {
		chunk := lines[i*size : min(len(lines), (i+1)*size)]
		files = append(files, writeLines(t, tmp, fmt.Sprintf("access.log.%d", i), chunk))
		for _, l := range chunk {
			io.WriteString(zw, strings.TrimSuffix(l, "\n")+"\n")
		}
	}
	zw.Close()
	gz := filepath.Join(tmp, "all.log.gz")
	if err := os.WriteFile(gz, newestFirst.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	for label, inputs := range map[string][]string{"files newest first": files, "files shuffled": {files[2], files[0], files[3], files[1]}, "gzip": {gz}} {
		rep, err := Run(Options{Inputs: inputs, MaxClasses: 200, Top: 5})
		if err != nil {
			t.Fatal(err)
		}
		if rep.Lines != int64(len(lines)) || rep.Order.Late != 0 {
			t.Errorf("%s: %d lines, order %+v", label, rep.Lines, rep.Order)
		}
		rep.Inputs, rep.Files, rep.MeasureSeconds, rep.MBPerSecond, rep.ReplaySeconds, rep.Order = nil, nil, 0, 0, 0, Order{}
		rep.Bytes = st.Size() // the gzip file is smaller
		var got bytes.Buffer
		if err := writeJSON(&got, rep); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Bytes(), want) {
			t.Errorf("%s: the report differs from the shipped file's:\n%s", label, firstDiff(want, got.Bytes()))
		}
	}
}

// TestReorderWindowEdge: with a window of W seconds, a line exactly W
// seconds older than the newest line before it counts in its own second;
// one W+1 seconds older is late, counted in the oldest second still open.
func TestReorderWindowEdge(t *testing.T) {
	const w = 8
	var got [][2]int64 // (second released, time of the record)
	ro := newReorder(w, false, func(s *slotBuf) {
		for _, it := range s.items {
			got = append(got, [2]int64{s.sec, it.time / 1e6})
		}
	})
	b := &batch{}
	for _, sec := range []int64{100, 110, 110 - w, 110 - w - 1, 111, 105} {
		ro.add(b, &rec{time: sec * 1e6, policy: 0}, 0)
	}
	ro.flush()
	// 100 is released when 110 arrives (110-8 = 102 is then the oldest
	// open second); 102 is exactly 8 s behind 110: its own second; 101 is
	// 9 s behind: late, counted in 102
	want := [][2]int64{{100, 100}, {102, 102}, {102, 102}, {105, 105}, {110, 110}, {111, 111}}
	if fmt.Sprint(got) != fmt.Sprint(want) || ro.late != 1 {
		t.Errorf("released %v, %d late; want %v and 1 late", got, ro.late, want)
	}
}

// A malformed line between lines far out of order (rotated logs joined
// newest first, or tac) used to panic in the reread: the segments were
// numbered as files. Every file and segment layout must read without a
// panic and count each request once.
func TestMalformedLineInReread(t *testing.T) {
	dir := t.TempDir()
	const l1 = `1.2.3.4 - - [04/Dec/2026:10:00:00 +0000] "GET /a HTTP/1.1" 200 1 "-" "x"`
	const l2 = `1.2.3.4 - - [04/Dec/2026:09:00:00 +0000] "GET /a HTTP/1.1" 200 1 "-" "x"`
	one := writeLines(t, dir, "one.log", []string{l1, "garbage line", l2})
	two := writeLines(t, dir, "two.log", []string{l1, l1, "garbage line", l2, "garbage line", l2})
	for _, inputs := range [][]string{{one}, {two}, {one, two}, {two, one}} {
		rep, err := Run(Options{Inputs: inputs, WhatIf: DefaultWhatIf, MaxClasses: 10, Top: 5, MinSamples: 1})
		if err != nil {
			t.Fatalf("%v: %v", inputs, err)
		}
		wantLines, wantBad := 0, 0
		for _, in := range inputs {
			if in == one {
				wantLines, wantBad = wantLines+3, wantBad+1
			} else {
				wantLines, wantBad = wantLines+6, wantBad+2
			}
		}
		if rep.Lines != int64(wantLines) || rep.Malformed != int64(wantBad) {
			t.Errorf("%v: lines %d malformed %d, want %d and %d", inputs, rep.Lines, rep.Malformed, wantLines, wantBad)
		}
		for _, m := range rep.MalformedExamples {
			if m.File != one && m.File != two {
				t.Errorf("%v: malformed line reported in %q", inputs, m.File)
			}
		}
		if !rep.Order.Reread {
			t.Errorf("%v: the hour-old line did not cause a reread; the test does not reach the case", inputs)
		}
	}
}
