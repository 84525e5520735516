package main

import (
	"strconv"
	"strings"
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
