package advise

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/loggen"
)

// The memory tests run the advisor in a child process (this test binary
// again, in TestHelperProcess) so that its peak resident set (VmHWM) is
// its own, not that of the test that generated the log.

func TestHelperProcess(t *testing.T) {
	args := os.Getenv("SLUICE_ADVISE_CHILD")
	if args == "" {
		t.Skip("run by the memory tests")
	}
	var argv []string
	if err := json.Unmarshal([]byte(args), &argv); err != nil {
		t.Fatal(err)
	}
	code := Command(argv, os.Stdin, os.Stdout, os.Stderr)
	fmt.Fprintf(os.Stderr, "VMHWM_KB %d\n", vmHWM())
	os.Exit(code)
}

// vmHWM is this process's peak resident set in kB, from /proc.
func vmHWM() int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return -1
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return n
		}
	}
	return -1
}

type childRun struct {
	peakKB  int64
	seconds float64
	rep     Report
}

// runChild runs the advisor on args in a child process.
func runChild(t *testing.T, args ...string) childRun {
	t.Helper()
	argv, _ := json.Marshal(append(args, "--json"))
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$")
	cmd.Env = append(os.Environ(), "SLUICE_ADVISE_CHILD="+string(argv))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("advisor %v: %v\n%s", args, err, stderr.String())
	}
	r := childRun{seconds: time.Since(start).Seconds(), peakKB: -1}
	for line := range strings.SplitSeq(stderr.String(), "\n") {
		if v, ok := strings.CutPrefix(line, "VMHWM_KB "); ok {
			r.peakKB, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	// the test binary prints PASS or the like after the JSON, if anything
	dec := json.NewDecoder(&stdout)
	if err := dec.Decode(&r.rep); err != nil {
		t.Fatalf("report: %v", err)
	}
	return r
}

// memoryOpts is the traffic of the memory tests: the same callers, so a
// bigger file is a longer stretch of the same service. The advisor keeps
// a summary per (class, key) of the window, so its memory follows the
// distinct callers, and the reorder buffer holds the traffic of its
// window (60 s): at 300 requests per second from 500 keys and 2000 IPs,
// the smaller log is minutes long and shows them all, so that what grows
// between the two is the log alone.
var memoryOpts = loggen.Options{Seed: 11, Format: loggen.Mixed, Users: 500, IPs: 2000, Rate: 300}

// TestMemoryDoesNotGrowWithFileSize runs the advisor on a 10 MB log and
// on one five times as large (2 and 10 MB under the race detector), and
// requires the peak resident set of the larger
// run to stay within a margin of the smaller.
func TestMemoryDoesNotGrowWithFileSize(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 60 MB of logs")
	}
	t.Parallel()
	dir := t.TempDir()
	size := int64(10e6)
	if raceEnabled {
		size = 2e6
	}
	small := genFile(t, dir, memoryOpts, size)
	large := genFile(t, dir, memoryOpts, 5*size)
	a := runChild(t, small)
	b := runChild(t, large)
	t.Logf("%d MB: peak RSS %d kB, %.1f s, %.0f MB/s measuring; %d MB: peak RSS %d kB, %.1f s, %.0f MB/s measuring (race detector: %v)",
		size/1e6, a.peakKB, a.seconds, a.rep.MBPerSecond, 5*size/1e6, b.peakKB, b.seconds, b.rep.MBPerSecond, raceEnabled)
	if a.peakKB <= 0 || b.peakKB <= 0 {
		t.Skip("no VmHWM in /proc/self/status here")
	}
	limit := a.peakKB*13/10 + 16<<10
	if raceEnabled {
		// The detector keeps shadow memory for all the heap ever used and
		// never gives it back: only a loose bound means anything here.
		limit = a.peakKB*2 + 32<<10
	}
	if b.peakKB > limit {
		t.Errorf("peak RSS grew from %d kB to %d kB for a file 5 times larger", a.peakKB, b.peakKB)
	}
	if a.rep.Lines*4 > b.rep.Lines {
		t.Errorf("lines %d and %d: the larger log is not larger", a.rep.Lines, b.rep.Lines)
	}
}

// TestBigLog is the 2 GB run: SLUICE_BIG=1 go test -run TestBigLog -v ./advise/
// (SLUICE_BIG_DIR picks where the log is written, default the test's
// temporary directory; a log already there of the same name is reused). It logs peak RSS and throughput, and requires the
// peak to be within a margin of that of a 100 MB log of the same traffic.
func TestBigLog(t *testing.T) {
	if os.Getenv("SLUICE_BIG") == "" {
		t.Skip("set SLUICE_BIG=1 to process a 2 GB log")
	}
	dir := os.Getenv("SLUICE_BIG_DIR")
	if dir == "" {
		dir = t.TempDir()
	}
	size := int64(2.1e9)
	if s := os.Getenv("SLUICE_BIG_BYTES"); s != "" {
		size, _ = strconv.ParseInt(s, 10, 64)
	}
	start := time.Now()
	big := filepath.Join(dir, fmt.Sprintf("gen-%d-%d.log", memoryOpts.Seed, size))
	if st, err := os.Stat(big); err != nil || st.Size() < size {
		big = genFile(t, dir, memoryOpts, size) // the same name
	}
	st, _ := os.Stat(big)
	t.Logf("log %s: %.2f GB (ready in %.0f s)", big, float64(st.Size())/1e9, time.Since(start).Seconds())
	small := genFile(t, t.TempDir(), memoryOpts, 100e6)
	a := runChild(t, small)
	b := runChild(t, big, "--out-config", filepath.Join(t.TempDir(), "big.yaml"))
	t.Logf("100 MB: %d lines, peak RSS %d kB, measure %.0f MB/s, total %.1f s", a.rep.Lines, a.peakKB, a.rep.MBPerSecond, a.seconds)
	t.Logf("%.2f GB: %d lines, %d malformed, peak RSS %d kB, measure %.1f s = %.0f MB/s, replay %.1f s = %.0f MB/s, total %.1f s",
		float64(st.Size())/1e9, b.rep.Lines, b.rep.Malformed, b.peakKB, b.rep.MeasureSeconds, b.rep.MBPerSecond,
		b.rep.ReplaySeconds, float64(b.rep.Bytes)/1e6/b.rep.ReplaySeconds, b.seconds)
	if b.peakKB > a.peakKB*13/10+16<<10 {
		t.Errorf("peak RSS grew from %d kB (100 MB) to %d kB (%.1f GB)", a.peakKB, b.peakKB, float64(st.Size())/1e9)
	}
}
