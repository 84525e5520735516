package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/bench"
)

// result is one benchmark line: its name parts and its figures by unit.
type result struct {
	bench    string // BenchmarkMemory, BenchmarkRedis, BenchmarkHeapPerKey
	workload string
	callers  int
	cost     int
	lib      string
	n        int64
	metrics  map[string]float64 // "ns/op", "allocs/op", "checks/s", …
}

// parseLine reads a go test benchmark line such as
//
//	BenchmarkMemory/w=hot/c=8/cost=1/lib=sluice-2  1000  56.7 ns/op  0 allocs/op
func parseLine(line string) (result, bool) {
	f := strings.Fields(line)
	if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") || len(f)%2 != 0 {
		return result{}, false
	}
	n, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return result{}, false
	}
	name := f[0]
	if i := strings.LastIndexByte(name, '-'); i > 0 && !strings.Contains(name[i:], "/") && !strings.Contains(name[i:], "=") {
		name = name[:i] // the -GOMAXPROCS suffix
	}
	parts := strings.Split(name, "/")
	r := result{bench: parts[0], n: n, metrics: map[string]float64{}}
	for _, p := range parts[1:] {
		k, v, _ := strings.Cut(p, "=")
		switch k {
		case "w":
			r.workload = v
		case "c":
			r.callers, _ = strconv.Atoi(v)
		case "cost":
			r.cost, _ = strconv.Atoi(v)
		case "lib":
			r.lib = v
		}
	}
	for i := 2; i+1 < len(f); i += 2 {
		v, err := strconv.ParseFloat(f[i], 64)
		if err != nil {
			return result{}, false
		}
		r.metrics[f[i+1]] = v
	}
	return r, true
}

// writeGateway records the gateway results in the raw output as benchmark
// lines, so that -from can print them again.
func writeGateway(w io.Writer, gw *gatewayResult) {
	for _, x := range []struct {
		lib string
		r   bench.LoadResult
	}{{"bare", gw.bare}, {"pooled", gw.pooled}, {"sluice", gw.sluice}} {
		if x.r.Requests == 0 {
			continue
		}
		fmt.Fprintf(w, "BenchmarkGateway/c=%d/lib=%s %d %.0f ns/op %.1f req/s %d p50-ns %d p99-ns %d failed %d elapsed-ns\n",
			gw.concurrency, x.lib, x.r.Requests, 1e9/x.r.RPS(), x.r.RPS(), x.r.P50, x.r.P99, x.r.Failed, x.r.Elapsed)
	}
}

// readRaw reads the raw output of an earlier run.
func readRaw(path string) ([]result, []*gatewayResult, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	var rs []result
	var gw []*gatewayResult
	byConc := map[int]*gatewayResult{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		r, ok := parseLine(sc.Text())
		if !ok {
			continue
		}
		if r.bench != "BenchmarkGateway" {
			rs = append(rs, r)
			continue
		}
		g := byConc[r.callers]
		if g == nil {
			g = &gatewayResult{concurrency: r.callers}
			byConc[r.callers] = g
			gw = append(gw, g)
		}
		lr := bench.LoadResult{
			Requests: r.n,
			Failed:   int64(r.metrics["failed"]),
			Elapsed:  time.Duration(r.metrics["elapsed-ns"]),
			P50:      time.Duration(r.metrics["p50-ns"]),
			P99:      time.Duration(r.metrics["p99-ns"]),
		}
		switch r.lib {
		case "bare":
			g.bare = lr
		case "pooled":
			g.pooled = lr
		default:
			g.sluice = lr
		}
	}
	return rs, gw, sc.Err()
}
