package simulate

import (
	"bytes"
	"encoding/json"
	"image/png"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
)

const accessLog = `203.0.113.7 - - [01/Mar/2026:12:00:00 +0000] "GET /products/1 HTTP/1.1" 200 512
203.0.113.7 - - [01/Mar/2026:12:00:00 +0000] "GET /products/2 HTTP/1.1" 200 512
198.51.100.2 - alice [01/Mar/2026:12:00:01 +0000] "POST /payments/ HTTP/1.1" 201 80 "-" "curl/8"
{"time":"2026-03-01T12:00:01.250Z","client_ip":"203.0.113.7","path":"/products/3"}
{"ts":1772366402.5,"key":"user-1024"}
not a log line
`

// A small run of every scenario, in memory and through the Redis scripts
// of a real server: every algorithm keeps its bound, the fixed window
// shows its double burst, Redis decides exactly as memory, and the chart
// is a PNG.
func TestCommand(t *testing.T) {
	measureKeys = 100
	srv := redistest.Start(t)
	dir := t.TempDir()
	logFile := filepath.Join(dir, "access.log")
	os.WriteFile(logFile, []byte(accessLog), 0o644)
	var stdout, stderr bytes.Buffer
	code := Command([]string{"--scenario", "all", "--log", logFile, "--duration", "25s", "--keys", "50",
		"--rate", "5/s", "--burst", "20", "--seed", "7", "--redis", srv.Addr(), "--json"},
		strings.NewReader(""), &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if !strings.Contains(stderr.String(), "skipped 1 lines") {
		t.Errorf("the malformed line was not reported: %q", stderr.String())
	}
	var rep Report
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("--json output: %v\n%s", err, stdout.String())
	}
	want := append(append([]string{}, scenarioNames...), "replay")
	if len(rep.Scenarios) != len(want) {
		t.Fatalf("%d scenarios, want %v", len(rep.Scenarios), want)
	}
	for i, sc := range rep.Scenarios {
		if sc.Name != want[i] || sc.Requests == 0 {
			t.Fatalf("scenario %d: %+v", i, sc)
		}
		if len(sc.Results) != 2*len(algo.Names()) {
			t.Fatalf("%s: %d results, want memory and redis for each algorithm", sc.Name, len(sc.Results))
		}
		for _, r := range sc.Results {
			if r.Bound1s >= 0 && r.Worst1s > r.Bound1s || r.BoundWindow >= 0 && r.WorstWindow > r.BoundWindow {
				t.Errorf("%s %s %s: worst %d/%d above bounds %d/%d", sc.Name, r.Algorithm, r.Backend, r.Worst1s, r.WorstWindow, r.Bound1s, r.BoundWindow)
			}
			if r.Admitted+r.Denied != sc.Requests {
				t.Errorf("%s %s: admitted %d + denied %d != %d", sc.Name, r.Algorithm, r.Admitted, r.Denied, sc.Requests)
			}
			if r.Backend == "redis" && (r.AgreesWithMemory == nil || *r.AgreesWithMemory != sc.Requests) {
				t.Errorf("%s %s: redis agrees with memory on %v of %d", sc.Name, r.Algorithm, r.AgreesWithMemory, sc.Requests)
			}
			if r.BytesPerKey <= 0 || r.NsPerCheck <= 0 {
				t.Errorf("%s %s %s: no measurement: %+v", sc.Name, r.Algorithm, r.Backend, r)
			}
			if r.Algorithm == algo.SlidingLog && (r.VsExactPct != 0 || r.DifferPct != 0) {
				t.Errorf("the exact log differs from itself: %+v", r)
			}
			if sc.Name == "boundary" && r.Algorithm == algo.FixedWindow && r.Worst1s != 40 {
				t.Errorf("boundary: fixed window admitted %d in the worst second, want 2 × burst = 40", r.Worst1s)
			}
		}
	}
	if replay := rep.Scenarios[len(rep.Scenarios)-1]; replay.Requests != 5 || replay.Keys != 3 {
		t.Errorf("replay read %d requests from %d keys, want 5 from 3", replay.Requests, replay.Keys)
	}
}

// --chart writes a PNG (one per scenario, NAME-SCENARIO.png, with several).
func TestChart(t *testing.T) {
	measureKeys = 100
	dir := t.TempDir()
	chart := filepath.Join(dir, "chart.png")
	var stdout, stderr bytes.Buffer
	code := Command([]string{"--scenario", "boundary", "--duration", "20s", "--rate", "5/s", "--burst", "20", "--chart", chart},
		nil, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	for _, name := range []string{"boundary"} {
		f, err := os.Open(chart)
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(f)
		f.Close()
		if err != nil {
			t.Fatalf("chart of %s: %v", name, err)
		}
		if b := img.Bounds(); b.Dx() < 400 || b.Dy() < 200 {
			t.Fatalf("chart of %s is %v", name, b)
		}
	}
}

// The text report, from the same seed, is the same twice in its
// deterministic columns.
func TestTextReportIsDeterministic(t *testing.T) {
	measureKeys = 100
	run := func() string {
		var out, errb bytes.Buffer
		if code := Command([]string{"--scenario", "bursty", "--duration", "20s", "--seed", "3"}, nil, &out, &errb); code != 0 {
			t.Fatalf("exit %d: %s", code, errb.String())
		}
		var kept []string
		for line := range strings.Lines(out.String()) {
			f := strings.Fields(line)
			if len(f) > 10 { // drop bytes/key, ns/check and its server part
				f = f[:len(f)-3]
			}
			kept = append(kept, strings.Join(f, " "))
		}
		return strings.Join(kept, "\n")
	}
	a, b := run(), run()
	if a != b {
		t.Fatalf("two runs with one seed differ:\n%s\n---\n%s", a, b)
	}
	for _, name := range algo.Names() {
		if !strings.Contains(a, name) {
			t.Fatalf("no %s in the report:\n%s", name, a)
		}
	}
}

func TestHelpAndBadFlags(t *testing.T) {
	var out, errb bytes.Buffer
	if code := Command([]string{"--help"}, nil, &out, &errb); code != 0 || !strings.Contains(out.String(), "Usage: sluice simulate") || !strings.Contains(out.String(), "--redis") && !strings.Contains(out.String(), "-redis") {
		t.Fatalf("--help: exit %d\n%s", code, out.String())
	}
	for _, args := range [][]string{
		{"--scenario", "weekend"},
		{"--scenario", "replay"},
		{"--rate", "fast"},
		{"--algorithms", "gcra"},
		{"extra"},
	} {
		errb.Reset()
		if code := Command(args, nil, &out, &errb); code != 2 || errb.Len() == 0 {
			t.Errorf("%v: exit %d, stderr %q", args, code, errb.String())
		}
	}
}

func TestReadLog(t *testing.T) {
	tr, bad, err := readLog(strings.NewReader(accessLog))
	if err != nil || bad != 1 {
		t.Fatalf("bad %d, err %v", bad, err)
	}
	// The two requests of 12:00:00 are spread over that second.
	if got := tr.events[1].at - tr.events[0].at; got != 500_000 {
		t.Fatalf("two requests in one whole second are %dµs apart, want 500000", got)
	}
	if tr.keys[0] != "203.0.113.7" || tr.keys[1] != "alice" || tr.keys[2] != "user-1024" {
		t.Fatalf("keys %v", tr.keys)
	}
	if _, _, err := readLog(strings.NewReader("garbage\n")); err == nil {
		t.Fatal("a log without one good line must fail")
	}
}

// A JSON line's numeric time is read as sluice advise reads it, seconds,
// milliseconds, microseconds or nanoseconds by its magnitude: one in µs
// was taken for seconds, overflowed, and crashed the replay (makeslice:
// len out of range); one in ms made two seconds 2,000.
func TestReadLogEpochMagnitudes(t *testing.T) {
	const at = 1710072007 // 2024-03-10T12:00:07Z
	for _, tc := range []struct{ name, first, second string }{
		{"seconds", "1710072007.5", "1710072009.5"},
		{"milliseconds", "1710072007500", "1710072009500"},
		{"microseconds", "1710072007500000", "1710072009500000"},
		{"nanoseconds", "1710072007500000000", "1710072009500000000"},
		{"RFC 3339", `"2024-03-10T12:00:07.5Z"`, `"2024-03-10T12:00:09.5Z"`},
	} {
		log := `{"ts":` + tc.first + `,"ip":"10.1.1.8"}` + "\n" + `{"ts":` + tc.second + `,"ip":"10.1.1.9"}` + "\n"
		tr, bad, err := readLog(strings.NewReader(log))
		if err != nil || bad != 0 || len(tr.events) != 2 {
			t.Fatalf("%s: %d events, %d bad, %v", tc.name, len(tr.events), bad, err)
		}
		if got := tr.events[0].at; got != at*1_000_000+500_000 {
			t.Errorf("%s: the first line at %d µs, want %d", tc.name, got, int64(at)*1_000_000+500_000)
		}
		if d := tr.events[1].at - tr.events[0].at; d != 2_000_000 {
			t.Errorf("%s: the lines %d µs apart, want 2 s", tc.name, d)
		}
		if _, err := simulate(tr, sluice.Rule{Rate: 1, Burst: 3}, []string{"token_bucket"}, nil); err != nil {
			t.Errorf("%s: replay: %v", tc.name, err)
		}
	}
}

// A line longer than any access log's (2 MB) is one malformed line, as
// sluice advise counts it: it stopped the replay ("token too long"). And
// a synthetic scenario too large to hold in memory is refused up front.
func TestReadLogLongLineAndHugeScenario(t *testing.T) {
	log := `{"ts":1710072007,"ip":"10.1.1.8"}` + "\n" + strings.Repeat("x", 2<<20) + "\n" + `{"ts":1710072009,"ip":"10.1.1.9"}`
	tr, bad, err := readLog(strings.NewReader(log))
	if err != nil || bad != 1 || len(tr.events) != 2 {
		t.Fatalf("%d events, %d bad, %v; want 2 and the long line as 1 bad", len(tr.events), bad, err)
	}
	var stderr bytes.Buffer
	if code := Command([]string{"--rate", "1e9/s", "--duration", "1s"}, nil, io.Discard, &stderr); code != 2 || !strings.Contains(stderr.String(), "want at most 2000000") {
		t.Fatalf("--rate 1e9/s: exit %d, %q", code, stderr.String())
	}
}
