package advise

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// The fuzz tests of the whole run (issue #27, "no input can crash it"):
// any bytes, cut into several files given in any order and standard
// input, read through both passes, never panic, and every line read is
// in the accounts. `go test -fuzz=FuzzRun ./advise/` searches; the seeds
// (f.Add and testdata/fuzz/FuzzRun) run in the normal suite.

// fuzzLog is a few lines of each format, some malformed, out of order.
const fuzzLog = `1.2.3.4 - - [05/Jan/2026:00:00:09 +0000] "GET /a/1 HTTP/1.1" 200 1
1.2.3.4 - u [05/Jan/2026:00:00:00 +0000] "GET /a/2 HTTP/1.1" 404 1
garbage line
{"time":"2026-01-05T00:00:03Z","remote_addr":"::1","method":"POST","path":"/b","status":429}
5.6.7.8 - - [04/Jan/2026:23:00:00 +0000] "GET /a/3 HTTP/1.1" 200 1 "-" "curl"
{"time":1767571205,"method":"GET","path":"/c?x=1","ip":"9.9.9.9"}
`

// linesIn counts the lines of data as the reader counts them: one per
// newline, and a last one without, but blank ones (nothing but spaces,
// tabs and carriage returns, or a byte order mark), which are skipped.
func linesIn(data []byte) int64 {
	var n int64
	for l := range bytes.SplitSeq(data, []byte{'\n'}) {
		l = bytes.TrimLeft(l, " \t\r")
		l = bytes.TrimPrefix(l, []byte("\xef\xbb\xbf"))
		if len(bytes.TrimRight(l, " \r")) > 0 {
			n++
		}
	}
	return n
}

// fuzzRun writes data cut into parts as files (the second gzipped when
// gz is set) and standard input (the last part, when stdin is set), runs
// the advisor, and checks that it ends cleanly and accounts for every
// line.
func fuzzRun(t *testing.T, data []byte, cuts uint16, stdin, gz bool, window time.Duration) {
	dir := t.TempDir()
	parts := 1 + int(cuts%4)
	var inputs []string
	var in *bytes.Reader
	var want int64
	exact := true
	pos := 0
	for i := range parts {
		end := len(data)
		if i < parts-1 {
			end = pos + int(cuts>>(2+3*i)&7)*(len(data)-pos)/8
		}
		part := data[pos:end]
		pos = end
		if bytes.HasPrefix(part, []byte{0x1f, 0x8b}) {
			exact = false // read as a (damaged) gzip stream
		}
		want += linesIn(part)
		if stdin && i == parts-1 {
			in = bytes.NewReader(part)
			inputs = append(inputs, "-")
			continue
		}
		raw := part
		if gz && i == 1 {
			var b bytes.Buffer
			zw := gzip.NewWriter(&b)
			zw.Write(part)
			zw.Close()
			raw = b.Bytes()
		}
		name := filepath.Join(dir, fmt.Sprintf("part%d.log", i))
		if err := os.WriteFile(name, raw, 0o644); err != nil {
			t.Fatal(err)
		}
		inputs = append(inputs, name)
	}
	o := Options{Inputs: inputs, Window: window, MaxClasses: 20, Top: 3, MaxPolicies: 4, MinShare: 0.01, MinBurst: 1,
		WhatIf: []float64{2}, OutConfig: filepath.Join(dir, "out.yaml"), HTML: filepath.Join(dir, "r.html"),
		ChartDir: filepath.Join(dir, "charts"), ChartFormat: "svg"}
	if in != nil {
		o.stdin = in
	} else {
		o.stdin = strings.NewReader("")
	}
	rep, err := Run(o)
	if err != nil {
		if rep != nil && strings.Contains(err.Error(), "no request could be read") {
			return
		}
		t.Fatalf("%v", err)
	}
	if exact && rep.Lines != want {
		t.Fatalf("read %d lines of %d", rep.Lines, want)
	}
	checkAccounts(t, rep, o.HTML)
	for _, c := range rep.Classes {
		checkSVG(t, c.Match, svgChart(c, true))
	}
}

func FuzzRun(f *testing.F) {
	f.Add([]byte(fuzzLog), uint16(0), false, false)
	f.Add([]byte(fuzzLog), uint16(3|4<<2|2<<5|6<<8), true, true)
	f.Add([]byte(fuzzLog+"\x00\xff\xfe binary\r\n"+strings.Repeat("x", 5000)), uint16(2|5<<2|3<<5), true, false)
	f.Add([]byte(fuzzLog[:len(fuzzLog)-20]), uint16(1|4<<2), false, true) // truncated mid-line
	f.Fuzz(func(t *testing.T, data []byte, cuts uint16, stdin, gz bool) {
		window := time.Duration(0)
		if cuts&0x8000 != 0 {
			window = time.Hour
		}
		fuzzRun(t, data, cuts, stdin, gz, window)
	})
}

// FuzzReorder feeds records of any times through the reorder buffer and
// checks what it promises: seconds come out in increasing order, every
// record once; a record within the window of the newest before it keeps
// its own second, and one older is counted late, in the oldest second
// still open.
func FuzzReorder(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 0, 10, 0xff, 0xf0, 0, 100, 0x80, 0}, uint8(5))
	f.Add([]byte{0x7f, 0xff, 0x80, 0x00, 0, 1, 0, 1}, uint8(0))
	f.Fuzz(func(t *testing.T, deltas []byte, w uint8) {
		window := int64(w % 70)
		var out []int64 // released seconds, in order
		var released int
		ro := newReorder(window, true, func(s *slotBuf) {
			out = append(out, s.sec)
			released += len(s.items)
			for _, it := range s.items {
				if floorSec(it.time) != s.sec {
					t.Fatalf("an item of time %d in second %d", it.time, s.sec)
				}
			}
		})
		b := &batch{arena: []byte("k")}
		now := int64(1767571200) * 1e6
		var late int64
		newest := int64(-1 << 62)
		for i := 0; i+2 <= len(deltas); i += 2 {
			now += int64(int16(binary.BigEndian.Uint16(deltas[i:]))) * 1e5 // ±3276 s
			sec := floorSec(now)
			if ro.started && sec < ro.lo {
				late++
			} else if ro.started && sec < newest-window {
				t.Fatalf("second %d, newest %d, window %d: not late, yet out of the window", sec, newest, window)
			}
			newest = max(newest, sec)
			ro.add(b, &rec{time: now, key: span{0, 1}}, 0)
		}
		ro.flush()
		if released != len(deltas)/2 {
			t.Fatalf("released %d records of %d", released, len(deltas)/2)
		}
		if ro.late != late {
			t.Fatalf("%d late, want %d", ro.late, late)
		}
		for i := 1; i < len(out); i++ {
			if out[i] <= out[i-1] {
				t.Fatalf("second %d released after %d", out[i], out[i-1])
			}
		}
	})
}

// mergedLines reads the parts through the merging reader.
func mergedLines(t *testing.T, parts ...[]byte) []byte {
	t.Helper()
	dir := t.TempDir()
	var srcs []source
	for i, p := range parts {
		name := filepath.Join(dir, fmt.Sprintf("p%d.log", i))
		if err := os.WriteFile(name, p, 0o644); err != nil {
			t.Fatal(err)
		}
		srcs = append(srcs, source{name: name, file: i, end: -1})
	}
	pl := &pipeline{prog: &progress{}}
	mr, err := pl.merge(srcs)
	if err != nil {
		t.Fatal(err)
	}
	defer mr.close()
	out, err := io.ReadAll(mr)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// normalLines are the lines of data as the merging reader passes them
// on: each with a newline, one longer than maxLine cut to maxLine+1
// bytes; sorted, to compare as a multiset.
func normalLines(data []byte) []string {
	var out []string
	for len(data) > 0 {
		l := data
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			l, data = data[:i], data[i+1:]
		} else {
			data = nil
		}
		out = append(out, string(l[:min(len(l), maxLine+1)])+"\n")
	}
	slices.Sort(out)
	return out
}

// FuzzMerge: the merging reader passes on every line of its parts, once,
// each part's lines in their order, and the lines with a time in time
// order when each part is.
func FuzzMerge(f *testing.F) {
	f.Add([]byte(fuzzLog), []byte("garbage\n"+fuzzLog[100:]))
	f.Add([]byte("a\nb"), []byte("\n\n\xff"))
	f.Fuzz(func(t *testing.T, a, b []byte) {
		out := mergedLines(t, a, b)
		want := append(normalLines(a), normalLines(b)...)
		slices.Sort(want)
		if got := normalLines(out); !slices.Equal(got, want) {
			t.Fatalf("merged %q and %q into %q", a, b, out)
		}
	})
}

// TestMergeLongAndDamaged: a line of 3 MiB in one of two overlapping
// files, and a gzip file cut short, are counted as the first reading
// counted them: the long line once, malformed; the damaged file up to
// its damage, with a note.
func TestMergeLongAndDamaged(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var a, b strings.Builder
	for i := range 600 {
		line := fmt.Sprintf("10.0.0.%d - - [05/Jan/2026:%02d:%02d:%02d +0000] \"GET /p/%d HTTP/1.1\" 200 1\n", i%7, i/60/60, i/60%60, i%60, i)
		if i%2 == 0 {
			a.WriteString(line)
		} else {
			b.WriteString(line)
		}
		if i == 300 {
			a.WriteString(strings.Repeat("x", 3<<20) + "\n")
		}
	}
	fa := filepath.Join(dir, "a.log")
	os.WriteFile(fa, []byte(a.String()), 0o644)
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte(b.String()))
	zw.Close()
	fb := filepath.Join(dir, "b.log.gz")
	os.WriteFile(fb, gz.Bytes()[:gz.Len()*2/3], 0o644)
	rep, err := Run(Options{Inputs: []string{fb, fa}, MaxClasses: 20, Top: 3})
	if err != nil {
		t.Fatal(err)
	}
	fileA := rep.Files[slices.IndexFunc(rep.Files, func(f FileLines) bool { return f.File == fa })]
	if rep.Order.Merged < 2 || rep.Order.Late != 0 || fileA.Malformed != 1 || fileA.Lines != 301 {
		t.Errorf("order %+v, files %+v: want merged, nothing late, the long line one malformed line", rep.Order, rep.Files)
	}
	if !strings.Contains(strings.Join(rep.Notes, "\n"), "the rest of this input is skipped") {
		t.Errorf("no note of the damaged file: %q", rep.Notes)
	}
	var requests uint64
	for _, c := range rep.Classes {
		requests += c.PerSecond.Requests
	}
	if int64(requests) != rep.Files[0].Parsed+rep.Files[1].Parsed {
		t.Errorf("%d requests in the classes, %d parsed", requests, rep.Files[0].Parsed+rep.Files[1].Parsed)
	}
}
