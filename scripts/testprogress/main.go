// Command testprogress reads `go test -json` on its standard input and
// prints what a person watching the test script needs: go test's own
// lines for each package (ok, FAIL, and the whole output of a failing
// test), and, every -every while tests run, which packages and tests are
// still running and for how long, so a long package is never minutes of
// silence. It exits 1 when a test or a build failed, as go test does.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
)

type event struct {
	Action  string
	Package string
	Test    string
	Output  string
}

// run is what is known of the tests in flight.
type run struct {
	mu      sync.Mutex
	out     io.Writer
	started map[string]time.Time // package -> first event
	current map[string]string    // package -> the top-level test running
	output  map[string][]string  // package/test -> its lines, printed if it fails
	failed  bool
	counts  [3]int // top-level tests passed, failed, skipped
}

func main() {
	every := flag.Duration("every", 30*time.Second, "how often to say what is still running")
	flag.Parse()
	r := &run{out: os.Stdout, started: map[string]time.Time{}, current: map[string]string{}, output: map[string][]string{}}
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(*every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				r.heartbeat()
			}
		}
	}()
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			// go test prints build errors as plain text
			fmt.Fprintln(r.out, sc.Text())
			continue
		}
		r.handle(e)
	}
	close(done)
	fmt.Fprintf(r.out, "tests: %d passed, %d failed, %d skipped\n", r.counts[0], r.counts[1], r.counts[2])
	if r.failed {
		os.Exit(1)
	}
}

func (r *run) handle(e event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.started[e.Package]; !ok && e.Package != "" {
		r.started[e.Package] = time.Now()
	}
	top := e.Test != "" && !strings.Contains(e.Test, "/")
	id := e.Package + " " + e.Test
	switch {
	case e.Action == "build-output":
		fmt.Fprint(r.out, e.Output)
	case e.Action == "build-fail":
		r.failed = true
	case e.Action == "run" && top:
		r.current[e.Package] = e.Test
	case e.Action == "output" && e.Test != "":
		key := e.Package + " " + strings.SplitN(e.Test, "/", 2)[0]
		r.output[key] = append(r.output[key], e.Output)
	case e.Action == "output":
		fmt.Fprint(r.out, e.Output) // the package's own lines: ok, FAIL, coverage, panics
	case (e.Action == "pass" || e.Action == "skip") && top:
		if e.Action == "pass" {
			r.counts[0]++
		} else {
			r.counts[2]++
		}
		delete(r.output, id)
		delete(r.current, e.Package)
	case e.Action == "fail" && top:
		r.counts[1]++
		r.failed = true
		for _, l := range r.output[id] {
			fmt.Fprint(r.out, l)
		}
		delete(r.output, id)
		delete(r.current, e.Package)
	case (e.Action == "pass" || e.Action == "fail" || e.Action == "skip") && e.Test == "":
		// What a test printed without ending (a panic, a timeout) is
		// printed with its package's end, never lost.
		var left []string
		for id := range r.output {
			if strings.HasPrefix(id, e.Package+" ") {
				left = append(left, id)
			}
		}
		slices.Sort(left)
		for _, id := range left {
			if e.Action == "fail" {
				for _, l := range r.output[id] {
					fmt.Fprint(r.out, l)
				}
			}
			delete(r.output, id)
		}
		if e.Action == "fail" {
			r.failed = true
		}
		delete(r.started, e.Package)
		delete(r.current, e.Package)
	}
}

func (r *run) heartbeat() {
	r.mu.Lock()
	defer r.mu.Unlock()
	var running []string
	for pkg, t0 := range r.started {
		s := fmt.Sprintf("%s (%s", pkg, time.Since(t0).Round(time.Second))
		if t := r.current[pkg]; t != "" {
			s += ", in " + t
		}
		running = append(running, s+")")
	}
	if len(running) == 0 {
		return
	}
	slices.Sort(running)
	fmt.Fprintf(r.out, "   ... still running: %s\n", strings.Join(running, "; "))
}
